"""``python -m training.show --config FILE [key=value ...] [--json]``: print the resolved table.

The model is built on the ``meta`` device (no memory, no init), so the table of a
multi-billion-parameter config prints in seconds and lists megatron's real parameter names.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from jobscripts.quiet import quiet_libraries
from runconfig import ConfigError, OverridesParser, load_config
from runconfig.schema import RunConfig
from rundir.contract import ExitCode


def vocab_size_of(cfg: RunConfig) -> int:
    """The vocabulary size a run will use (from the config, else the data manifest)."""
    if cfg.model.vocab_size is not None:
        return cfg.model.vocab_size
    if cfg.data.manifest:
        from data_prep.manifest import read_manifest

        return read_manifest(cfg.data.manifest).vocab_size
    if cfg.data.tokenizer:
        from data_prep.tokenizer import load_tokenizer

        return load_tokenizer(cfg.data.tokenizer).vocab_size
    raise ConfigError("model.vocab_size: needed to build the table (or give data.manifest / data.tokenizer)")


def resolved_table(cfg: RunConfig) -> dict[str, Any]:
    """Build the patched model on the meta device in a one-process group and tabulate it."""
    from patches.table import build_table, global_parameters
    from training.distributed import single_process
    from training.model import Placement, build_model, padded_vocab_size, resolve

    resolved = resolve(cfg)
    vocab = padded_vocab_size(vocab_size_of(cfg), cfg.parallel.tensor_model_parallel_size)
    one_stage = _single_stage(cfg)
    with single_process(), torch.device("meta"):
        model = build_model(one_stage, vocab, Placement(initialize=False), resolved=resolved)
        return build_table(resolved, global_parameters(model))


def _single_stage(cfg: RunConfig) -> RunConfig:
    import dataclasses

    return dataclasses.replace(
        cfg,
        parallel=dataclasses.replace(
            cfg.parallel, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False
        ),
    )


def main(argv: list[str] | None = None) -> ExitCode:
    quiet_libraries()
    parser = OverridesParser(
        prog="python -m training.show", description=__doc__.splitlines()[0], override_schema=RunConfig
    )
    parser.add_argument("--config", required=True, help="run config YAML")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(RunConfig, args.config, args.overrides)
        table = resolved_table(cfg)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        from patches.table import format_table

        print(format_table(table))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
