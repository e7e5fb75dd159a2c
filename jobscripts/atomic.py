"""Atomic file writes: a reader, or a rerun after a kill, sees the old file or the new one, never half.

Free of heavy imports because data_prep's worker processes use it too.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path``: temp file in the same folder, fsync, then ``os.replace``.

    The file gets the permissions a plain ``open()`` would give (``mkstemp`` alone makes 0600
    files, and run outputs are shared).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _default_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike) -> Any | None:
    """The parsed file, or None when it is missing or unreadable (a marker not yet written)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def tmp_path(path: str | os.PathLike) -> str:
    """A sibling name for writing ``path`` (by a library that wants a filename) before :func:`publish`."""
    path = Path(path)
    return str(path.with_name(f".{path.name}.{os.getpid()}.tmp"))


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """fsync ``tmp`` and rename it onto ``path``."""
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
