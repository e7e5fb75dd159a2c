"""The one exception type for input a user can fix, and the exit codes of ``python -m launch``."""

from __future__ import annotations

# docs/launch.md "Exit codes": 0 done; 1 a run (or a submission) failed; 2 bad input; 4 some
# runs are running elsewhere (a locked run dir, a live SLURM array); 75 interrupted, or runs
# left pending: rerun to resume.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_BUSY, EXIT_RESUMABLE = 0, 1, 2, 4, 75


class LaunchError(Exception):
    """Bad input (a file, key, grid entry or flag); the CLI prints the message and exits 2."""
