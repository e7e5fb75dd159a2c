"""Export a run's checkpoint to a Hugging Face folder and prove it computes the same function.

    python -m training.export_hf RUN_DIR --out DIR [--step N] [--parity-sequences 8] [--weights-only]

Writes ``DIR`` (``config.json``, ``model.safetensors``, tokenizer files, ``export.json``)
that ``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
load with no custom code. The multipliers are folded into the weights (training/hf_layout.py);
``export.json`` records the folds and a parity check on the run's held-out tokens: the
megatron model (patched, from the same checkpoint) and the exported model, float32, same
tokens: the largest logit difference relative to the largest logit, and the loss difference.

The logits keep megatron's padding rows (ids from the tokenizer's vocabulary size up to the
embedding's rows, padded for tensor parallelism): the run's loss is a softmax over them, so the
export's is too. ``generation_config.json`` suppresses them (``suppress_tokens``): ``generate()``
never emits an id the tokenizer cannot decode.

The run's tokenizer goes with the model (``model_max_length`` = the model's positions,
``model.seq_length``); a run whose tokenizer cannot be exported to match the model (mock
data, a missing or changed tokenizer file, another vocabulary size, a SentencePiece model that
normalizes text such as ``nmt_nfkc``) is refused, before any model work, unless ``--weights-only``
asks for the weights alone.

The folder is built under ``DIR.partial`` and renamed when complete, so ``DIR`` is either
absent, the previous export, or this one. Exit codes: 0 exported and parity met; 1 parity
not met (the folder is written, ``export.json`` says ``"passed": false``); 2 the run cannot
be exported (the message names the config key or file).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch

from data_prep.tokenizer import load_tokenizer
from jobscripts.atomic import atomic_write_text
from jobscripts.cli import state_defaults
from jobscripts.quiet import quiet_libraries
from runconfig.schema import RunConfig
from rundir.contract import SUMMARY_FILE, ExitCode, Status
from rundir.files import RunDirError, checkpoint_steps, read_summary
from training.checkpoint import find_checkpoint, load_model_weights, one_process_config, read_run_config
from training.hf_layout import ExportError, choose_layout, folds, hf_config, hf_state_dict
from training.hf_tokenizer import TokenizerExportError, check_exportable, encoding_parity, export_tokenizer

EXPORT_FILE = "export.json"
EXPORT_FORMAT_VERSION = 2  # 2: BOS is EOD, a SentencePiece export reads "</s>" in text as characters
LOGIT_RTOL = 1e-4  # max |logit difference| / max |logit|, float32
LOSS_ATOL = 1e-5  # nats


class NoTokenizerError(ExportError):
    """The run's tokenizer cannot go with the model; ``reason`` says why, the message adds what
    ``--weights-only`` does (the command that has that flag says so; ``eval lm-eval`` has not)."""

    HINT = "--weights-only exports the weights without a tokenizer"

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}; {self.HINT}")
        self.reason = reason


def refuse_diverged(run_dir: Path, step: Optional[int]) -> None:
    """A diverged run's checkpoints are from before it diverged, none of them its result: without
    ``step`` (the latest checkpoint) it is refused, naming ``summary.json``, the reason and the
    steps kept."""
    summary = read_summary(run_dir)
    if step is not None or summary is None or summary.status != Status.DIVERGED:
        return
    where = f"{run_dir / SUMMARY_FILE}: the run diverged ({summary.reason})"
    kept = checkpoint_steps(run_dir)
    if not kept:
        raise ExportError(f"{where} before its first checkpoint: nothing to export")
    raise ExportError(
        f"{where}; its checkpoints (steps {', '.join(map(str, kept))}) are from before that: --step N exports one of them"
    )


def _run_data(cfg: RunConfig) -> tuple[Optional[str], Optional[str], list[str], int, int]:
    """(tokenizer file or None for mock data, the sha256 the data was made with (manifests
    record it) or None, dataset prefixes (validation first), vocabulary size, end-of-document
    id), from the manifest when the run used one."""
    from data_prep.manifest import read_manifest
    from training.data import tokenizer_info

    info = tokenizer_info(cfg)
    if cfg.data.manifest:
        m = read_manifest(cfg.data.manifest)
        prefixes = m.valid_prefixes + m.train_prefixes
        return m.tokenizer_path, m.tokenizer_sha256, prefixes, info.vocab_size, info.eod
    prefixes = cfg.data.valid_prefixes + cfg.data.train_prefixes
    return cfg.data.tokenizer, None, prefixes, info.vocab_size, info.eod


def matching_tokenizer(run_dir: Path, path: Optional[str], sha256: Optional[str], vocab: int):
    """The run's tokenizer, refused (:class:`NoTokenizerError`, naming the cause) when it cannot be
    the model's: no tokenizer (mock data), a missing file, a file changed since the data was
    made (sha256), another vocabulary size, or one with no exact Hugging Face export (a
    normalizing SentencePiece model: :func:`training.hf_tokenizer.check_exportable`)."""
    if path is None:
        raise NoTokenizerError(f"{run_dir}: trained on mock data (data.mock=true): there is no tokenizer to export")
    if not Path(path).exists():
        raise NoTokenizerError(f"{path}: the run's tokenizer file does not exist")
    tok = load_tokenizer(path)
    if sha256 and tok.sha256 != sha256:
        raise NoTokenizerError(
            f"{path}: sha256 {tok.sha256[:12]}... is not the manifest's {sha256[:12]}...: the tokenizer changed "
            f"after the data was made"
        )
    if tok.vocab_size != vocab:
        raise NoTokenizerError(f"{path}: {tok.vocab_size} tokens, but the run's vocabulary has {vocab}")
    try:
        check_exportable(path)
    except TokenizerExportError as exc:
        raise NoTokenizerError(str(exc)) from exc
    return tok


def _heldout_batch(cfg: RunConfig, sequences: int) -> dict[str, torch.Tensor]:
    """The first ``sequences`` held-out samples the run evaluated on (training/data.py)."""
    from training.data import BatchPlan, build_datasets, eval_micro_batches

    with tempfile.TemporaryDirectory() as cache:
        data = build_datasets(cfg, cache)
        g = cfg.training.global_batch_size
        plan = BatchPlan(g, g, 1, 0)
        batch = eval_micro_batches(data.valid, plan, max(1, -(-sequences // g)))
    merged = {k: torch.cat([b[k] for b in batch])[:sequences] for k in batch[0]}
    return merged


def _token_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> float:
    logp = torch.log_softmax(logits.double(), dim=-1)
    nll = -logp.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)
    mask = batch["loss_mask"].double()
    return float((nll * mask).sum() / mask.sum())


def logit_parity(megatron_model, hf_model, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The patched megatron model (TP=1) vs the exported model on the same tokens, float32."""
    megatron_model.eval()
    hf_model.eval()
    with torch.no_grad():
        ours = megatron_model(batch["tokens"], batch["position_ids"], None).float()
        theirs = hf_model(input_ids=batch["tokens"]).logits.float()
    diff = float((ours - theirs).abs().max())
    scale = float(ours.abs().max())
    loss_ours, loss_theirs = _token_loss(ours, batch), _token_loss(theirs, batch)
    rel = diff / scale if scale > 0 else diff
    return {
        "sequences": int(batch["tokens"].shape[0]),
        "tokens": int(batch["loss_mask"].sum()),
        "max_abs_logit_diff": diff,
        "max_abs_logit": scale,
        "max_rel_logit_diff": rel,
        "loss_megatron": loss_ours,
        "loss_export": loss_theirs,
        "loss_diff": abs(loss_ours - loss_theirs),
        "goal": {"max_rel_logit_diff": LOGIT_RTOL, "loss_diff": LOSS_ATOL},
        "passed": rel <= LOGIT_RTOL and abs(loss_ours - loss_theirs) <= LOSS_ATOL,
    }


def _heldout_texts(prefixes: list[str], tok, eod: int, limit: int = 200) -> list[str]:
    """Up to ``limit`` whole documents of ``prefixes``, decoded with the run's tokenizer: the
    texts both tokenizers must encode identically."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    texts: list[str] = []
    for prefix in prefixes:
        docs = IndexedDataset(prefix)
        for i in range(min(len(docs), limit - len(texts))):
            ids = [t for t in docs[i].tolist() if t != eod]
            texts.append(tok.decode(ids))
    return texts


def _prepare_out(out: Path) -> Path:
    if out.exists() and not (out / EXPORT_FILE).is_file():
        raise ExportError(f"--out {out}: exists and is not an export folder (no {EXPORT_FILE}); choose another")
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    return partial


def export(
    run_dir: str | Path,
    out: str | Path,
    step: Optional[int] = None,
    parity_sequences: int = 8,
    weights_only: bool = False,
) -> dict:
    """Export ``run_dir``'s checkpoint to ``out`` with its tokenizer (``weights_only``: without);
    returns the export.json record."""
    from transformers import AutoModelForCausalLM

    from training.distributed import single_process
    from training.model import resolve

    run_dir, out = Path(run_dir), Path(out)
    cfg = read_run_config(run_dir)
    refuse_diverged(run_dir, step)
    resolved = resolve(cfg)
    layout = choose_layout(cfg, resolved)
    ckpt = find_checkpoint(run_dir, step)
    tokenizer_path, sha256, prefixes, vocab, eod = _run_data(cfg)
    tok = None if weights_only else matching_tokenizer(run_dir, tokenizer_path, sha256, vocab)
    f = folds(cfg, resolved)
    partial = _prepare_out(out)
    torch.manual_seed(0)
    with single_process():
        megatron_model = load_model_weights(one_process_config(cfg), ckpt)
        state = {k: v for k, v in megatron_model.state_dict().items() if isinstance(v, torch.Tensor)}
        vocab_rows = int(state["embedding.word_embeddings.weight"].shape[0])
        config = hf_config(layout, cfg, vocab_rows, eod)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(hf_state_dict(layout, state, cfg, f), strict=False)
        tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise ExportError(f"{layout}: state dict mismatch: missing {missing}, unexpected {unexpected}")
        if vocab_rows > vocab:  # megatron's padding rows: logits kept (the run's loss is over them), never generated
            model.generation_config.suppress_tokens = list(range(vocab, vocab_rows))
        model.save_pretrained(str(partial))
        reloaded = AutoModelForCausalLM.from_pretrained(str(partial), dtype=torch.float32)
        batch = _heldout_batch(cfg, parity_sequences)
        parity = logit_parity(megatron_model, reloaded, batch)
    record: dict[str, Any] = {
        "format_version": EXPORT_FORMAT_VERSION,
        "run_dir": str(run_dir.resolve()),
        "checkpoint": ckpt.path.name,
        "step": ckpt.step,
        "checkpoint_format": ckpt.format,
        "layout": layout,
        "architecture": config.architectures[0],
        "preset": resolved.preset,
        "folds": f.to_json(),
        "vocab": {
            "tokenizer": vocab,
            "rows": vocab_rows,
            "eod_id": eod,
            "suppressed_in_generation": vocab_rows - vocab,
        },
        "parity": parity,
        "tokenizer": None,
        "weights_only": weights_only,
    }
    if tok is not None:
        record["tokenizer"] = export_tokenizer(tokenizer_path, eod, partial, cfg.model.seq_length)
        texts = _heldout_texts(prefixes, tok, eod)
        record["tokenizer"]["parity"] = encoding_parity(tok, partial, texts)
    tp = record["tokenizer"] and record["tokenizer"]["parity"]
    record["passed"] = parity["passed"] and (not tp or tp["identical_ids"] == tp["texts"])
    atomic_write_text(partial / EXPORT_FILE, json.dumps(record, indent=1))
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return record


def main(argv: Optional[list[str]] = None) -> ExitCode:
    quiet_libraries()
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bar()  # a bar per shard written and loaded: noise around a one-line result
    args = build_parser().parse_args(argv)
    try:
        record = export(args.run_dir, args.out, args.step, args.parity_sequences, args.weights_only)
    except (ExportError, TokenizerExportError, RunDirError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    return _report(args, record)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m training.export_hf", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory with at least one checkpoint")
    parser.add_argument("--out", required=True, help="the Hugging Face folder to write")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    parser.add_argument("--parity-sequences", type=int, default=8, help="held-out sequences for the parity check")
    parser.add_argument(
        "--weights-only",
        action="store_true",
        help="export the model without a tokenizer (a run on mock data, or one whose tokenizer is gone)",
    )
    return state_defaults(parser)


def _report(args: argparse.Namespace, record: dict) -> ExitCode:
    p = record["parity"]
    print(
        f"{args.out}: {record['architecture']} from {record['checkpoint']}; logits max rel diff "
        f"{p['max_rel_logit_diff']:.2e} (goal {LOGIT_RTOL:g}), loss {p['loss_megatron']:.6f} vs "
        f"{p['loss_export']:.6f} (diff {p['loss_diff']:.1e}, goal {LOSS_ATOL:g})"
    )
    if record["tokenizer"]:
        tp = record["tokenizer"]["parity"]
        print(
            f"tokenizer: {tp['identical_ids']}/{tp['texts']} held-out documents and special-token probes encode identically"
        )
    else:
        print("tokenizer: none (--weights-only)")
    if not record["passed"]:
        print(f"error: parity not met; see {Path(args.out) / EXPORT_FILE}", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
