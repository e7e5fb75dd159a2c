"""The throughput switches of the model section: ``model.compile`` (torch.compile of each layer),
``model.recompute`` (megatron's activation recompute) and ``model.cuda_graphs`` (megatron's
local CUDA graphs). What can run on CPU runs here; the GPU-only ones are checked for how they
reach megatron's TransformerConfig and for their refusal on CPU (their GPU runs:
tests/test_gpu_path.py::test_gpu_throughput_switches_compute_the_same_steps)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import ROPE_SHAPE, ROPE_VOCAB, tiny_config

VOCAB = ROPE_VOCAB
SHAPE = ROPE_SHAPE


def two_steps(cfg):
    """Loss and gradients of the second of two forward+backward passes (the first compiles)."""
    from training.model import build_model

    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 33), generator=g)
    positions = torch.arange(32).unsqueeze(0).expand(2, 32)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        loss.backward()
    return model, float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


def check_compiled_equals_eager(backend: str) -> None:
    eager_model, eager_loss, eager = two_steps(tiny_config(*SHAPE))
    model, loss, compiled = two_steps(tiny_config(*SHAPE, "model.compile=true", f"model.compile_backend={backend}"))
    assert all(layer._compiled_call_impl is not None for layer in model.decoder.layers)
    assert eager_model.decoder.layers[0]._compiled_call_impl is None
    assert list(model.state_dict()) == list(eager_model.state_dict())  # checkpoints unchanged
    assert loss == pytest.approx(eager_loss, rel=1e-6)
    for name in eager:
        assert (compiled[name] - eager[name]).abs().max() <= 1e-5 * eager[name].abs().max(), name


def test_compiled_layers_compute_the_eager_step(megatron):
    """Dynamo traces megatron's layer (and the toolkit's RoPE through its plain-op form);
    aot_eager runs the traced forward and backward graphs without code generation."""
    check_compiled_equals_eager("aot_eager")


@pytest.mark.slow
def test_inductor_compiled_layers_compute_the_eager_step(megatron):
    """The same with inductor's generated C++ kernels (needs a C++ compiler; ~30 s on 2 cores)."""
    check_compiled_equals_eager("inductor")


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (("model.recompute=full", "model.recompute_num_layers=2"), ("full", "uniform", 2, None, "none")),
        (
            ("model.recompute=selective", "model.recompute_modules=[core_attn,mlp]"),
            ("selective", None, None, ["core_attn", "mlp"], "none"),
        ),
        (("model.cuda_graphs=true",), (None, None, None, None, "local")),
        ((), (None, None, None, None, "none")),
    ],
    ids=["full", "selective", "cuda-graphs", "defaults"],
)
def test_gpu_switches_reach_megatrons_transformer_config(overrides, expected):
    from training.model import Placement, transformer_config

    cfg = tiny_config("parallel.device=cuda", *overrides)
    c = transformer_config(cfg, Placement(device="cuda", bf16=True))
    modules = c.recompute_modules if c.recompute_granularity == "selective" else None
    assert (c.recompute_granularity, c.recompute_method, c.recompute_num_layers, modules, c.cuda_graph_impl) == expected


def test_cuda_graph_switch_is_off_on_the_cpu_placement():
    """The TransformerConfig of a CPU placement never asks for CUDA graphs (they build CUDA pools)."""
    from training.model import Placement, transformer_config

    assert transformer_config(tiny_config("model.cuda_graphs=true"), Placement()).cuda_graph_impl == "none"


@pytest.mark.parametrize(
    "overrides,key",
    [
        (("parallel.device=cpu", "model.recompute=full"), "model.recompute: needs the GPU path"),
        (("parallel.device=cpu", "model.cuda_graphs=true"), "model.cuda_graphs: needs the GPU path"),
        (("model.cuda_graphs=true", "model.compile=true"), "model.cuda_graphs: not with model.compile"),
        (("model.recompute=full", "model.recompute_num_layers=5"), "model.recompute_num_layers: 5 exceeds"),
        (("model.recompute=full", "model.recompute_num_layers=3"), "model.recompute_num_layers: 3 does not divide"),
        (("model.recompute=selective", "model.recompute_modules=[]"), "model.recompute_modules: name at least"),
        (("model.recompute_modules=[attention]",), "model.recompute_modules"),
        (("model.recompute=partial",), "model.recompute"),
        (("model.compile_backend=tvm",), "model.compile_backend"),
    ],
)
def test_bad_throughput_settings_name_the_key(overrides, key):
    from runconfig import ConfigError

    with pytest.raises(ConfigError, match=key):
        tiny_config(*overrides)  # tiny_cpu.yaml: 4 layers


def test_throughput_switches_may_change_on_resume():
    """A checkpoint's config written before the switches existed, or with other values of them or
    of the kernel choices (attention backend, fused cross-entropy), resumes; a change of the math (here the width) still refuses."""
    from runconfig.loader import to_dict
    from training.session import config_differences

    new = to_dict(
        tiny_config(
            "model.recompute=full", "model.compile=true", "model.rope_impl=megatron",
            "model.attention_backend=math", "model.cross_entropy_fusion=false",  # the kernel choices: recorded, changed
        )
    )  # fmt: skip
    old = to_dict(tiny_config())
    for key in ("rope_impl", "recompute", "recompute_modules", "recompute_num_layers", "compile",
                "compile_backend", "cuda_graphs"):  # fmt: skip
        del old["model"][key]
    assert config_differences(old, new) == []
    assert config_differences(old, to_dict(tiny_config("model.hidden_size=128"))) == ["model.hidden_size: 64 -> 128"]


def test_layernorm_recompute_is_refused_on_a_gpu_without_transformer_engine(monkeypatch):
    """megatron-core 0.16.1 marks every CheckpointWithoutOutput() as fp8 (``fp8 is not None`` of
    its default False), whose forward then needs TE: without TE the trainer refuses the setting at
    start-up (exit 2 naming the key) instead of a NameError at the first step. With TE (or another
    module, or the CPU) nothing is refused. The first assertion pins megatron's behaviour: when it
    fails, megatron fixed it and the refusal can go."""
    from megatron.core.tensor_parallel import random as mcore_random

    from training.session import SetupError, check_layernorm_recompute

    assert mcore_random.CheckpointWithoutOutput().fp8 is True
    cfg = tiny_config("parallel.device=cuda", "model.recompute=selective", "model.recompute_modules=[layernorm]")
    monkeypatch.setattr(mcore_random, "HAVE_TE", False)
    with pytest.raises(SetupError, match="model.recompute_modules: layernorm needs Transformer Engine"):
        check_layernorm_recompute(cfg, "cuda")
    check_layernorm_recompute(cfg, "cpu")
    check_layernorm_recompute(tiny_config("parallel.device=cuda", "model.recompute=selective",
                                          "model.recompute_modules=[core_attn, mlp]"), "cuda")  # fmt: skip
    monkeypatch.setattr(mcore_random, "HAVE_TE", True)
    check_layernorm_recompute(cfg, "cuda")
