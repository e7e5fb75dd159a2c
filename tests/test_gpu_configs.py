"""The GPU run configs (configs/gpt_*_gpu.yaml, *_8gpu.yaml, *_multinode.yaml) load and validate
for a CUDA device, split their global batch evenly over the data-parallel ranks they are
written for, and have the parameter counts their comments state (a hand count, the toolkit
model built on the meta device, and the plain reference GPT)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import REPO

VOCAB = 50304
# config -> (GPUs it is written for, micro-batches per GPU per step, layers, width)
CONFIGS = {
    "gpt_100m_gpu.yaml": (1, 8, 12, 768),
    "gpt_350m_gpu.yaml": (1, 16, 24, 1024),
    "gpt_350m_8gpu.yaml": (8, 4, 24, 1024),
    "gpt_350m_multinode.yaml": (32, 1, 24, 1024),
    "gpt_1b_gpu.yaml": (1, 16, 16, 2048),
    "gpt_1b_8gpu.yaml": (8, 4, 16, 2048),
    "gpt_1b_multinode.yaml": (32, 2, 16, 2048),
}
# Per layer: two LayerNorms (weight and bias) 4h, QKV 3h^2, projection h^2, fc1 and fc2 8h^2 (no
# linear biases); a final LayerNorm 2h; untied input and output tables 50304 h each.
#   h=768,  L=12: 12 * (12*768^2 + 4*768)   + 2*768  =  84,973,056; + 2*50304*768  =   162,240,000
#   h=1024, L=24: 24 * (12*1024^2 + 4*1024) + 2*1024 = 302,090,240; + 2*50304*1024 =   405,112,832
#   h=2048, L=16: 16 * (12*2048^2 + 4*2048) + 2*2048 = 805,441,536; + 2*50304*2048 = 1,011,486,720
HAND = {768: (84_973_056, 162_240_000), 1024: (302_090_240, 405_112_832), 2048: (805_441_536, 1_011_486_720)}


def load(name: str):
    from runconfig import load_config
    from runconfig.schema import RunConfig

    return load_config(RunConfig, REPO / "configs" / name, ["data.mock=true", f"model.vocab_size={VOCAB}"])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_gpu_config_loads_validates_and_splits_its_batch(name):
    from runconfig.validate import validate

    world, per_gpu, layers, width = CONFIGS[name]
    cfg = load(name)
    validate(cfg, "cuda")
    par, tr = cfg.parallel, cfg.training
    assert (cfg.model.num_layers, cfg.model.hidden_size, par.device, tr.precision) == (layers, width, "cuda", "bf16")
    dp = world // (par.tensor_model_parallel_size * par.pipeline_model_parallel_size)
    assert tr.global_batch_size == tr.micro_batch_size * dp * per_gpu
    assert cfg.model.head_dim in (64, 128) and cfg.model.seq_length == 2048


@pytest.mark.parametrize("width", sorted(HAND))
def test_gpu_config_parameter_counts_are_the_hand_counts(megatron, width):
    from benchmarks.plain_gpt import PlainGPT, shape_of
    from training.model import Placement, build_model

    name = next(n for n, spec in CONFIGS.items() if spec[3] == width and n.endswith("_gpu.yaml"))
    cfg = load(name)
    h, layers = width, cfg.model.num_layers
    non_embedding, total = HAND[width]
    assert layers * (12 * h * h + 4 * h) + 2 * h == non_embedding
    assert non_embedding + 2 * VOCAB * h == total
    with torch.device("meta"):
        model = build_model(cfg, VOCAB, Placement(initialize=False))
        plain = PlainGPT(shape_of(cfg, VOCAB))
    counted = {n: p.numel() for n, p in model.named_parameters()}
    assert sum(counted.values()) == total
    assert sum(v for n, v in counted.items() if "embedding" not in n and "output_layer" not in n) == non_embedding
    assert sum(p.numel() for p in plain.parameters()) == total
    text = Path(REPO / "configs" / name).read_text()
    assert f"{non_embedding:,} non-embedding" in text and f"{total:,} as configured" in text
