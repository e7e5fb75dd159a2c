"""Checkpoints: periodic and final, atomic, with everything a bit-exact resume needs.

Layout of ``RUN_DIR/checkpoints/step_XXXXXXXX/``:

* ``common.json``: step, consumed samples, accumulated wall time, parallel layout, the
  resolved parametrization table and config (compared on resume), and what the data is
  (``training.data.data_identity``: the data may move between a run and its resume);
* ``scheduler.pt``: megatron ``OptimizerParamScheduler`` state;
* ``rng_rank{R}.pt``: python / numpy / torch (and CUDA + megatron tracker) RNG per rank;
* model and optimizer state: on CPU ``model_tp{T}_pp{P}.pt`` from data-parallel rank 0 (one
  per tensor-parallel rank and pipeline stage, the stage's own parameter names);
  on GPU a ``dist/`` folder written by megatron ``dist_checkpointing`` (resharding-capable).

Every rank writes into ``step_XXXXXXXX.tmp/``; after a barrier rank 0 renames it and then
rewrites ``checkpoints/latest``. A kill at any point leaves either the previous checkpoint
or the new one, never a half-written one named as complete.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from jobscripts.atomic import atomic_write_text
from runconfig import load_config
from runconfig.schema import RunConfig
from rundir.files import (
    CHECKPOINTS_DIR,
    COMMON_FILE,
    CONFIG_FILE,
    LATEST,
    RunDirError,
    checkpoint_dir,
    checkpoint_steps,
    latest_checkpoint,
    step_dir_name,
)


def cpu_state_file(tp_rank: int, pp_rank: int) -> str:
    """A CPU checkpoint's model + optimizer state of one model-parallel rank."""
    return f"model_tp{tp_rank}_pp{pp_rank}.pt"


CPU_MODEL_FILE = cpu_state_file(0, 0)  # the whole model of a TP=PP=1 CPU checkpoint


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 - the global RNG other libraries draw from
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        from megatron.core import tensor_parallel

        state["cuda"] = torch.cuda.get_rng_state()
        state["tracker"] = tensor_parallel.get_cuda_rng_tracker().get_states()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002 - the global RNG other libraries draw from
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        from megatron.core import tensor_parallel

        torch.cuda.set_rng_state(state["cuda"])
        tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def save(
    ckpt_root: Path,
    step: int,
    common: dict[str, Any],
    backend: Any,
    scheduler: Any,
    rank: int,
    keep: int,
) -> Path:
    """Write checkpoint ``step`` with all ranks; returns its final path."""
    final = ckpt_root / step_dir_name(step)
    tmp = ckpt_root / (step_dir_name(step) + ".tmp")
    if rank == 0:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    _barrier()
    backend.save_state(tmp)
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")
    if rank == 0:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        atomic_write_text(tmp / COMMON_FILE, json.dumps(common, indent=1, sort_keys=True))
    _barrier()
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        atomic_write_text(ckpt_root / LATEST, final.name + "\n")
        _prune(ckpt_root, keep)
    _barrier()
    return final


def _prune(ckpt_root: Path, keep: int) -> None:
    done = sorted(p for p in ckpt_root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckpt_root.glob("step_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def other_model_parallel(saved: Optional[dict[str, int]], layout: dict[str, int]) -> bool:
    """Whether a CPU checkpoint's recorded layout has other tensor- or pipeline-parallel sizes than
    ``layout`` (its state files are per TP rank and stage); None (not recorded) counts as the same.
    The data-parallel size may differ: data-parallel rank 0 wrote the whole state."""
    return saved is not None and any(saved.get(k) != layout.get(k) for k in ("tp", "pp"))


def rng_source_rank(saved: Optional[dict[str, int]], layout: dict[str, int], rank: int) -> int:
    """The rank of the checkpoint whose RNG state this rank takes. In the layout that wrote it,
    its own. Where only the data-parallel size differs, the rank of this rank's tensor-parallel
    rank and pipeline stage at data-parallel rank 0 of the saved layout (megatron's rank order
    tp-cp-ep-dp-pp: tensor-parallel fastest, stage slowest), as Megatron-LM takes data-parallel
    rank 0's RNG on load: the data-parallel ranks are seeded alike (``seed + 100 x stage``) and
    draw alike, so any of them holds the same state."""
    if not saved or saved == layout or other_model_parallel(saved, layout):
        return rank
    tp = layout["tp"]
    tp_rank, stage = rank % tp, rank // (tp * layout["dp"])
    return stage * tp * int(saved["dp"]) + tp_rank


def load(path: Path, backend: Any, scheduler: Any, rank: int) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and this rank's RNG (:func:`rng_source_rank`);
    returns ``common.json``."""
    common = json.loads((path / COMMON_FILE).read_text())
    backend.load_state(path, common)
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    rng_file = path / f"rng_rank{rng_source_rank(common.get('layout'), backend.layout, rank)}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return common


# ----------------------------------------------------------------------------- reading weights back
class CheckpointError(ValueError):
    """A checkpoint that is missing, incomplete or does not fit the model; names the file."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint folder of a run directory and how its model state is stored."""

    run_dir: Path
    path: Path
    step: int
    format: str  # "cpu" (model_tp{T}_pp{P}.pt per model-parallel rank) | "dist" (dist/ folder)
    tp: int = 1  # tensor-parallel ranks of a CPU checkpoint (joined on reading)
    pp: int = 1  # pipeline stages of a CPU checkpoint (joined on reading)
    common: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # its common.json, as read


def read_run_config(run_dir: Path) -> RunConfig:
    """The config a run directory was trained with (its ``config.yaml``)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise RunDirError(f"{path}: missing (not a run directory, or the run never started)")
    return load_config(RunConfig, path)


def one_process_config(cfg: Any) -> Any:
    """The run's config with TP = PP = 1: the layout weights are read back into."""
    import dataclasses

    par = dataclasses.replace(
        cfg.parallel, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False
    )
    return dataclasses.replace(cfg, parallel=par)


def find_checkpoint(run_dir: Path, step: Optional[int] = None) -> Checkpoint:
    """The latest checkpoint of ``run_dir`` (or the one of ``step``) whose model weights can be read
    into one process: a GPU ``dist/`` checkpoint (any layout: it reshards) or a CPU one (its
    tensor-parallel shards and pipeline stages are joined)."""
    if step is None:
        try:
            path = latest_checkpoint(run_dir)
        except ValueError as exc:
            raise CheckpointError(str(exc)) from exc
        if path is None:
            raise CheckpointError(f"no checkpoint in {Path(run_dir) / CHECKPOINTS_DIR}")
    else:
        path = checkpoint_dir(run_dir, step)
        if not path.is_dir():
            kept = checkpoint_steps(run_dir)
            raise CheckpointError(
                f"no checkpoint at step {step} in {Path(run_dir) / CHECKPOINTS_DIR}; steps with one: "
                + (", ".join(map(str, kept)) if kept else "none")
            )
        if not (path / COMMON_FILE).is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {COMMON_FILE})")
    try:
        common = json.loads((path / COMMON_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path / COMMON_FILE}: {exc}") from exc
    if (path / "dist").is_dir():
        return Checkpoint(run_dir, path, int(common.get("step", -1)), "dist", common=common)
    layout = common.get("layout") or {}
    tp, pp = int(layout.get("tp", 1)), int(layout.get("pp", 1))
    for stage in range(pp):
        for rank in range(tp):
            if not (path / cpu_state_file(rank, stage)).is_file():
                raise CheckpointError(
                    f"{path} has neither {cpu_state_file(rank, stage)} (tp={tp}, pp={pp}) nor a dist/ folder"
                )
    return Checkpoint(run_dir, path, int(common.get("step", -1)), "cpu", tp, pp, common)


def _gated_fc1(name: str, gated: bool) -> bool:
    """Whether ``name`` is the gated MLP's fc1 (weight or bias), each rank holding ``[gate_r; up_r]``."""
    return gated and name.rsplit(".", 1)[0].endswith("mlp.linear_fc1")


def _join_shards(name: str, shards: list[torch.Tensor], param: Any, gated: bool) -> torch.Tensor:
    """One tensor from its tensor-parallel shards, along the dimension megatron records on the
    parameter (``partition_dim``); the gated MLP's fc1 (each rank ``[gate_r; up_r]``) as all
    gates then all ups, as megatron's ``apply_swiglu_sharded_factory`` describes it. The fused
    QKV needs nothing more: each rank holds whole query groups (``q.. k v`` per group), so the
    global tensor is the ranks' rows in order, as megatron's sharded state dict has it."""
    from patches.table import tp_partition_dim

    dim = None if param is None else tp_partition_dim(param)
    if dim is None:
        for rank, other in enumerate(shards[1:], start=1):
            if other.shape != shards[0].shape or not torch.equal(other, shards[0]):
                raise CheckpointError(f"{name}: replicated tensor differs between tensor-parallel ranks 0 and {rank}")
        return shards[0]
    if _gated_fc1(name, gated):
        halves = [s.chunk(2, dim=0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(shards, dim=dim)


def _split_shard(name: str, full: torch.Tensor, param: Any, gated: bool, rank: int, size: int) -> torch.Tensor:
    """Tensor-parallel rank ``rank`` of ``size``'s part of a global tensor, the inverse of
    :func:`_join_shards`: the ``rank``-th of ``size`` equal slices along the parameter's
    ``partition_dim`` (megatron's column- and row-parallel split; the vocabulary-parallel
    embedding and output layer by rows), and of the gated fc1 the ``rank``-th slice of the gates
    followed by the ``rank``-th slice of the ups (``apply_swiglu_sharded_factory``'s layout)."""
    from patches.table import tp_partition_dim

    dim = None if param is None else tp_partition_dim(param)
    if dim is None or size == 1:
        return full
    if full.shape[dim] % (2 * size if _gated_fc1(name, gated) else size):
        raise CheckpointError(f"{name}: {list(full.shape)} does not split over {size} tensor-parallel ranks")
    if _gated_fc1(name, gated):
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(size, dim=0)[rank], up.chunk(size, dim=0)[rank]], dim=0)
    return full.chunk(size, dim=dim)[rank]


def _stage_state(cfg: Any, ckpt: Checkpoint, tp_rank: int, stage: int) -> dict[str, Any]:
    """One model-parallel rank's file, with global layer numbers (megatron's layer offset of the
    stage) and without the last stage's copy of a tied embedding (the model has it once)."""
    file = ckpt.path / cpu_state_file(tp_rank, stage)
    try:
        state = torch.load(file, map_location="cpu", weights_only=False, mmap=True)["model"]
    except Exception as exc:  # a truncated or foreign file: say which
        raise CheckpointError(f"cannot read {file}: {type(exc).__name__}: {exc}") from exc
    if ckpt.pp == 1:
        return state
    import dataclasses

    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from training.model import transformer_config

    staged = dataclasses.replace(cfg.parallel, pipeline_model_parallel_size=ckpt.pp)
    offset = get_transformer_layer_offset(transformer_config(dataclasses.replace(cfg, parallel=staged)), pp_rank=stage)
    tied = not cfg.model.untie_embeddings_and_output_weights
    renamed = {}
    for name, value in state.items():
        if tied and stage > 0 and name == "output_layer.weight":
            continue
        renamed[_LAYER.sub(lambda m: f"decoder.layers.{int(m.group(1)) + offset}.", name)] = value
    return renamed


_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def _source_shards(cfg: Any, ckpt: Checkpoint) -> list[dict[str, Any]]:
    """A CPU checkpoint's model state per tensor-parallel rank, its pipeline stages joined
    (global layer numbers, the tied embedding once)."""
    return [
        {k: v for stage in range(ckpt.pp) for k, v in _stage_state(cfg, ckpt, rank, stage).items()}
        for rank in range(ckpt.tp)
    ]


def _cpu_state(cfg: Any, ckpt: Checkpoint) -> dict[str, Any]:
    """The model state of a CPU checkpoint, its pipeline stages and tensor-parallel shards joined
    (TP = PP = 1 names)."""
    shards = _source_shards(cfg, ckpt)
    if ckpt.tp == 1:
        return shards[0]
    from training.model import Placement, build_model

    vocab = _vocab_in(ckpt, shards[0]) * ckpt.tp
    with torch.device("meta"):  # initialization is what sets partition_dim; on meta it costs nothing
        params = dict(build_model(cfg, vocab, Placement(initialize=True)).named_parameters())
    gated = cfg.model.activation == "swiglu"
    return {
        name: _join_shards(name, [s[name] for s in shards], params.get(name), gated)
        if isinstance(value, torch.Tensor)
        else value
        for name, value in shards[0].items()
    }


def _vocab_in(ckpt: Checkpoint, state: Optional[dict[str, Any]]) -> int:
    """The (padded) vocabulary the checkpoint was trained with, read from its embedding."""
    key = "embedding.word_embeddings.weight"
    if state is not None:
        if key not in state:
            raise CheckpointError(f"{ckpt.path / CPU_MODEL_FILE} has no {key}")
        return int(state[key].shape[0])
    from megatron.core import dist_checkpointing

    meta = dist_checkpointing.load_tensors_metadata(str(ckpt.path / "dist"))
    if key not in meta:
        raise CheckpointError(f"{ckpt.path / 'dist'} has no {key}")
    return int(meta[key].global_shape[0])


def load_model_weights(cfg: Any, ckpt: Checkpoint) -> torch.nn.Module:
    """The run's patched model with the checkpoint's weights, fp32 on CPU, in eval mode.

    ``cfg`` is the run's config with one model process (TP=PP=1); megatron's parallel state
    must be initialized (``training.distributed.single_process``). Only model weights are
    read: a dist checkpoint's optimizer shards are left alone.
    """
    from training.model import Placement, build_model

    skip_init = Placement(initialize=False)
    if ckpt.format == "cpu":
        state = _cpu_state(cfg, ckpt)
        model = build_model(cfg, _vocab_in(ckpt, state), skip_init)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f"{ckpt.path} does not fit {ckpt.run_dir / CONFIG_FILE}: {exc}") from exc
        return model.float().eval()
    model = build_model(cfg, _vocab_in(ckpt, None), skip_init)
    _load_dist_model(model, ckpt, f"cannot load {ckpt.path / 'dist'} into {ckpt.run_dir / CONFIG_FILE}'s model")
    return model.float().eval()


def _load_dist_model(model: torch.nn.Module, ckpt: Checkpoint, failure: str) -> None:
    """The model's keys of a ``dist`` checkpoint into ``model``, in ``model``'s layout (megatron
    reshards); the optimizer's keys in the folder are left unread. ``failure`` starts the error."""
    from megatron.core import dist_checkpointing

    try:
        state = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(ckpt.path / "dist"))
        model.load_state_dict(state["model"], strict=True)
    except Exception as exc:
        raise CheckpointError(f"{failure}: {type(exc).__name__}: {exc}") from exc


# ----------------------------------------------------------------------------- another run's weights (checkpoint.init_from)
def init_source(source: str | Path) -> Checkpoint:
    """``checkpoint.init_from``: a run directory (its latest checkpoint) or one of its checkpoint
    folders (``RUN/checkpoints/step_00000100``)."""
    path = Path(source)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint.init_from: {path} is neither a run directory nor a checkpoint folder")
    run_dir, step = path, None
    if path.parent.name == CHECKPOINTS_DIR:  # one of a run's complete checkpoint folders
        steps = [k for k in checkpoint_steps(path.parent.parent) if step_dir_name(k) == path.name]
        if steps:
            run_dir, step = path.parent.parent, steps[0]
    try:
        return find_checkpoint(run_dir, step)
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint.init_from: {exc}") from exc


# What a weights-only init (checkpoint.init_mode=weights) compares of the source run's
# ``model.*`` config with this run's: every ModelConfig field, classified (tests/test_init_from.py
# fails on a field missing here).
#   same:  changes the function the same tensors compute: a difference exits 2, naming why;
#   shape: changes the tensors' names or shapes only with a model the tensor check (the strict
#          load, every source tensor used) already refuses;
#   free:  a fine-tuning run may change it: the weights compute the same function.
INIT_WEIGHTS_MODEL_KEYS: dict[str, tuple[str, str]] = {
    "num_layers": ("shape", "one set of tensors per layer"),
    "hidden_size": ("shape", "every matrix's width"),
    "num_attention_heads": (
        "same",
        "the fused QKV rows are split into heads by it: another head count (with kv_channels) can give the same "
        "shape and attend over other slices",
    ),
    "num_query_groups": (
        "same",
        "the fused QKV holds q.. k v per query group: another grouping can give the same shape and reads other "
        "rows as keys and values",
    ),
    "kv_channels": ("same", "the head dimension splits the QKV rows into heads and sets the attention's 1/sqrt(d)"),
    "ffn_hidden_size": ("shape", "the MLP's fc1 rows and fc2 columns (with the same activation)"),
    "seq_length": (
        "free",
        "rope computes each position's rotation (a longer context is fine-tuning's); learned_absolute's table has "
        "seq_length rows, which the tensor check compares",
    ),
    "vocab_size": ("shape", "the embedding's (padded) rows: the tensor check compares the padding too"),
    "make_vocab_size_divisible_by": ("shape", "the embedding's padded rows, which the tensor check compares"),
    "position_embedding_type": (
        "same",
        "rope rotates q and k by position where learned_absolute adds a learned table to the embedding",
    ),
    "normalization": ("same", "RMSNorm does not subtract the mean: the norms' weights can have the same shapes"),
    "activation": ("same", "swiglu's fc1 is [gate; up] of F rows each: a gelu fc1 of 2F rows has its shape"),
    "add_bias_linear": ("shape", "the biases are tensors of their own"),
    "untie_embeddings_and_output_weights": ("shape", "an untied output layer is a tensor of its own"),
    "init_method_std": ("free", "initialization only: every weight is loaded"),
    "hidden_dropout": ("free", "training noise, not the weights' function"),
    "attention_dropout": ("free", "training noise, not the weights' function"),
    "layernorm_epsilon": ("same", "part of every normalization's function"),
    "block": ("same", "linear1's one-matrix MLP branch computes another function of the same shapes"),
    "linear1_phi": ("same", "linear1's nonlinearity (compared where both runs are linear1)"),
    "transformer_impl": ("free", "the same math; its parameter names are the tensor check's"),
    "attention_backend": ("free", "a kernel choice: float rounding"),
    "cross_entropy_fusion": ("free", "a kernel choice: float rounding"),
    "rope_impl": ("free", "the same rotation: float rounding"),
    "recompute": ("free", "activation memory: the same math"),
    "recompute_modules": ("free", "activation memory: the same math"),
    "recompute_num_layers": ("free", "activation memory: the same math"),
    "compile": ("free", "torch.compile: the same math, float rounding"),
    "compile_backend": ("free", "torch.compile: the same math, float rounding"),
    "cuda_graphs": ("free", "CUDA graphs: the same math"),
}


def _effective(model: Any, key: str) -> Any:
    """The value a model key means (a None default resolved as the model resolves it)."""
    if key == "kv_channels":
        return model.head_dim
    if key == "num_query_groups":
        return model.num_query_groups or model.num_attention_heads
    return getattr(model, key)


def init_weights_refusals(source_cfg: Any, cfg: Any) -> list[str]:
    """``model.KEY: source -> this run (why)`` for each ``same`` key of
    :data:`INIT_WEIGHTS_MODEL_KEYS` where this run's model computes another function of the
    source's weights than the source's model did."""
    problems = []
    for key, (policy, why) in INIT_WEIGHTS_MODEL_KEYS.items():
        if policy != "same" or (key == "linear1_phi" and "standard" in (source_cfg.model.block, cfg.model.block)):
            continue
        old, new = _effective(source_cfg.model, key), _effective(cfg.model, key)
        if old != new:
            problems.append(f"model.{key}: {old!r} -> {new!r} ({why})")
    return problems


def init_weights(cfg: Any, model: torch.nn.Module, source: str | Path) -> Checkpoint:
    """Load another run's model weights into this run's freshly built ``model`` (before the
    optimizer copies them), as Megatron-LM's ``--pretrained-checkpoint`` with ``--finetune``:
    the optimizer, LR schedule, RNG and step count start fresh.

    Either format loads into any layout. A GPU (``dist``) checkpoint: megatron reshards it. A
    CPU one: its tensor-parallel shards and pipeline stages are joined into global tensors (as
    the export reads them) and each rank takes its part as megatron splits them
    (:func:`_rank_state`). The source's model config must compute the same function of the
    weights (:func:`init_weights_refusals`) and the shapes must match (``strict``, on every rank,
    and no tensor of the source left over): a mismatch names both sides, on every rank alike.
    """
    ckpt = init_source(source)
    try:
        source_cfg = one_process_config(read_run_config(ckpt.run_dir))
    except (OSError, ValueError) as exc:  # RunDirError and ConfigError are ValueErrors
        raise CheckpointError(f"checkpoint.init_from: cannot read {ckpt.run_dir / CONFIG_FILE}: {exc}") from exc
    refusals = init_weights_refusals(source_cfg, cfg)
    if refusals:
        raise CheckpointError(
            f"checkpoint.init_from: {ckpt.path} (the model of {ckpt.run_dir / CONFIG_FILE}) computes another function "
            "than this run's model of the same weights:\n  " + "\n  ".join(refusals)
        )
    if ckpt.format == "dist":
        _load_dist_model(model, ckpt, f"checkpoint.init_from: {ckpt.path / 'dist'} does not fit this run's model")
        return ckpt
    shards = _source_shards(source_cfg, ckpt)
    state, used, problems = _rank_state(cfg, model, shards)
    if not problems:
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            problems.append(str(exc))
    if dist.is_initialized() and dist.get_world_size() > 1:  # every rank refuses alike
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, (used, problems))
        used = set().union(*(g[0] for g in gathered))
        problems = list(dict.fromkeys(p for g in gathered for p in g[1]))
    left = sorted(set(shards[0]) - used, key=_layer_order)
    if left:
        problems.append("the source's " + ", ".join(left) + " fit no parameter of this run")
    if problems:
        raise CheckpointError(
            f"checkpoint.init_from: {ckpt.path} (the model of {ckpt.run_dir / CONFIG_FILE}) does not fit this run's "
            "model: " + "; ".join(problems)
        )
    return ckpt


_VOCAB_ROWS = ("embedding.word_embeddings.weight", "output_layer.weight")  # one row per (padded) vocabulary entry


def _layer_order(name: str) -> tuple:
    match = _LAYER.match(name)
    return (int(match.group(1)) if match else -1, name)


def _rank_state(cfg: Any, model: torch.nn.Module, shards: list[dict[str, Any]]) -> tuple[dict, set, list[str]]:
    """This rank's model state from a CPU checkpoint's shards (:func:`_source_shards`, global
    names): each local tensor's global name (its layer number plus megatron's layer offset of
    this pipeline stage; the last stage's copy of a tied embedding is the embedding), the
    source's shards of it joined and this tensor-parallel rank's part split off, both along the
    dimension megatron records on this run's parameter. Returns the state, the global names it
    used and what does not fit (the vocabulary padding, a tensor that does not split)."""
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from training.model import transformer_config

    rank = parallel_state.get_tensor_model_parallel_rank()
    size = parallel_state.get_tensor_model_parallel_world_size()
    offset = get_transformer_layer_offset(transformer_config(cfg))
    gated = cfg.model.activation == "swiglu"
    params = dict(model.named_parameters())
    state: dict[str, Any] = {}
    used: set[str] = set()
    problems: list[str] = []
    for name, value in model.state_dict().items():
        param = params.get(name)
        if name == "output_layer.weight" and getattr(param, "shared", False):  # tied, on the last stage
            glob = "embedding.word_embeddings.weight"
        else:
            glob = _LAYER.sub(lambda m: f"decoder.layers.{int(m.group(1)) + offset}.", name)
        if glob not in shards[0]:
            continue  # the strict load names it missing
        used.add(glob)
        if not isinstance(value, torch.Tensor):
            state[name] = shards[0][glob]
            continue
        try:
            full = _join_shards(glob, [s[glob] for s in shards], param, gated)
            if glob in _VOCAB_ROWS and full.shape[0] != value.shape[0] * size:
                problems.append(
                    f"the source's vocabulary is padded to {full.shape[0]} rows, this run's to {value.shape[0] * size} "
                    "(megatron pads it to a multiple of model.make_vocab_size_divisible_by "
                    f"({cfg.model.make_vocab_size_divisible_by}) x the tensor-parallel size, here {size}, and the "
                    "padding rows take part in the softmax): give this run a model.make_vocab_size_divisible_by and "
                    "tensor-parallel size that pad the vocabulary as the source's did"
                )
                continue
            state[name] = _split_shard(glob, full, param, gated, rank, size)
        except CheckpointError as exc:
            problems.append(str(exc))
    return state, used, problems


# ----------------------------------------------------------------------------- continuing another run (checkpoint.init_mode=continue)
def config_sha256(config: dict[str, Any]) -> str:
    """The digest of a resolved config (a checkpoint's ``common.json`` ``config``): sorted-key JSON, sha256."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def branch_record(ckpt: Checkpoint, common: dict[str, Any]) -> dict[str, Any]:
    """What a run continued from another run's checkpoint records of its source (``summary.json``'s
    and its own checkpoints' ``branch_of``): the run directory, checkpoint folder, step and the
    digest of the config the source ran with."""
    return {
        "run_dir": str(Path(ckpt.run_dir).resolve()),
        "checkpoint": str(Path(ckpt.path).resolve()),
        "step": int(common["step"]),
        "config_sha256": config_sha256(common["config"]),
    }
