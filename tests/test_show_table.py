"""`python -m training.show` prints the resolved table for every preset; bad input exits 2."""

from __future__ import annotations

import json
import math

import pytest

from tests.conftest import TINY

REQUIRED = {
    "preset",
    "alpha",
    "gamma",
    "width_ratio",
    "depth_ratio",
    "branch_multiplier",
    "softmax_scale",
    "output_multiplier",
    "optimizer",
    "params",
}
ROW = {"name", "role", "shape", "init_std", "lr_factor", "wd_factor", "eps"}
# tiny_cpu.yaml: L=4, L0=2 -> m_L=2; width 64 = base; SGD/Adam as given.
EXPECTED = {  # preset -> (alpha, gamma, branch multiplier, Adam LR factor of hidden matrices)
    "sp": (0.0, 0.0, 1.0, 1.0),
    "mup": (0.0, 0.0, 1.0, 1.0),
    "depth_mup": (0.5, 0.5, 2**-0.5, 2**-0.5),
    "branch_only": (0.5, 0.0, 2**-0.5, 1.0),
    "ode": (1.0, 0.0, 0.5, 1.0),
    "completep": (1.0, 0.0, 0.5, 1.0),
    "custom": (0.25, 0.75, 2**-0.25, 2**-0.75),
}


def show(capsys, *args):
    from training.show import main

    code = main(["--config", str(TINY), *args])
    return code, capsys.readouterr()


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_every_preset_prints_its_table(megatron, capsys, preset):
    extra = ["parametrization.alpha=0.25", "parametrization.gamma=0.75"] if preset == "custom" else []
    code, out = show(capsys, "--json", f"parametrization.preset={preset}", *extra)
    assert code == 0, out.err
    table = json.loads(out.out)
    assert REQUIRED <= set(table)
    alpha, gamma, branch, hidden_lr = EXPECTED[preset]
    assert (table["alpha"], table["gamma"]) == (alpha, gamma)
    assert table["branch_multiplier"] == pytest.approx(branch)
    assert table["depth_ratio"] == 2.0 and table["softmax_scale"] == pytest.approx(1 / math.sqrt(16))
    rows = {r["name"]: r for r in table["params"]}
    assert all(ROW <= set(r) for r in rows.values())
    assert rows["decoder.layers.3.mlp.linear_fc2.weight"]["lr_factor"] == pytest.approx(hidden_lr)
    assert rows["decoder.layers.3.mlp.linear_fc2.weight"]["shape"] == [64, 256]
    assert len(rows) == 2 + 4 * 12 + 2 + 1  # embeddings, 4 layers x 12 tensors, final norm, output
    code, out = show(capsys, f"parametrization.preset={preset}", *extra)
    assert code == 0 and "branch multiplier" in out.out


@pytest.mark.parametrize(
    "override,needle",
    [
        ("parametrization.alfa=1", "parametrization.alfa"),
        ("parametrization.preset=deep", "parametrization.preset"),
        ("model.num_layers=x", "model.num_layers"),
        ("optimizer.name=lamb", "optimizer.name"),
    ],
)
def test_bad_input_names_the_key(megatron, capsys, override, needle):
    code, out = show(capsys, override)
    assert code == 2 and needle in out.err
