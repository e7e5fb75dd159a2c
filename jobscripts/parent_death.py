"""A process that gets a signal when its parent dies (Linux ``PR_SET_PDEATHSIG``).

launch starts every trainer so (``launch.processes``), and ``train_gpt.py`` asks for it itself
under torchrun, whose agent sets none: a torchrun killed by SIGKILL (the OOM killer, a job
step torn down) left its ranks training on, holding the run lock, orphaned. The signal is tied
to the *thread* that forked the process. Standard library only: the trainer calls it before
its imports.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Optional

PR_SET_PDEATHSIG = 1

_prctl: Optional[Callable[..., int]] = None
if sys.platform.startswith("linux"):  # resolved at import: no dlopen between fork and exec
    _prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send this process ``sig`` when its parent dies; sent at once when the
    parent (``parent_pid``) died before the request took effect. Elsewhere than Linux: nothing."""
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
