"""Library noise is silenced the same way by every entry point (jobscripts/quiet.py), and only it."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import pytest

from jobscripts.quiet import quiet_libraries
from tests.conftest import REPO, TINY, env


def shown(message: str, category: type[Warning], module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("always")
        quiet_libraries()
        warnings.warn_explicit(message, category, f"{module.replace('.', '/')}.py", 1, module=module)
    return bool(caught)


def test_only_the_named_library_messages_are_silenced():
    assert not shown("Transformer Engine and Apex are not installed. Falling back", UserWarning, "megatron.core.x")
    assert not shown("Apex is not installed. Falling back to Torch Norm", UserWarning, "megatron.core.models.x")
    assert not shown("full scope is deprecated. Use empty cuda_graph_scope", UserWarning, "megatron.core.x")
    assert shown("Apex is not installed", UserWarning, "my_script")  # the same words from elsewhere
    assert shown("some other megatron warning", UserWarning, "megatron.core.x")
    assert shown("a setting the user chose is deprecated", DeprecationWarning, "megatron.core.x")


@pytest.mark.parametrize("cuda", [False, True])
def test_deepspeed_cpu_guess_is_dropped_only_without_a_gpu(monkeypatch, cuda):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    quiet_libraries()
    quiet_libraries()  # idempotent
    logger = logging.getLogger("DeepSpeed")
    assert sum(type(f).__name__ == "_DeepSpeedCpuGuess" for f in logger.filters) == 1
    guess = logger.makeRecord(
        "DeepSpeed",
        logging.WARNING,
        "real_accelerator.py",
        213,
        "Setting accelerator to CPU. If you have GPU ...",
        (),
        None,
    )
    other = logger.makeRecord("DeepSpeed", logging.WARNING, "x.py", 1, "something else", (), None)
    assert bool(logger.filter(guess)) is cuda and bool(logger.filter(other))


def test_training_show_writes_nothing_to_stderr():
    """14 lines of megatron warnings before jobscripts/quiet.py; none now."""
    cmd = [sys.executable, "-m", "training.show", "--config", str(TINY)]
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "branch multiplier" in out.stdout
    assert out.stderr == ""
