"""Megatron-LM's ``pretrain_gpt.py`` flags whose setting has another name (or none) here.

One table, :data:`MEGATRON_LM_ARGS`: the hint a command prints for ``--train-iters 10``
(``runconfig.loader.override_hint``), the note a config key written with Megatron-LM's name
gets (``training.train_iters=10``, ``optimizer.min_lr=1e-5``), and the table in
docs/megatron-integration.md ("Coming from Megatron-LM", checked against this one by
tests/test_cli_overrides.py). A flag whose name is a key's last part (``--lr``,
``--micro-batch-size``, ``--clip-grad``, ``--seq-length``) is found among the schema's keys
and is not listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class MegatronArg:
    key: Optional[str]  # the dotted key that holds the setting; None: no key does
    value: Optional[str] = None  # what a value-less flag stands for (--bf16: bf16); None: the flag's value
    note: str = ""  # where the meaning differs from Megatron-LM's
    values: tuple[tuple[str, str], ...] = ()  # Megatron-LM's value -> the value here, where they differ
    convert: bool = False  # the value means something else here (the note says how to convert it)
    spelling: Optional[str] = None  # Megatron-LM's own spelling where it mixes - and _ (None: all dashes)

    def flag(self, name: str) -> str:
        """The flag as Megatron-LM spells it, for the table's ``name`` (dashes as underscores)."""
        return self.spelling or "--" + name.replace("_", "-")

    def override(self, given: Optional[str]) -> str:
        """The ``key=value`` to write for the flag (``given``: its value on the command line)."""
        if self.value is not None:
            return f"{self.key}={self.value}"
        if given is None or self.convert:
            return f"{self.key}=VALUE"
        return f"{self.key}={dict(self.values).get(given, given)}"


_RUN_DIR = "checkpoints go to RUN_DIR/checkpoints; rerunning a run directory resumes its latest checkpoint"

# Megatron-LM flag (dashes as underscores) -> where its setting lives here.
MEGATRON_LM_ARGS: dict[str, MegatronArg] = {
    "train_iters": MegatronArg("training.steps"),
    "lr_warmup_iters": MegatronArg("scheduler.warmup_steps"),
    "lr_warmup_fraction": MegatronArg(
        "scheduler.warmup_steps", note="a step count, fraction x training.steps", convert=True
    ),
    "min_lr": MegatronArg(
        "optimizer.min_lr_ratio",
        note="--min-lr / --lr; each group decays to that fraction of its own peak",
        convert=True,
    ),
    "lr_decay_style": MegatronArg(
        "scheduler.decay_style", note="no inverse-square-root; WSD is wsd", values=(("WSD", "wsd"),)
    ),
    "lr_decay_iters": MegatronArg(None, note="the LR decays over training.steps"),
    "lr_wsd_decay_iters": MegatronArg("scheduler.wsd_decay_steps"),
    "lr_wsd_decay_style": MegatronArg("scheduler.wsd_decay_style"),
    "optimizer": MegatronArg(
        "optimizer.name",
        note="its adam decouples weight decay, which is adamw here; adam here adds the decay to the gradient (L2)",
        values=(("adam", "adamw"),),
    ),
    "bf16": MegatronArg("training.precision", "bf16"),
    "fp16": MegatronArg(None, note="no fp16: training.precision=bf16 or fp32"),
    "save": MegatronArg("run.dir", note=_RUN_DIR),
    "load": MegatronArg(
        "run.dir",
        note=_RUN_DIR
        + "; another run's checkpoint into a new run: checkpoint.init_from with checkpoint.init_mode=continue",
    ),
    "override_opt_param_scheduler": MegatronArg(
        "checkpoint.init_mode",
        "continue",
        spelling="--override-opt_param-scheduler",
        note="with checkpoint.init_from: the source's weights, optimizer state, step, RNG and data position, this "
        "run's training.steps, scheduler.*, optimizer.lr, optimizer.min_lr_ratio, optimizer.weight_decay and "
        "optimizer.clip_grad from there (each group's peak and floor set after loading; a resume of the same run.dir refuses a changed schedule)",
    ),
    "pretrained_checkpoint": MegatronArg(
        "checkpoint.init_from",
        note="model weights only, at step 0 (with --finetune); a run directory or checkpoint folder",
    ),
    "finetune": MegatronArg(
        "checkpoint.init_from", note="give the checkpoint: its weights, a fresh optimizer, schedule and step count"
    ),
    "save_interval": MegatronArg("checkpoint.interval"),
    "log_interval": MegatronArg("logging.interval"),
    "eval_interval": MegatronArg("eval.interval"),
    "eval_iters": MegatronArg("eval.batches"),
    "tensorboard_dir": MegatronArg("logging.tensorboard", "true", note="written to RUN_DIR/tensorboard"),
    "swiglu": MegatronArg("model.activation", "swiglu"),
    "disable_bias_linear": MegatronArg("model.add_bias_linear", "false"),
    "norm_epsilon": MegatronArg("model.layernorm_epsilon"),
    "max_position_embeddings": MegatronArg("model.seq_length", note="learned positions are model.seq_length long"),
    "data_path": MegatronArg(
        "data.train_prefixes", note="a list, weights apart: data.train_prefixes='[a, b]' data.train_weights='[1, 2]'"
    ),
    "mock_data": MegatronArg("data.mock", "true"),
    "tokenizer_model": MegatronArg("data.tokenizer"),
    "data_cache_path": MegatronArg("data.cache_dir"),
    "recompute_granularity": MegatronArg("model.recompute"),
}


def _lookup(name: str, keys: Iterable[str]) -> Optional[tuple[str, MegatronArg]]:
    """``(--flag, its row)`` for Megatron-LM's flag ``name`` (dashes or underscores), or None when
    the table does not list it or ``keys`` (the schema's) are not the run config's: a schema
    without the table's keys (data_prep's) gets no Megatron-LM hints."""
    name = name.replace("-", "_")
    arg = MEGATRON_LM_ARGS.get(name)
    if arg is None or not {a.key for a in MEGATRON_LM_ARGS.values() if a.key} <= set(keys):
        return None
    return arg.flag(name), arg


def megatron_hint(name: str, given: Optional[str], keys: Iterable[str]) -> Optional[str]:
    """What to write instead of Megatron-LM's flag ``name`` given with value ``given``, or None."""
    found = _lookup(name, keys)
    if found is None:
        return None
    flag, arg = found
    if arg.key is None:
        return f"nothing for Megatron-LM's {flag} ({arg.note})"
    return arg.override(given) + f" (Megatron-LM's {flag}" + (f": {arg.note})" if arg.note else ")")


def megatron_key_note(key: str, keys: Iterable[str]) -> Optional[str]:
    """For a key that is not among the schema's ``keys`` but whose last part is a Megatron-LM
    flag of the table (``training.train_iters``, ``optimizer.min_lr``): where that setting
    lives, or None."""
    found = _lookup(key.rsplit(".", 1)[-1], keys)
    if found is None:
        return None
    flag, arg = found
    if arg.key is None:
        return f"Megatron-LM's {flag} has no key here ({arg.note})"
    return f"Megatron-LM's {flag} is {arg.key} here" + (f" ({arg.note})" if arg.note else "")
