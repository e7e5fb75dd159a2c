"""The schema of a training-run config: one dataclass per YAML section.

Key names here are a contract read by ``train_gpt.py``, ``training.show``, the sweep tools
and the analysis (docs/contracts.md). Each ``__post_init__`` rejects bad values with a
message that starts with the dotted key.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, get_args

from patches.names import OPTIMIZER_FAMILIES, BlockName, Linear1Phi, OptimizerFamily, OptimizerName
from patches.parametrization import Parametrization
from patches.rules import ModelShape, ResolvedParametrization
from patches.rules import resolve as resolve_parametrization
from runconfig.checks import FLOAT32_MAX, check_below, check_seed
from runconfig.checks import check_at_least as _at_least
from runconfig.checks import check_choice as _choice

# The choices of each key, as types: OmegaConf checks them when a config is loaded, each
# section's __post_init__ when one is built in Python.
PositionEmbedding = Literal["learned_absolute", "rope"]
Normalization = Literal["LayerNorm", "RMSNorm"]
Activation = Literal["gelu", "relu", "swiglu"]
TransformerImpl = Literal["local", "transformer_engine"]
AttentionBackend = Literal["auto", "flash", "cudnn", "efficient", "math"]  # torch SDPBackend names, lower case
ATTENTION_BACKENDS: tuple[str, ...] = get_args(AttentionBackend)
RopeImpl = Literal["toolkit", "megatron"]
Recompute = Literal["none", "selective", "full"]
RecomputeModule = Literal["core_attn", "mlp", "layernorm"]  # megatron-core's names for dense layers
CompileBackend = Literal["inductor", "aot_eager", "eager"]
DecayStyle = Literal["constant", "linear", "cosine", "wsd"]
WsdDecayStyle = Literal["linear", "cosine", "exponential", "minus_sqrt"]
Precision = Literal["auto", "fp32", "bf16"]  # auto: bf16 on GPU, fp32 on CPU
Device = Literal["auto", "cpu", "cuda"]
# checkpoint.init_mode: what a new run takes from checkpoint.init_from (docs/megatron-integration.md)
InitMode = Literal["weights", "continue"]


@dataclass
class ModelConfig:
    num_layers: int = 2
    hidden_size: int = 64
    num_attention_heads: int = 4
    num_query_groups: Optional[int] = None  # GQA; None -> num_attention_heads
    kv_channels: Optional[int] = None  # head dim; None -> hidden_size // num_attention_heads
    ffn_hidden_size: Optional[int] = None  # None -> 4 * hidden_size
    seq_length: int = 128
    vocab_size: Optional[int] = None  # None -> from the tokenizer (required with mock data)
    # the embedding and output layer have ceil(vocab / (this x TP)) x this x TP rows, Megatron-LM's
    # --make-vocab-size-divisible-by (the padding rows take part in the softmax)
    make_vocab_size_divisible_by: int = 128
    position_embedding_type: PositionEmbedding = "learned_absolute"
    normalization: Normalization = "LayerNorm"
    activation: Activation = "gelu"
    add_bias_linear: bool = True
    untie_embeddings_and_output_weights: bool = True
    init_method_std: float = 0.02
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    layernorm_epsilon: float = 1e-5
    block: BlockName = "standard"  # linear1: TP-VI one-matrix MLP branch
    linear1_phi: Linear1Phi = "relu"  # linear1 only
    transformer_impl: TransformerImpl = "local"
    # local impl: PyTorch SDPA kernel (auto: PyTorch's pick; flash | cudnn | efficient | math)
    attention_backend: AttentionBackend = "auto"
    # GPU + bf16: megatron's native fused cross-entropy (torch.compile'd, fewer passes over the
    # logits); the CPU path and fp32 runs always use megatron's unfused one
    cross_entropy_fusion: bool = True
    # local impl, rope positions: toolkit rotates q and k straight from the fused QKV projection
    # (training/attention.py: no concatenations); megatron is megatron-core's unfused RoPE, the
    # same math with 4 concatenations per layer forward and 3 more in backward (kept to compare)
    rope_impl: RopeImpl = "toolkit"
    # GPU activation recompute, megatron-core's (its checkpointing saves CUDA RNG states): none |
    # selective (the recompute_modules of each layer) | full (each layer's input is kept and the
    # layer recomputed in backward, recompute_num_layers layers per chunk, megatron's uniform method)
    recompute: Recompute = "none"
    recompute_modules: list[RecomputeModule] = field(default_factory=lambda: ["core_attn"])
    recompute_num_layers: int = 1
    # torch.compile each transformer layer (dynamo traces megatron's layer, inductor fuses the
    # element-wise work between the matrix products); off until measured on a GPU (docs/gpu_runs.md)
    compile: bool = False
    compile_backend: CompileBackend = "inductor"  # aot_eager, eager: trace without codegen
    # GPU: megatron-core's local CUDA graphs (cuda_graph_impl="local"), one per layer's forward and
    # backward, captured by megatron's schedules after the first step; off until measured on a GPU
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length"):
            _at_least(f"model.{key}", getattr(self, key), 1)
        if self.hidden_size % self.num_attention_heads and self.kv_channels is None:
            raise ValueError(
                f"model.hidden_size: {self.hidden_size} is not divisible by "
                f"model.num_attention_heads={self.num_attention_heads}; set model.kv_channels"
            )
        _choice("model.position_embedding_type", self.position_embedding_type, PositionEmbedding)
        _choice("model.normalization", self.normalization, Normalization)
        _choice("model.activation", self.activation, Activation)
        _choice("model.block", self.block, BlockName)
        _choice("model.linear1_phi", self.linear1_phi, Linear1Phi)
        _choice("model.transformer_impl", self.transformer_impl, TransformerImpl)
        _choice("model.attention_backend", self.attention_backend, AttentionBackend)
        _choice("model.rope_impl", self.rope_impl, RopeImpl)
        _choice("model.recompute", self.recompute, Recompute)
        for module in self.recompute_modules:
            _choice("model.recompute_modules", module, RecomputeModule)
        _at_least("model.recompute_num_layers", self.recompute_num_layers, 1)
        _choice("model.compile_backend", self.compile_backend, CompileBackend)
        _at_least("model.init_method_std", self.init_method_std, 1e-12)
        _at_least("model.vocab_size", self.vocab_size, 1, optional=True)
        _at_least("model.make_vocab_size_divisible_by", self.make_vocab_size_divisible_by, 1)
        for key in ("hidden_dropout", "attention_dropout"):
            check_below(f"model.{key}", getattr(self, key), 0.0, 1.0)

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads


@dataclass
class OptimizerConfig:
    name: OptimizerName = "adamw"  # adam (L2 weight decay) | adamw (decoupled) | sgd
    lr: float = 1e-3  # eta: the base LR a sweep varies; each group gets eta * its factor
    min_lr_ratio: float = 0.1  # each group decays to this fraction of its own peak LR
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    sgd_momentum: float = 0.9
    clip_grad: float = 1.0  # global grad-norm clip; 0 disables

    def __post_init__(self) -> None:
        _choice("optimizer.name", self.name, OptimizerName)
        # torch keeps each group's LR (and the scheduler's min_lr) as a float32 scalar on the
        # optimizer step: a larger value overflows there (training/optim.py)
        if not (math.isfinite(self.lr) and 0 < self.lr <= FLOAT32_MAX):
            raise ValueError(f"optimizer.lr: must be a positive number <= {FLOAT32_MAX:.6g} (float32), got {self.lr!r}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"optimizer.min_lr_ratio: must be in [0, 1], got {self.min_lr_ratio!r}")
        _at_least("optimizer.weight_decay", self.weight_decay, 0.0)
        _at_least("optimizer.clip_grad", self.clip_grad, 0.0)
        _at_least("optimizer.adam_eps", self.adam_eps, 0.0)
        # torch.optim.Adam refuses these only when the optimizer is built, naming no key
        check_below("optimizer.adam_beta1", self.adam_beta1, 0.0, 1.0)
        check_below("optimizer.adam_beta2", self.adam_beta2, 0.0, 1.0)
        _at_least("optimizer.sgd_momentum", self.sgd_momentum, 0.0)

    @property
    def family(self) -> OptimizerFamily:
        """The LR-rule family of the spec: 'adam' for Adam/AdamW, 'sgd' for SGD."""
        return OPTIMIZER_FAMILIES[self.name]


@dataclass
class SchedulerConfig:
    decay_style: DecayStyle = "cosine"  # wsd: warmup-stable-decay
    warmup_steps: int = 0
    wsd_decay_steps: Optional[int] = None  # wsd: length of the final decay phase
    wsd_decay_style: WsdDecayStyle = "linear"  # the wsd decay phase

    def __post_init__(self) -> None:
        _choice("scheduler.decay_style", self.decay_style, DecayStyle)
        _choice("scheduler.wsd_decay_style", self.wsd_decay_style, WsdDecayStyle)
        _at_least("scheduler.warmup_steps", self.warmup_steps, 0)
        if self.decay_style == "wsd" and not self.wsd_decay_steps:
            raise ValueError("scheduler.wsd_decay_steps: required (> 0) with scheduler.decay_style=wsd")


@dataclass
class TrainingConfig:
    steps: int = 100
    micro_batch_size: int = 4
    global_batch_size: int = 8
    precision: Precision = "auto"  # auto: bf16 on GPU, fp32 on CPU
    divergence_loss_bound: Optional[float] = None  # None -> ln(vocab_size) + 3
    divergence_patience: int = 1  # consecutive steps above the bound that end the run

    def __post_init__(self) -> None:
        for key in ("steps", "micro_batch_size", "global_batch_size", "divergence_patience"):
            _at_least(f"training.{key}", getattr(self, key), 1)
        if self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"training.global_batch_size: {self.global_batch_size} is not a multiple of "
                f"training.micro_batch_size={self.micro_batch_size}"
            )
        _choice("training.precision", self.precision, Precision)
        if self.divergence_loss_bound is not None and not (
            math.isfinite(self.divergence_loss_bound) and self.divergence_loss_bound > 0
        ):
            raise ValueError(
                "training.divergence_loss_bound: must be a positive finite number (a cross-entropy "
                f"loss in nats) or null, got {self.divergence_loss_bound!r}"
            )


@dataclass
class EvalConfig:
    at: list[float] = field(default_factory=lambda: [0.5, 1.0])  # fractions of training.steps
    interval: Optional[int] = None  # also evaluate every N steps
    batches: int = 4  # fixed held-out batches (of training.global_batch_size sequences each)

    def __post_init__(self) -> None:
        if not self.at:
            # the last ``at`` point is the run's final_val_loss (training.loop_parts.EvalSchedule)
            raise ValueError("eval.at: must list at least one fraction in (0, 1], got []")
        for frac in self.at:
            if not 0.0 < frac <= 1.0:
                raise ValueError(f"eval.at: fractions must be in (0, 1], got {frac!r}")
        if self.interval is not None:
            _at_least("eval.interval", self.interval, 1)
        _at_least("eval.batches", self.batches, 1)


@dataclass
class DataConfig:
    mock: bool = False  # Megatron's MockGPTDataset (smoke runs; needs model.vocab_size)
    manifest: Optional[str] = None  # data_prep output dir or its manifest.json
    train_prefixes: list[str] = field(default_factory=list)
    train_weights: Optional[list[float]] = None
    valid_prefixes: list[str] = field(default_factory=list)
    valid_weights: Optional[list[float]] = None
    split: str = "98,2,0"  # used when no valid prefixes are given: split the train blend
    tokenizer: Optional[str] = None  # SentencePiece .model or HF tokenizer.json
    seed: int = 1234  # data order and eval batches; the same for every run of a sweep
    cache_dir: Optional[str] = None  # GPTDataset index cache (None: RunConfig.index_cache_dir())

    def __post_init__(self) -> None:
        if self.train_weights is not None and len(self.train_weights) != len(self.train_prefixes):
            raise ValueError("data.train_weights: needs one weight per entry of data.train_prefixes")
        if self.valid_weights is not None and len(self.valid_weights) != len(self.valid_prefixes):
            raise ValueError("data.valid_weights: needs one weight per entry of data.valid_prefixes")
        check_seed("data.seed", self.seed)


@dataclass
class RunSection:
    dir: str = "runs/default"
    seed: int = 0  # initialization and dropout; data order is data.seed

    def __post_init__(self) -> None:
        if not self.dir:
            raise ValueError("run.dir: must not be empty")
        check_seed("run.seed", self.seed)


@dataclass
class CheckpointConfig:
    interval: Optional[int] = None  # steps between periodic checkpoints; None -> final only
    keep: int = 2  # most recent checkpoints kept
    final: bool = True
    # a run directory (its latest checkpoint) or one checkpoint folder: a run that starts from
    # step 0 takes its model weights, with a fresh optimizer, LR schedule and step count
    # (Megatron-LM's --pretrained-checkpoint with --finetune); a run with a checkpoint of its own resumes that
    init_from: Optional[str] = None
    # What a new run takes from checkpoint.init_from:
    #   weights: the model weights only, at step 0, into any TP/PP layout (Megatron-LM's --finetune);
    #   continue: everything a resume takes (weights, optimizer state, step count, RNG, so the data
    #     position), with this run's own schedule keys applied from that step on: training.steps,
    #     scheduler.*, eval.at, eval.interval, the peak and floor LR optimizer.lr and
    #     optimizer.min_lr_ratio, optimizer.weight_decay and optimizer.clip_grad (Megatron-LM's --load of another run's checkpoint with
    #     --override-opt_param-scheduler): WSD cooldown branches and extensions of a finished run.
    #     Anything else that differs from the source (model shape, parametrization, the rest of
    #     the optimizer, data, global batch) is refused, as is a source step >= training.steps.
    init_mode: InitMode = "weights"

    def __post_init__(self) -> None:
        if self.interval is not None:
            _at_least("checkpoint.interval", self.interval, 1)
        _at_least("checkpoint.keep", self.keep, 1)
        _choice("checkpoint.init_mode", self.init_mode, InitMode)
        if self.init_mode == "continue" and not self.init_from:
            raise ValueError(
                "checkpoint.init_mode: continue needs checkpoint.init_from (the run or checkpoint to continue)"
            )


@dataclass
class LoggingConfig:
    interval: int = 10
    progress_bar: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: Optional[str] = None
    diagnostics_interval: int = 0  # > 0: per-layer update/activation sizes every N steps (diagnostics.jsonl)

    def __post_init__(self) -> None:
        _at_least("logging.interval", self.interval, 1)
        _at_least("logging.diagnostics_interval", self.diagnostics_interval, 0)


@dataclass
class ParallelConfig:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    sequence_parallel: bool = False
    use_distributed_optimizer: bool = True  # GPU path only; Adam/AdamW only (megatron): false for sgd
    device: Device = "auto"
    cpu_threads: Optional[int] = None  # torch.set_num_threads on the CPU path

    def __post_init__(self) -> None:
        _at_least("parallel.tensor_model_parallel_size", self.tensor_model_parallel_size, 1)
        _at_least("parallel.pipeline_model_parallel_size", self.pipeline_model_parallel_size, 1)
        _choice("parallel.device", self.device, Device)


@dataclass
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    parametrization: Parametrization = field(default_factory=Parametrization)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    data: DataConfig = field(default_factory=DataConfig)
    run: RunSection = field(default_factory=RunSection)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)

    def __post_init__(self) -> None:
        from runconfig.validate import validate

        validate(self)  # the cross-section checks (device-dependent ones once the device is known)

    def index_cache_dir(self, run_dir: Optional[Path] = None) -> str:
        """Where megatron's dataset index cache goes: ``data.cache_dir``, else ``<run dir>/.index_cache``
        (``run_dir``: where the run directory is now, if it moved since ``run.dir`` was written)."""
        return self.data.cache_dir or str(Path(run_dir or self.run.dir) / ".index_cache")

    def check_data_source(self) -> None:
        """Training needs data; showing the table or a coordinate check does not."""
        if not self.data.mock and not (self.data.manifest or self.data.train_prefixes):
            raise ValueError("data: give data.manifest, data.train_prefixes, or set data.mock=true")


def run_identity(cfg: RunConfig) -> dict[str, Any]:
    """The ``summary.json`` fields that say which run this is (docs/contracts.md); the trainer
    and the tests' stand-in trainer both write them from here."""
    from patches.rules import emergent_scale_record

    par, model = cfg.parametrization, cfg.model
    width = par.resolved_width
    scale = emergent_scale_record(model.num_layers, model.hidden_size, float(par.yaida_s)) if width == "yaida" else None
    return {
        "preset": par.preset,
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "lr": cfg.optimizer.lr,
        "block_multiplier": par.block_multiplier,
        "seed": cfg.run.seed,
        "base_num_layers": par.resolved_base_num_layers(model.num_layers),
        "optimizer": cfg.optimizer.name,
        "width": width,
        "emergent_scale": scale,
    }


# Keys added after runs began recording their config (each key the first schema lacked:
# tests/runconfig_fixtures/schema_keys_3c586d3.txt), each with the value a run whose record
# lacks it ran with, so that a checkpoint written before the key existed resumes (and is
# continued from) as it ran, not refused as if the key had changed from None. Where the new
# default is not that value, a resume with the default is refused (a key a resume may not
# change) and the refusal names the value to give (:func:`explain_added`).
KEYS_ADDED: dict[str, Any] = {
    "parametrization.yaida_s": None,  # c265545: no width 'yaida' before it; the others take no s
    "logging.diagnostics_interval": 0,  # 78c6b65: no diagnostics.jsonl before it
    "model.attention_backend": "auto",  # 3245dea: PyTorch's SDPA picked its kernel
    "model.cross_entropy_fusion": False,  # 3245dea: megatron's unfused cross-entropy (default on since; a resume may change it)
    "model.rope_impl": "megatron",  # 1e2a64b: megatron-core's RoPE (a resume may change it)
    "model.recompute": "none",  # 6c2d005: the throughput switches, all off before them
    "model.recompute_modules": ["core_attn"],
    "model.recompute_num_layers": 1,
    "model.compile": False,
    "model.compile_backend": "inductor",
    "model.cuda_graphs": False,
    "checkpoint.init_from": None,  # 1e5007c: every run started from its own initialization
    "checkpoint.init_mode": "weights",  # d63a872: checkpoint.init_from took the weights only
    "model.make_vocab_size_divisible_by": 128,  # f13ef06: the padding multiple was fixed at 128
}


def _lacks(config: dict[str, Any], key: str) -> bool:
    section, name = key.split(".")
    return isinstance(config.get(section), dict) and name not in config[section]


def as_recorded(config: dict[str, Any]) -> dict[str, Any]:
    """A recorded config (``config.yaml``, a checkpoint's ``common.json``) with each key of
    :data:`KEYS_ADDED` it lacks set to the value its run had. Comparisons pass both sides through
    it, so that a key neither side holds (a partial config) is no change; a whole config has them all."""
    out = dict(config)
    for key, value in KEYS_ADDED.items():
        if _lacks(out, key):
            section, name = key.split(".")
            out[section] = {**out[section], name: copy.deepcopy(value)}
    return out


def recorded_changes(recorded: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The keys whose value differs between a recorded config and ``config``, both read through
    :func:`as_recorded` (a key added since the record is the value its run had, not None)."""
    from runconfig.loader import changed_keys

    return changed_keys(as_recorded(recorded), as_recorded(config))


def explain_added(lines: list[str], config: dict[str, Any]) -> list[str]:
    """``lines`` (``key: old -> new``, as :func:`runconfig.loader.describe_changes` writes them)
    with each key the recorded ``config`` lacks (its run predates the key) explained: the value
    that run had, as :data:`KEYS_ADDED` gives it, and the override that gives it back."""
    out = []
    for line in lines:
        key = line.split(":", 1)[0]
        if key in KEYS_ADDED and _lacks(config, key):
            value = json.dumps(KEYS_ADDED[key])
            line += f" (recorded before {key} existed: the run had {value}; give {key}={value} to go on as it ran)"
        out.append(line)
    return out


def model_shape(cfg: RunConfig) -> ModelShape:
    """The dimensions the parametrization rules read from a run config."""
    m = cfg.model
    return ModelShape(m.num_layers, m.hidden_size, m.num_attention_heads, m.kv_channels)


def resolve(cfg: RunConfig) -> ResolvedParametrization:
    """The resolved parametrization of a run config (the engine refuses what it has no rule for)."""
    return resolve_parametrization(
        cfg.parametrization,
        model_shape(cfg),
        optimizer=cfg.optimizer.name,
        init_method_std=cfg.model.init_method_std,
        adam_eps=cfg.optimizer.adam_eps,
    )
