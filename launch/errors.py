"""The one exception type for input a user can fix."""

from __future__ import annotations


class LaunchError(Exception):
    """Bad input (a file, key, grid entry or flag); the CLI prints the message and exits 2."""
