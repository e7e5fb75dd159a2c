"""The step loop's named parts, one job each, so that ``training.runner``'s loop only hands work out.

* :class:`EvalSchedule`: which steps evaluate, and the fraction of training each stands for;
* :class:`DivergenceGuard`: when a run has diverged (non-finite loss or grad norm, or the loss
  above a bound for ``patience`` steps in a row);
* :class:`ThroughputMeter`: step time, tokens/s, TFLOP/s per GPU and MFU over a logging window;
* :class:`Checkpointer`: when to write a periodic checkpoint (``maybe_save``).

None of them touches torch or the file system, so each is tested on its own
(tests/test_loop_parts.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional


class EvalSchedule:
    """Step -> recorded fraction: each ``at`` fraction, plus every ``interval`` steps."""

    def __init__(self, steps: int, at: Iterable[float], interval: int = 0) -> None:
        points: dict[int, float] = {}
        if interval:
            points.update({s: s / steps for s in range(interval, steps + 1, interval)})
        points.update({max(1, round(f * steps)): f for f in at})
        self.points = dict(sorted(points.items()))

    @classmethod
    def of(cls, cfg: Any) -> EvalSchedule:
        return cls(cfg.training.steps, cfg.eval.at, cfg.eval.interval)

    def due(self, step: int) -> Optional[float]:
        """The fraction recorded at ``step`` (None: no eval there)."""
        return self.points.get(step)

    @property
    def final_step(self) -> int:
        """The step whose eval is the run's ``final_val_loss``."""
        return max(self.points)


@dataclass
class DivergenceGuard:
    """Stops a run whose loss has left any useful range, and says why."""

    bound: float  # loss above this counts (default: ln(vocab) + 3, a uniform guess plus 3 nats)
    patience: int  # consecutive steps above ``bound`` before the run is called diverged
    _above: int = 0

    @classmethod
    def of(cls, cfg: Any, vocab_size: int) -> DivergenceGuard:
        bound = cfg.training.divergence_loss_bound or math.log(vocab_size) + 3.0
        return cls(bound, cfg.training.divergence_patience)

    def check(self, loss: float, grad_norm: float, step: int) -> Optional[str]:
        """The reason the run diverged at ``step``, or None."""
        if not math.isfinite(loss):
            return f"loss is {loss} at step {step}"
        if not math.isfinite(grad_norm):
            return f"grad norm is {grad_norm} at step {step}"
        self._above = self._above + 1 if loss > self.bound else 0
        if self._above >= self.patience:
            return f"loss {loss:.4g} above bound {self.bound:.4g} at step {step}"
        return None


@dataclass
class ThroughputMeter:
    """Mean step time over the steps since the last logged row, and what follows from it.

    ``flops_per_step`` (whole model, all ranks) and ``peak_flops`` (one GPU) are None on CPU,
    where TFLOP/s and MFU are not reported.
    """

    tokens_per_step: int
    world_size: int = 1
    flops_per_step: Optional[float] = None
    peak_flops: Optional[float] = None
    _window: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self._window.append(seconds)

    def row(self) -> dict[str, Optional[float]]:
        """``step_time_s``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu`` of the window; then a new window."""
        mean = sum(self._window) / len(self._window)
        self._window = []
        tflops = self.flops_per_step / mean / self.world_size / 1e12 if self.flops_per_step else None
        return {
            "step_time_s": mean,
            "tokens_per_s": self.tokens_per_step / mean,
            "tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / self.peak_flops if tflops and self.peak_flops else None,
        }


@dataclass
class Checkpointer:
    """Periodic checkpoints every ``interval`` steps (0: none) before the last step; the final
    one is the loop's to ask for (``checkpoint.final``)."""

    save: Callable[[int], Any]
    interval: int
    steps: int

    def maybe_save(self, step: int) -> bool:
        if self.interval and step % self.interval == 0 and step < self.steps:
            self.save(step)
            return True
        return False
