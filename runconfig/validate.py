"""Every check of a run config that involves more than one key, in one place: :func:`validate`.

Single values are checked by their section's ``__post_init__`` (runconfig/schema.py). What a
combination of keys, or a key and the device, rules out is checked here, and nowhere else:
``RunConfig.__post_init__`` calls ``validate(cfg)`` (so every entry point that loads a
config runs it: train_gpt.py, training.show, launch's grid expansion, eval), and the
trainer calls it again with the device it resolved. Each message starts with the dotted key.
One rule changes a key instead of refusing it: :func:`apply_data_source`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from runconfig.checks import FLOAT32_MAX, SEED_MAX

if TYPE_CHECKING:
    from runconfig.schema import RunConfig

DEVICES = ("cpu", "cuda")


def _check_step_size(cfg: RunConfig, lr_factor: float) -> None:
    """The largest step size the optimizer applies must be a finite float32: torch's optimizers
    pass it to the float32 parameters as a scalar (Adam's ``lr * factor / (1 - beta1**step)``
    is largest at step 1), and a larger one fails with an overflow at the first step."""
    o = cfg.optimizer
    scale = lr_factor
    if cfg.optimizer.family == "adam" and 0.0 <= o.adam_beta1 < 1.0:
        scale /= 1.0 - o.adam_beta1
    if o.lr * scale > FLOAT32_MAX:
        raise ValueError(
            f"optimizer.lr: {o.lr!r} gives a step size of {o.lr * scale:.6g} (lr * LR factor {lr_factor:.6g}"
            + (" / (1 - optimizer.adam_beta1)" if scale != lr_factor else "")
            + f"), over the float32 maximum {FLOAT32_MAX:.6g}"
        )


def validate(cfg: RunConfig, device: Optional[str] = None) -> None:
    """Raise ``ValueError`` for a combination of settings that cannot run.

    ``device`` is the resolved device (cpu | cuda); None uses ``parallel.device`` when it
    names one and skips the device checks when it is ``auto`` (not known until run time).
    """
    from runconfig.schema import resolve

    apply_data_source(cfg)
    m, sch, tr, par = cfg.model, cfg.scheduler, cfg.training, cfg.parallel
    # megatron's OptimizerParamScheduler asserts warmup < decay steps (= training.steps) for every
    # style, constant included: refused here, naming the key, not as an AssertionError at step 0
    if sch.warmup_steps >= tr.steps:
        raise ValueError(f"scheduler.warmup_steps: {sch.warmup_steps} must be < training.steps={tr.steps}")
    if sch.decay_style == "wsd" and sch.wsd_decay_steps > tr.steps - sch.warmup_steps:
        # a longer decay would start inside the warmup: the LR would jump from the warmup's
        # line onto the decay's at the end of the warmup, never holding the peak
        raise ValueError(
            f"scheduler.wsd_decay_steps: {sch.wsd_decay_steps} must be <= training.steps={tr.steps} - "
            f"scheduler.warmup_steps={sch.warmup_steps} = {tr.steps - sch.warmup_steps} (scheduler.decay_style=wsd)"
        )
    if m.block == "linear1" and m.activation == "swiglu":
        raise ValueError("model.activation: swiglu does not apply to model.block=linear1 (use model.linear1_phi)")
    if m.num_layers % par.pipeline_model_parallel_size:
        raise ValueError(
            f"parallel.pipeline_model_parallel_size: {par.pipeline_model_parallel_size} "
            f"does not divide model.num_layers={m.num_layers}"
        )
    if cfg.data.mock and m.vocab_size is None:
        raise ValueError("model.vocab_size: required when data.mock is true")
    if par.pipeline_model_parallel_size > 1 and cfg.run.seed + 100 * (par.pipeline_model_parallel_size - 1) > SEED_MAX:
        raise ValueError(
            f"run.seed: {cfg.run.seed} + 100 * pipeline rank (megatron's rule) exceeds numpy's seed range "
            f"[0, 2**32 - 1] with parallel.pipeline_model_parallel_size={par.pipeline_model_parallel_size}"
        )
    resolved = resolve(cfg)  # the parametrization engine's own refusals (e.g. width yaida has no Adam rule)
    _check_step_size(cfg, max(rule.lr_factor for rule in resolved.roles.values()))

    device = device or (par.device if par.device in DEVICES else None)
    if device == "cpu":
        if tr.precision == "bf16":
            raise ValueError("training.precision: bf16 needs the GPU path; use fp32 on CPU")
        if par.sequence_parallel:
            raise ValueError("parallel.sequence_parallel: needs the GPU path")
        if m.recompute != "none":
            raise ValueError("model.recompute: needs the GPU path (megatron's checkpointing saves CUDA RNG states)")
        if m.cuda_graphs:
            raise ValueError("model.cuda_graphs: needs the GPU path")
    elif device == "cuda":
        if par.use_distributed_optimizer and cfg.optimizer.name == "sgd":
            raise ValueError(
                "parallel.use_distributed_optimizer: megatron-core's distributed optimizer supports only "
                "Adam/AdamW; set parallel.use_distributed_optimizer=false for optimizer.name=sgd"
            )
    if m.cuda_graphs and m.compile:
        raise ValueError("model.cuda_graphs: not with model.compile (one or the other: both are untested together)")
    stage_layers = m.num_layers // par.pipeline_model_parallel_size
    if m.recompute == "full" and m.recompute_num_layers > stage_layers:
        raise ValueError(
            f"model.recompute_num_layers: {m.recompute_num_layers} exceeds the layers per pipeline stage "
            f"({stage_layers})"
        )
    if m.recompute == "full" and stage_layers % m.recompute_num_layers:
        # megatron-core 0.16.1's uniform method checkpoints chunks of exactly this many layers:
        # a last, shorter chunk ends in an IndexError at the first forward
        raise ValueError(
            f"model.recompute_num_layers: {m.recompute_num_layers} does not divide the layers per pipeline "
            f"stage ({stage_layers})"
        )
    if m.recompute == "selective" and not m.recompute_modules:
        raise ValueError("model.recompute_modules: name at least one module for model.recompute=selective")
    if par.sequence_parallel and m.block == "linear1":
        raise ValueError("parallel.sequence_parallel: not supported with model.block=linear1")
    tp = par.tensor_model_parallel_size
    if tp > 1:  # megatron splits heads, query groups and the MLP's columns over the TP ranks
        split = {
            "model.num_attention_heads": m.num_attention_heads,
            "model.num_query_groups": m.num_query_groups or m.num_attention_heads,
            "model.ffn_hidden_size": m.ffn_hidden_size or 4 * m.hidden_size,
        }
        if par.sequence_parallel:  # and the sequence, outside attention and the MLP
            split["model.seq_length"] = m.seq_length
        for key, value in split.items():
            if value % tp:
                raise ValueError(f"{key}: {value} is not divisible by parallel.tensor_model_parallel_size={tp}")


def validate_layout(cfg: RunConfig, world_size: int) -> None:
    """Raise ``ValueError`` when ``world_size`` processes cannot run ``cfg``: checked where the
    processes are known (the trainer) and where they are asked for (``launch job``, a sweep's
    ``executor.gpus_per_run``), so a bad layout fails at submission, not on the nodes."""
    par = cfg.parallel
    model_parallel = par.tensor_model_parallel_size * par.pipeline_model_parallel_size
    check_world(world_size, par.tensor_model_parallel_size, par.pipeline_model_parallel_size)
    check_batch_split(cfg.training.global_batch_size, cfg.training.micro_batch_size, world_size // model_parallel)


def check_world(world_size: int, tp: int, pp: int) -> None:
    if world_size % (tp * pp):
        raise ValueError(
            f"parallel: world size {world_size} is not divisible by tensor ({tp}) x pipeline ({pp}) parallel sizes"
        )


def check_batch_split(global_batch_size: int, micro_batch_size: int, dp_size: int) -> None:
    """Each step's samples split evenly into micro-batches on every data-parallel rank."""
    per_step = micro_batch_size * dp_size
    if global_batch_size % per_step:
        raise ValueError(
            f"training.global_batch_size: {global_batch_size} is not a multiple of "
            f"training.micro_batch_size x data-parallel size = {micro_batch_size} x {dp_size}"
        )


def apply_data_source(cfg: RunConfig) -> None:
    """A data source given on top of ``data.mock: true`` wins: mock data is turned off.

    ``configs/tiny_cpu.yaml`` says ``mock: true``; a user who adds ``data.manifest=DIR`` (or
    ``data.train_prefixes``) means to train on that data, and the run's config.yaml then
    records ``mock: false``. What cannot be honoured is refused, naming both keys: held-out
    prefixes with mock training data, or a manifest and prefixes at once (the manifest
    would silently replace the prefixes).
    """
    d = cfg.data
    if d.manifest and (d.train_prefixes or d.valid_prefixes):
        key = "data.train_prefixes" if d.train_prefixes else "data.valid_prefixes"
        raise ValueError(
            f"data.manifest: given together with {key}; give one data source (the manifest has both splits)"
        )
    if d.mock and (d.manifest or d.train_prefixes):
        d.mock = False
    elif d.mock and d.valid_prefixes:
        raise ValueError(
            "data.valid_prefixes: given with data.mock=true and no training data; "
            "give data.train_prefixes (or data.manifest) too, or drop data.valid_prefixes"
        )
