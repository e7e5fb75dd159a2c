"""benchmarks/deadline.py: a benchmark under a time limit runs fewer rounds, never one past it."""

import pytest

from benchmarks import deadline as dl


class Clock:
    """time.monotonic for the module under test; each round advances it by a planted duration."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(dl.time, "monotonic", c)
    return c


def test_rounds_stop_before_the_one_that_would_pass_the_limit(clock):
    plan = dl.Rounds(10, dl.Deadline(100.0))
    ran = []
    for r in plan:
        ran.append(r)
        clock.now += [20, 30, 25, 10, 10, 10, 10, 10, 10, 10][r]
    # after 3 rounds 75 s have passed, 25 s are left, the longest round took 30: a fourth would not fit
    assert ran == [0, 1, 2] and plan.done == 3 and plan.stopped_early
    assert plan.note() == "time limit (100 s): 3 of 10 rounds ran"


def test_a_reserve_for_what_follows_the_rounds_is_kept(clock):
    plan = dl.Rounds(10, dl.Deadline(100.0), reserve=lambda: 40.0)
    for _ in plan:
        clock.now += 20
    # after 2 rounds 60 s are left: 20 for another and 40 kept; after 3, 40 left: stop
    assert plan.done == 3


def test_the_first_round_runs_even_past_the_limit_and_no_limit_runs_all(clock):
    plan = dl.Rounds(4, dl.Deadline(1.0))
    for _ in plan:
        clock.now += 50
    assert plan.done == 1 and plan.stopped_early
    unlimited = dl.Rounds(4, dl.Deadline(None))
    for _ in unlimited:
        clock.now += 1e6
    assert unlimited.done == 4 and unlimited.note() == ""


def test_a_limit_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="--time-limit must be positive, got 0"):
        dl.Deadline(0)


@pytest.mark.parametrize("script", ["gpu_vs_plain.py", "gpu_packing.py", "run_startup.py"])
def test_a_bad_time_limit_is_exit_2_naming_the_option(script):
    import subprocess
    import sys

    from tests.conftest import REPO

    for value, why in (("0", "must be positive, got 0"), ("soon", "expected seconds, got 'soon'")):
        done = subprocess.run([sys.executable, f"benchmarks/{script}", "--time-limit", value], cwd=REPO,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.splitlines()[-1] == f"{script}: error: argument --time-limit: {why}"


def test_a_bounded_block_is_cut_when_the_deadline_passes_and_the_alarm_is_put_back():
    import signal
    import time

    before = signal.getsignal(signal.SIGALRM)
    t0 = time.monotonic()
    with pytest.raises(dl.TimeLimit, match=r"the time limit \(0 s\) passed"):
        with dl.Deadline(0.2).bounded():
            time.sleep(30)  # a set-up with no bound of its own
    assert time.monotonic() - t0 < 5
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with dl.Deadline(None).bounded():  # no limit: no alarm
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    with pytest.raises(dl.TimeLimit):  # through the `except Exception` of the code it cuts
        try:
            with dl.Deadline(0.1).bounded():
                time.sleep(30)
        except Exception:  # noqa: BLE001
            pytest.fail("TimeLimit was caught as an Exception")


def test_sigterm_raises_stopped_once_and_the_handler_is_put_back():
    import os
    import signal

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(dl.Stopped, match=r"SIGTERM \(the stage's time limit\)"):
        with dl.stop_on_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()  # not reached: the handler raises on delivery
    assert signal.getsignal(signal.SIGTERM) is before
