"""Everything one run's step loop needs, built completely before the first step (:func:`build_session`).

Device and precision, the distributed groups, data, the patched model with its resolved
table, the backend (optimizer, DDP), the scheduler, and the resume point from the latest
checkpoint (refused when the table or a math-changing config key differs). A
:class:`SetupError` here means an invalid config: exit 2, nothing trained.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import torch
import torch.distributed as dist

from jobscripts.allocation import cpu_threads
from jobscripts.atomic import atomic_write_text
from runconfig import changed_keys, describe_changes, dump_yaml, to_dict
from runconfig.schema import RunConfig, explain_added, recorded_changes
from runconfig.validate import validate, validate_layout

if TYPE_CHECKING:  # the heavy modules are imported when a session is built
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from patches.rules import ResolvedParametrization
    from training.backends import Backend, MicroBatch
    from training.data import BatchPlan, Datasets
    from training.diagnostics import Diagnostics
    from training.distributed import DistInfo
    from training.metrics import RunLog
    from training.model import Placement
from rundir.files import (
    CHECKPOINTS_DIR,
    COMMON_FILE,
    CONFIG_FILE,
    DIAGNOSTICS_FILE,
    EXIT_FILE,
    LATEST,
    METRICS_FILE,
    PARAMETRIZATION_FILE,
    SUMMARY_FILE,
    RunDirError,
    checkpoint_steps,
    latest_checkpoint,
    step_dir_name,
    truncate_diagnostics,
    truncate_metrics,
    with_relative_source,
)
from training.loop_parts import pipeline_note

# Config keys that may change between a run and its resume (they do not change the math; the
# throughput switches and the kernel choices change float rounding at most, as Megatron-LM lets a
# resume switch its attention backend or fused cross-entropy; runs written before they existed
# resume, e.g. with cross_entropy_fusion's new default true where they ran unfused).
RESUMABLE_CHANGES = (
    "run.dir", "logging.", "checkpoint.", "parallel.cpu_threads", "data.cache_dir",
    "model.rope_impl", "model.recompute", "model.compile", "model.cuda_graphs",
    "model.attention_backend", "model.cross_entropy_fusion",
)  # fmt: skip

log = logging.getLogger("train_gpt")


class SetupError(ValueError):
    """Invalid config discovered while setting up (exit 2, nothing trained)."""


@dataclass(frozen=True)
class TrainingData:
    """The run's data, as every rank addresses it: batches by step, never by iterator state."""

    datasets: Datasets  # train / valid datasets and the tokenizer
    plan: BatchPlan  # which micro-batches of a global batch this rank takes
    eval_batches: list[MicroBatch]  # the fixed held-out micro-batches of this rank
    vocab_size: int  # the tokenizer's
    padded_vocab: int  # the embedding's rows (megatron pads for tensor parallelism)


@dataclass(frozen=True)
class ResumePoint:
    """Where this session starts: step 0, or what the latest checkpoint recorded."""

    step: int = 0
    evals: tuple[dict, ...] = ()  # {step, fraction, val_loss} recorded before this session
    wall_offset: float = 0.0  # wall seconds of earlier sessions of this run


@dataclass
class Session:
    """A run ready to train: built by :func:`build_session`, read by the loop (training.runner)."""

    cfg: RunConfig
    run_dir: Path
    is_main: bool
    placement: Placement  # device and precision
    dist: DistInfo
    data: TrainingData
    resolved: ResolvedParametrization
    table: dict  # the resolved table (parametrization.json), global names and shapes
    backend: Backend
    scheduler: OptimizerParamScheduler
    config_dict: dict  # the resolved config, as written to config.yaml and checkpoints
    data_identity: dict  # what the data is, wherever it lies (training.data.data_identity), in checkpoints
    resume: ResumePoint
    runlog: Optional[RunLog] = None  # rank 0 only
    diagnostics: Optional[Diagnostics] = None  # logging.diagnostics_interval > 0
    evals: list[dict] = field(default_factory=list)  # every eval so far, this session's appended
    branch: Optional[dict] = None  # continued from another run (checkpoint.branch_record): summary.json's branch_of

    def __post_init__(self) -> None:
        if not self.evals:
            self.evals = [dict(e) for e in self.resume.evals]

    @property
    def device(self) -> str:
        return self.placement.device


def config_differences(old: dict, new: dict, allowed: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """``key: old -> new`` for each config key that differs, but those ``allowed`` to (prefixes)."""
    return describe_changes(changed_keys(old, new), allowed)


def setup_logging(run_dir: Path, is_main: bool) -> None:
    log.handlers.clear()
    log.setLevel(logging.INFO if is_main else logging.WARNING)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    log.addHandler(err)
    if is_main:
        fh = logging.FileHandler(run_dir / "train.log")
        fh.setFormatter(fmt)
        log.addHandler(fh)
    log.propagate = False


def check_layernorm_recompute(cfg: RunConfig, device: str) -> None:
    """Refuse ``model.recompute_modules: [layernorm]`` on a GPU without Transformer Engine.

    megatron-core 0.16.1's ``CheckpointWithoutOutput()`` sets ``self.fp8 = fp8 is not None``, so
    its default ``fp8=False`` marks it fp8 and its forward calls TE's ``FP8GlobalStateManager``: a
    NameError at the first step where TE is not installed. Checked here, on the node that trains
    (the login node that validated the sweep may lack TE where the GPU nodes have it)."""
    m = cfg.model
    if device != "cuda" or m.recompute != "selective" or "layernorm" not in m.recompute_modules:
        return
    from megatron.core.tensor_parallel import random as mcore_random

    if not mcore_random.HAVE_TE:
        raise SetupError(
            "model.recompute_modules: layernorm needs Transformer Engine with megatron-core 0.16.1 (its "
            "CheckpointWithoutOutput calls TE's FP8GlobalStateManager even without fp8), and it is not "
            "installed here; recompute core_attn or mlp instead"
        )


def device_of(cfg: RunConfig) -> str:
    """The device ``parallel.device`` names (auto: cuda where there is one)."""
    par = cfg.parallel
    return par.device if par.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")


def select_device(cfg: RunConfig) -> tuple[str, bool]:
    """(device, bf16) from ``parallel.device`` and ``training.precision`` (checked against the
    device by :func:`runconfig.validate.validate`); CPU thread settings."""
    par = cfg.parallel
    device = device_of(cfg)
    if device == "cuda" and not torch.cuda.is_available():
        raise SetupError("parallel.device: cuda requested but no CUDA device is available")
    try:
        validate(cfg, device)
    except ValueError as exc:
        raise SetupError(str(exc)) from exc
    check_layernorm_recompute(cfg, device)
    bf16 = cfg.training.precision == "bf16" or (cfg.training.precision == "auto" and device == "cuda")
    if device == "cpu":
        threads = cpu_threads(par.cpu_threads)  # the config, else the slot's or the SLURM allocation's
        if threads:
            torch.set_num_threads(threads)
        # Denormal floats take a slow microcode path on x86 CPUs (GPUs flush them in bf16
        # anyway); small Adam second moments and scaled branches produce them routinely.
        torch.set_flush_denormal(True)
    return device, bf16


def _has_checkpoint(run_dir: Path) -> bool:
    """Whether the run has a checkpoint of its own to resume (an unreadable one counts: the
    resume below reports it)."""
    try:
        return latest_checkpoint(run_dir) is not None
    except RunDirError:
        return True


def build_session(cfg: RunConfig, *, force: bool, is_main: bool) -> Session:
    """Set up the run of ``cfg`` (resuming from its latest checkpoint) and return it."""
    from training import checkpoint
    from training.data import build_datasets, check_run_data, data_identity, data_parallel_plan, eval_micro_batches
    from training.distributed import env_int, init_distributed, seed_everything
    from training.metrics import RunLog
    from training.model import Placement, build_model, padded_vocab_size, resolve
    from training.optim import build_scheduler

    try:
        tokenizer = check_run_data(cfg)  # broken data exits 2 here, before a process group or model exists
    except (ValueError, FileNotFoundError) as exc:
        raise SetupError(str(exc)) from exc
    vocab_size = tokenizer.vocab_size
    device, bf16 = select_device(cfg)
    run_dir = Path(cfg.run.dir)
    par = cfg.parallel
    try:  # before a process group exists: every rank exits 2 alike
        validate_layout(cfg, env_int("WORLD_SIZE", 1))
    except ValueError as exc:
        raise SetupError(str(exc)) from exc
    if device == "cuda" and par.tensor_model_parallel_size > 1:
        # before the CUDA context: one hardware queue keeps TP's communication kernels in the
        # order megatron issues them, so they overlap with the matrix products (as Megatron-LM sets)
        os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    if is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        if force:
            clear_run_dir(run_dir)
    setup_logging(run_dir, is_main)
    info = init_distributed(device, par.tensor_model_parallel_size, par.pipeline_model_parallel_size)
    seed_everything(cfg.run.seed, device, cudagraphable_rng=cfg.model.cuda_graphs)

    try:
        data = build_datasets(cfg, cfg.index_cache_dir(), checked=tokenizer)
        plan = data_parallel_plan(cfg)
    except (ValueError, FileNotFoundError) as exc:
        raise SetupError(str(exc)) from exc
    eval_batches = eval_micro_batches(data.valid, plan, cfg.eval.batches)
    padded_vocab = padded_vocab_size(vocab_size, par.tensor_model_parallel_size, cfg.model.make_vocab_size_divisible_by)

    resolved = resolve(cfg)
    placement = Placement(device=device, bf16=bf16)
    model = build_model(cfg, padded_vocab, placement, resolved=resolved)
    weights_only = cfg.checkpoint.init_mode == "weights"
    source = None
    if cfg.checkpoint.init_from and weights_only and not _has_checkpoint(run_dir):  # its own: resumed below
        try:
            source = checkpoint.init_weights(cfg, model, cfg.checkpoint.init_from)
        except checkpoint.CheckpointError as exc:
            raise SetupError(str(exc)) from exc
        log.info("initialized the model from %s (step %d of %s)", source.path, source.step, source.run_dir)
    table = gather_table(cfg, model, resolved)
    backend = make_backend(cfg, model, resolved, device, bf16)
    scheduler = build_scheduler(cfg, backend.optimizer)

    config_dict = to_dict(cfg)
    if source is not None:
        warn_parametrization_change(source, table, config_dict)
    identity = data_identity(cfg, tokenizer)
    resume, branch = ResumePoint(), None
    try:
        ckpt = latest_checkpoint(run_dir)
    except RunDirError as exc:
        raise SetupError(unreadable_checkpoint(run_dir, exc)) from exc
    if ckpt is None and cfg.checkpoint.init_from and not weights_only:
        resume, branch = continue_from(cfg, data, backend, scheduler, table, identity, info.rank, device)
    if ckpt is not None:
        if not (ckpt.parent / LATEST).is_file():  # latest_checkpoint fell back to the newest complete folder
            log.warning(
                "%s is missing; resuming from the newest complete checkpoint, %s", ckpt.parent / LATEST, ckpt.name
            )
        try:
            common = json.loads((ckpt / COMMON_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise SetupError(unreadable_checkpoint(run_dir, exc, ckpt)) from exc
        check_resumable(common, ckpt, table, config_dict, identity)
        if device != "cuda":
            check_cpu_layout(common, ckpt, backend.layout)
        try:
            common = checkpoint.load(ckpt, backend, scheduler, info.rank)
        except (OSError, EOFError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError) as exc:
            raise SetupError(unreadable_checkpoint(run_dir, exc, ckpt)) from exc
        resume = ResumePoint(common["step"], tuple(common["evals"]), common["wall_time_s"])
        # a continued run keeps naming its source (relative to where the checkpoint was saved: a
        # record written before relative_run_dir existed gets it here)
        saved_in = common.get("config", {}).get("run", {}).get("dir") or run_dir
        branch = with_relative_source(common.get("branch_of"), Path(saved_in))
        log.info("resumed from %s (step %d)", ckpt, resume.step)
    runlog = None
    if is_main:
        truncate_metrics(run_dir, resume.step)
        truncate_diagnostics(run_dir, resume.step)
        (run_dir / SUMMARY_FILE).unlink(missing_ok=True)
        (run_dir / EXIT_FILE).unlink(missing_ok=True)  # an earlier attempt's refusal: this one got past it
        atomic_write_text(run_dir / CONFIG_FILE, dump_yaml(cfg))
        atomic_write_text(run_dir / PARAMETRIZATION_FILE, json.dumps(table, indent=1) + "\n")
        lg = cfg.logging
        runlog = RunLog(run_dir, lg.tensorboard, lg.wandb, lg.wandb_project, config_dict, resume.step, branch)
    log.info(
        "run %s: %s L=%d n=%d lr=%g on %s (%s, tp=%d pp=%d dp=%d), %d steps x %d sequences "
        "(%d micro-batches of %d x data-parallel size %d)",
        run_dir,
        cfg.parametrization.preset,
        cfg.model.num_layers,
        cfg.model.hidden_size,
        cfg.optimizer.lr,
        device,
        "bf16" if bf16 else "fp32",
        par.tensor_model_parallel_size,
        par.pipeline_model_parallel_size,
        plan.dp_size,
        cfg.training.steps,
        cfg.training.global_batch_size,
        plan.num_microbatches,
        cfg.training.micro_batch_size,
        plan.dp_size,
    )
    if padded_vocab > vocab_size:  # Megatron-LM prints this too ("padded vocab ... dummy tokens")
        log.info(
            "vocabulary %d padded to %d rows (%d padding rows: a multiple of model.make_vocab_size_divisible_by=%d x tp=%d)",
            vocab_size,
            padded_vocab,
            padded_vocab - vocab_size,
            cfg.model.make_vocab_size_divisible_by,
            par.tensor_model_parallel_size,
        )
    if par.pipeline_model_parallel_size > 1:
        log.info("%s", pipeline_note(par.pipeline_model_parallel_size, plan.num_microbatches))
    return Session(
        cfg=cfg,
        run_dir=run_dir,
        is_main=is_main,
        placement=placement,
        dist=info,
        data=TrainingData(data, plan, eval_batches, vocab_size, padded_vocab),
        resolved=resolved,
        table=table,
        backend=backend,
        scheduler=scheduler,
        config_dict=config_dict,
        data_identity=identity,
        resume=resume,
        runlog=runlog,
        diagnostics=make_diagnostics(cfg, backend.model, eval_batches, device),
        branch=branch,
    )


def warn_parametrization_change(source: Any, table: dict, config_dict: dict) -> None:
    """A weights-only init from a run of another parametrization (an sp run's weights into a
    depth_mup run, say) is an experiment of its own: the same weights under this run's
    multipliers compute another function than the source's model did. Warned, naming the
    ``parametrization.*`` keys and the resolved table's entries that differ."""
    from patches.table import table_differences

    common = source.common  # init_source read it
    changed = {
        k: v for k, v in recorded_changes(common["config"], config_dict).items() if k.startswith("parametrization.")
    }
    entries = [
        line
        for line in table_differences(common["parametrization"], table)
        # the model's shapes are the tensor check's; the init scales are not used (every weight is loaded)
        if not line.startswith(("params[", "model", "megatron")) and ".init_std:" not in line
    ]
    if not changed and not entries:
        return
    log.warning(
        "checkpoint.init_from=%s: its weights were trained under another parametrization: %s; this run applies "
        "its own multipliers and LR factors to them, so its model at step 0 computes another function than the "
        "source's: %s%s",
        source.path,
        ", ".join(describe_changes(changed, ())) or "the same keys resolve differently",
        "; ".join(entries[:MAX_SHOWN]),
        f"; ... and {len(entries) - MAX_SHOWN} more" if len(entries) > MAX_SHOWN else "",
    )


def continue_from(
    cfg: RunConfig,
    data: Datasets,
    backend: Backend,
    scheduler: OptimizerParamScheduler,
    table: dict,
    identity: dict,
    rank: int,
    device: str,
) -> tuple[ResumePoint, dict]:
    """``checkpoint.init_mode=continue``: load another run's checkpoint as a resume does (model,
    optimizer state, megatron scheduler step, this rank's RNG), after :func:`check_continuable`.

    The scheduler is this run's (``training.optim.build_scheduler``, built with megatron's
    ``override_opt_param_scheduler=True``): megatron's ``OptimizerParamScheduler.load_state_dict``
    keeps the class values of peak and floor LR, warmup, decay steps and style (the WSD decay
    steps and style are never in its state) and takes only the step count from the checkpoint,
    which is Megatron-LM's ``--override-opt_param-scheduler``. Loading the optimizer state restores
    each group's peak and floor LR from the source, so this run's own (``optimizer.lr`` x role factor,
    x ``optimizer.min_lr_ratio``) are put back after it (``training.optim.set_group_bounds``). The data position is the step
    (step s reads samples [s*G, (s+1)*G)). Evaluations the source recorded at steps that are
    eval points of this run are carried over with this run's fractions. Returns the resume point
    and the record of the source (``checkpoint.branch_record``)."""
    from training import checkpoint
    from training.data import build_datasets, same_sample_order
    from training.loop_parts import EvalSchedule
    from training.optim import group_bounds, set_group_bounds

    try:
        source = checkpoint.init_source(cfg.checkpoint.init_from)
    except checkpoint.CheckpointError as exc:
        raise SetupError(str(exc)) from exc
    where = f"checkpoint.init_from={source.path} (step {source.step} of {source.run_dir}) with checkpoint.init_mode=continue"
    common = source.common  # init_source read it (and refused it unreadable)
    earlier = earlier_checkpoints(source.run_dir, cfg.training.steps)
    check_continuable(where, common, cfg, table, to_dict(cfg), identity, earlier)
    on_gpu = device == "cuda"
    if (source.format == "dist") != on_gpu:
        held, reader, path = (
            ("megatron's optimizer state (a dist_checkpointing folder)", "the CPU path's torch optimizer", "GPU")
            if source.format == "dist"
            else ("the CPU path's torch optimizer state (torch.save files)", "megatron's GPU optimizer", "CPU")
        )
        raise SetupError(
            f"{where}: a {'GPU (dist)' if source.format == 'dist' else 'CPU'} checkpoint holds {held}, which "
            f"{reader} does not read (this run is on {device}): continue it on the {path} path, or take its weights "
            "alone with checkpoint.init_mode=weights (either format loads into either path and any layout)"
        )
    if not on_gpu:
        check_cpu_layout(
            common,
            source.path,
            backend.layout,
            hint="run the branch with the source's tensor- and pipeline-parallel sizes",
        )
    record = with_relative_source(checkpoint.branch_record(source, common), Path(cfg.run.dir))
    src_steps = int(common["config"]["training"]["steps"])
    if src_steps != cfg.training.steps:  # megatron's sample order depends on the sample count
        other = build_datasets(cfg, cfg.index_cache_dir(), checked=data.tokenizer, steps=src_steps)
        shared = min(src_steps, cfg.training.steps) * cfg.training.global_batch_size
        record["same_sample_order"] = same_sample_order(data.train, other.train, shared)
        if not record["same_sample_order"]:
            log.warning(
                "%s: training.steps %d -> %d makes megatron shuffle the training data over another number of "
                "epochs: the samples of steps %d.. are not the ones the source would have read (Megatron-LM does "
                "the same); summary.json records same_sample_order=false",
                where,
                src_steps,
                cfg.training.steps,
                source.step,
            )
    bounds = group_bounds(backend.param_groups)  # this run's peak and floor LR per group
    try:
        common = checkpoint.load(source.path, backend, scheduler, rank)
    except (OSError, EOFError, RuntimeError, KeyError, ValueError, pickle.UnpicklingError) as exc:
        raise SetupError(f"{where}: cannot load it: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    set_group_bounds(backend.param_groups, bounds, scheduler)
    points = EvalSchedule.of(cfg).points
    evals = tuple(
        {**e, "fraction": points[e["step"]]}
        for e in common["evals"]
        if e["step"] in points and e["step"] <= source.step
    )
    lost = [k for k in points if k <= source.step and k not in {e["step"] for e in evals}]
    if lost:  # this run evaluates only after the branch step
        named = ", ".join(f"fraction {points[k]:g} (step {k})" for k in lost[:5])
        log.warning(
            "%s: eval point(s) %s%s are at or before the branch step %d and the source recorded no eval "
            "there: this run has no eval at them (their results.csv rows stay empty)",
            where,
            named,
            f" and {len(lost) - 5} more" if len(lost) > 5 else "",
            source.step,
        )
    log.info(
        "continued %s: its weights, optimizer state, RNG and data position at step %d; this run's schedule "
        "(%d steps, %s) from there",
        source.path,
        source.step,
        cfg.training.steps,
        cfg.scheduler.decay_style,
    )
    return ResumePoint(int(common["step"]), evals, 0.0), record


# What a continued run may set differently from the run it continues (beyond what a resume may):
# the schedule (Megatron-LM's --override-opt_param-scheduler) and where it evaluates.
# The peak and floor LR are schedule values too: megatron's scheduler reads them from the groups,
# which continue_from sets from this run's config after loading. The weight decay is the
# scheduler's (start_wd = end_wd = optimizer.weight_decay, class values it keeps): its step
# writes each group's weight_decay = that x the group's wd_mult, over what the optimizer state
# restored. The clip threshold is read from this run's config at each step (CpuOptimizer,
# megatron's optimizer config), never from the optimizer state.
BRANCH_CHANGES = (
    "training.steps",
    "scheduler.",
    "eval.at",
    "eval.interval",
    "optimizer.lr",
    "optimizer.min_lr_ratio",
    "optimizer.weight_decay",
    "optimizer.clip_grad",
)
# Why the other keys cannot differ, by key prefix (the first match is said).
CONTINUE_REFUSALS = (
    (
        "training.global_batch_size",
        "the data position is the step count: step s reads samples [s*G, (s+1)*G), so another G would skip or "
        "repeat samples of the source, and its Adam moments were averaged over G sequences",
    ),
    ("training.micro_batch_size", "the source's micro-batches; the step's float rounding follows them"),
    ("model.", "the optimizer state belongs to the source's parameters: model shape or block"),
    ("parametrization.", "the optimizer state and LR per role belong to the source's parametrization"),
    ("optimizer.name", "the optimizer state is the source optimizer's (Adam moments or SGD momentum)"),
    (
        "optimizer.adam_",
        "loading the optimizer state restores each group's betas and eps from the source: a new value would be ignored",
    ),
    (
        "optimizer.sgd_momentum",
        "loading the optimizer state restores each group's momentum from the source: a new value would be ignored",
    ),
    (
        "optimizer.",
        "not a schedule key: a branch may change the peak and floor LR (optimizer.lr, optimizer.min_lr_ratio), "
        "optimizer.weight_decay, optimizer.clip_grad and the schedule, not the rest of the optimizer",
    ),
    ("data.", "the data position is a position in the source's data (data set, tokenizer, order)"),
    ("run.seed", "the RNG state continues the source's"),
    (
        "parallel.",
        "the optimizer state is loaded as a resume loads it, in the layout that wrote it: a CPU checkpoint holds "
        "one torch optimizer state per tensor-parallel rank and pipeline stage, its Adam moments indexed by each "
        "parameter shard's position in that rank's groups, with no names to join and re-split them by (the model "
        "weights have them: checkpoint.init_mode=weights loads them into any layout); continue in the source's layout",
    ),
)


def earlier_checkpoints(run_dir: Path, before: int) -> str:
    """How to name one of ``run_dir``'s checkpoints before step ``before`` (this run's last step) in
    ``checkpoint.init_from``, for the refusal of a source at or past it; "" when it keeps none."""
    steps = [k for k in checkpoint_steps(run_dir) if k < before]
    if not steps:
        return ""
    folder = Path(run_dir) / CHECKPOINTS_DIR / step_dir_name(steps[-1])
    listed = ", ".join(str(k) for k in steps)
    return (
        f", or branch from an earlier checkpoint: checkpoint.init_from={folder} "
        f"(the source keeps checkpoints before step {before} at step(s) {listed})"
    )


def check_continuable(
    where: str, common: dict, cfg: RunConfig, table: dict, config_dict: dict, data: dict, earlier: str = ""
) -> None:
    """Refuse to continue another run's checkpoint where this run differs in anything but the
    schedule keys (:data:`BRANCH_CHANGES`), or would start at or past its own last step: each
    differing key named with why it cannot change (:data:`CONTINUE_REFUSALS`); ``earlier``
    (:func:`earlier_checkpoints`) names the source's checkpoints this run could branch from instead."""
    from patches.table import table_differences
    from training.data import DATA_LOCATION_KEYS

    problems = []
    step = int(common["step"])
    if step >= cfg.training.steps:
        problems.append(
            f"training.steps: {cfg.training.steps} is not past the source's step {step}: nothing to continue "
            f"(give training.steps > {step}{earlier})"
        )
    changed = recorded_changes(common["config"], config_dict)
    same_data = common.get("data") == data
    allowed = RESUMABLE_CHANGES + BRANCH_CHANGES + (DATA_LOCATION_KEYS if same_data else ())
    for line in explain_added(describe_changes(changed, allowed), common["config"]):
        key = line.split(":", 1)[0]
        why = next((w for prefix, w in CONTINUE_REFUSALS if key == prefix or key.startswith(prefix)), None)
        problems.append(f"{line} ({why})" if why else line)
    if not same_data and "data" in common and not any(k.startswith("data.") for k in changed):
        problems.append(f"data: the files are not the source's: {common['data']} -> {data}")
    table_diffs = table_differences(common["parametrization"], table)
    if table_diffs and not problems:
        problems.append(
            f"the resolved parametrization differs ({len(table_diffs)} entries): " + "; ".join(table_diffs[:3])
        )
    if problems:
        raise SetupError(
            f"{where}: cannot continue it:\n  "
            + "\n  ".join(problems)
            + "\n  (checkpoint.init_mode=weights takes its model weights only, with a fresh optimizer and schedule)"
        )


PROBE_SEQUENCES = 2  # the probe forward costs ~1/3 of a step per sequence share: keep it small


def make_diagnostics(cfg: RunConfig, model: torch.nn.Module, eval_batches: list, device: str) -> Optional[Diagnostics]:
    """The per-layer diagnostics part, or None when ``logging.diagnostics_interval`` is 0. The
    probe batch is the first two sequences of the first held-out micro-batch (the same for
    every run of a sweep)."""
    if not cfg.logging.diagnostics_interval:
        return None
    from megatron.core import parallel_state

    from training.diagnostics import Diagnostics

    probe = None
    if eval_batches:
        target = next(model.parameters()).device
        probe = {k: eval_batches[0][k][:PROBE_SEQUENCES].to(target) for k in ("tokens", "position_ids")}
    pp = parallel_state.get_pipeline_model_parallel_world_size()
    return Diagnostics(
        model,
        cfg.logging.diagnostics_interval,
        probe,
        layer_offset=stage_layer_offset(cfg),
        tp_group=parallel_state.get_tensor_model_parallel_group(),
        pp_group=parallel_state.get_pipeline_model_parallel_group() if pp > 1 else None,
        dp_group=parallel_state.get_data_parallel_group(with_context_parallel=True),
        sequence_parallel=cfg.parallel.sequence_parallel,
    )


def clear_run_dir(run_dir: Path) -> None:
    """``--force``: forget the run's checkpoints, metrics and summary (its config is rewritten)."""
    for name in (CHECKPOINTS_DIR, METRICS_FILE, DIAGNOSTICS_FILE, SUMMARY_FILE, "tensorboard"):
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def make_backend(cfg: RunConfig, model: torch.nn.Module, resolved: Any, device: str, bf16: bool) -> Backend:
    from training.backends import CpuBackend, GpuBackend

    try:
        if device == "cuda":
            return GpuBackend(cfg, model, resolved, bf16)
        return CpuBackend(cfg, model, resolved)
    except ValueError as exc:
        raise SetupError(str(exc)) from exc


def stage_layer_offset(cfg: RunConfig) -> int:
    """Global index of this pipeline stage's first layer (megatron's even split)."""
    from megatron.core import parallel_state

    pp = parallel_state.get_pipeline_model_parallel_world_size()
    return parallel_state.get_pipeline_model_parallel_rank() * cfg.model.num_layers // pp


def gather_table(cfg: RunConfig, model: torch.nn.Module, resolved: Any) -> dict:
    """The resolved table with global names and shapes, gathered over pipeline stages."""
    from megatron.core import parallel_state

    from patches.table import build_table, global_parameters

    pp = parallel_state.get_pipeline_model_parallel_world_size()
    rows = global_parameters(model, parallel_state.get_tensor_model_parallel_world_size(), stage_layer_offset(cfg))
    if pp > 1:
        gathered: list = [None] * pp
        dist.all_gather_object(gathered, rows, group=parallel_state.get_pipeline_model_parallel_group())
        rows = sorted({r[0]: r for part in gathered for r in part}.values())
    return build_table(resolved, rows)


def unreadable_checkpoint(run_dir: Path, exc: BaseException, ckpt: Optional[Path] = None) -> str:
    """The refusal to resume from a checkpoint that cannot be read (truncated or missing files):
    what failed, and what the user can do (another complete checkpoint, or --force)."""
    others = [step_dir_name(s) for s in checkpoint_steps(run_dir) if ckpt is None or step_dir_name(s) != ckpt.name]
    first = f"cannot resume from {ckpt}: " if ckpt is not None else "cannot resume: "
    what = f"{first}{type(exc).__name__}: {exc}".splitlines()[0]
    if others:
        pointer = run_dir / CHECKPOINTS_DIR / LATEST
        return (
            f"{what}\n  other checkpoints: {', '.join(others)}: write one's name into {pointer} "
            "to resume from it, or give --force to retrain"
        )
    return f"{what}\n  no other checkpoint: give --force to retrain"


def check_cpu_layout(
    common: dict,
    ckpt: Path,
    layout: dict[str, int],
    hint: str = "rerun with the checkpoint's tensor- and pipeline-parallel sizes, or --force to retrain",
) -> None:
    """A CPU checkpoint holds one state file per tensor-parallel rank and pipeline stage, from
    data-parallel rank 0: it loads only with the tensor- and pipeline-parallel sizes that wrote
    it. The data-parallel size (set by the world size, no config key) may differ: the CPU path's
    torch optimizer is not sharded over data-parallel ranks (``parallel.use_distributed_optimizer``
    is the GPU path's), so every data-parallel rank holds the same model and optimizer state,
    the one written, and the global batch is the config's. Warned: the steps are the same math
    with another float rounding (the batch split into other micro-batches per rank and summed
    over ranks), so not bit-exact."""
    from training.checkpoint import other_model_parallel

    saved = common.get("layout")
    if saved is None or saved == layout:
        return

    def spell(lay: dict) -> str:
        return " ".join(f"{k}={lay.get(k)}" for k in ("tp", "pp", "dp"))

    if other_model_parallel(saved, layout):
        raise SetupError(
            f"{ckpt}: written with parallel layout {spell(saved)}; this CPU run is {spell(layout)}: a CPU "
            "checkpoint's optimizer state is one torch optimizer state per tensor-parallel rank and pipeline "
            "stage, indexed by each parameter shard's position, and loads only with the tensor- and "
            f"pipeline-parallel sizes that wrote it (the GPU path's dist_checkpointing reshards); {hint}"
        )
    log.warning(
        "%s: written with data-parallel size %s, this run's is %s: every data-parallel rank takes the state "
        "data-parallel rank 0 wrote (the CPU optimizer is not sharded); the same global batch in other "
        "micro-batches per rank gives the same steps to float rounding, not bit for bit",
        ckpt,
        saved.get("dp"),
        layout.get("dp"),
    )


MAX_SHOWN = 20  # lines of a parametrization difference shown


def check_resumable(common: dict, ckpt: Path, table: dict, config_dict: dict, data: dict) -> None:
    """Refuse a resume whose parametrization table or math-changing config differs from the
    checkpoint's. The data's location (:data:`training.data.DATA_LOCATION_KEYS`) may change
    when its identity (``data``, :func:`training.data.data_identity`) is the checkpoint's."""
    from patches.table import table_differences
    from training.data import DATA_LOCATION_KEYS

    table_diffs = table_differences(common["parametrization"], table)
    changed = recorded_changes(common["config"], config_dict)
    moved = [k for k in DATA_LOCATION_KEYS if k in changed]
    same_data = common.get("data") == data
    diffs = explain_added(
        describe_changes(changed, RESUMABLE_CHANGES + (DATA_LOCATION_KEYS if same_data else ())), common["config"]
    )
    if table_diffs and not diffs:  # the same config resolves differently (the presets' code changed)
        shown = table_diffs[:MAX_SHOWN]
        if len(table_diffs) > MAX_SHOWN:
            shown.append(f"... and {len(table_diffs) - MAX_SHOWN} more")
        raise SetupError(
            f"{ckpt}: the resolved parametrization differs from the checkpoint's; refusing to resume:\n  "
            + "\n  ".join(shown)
        )
    if diffs:  # the config keys the user changed come first: they are what to put back
        if table_diffs:
            diffs.append(f"(the resolved parametrization differs with them: {len(table_diffs)} entries)")
        if moved and "data" not in common:
            diffs.append("(the data moved; this checkpoint predates the record of what its data is, so it cannot tell)")
        elif moved:
            diffs.append(f"(the data moved and its files are not the checkpoint's: {common['data']} -> {data})")
        raise SetupError(
            f"{ckpt}: the config differs from the checkpoint's; refusing to resume:\n  " + "\n  ".join(diffs)
        )
    if moved:
        log.info("the data moved (%s) since %s; its files are the checkpoint's", ", ".join(moved), ckpt)
