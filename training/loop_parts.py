"""The step loop's named parts, one job each, so that ``training.runner``'s loop only hands work out.

* :class:`EvalSchedule`: which steps evaluate, and the fraction of training each stands for;
* :class:`DivergenceGuard`: when a run has diverged (non-finite loss or grad norm, or the loss
  above a bound for ``patience`` steps in a row);
* :class:`ThroughputMeter`: step time, tokens/s, TFLOP/s per GPU and MFU over a logging interval;
* :class:`EtaEstimate`: the time left, from the session's steps after its first (warm-up) step;
* :func:`train_line`: the Megatron-style line each logged step prints;
* :class:`Checkpointer`: when to write a periodic checkpoint (``maybe_save``).

None of them touches torch or the file system, so each is tested on its own
(tests/test_loop_parts.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
    """Step time, tokens/s, TFLOP/s per GPU and MFU over a logging interval.

    The interval is the wall time between two logged steps (building the micro-batches
    included, as in Megatron-LM's ``interval-time``), less what the loop excludes
    (evaluation, checkpoints): one step's time swings with the machine, an interval's does
    not. The first step of a session (:meth:`warmed_up`: kernels compiled or autotuned,
    caches and the allocator filled) leaves the interval it falls in, as torchtitan keeps it
    apart by logging step 1 on its own: 1.6 s against 0.03 s a step on the tiny CPU model, it
    would make the first interval of 10 steps read a sixth of the steady rate. An interval of
    that one step alone reports it. ``flops_per_step`` (whole model, all ranks;
    ``training.flops``) gives TFLOP/s on every device; ``peak_flops`` (one GPU) is None where
    the peak is unknown (CPU), and MFU with it. ``clock`` is injectable for tests.
    """

    tokens_per_step: int
    world_size: int = 1
    flops_per_step: Optional[float] = None
    peak_flops: Optional[float] = None
    clock: Callable[[], float] = time.perf_counter
    _started: float = 0.0
    _step: int = 0
    _excluded: float = 0.0
    _warmup: Optional[float] = None  # the session's first step, while in the open window

    def start(self, step: int) -> None:
        """Open a window after ``step`` (the step the session resumes from, or the last logged one)."""
        self._started, self._step, self._excluded, self._warmup = self.clock(), step, 0.0, None

    def warmed_up(self) -> float:
        """Called right after the session's first step (the first of the open window): its
        seconds, which the window's rate leaves out when the window holds other steps."""
        self._warmup = self.clock() - self._started - self._excluded
        return self._warmup

    def exclude(self, seconds: float) -> None:
        """Time inside the window that is not training (an evaluation, a checkpoint)."""
        self._excluded += seconds

    def row(self, step: int) -> dict[str, Optional[float]]:
        """``step_time_s``, ``tokens_per_s``, ``tflops_per_gpu``, ``mfu`` of the window that ends
        after ``step``; then a new window."""
        steps = max(step - self._step, 1)
        seconds = self.clock() - self._started - self._excluded
        if self._warmup is not None and steps > 1:
            seconds, steps = seconds - self._warmup, steps - 1
        mean = max(seconds, 1e-9) / steps
        self.start(step)
        tflops = self.flops_per_step / mean / self.world_size / 1e12 if self.flops_per_step else None
        return {
            "step_time_s": mean,
            "tokens_per_s": self.tokens_per_step / mean,
            "tflops_per_gpu": tflops,
            "mfu": tflops * 1e12 / self.peak_flops if tflops and self.peak_flops else None,
        }


@dataclass
class EtaEstimate:
    """The training line's ETA: the steps left times this session's mean step time. The
    session's first step (:meth:`warmed_up`: compilation, autotuning, caches, as
    :class:`ThroughputMeter` leaves it out of its rates) is left out where later steps exist: on
    the tiny CPU model 1.6 s against 0.03 s a step, it made the ETA after 10 steps six times too
    long. Evaluations and checkpoints stay in (they recur until the end). Before any step after
    the first, the first step's time is all there is. ``clock`` is injectable for tests."""

    clock: Callable[[], float] = time.monotonic
    _step: int = 0
    _started: float = 0.0
    _warm: Optional[float] = None  # when the session's first step ended

    def start(self, step: int) -> None:
        """The session starts after ``step`` (the step it resumes from)."""
        self._step, self._started, self._warm = step, self.clock(), None

    def warmed_up(self) -> None:
        """Called right after the session's first step."""
        self._warm = self.clock()

    def seconds_left(self, done: int, steps: int) -> Optional[float]:
        """Seconds until step ``steps``, ``done`` steps being done; None before the first."""
        n = done - self._step
        if n <= 0:
            return None
        if self._warm is not None and n > 1:
            per_step = (self.clock() - self._warm) / (n - 1)
        else:
            per_step = (self.clock() - self._started) / n
        return per_step * (steps - done)


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def train_line(
    step: int,
    steps: int,
    *,
    global_batch_size: int,
    loss: float,
    lr: float,
    grad_norm: float,
    rates: dict[str, Optional[float]],
    elapsed_s: float,
    eta_s: Optional[float],
    skipped: int = 0,
) -> str:
    """The console and train.log line of a logged step, with Megatron-LM's ``training_log``
    field names where they exist (``iteration``, ``consumed samples``, ``elapsed time per
    iteration (ms)``, ``throughput per GPU (TFLOP/s/GPU)``, ``learning rate``, ``lm loss``,
    ``grad norm``). ``lr`` is the base LR eta of the schedule (each group's is a fixed multiple
    of it: metrics.jsonl has them all); TFLOP/s and MFU only where ``rates`` has them."""
    parts = [
        f"iteration {step:>{len(str(steps))}d}/{steps}",
        f"consumed samples: {step * global_batch_size}",
        f"elapsed time per iteration (ms): {rates['step_time_s'] * 1000:.1f}",
        f"tokens/s: {rates['tokens_per_s']:,.0f}",
    ]
    if rates.get("tflops_per_gpu") is not None:
        parts.append(f"throughput per GPU (TFLOP/s/GPU): {rates['tflops_per_gpu']:.4g}")
    if rates.get("mfu") is not None:
        parts.append(f"MFU: {100 * rates['mfu']:.1f}%")
    parts += [
        f"learning rate: {lr:.6E}",
        f"global batch size: {global_batch_size}",
        f"lm loss: {loss:.6E}",
        f"grad norm: {grad_norm:.3f}",
    ]
    if skipped:
        parts.append(f"number of skipped iterations: {skipped}")
    parts.append(f"elapsed: {_clock_text(elapsed_s)}")
    parts.append(f"ETA: {_clock_text(eta_s) if eta_s is not None else '?'}")
    return " | ".join(parts)


def pipeline_note(stages: int, microbatches: int) -> str:
    """What a pipeline of ``stages`` costs a step of ``microbatches`` (1F1B without interleaving):
    each stage idles (stages - 1) of the step's (microbatches + stages - 1) slots while the
    pipeline fills and drains. Megatron-LM prints nothing about it; a multi-node user sizing
    the global batch needs to know."""
    idle = (stages - 1) / (microbatches + stages - 1)
    return (
        f"pipeline: {stages} stages, {microbatches} micro-batches per step: about {idle:.0%} of each step is "
        f"the pipeline filling and draining ((stages - 1) / (micro-batches + stages - 1)); "
        f"more micro-batches per step (a larger training.global_batch_size or smaller micro_batch_size) shrink it"
    )


def perplexity(loss: float) -> float:
    """``exp(loss)``, Megatron-LM's ``lm loss PPL``; inf where it overflows a float."""
    return math.inf if loss >= 709.0 else math.exp(loss)  # nan stays nan


def eval_line(step: int, fraction: float, val_loss: float) -> str:
    """The console and train.log line of a held-out evaluation."""
    return f"step {step} ({fraction:.3g} of training): val_loss {val_loss:.4f} | PPL {perplexity(val_loss):.4g}"


def summary_line(summary: Any) -> str:
    """The last console and train.log line of a session: how it ended, as ``summary.json`` records
    it (a ``rundir.files.RunSummary``)."""
    s = summary
    line = f"{s.status}: {s.steps}/{s.target_steps} steps, {s.tokens:,} tokens, {_clock_text(s.wall_time_s or 0.0)}"
    if s.final_val_loss is not None:
        line += f" | final val_loss {s.final_val_loss:.4f} | PPL {perplexity(s.final_val_loss):.4g}"
    if s.reason:
        line += f" | {s.reason}"
    return line


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
