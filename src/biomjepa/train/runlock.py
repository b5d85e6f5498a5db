"""One training process per run directory: an exclusive lock on ``run_dir/.lock``.

Two runs writing the same run directory at once would interleave their checkpoints, logs and
``LATEST`` pointer. :func:`lock_run_dir` takes an ``flock`` on ``run_dir/.lock`` (released by the
kernel when the process ends, so a crash never leaves a stale lock) and records the holder's pid
and host in the file for the error message (opened so that a link planted under its name cannot redirect that
record: :func:`biomjepa._lockfile.open_lock_file`). The lock is per process: a process that already
holds it (e.g. a second :class:`~biomjepa.train.loop.Trainer` after the first one finished) takes
it again freely. Platforms without ``fcntl`` (Windows) run unlocked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

from .._lockfile import open_lock_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)
LOCK = ".lock"
_HELD: dict[Path, int] = {}  # run directory → file descriptor holding its lock in this process


class RunDirectoryBusy(RuntimeError):
    """Another process is training into the same run directory."""


def lock_run_dir(run_dir: str | os.PathLike) -> None:
    """Take the run directory's lock for this process (created if needed).

    Raises
    ------
    RunDirectoryBusy
        Another process holds it; the message names its pid and host.
    biomjepa._lockfile.UnsafeLockFile
        ``run_dir/.lock`` is a link, not a regular file, or another user's or hard-linked file (nothing is written).
    """
    run_dir = Path(run_dir).resolve()
    if run_dir in _HELD or fcntl is None:
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(run_dir / LOCK)  # never through a link planted there, nor into another user's file
    if fd is None:
        raise PermissionError(f"Cannot create the lock file {run_dir / LOCK}: the run directory {run_dir} is not "
                              "writable. Give a `run_name`/`out_dir` you can write to.")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown process"
        os.close(fd)
        raise RunDirectoryBusy(
            f"The run directory {run_dir} is in use by another training process ({holder}). Two runs writing "
            "one directory corrupt each other's checkpoints: wait for it to finish, or give this run another "
            "`run_name`/`out_dir`."
        ) from None
    with contextlib.suppress(OSError):  # a read-only lock file (in a read-only place) is locked, not written
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    _HELD[run_dir] = fd


def unlock_run_dir(run_dir: str | os.PathLike) -> None:
    """Release this process' lock on ``run_dir`` (no-op when it holds none)."""
    fd = _HELD.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
