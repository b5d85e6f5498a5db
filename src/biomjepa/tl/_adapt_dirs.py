"""Where ``bj.tl.adapt`` writes: the ``out_dir`` it claims (checked, locked), its scratch directory beside it, and
what it removes when it stops, or what a killed one left (:func:`_sweep`)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from .._h5files import file_identity
from .._settings import settings

_CLAIMED: set[str] = set()  # out_dirs this process is writing (bj.tl.adapt in several threads)
_CLAIMED_GUARD = threading.Lock()
#: a scratch directory: ``.<out_dir name>.adapt-<8 characters of tempfile.mkdtemp>`` beside ``out_dir``
SCRATCH = re.compile(r"^\.(?P<name>.+)\.adapt-[a-z0-9_]{8}$")
logger = logging.getLogger(__name__)


@contextlib.contextmanager
def _claimed(out_dir):
    """The checkpoint directory, checked and locked for this call (a second adapt on it is refused at once).

    A symlink is followed (the checkpoint goes where it points). The lock is a hidden file beside the directory,
    removed when the call ends. Scratch directories that killed adapts left beside it are removed (:func:`_sweep`).
    """
    from .._files import LockBusy, lock
    from .._stops import stops_held

    if out_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        where = _mkdir(settings.cachedir / "adapted", "bj.settings.cachedir", fix="set `bj.settings.cachedir` to a "
                       "directory you can write to (adapt writes under it when out_dir is not given), or pass out_dir=.")
        out = Path(tempfile.mkdtemp(prefix=f"adapt-{stamp}-", dir=where))
    else:
        out = Path(os.path.realpath(Path(out_dir).expanduser()))
        if Path(os.path.realpath(os.getcwd())).is_relative_to(out):
            raise ValueError(f"out_dir={str(out_dir)!r} is the current working directory (or a folder above it): the "
                             "checkpoint directory appears whole, by a rename, which would replace it. Give a new "
                             "directory, e.g. out_dir='adapted'.")
        _mkdir(out.parent, "out_dir")
    path = out.parent / f".{out.name}.adapt.lock"
    fix = "Another bj.tl.adapt is writing its checkpoint there: wait for it to finish, or give another out_dir."
    with _CLAIMED_GUARD:  # the file lock is re-entrant within a process: two threads are told apart here
        if str(out) in _CLAIMED:
            raise LockBusy(f"out_dir={str(out)!r} is being written by another bj.tl.adapt of this process. {fix}")
        before = file_identity(path)
        held = lock(path, what=f"out_dir={str(out)!r}", fix=fix)
        _CLAIMED.add(str(out))
    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            what = "a file" if not out.is_dir() else "not an empty directory"
            raise FileExistsError(f"out_dir={str(out)!r} is {what}; adapt never replaces a checkpoint or other "
                                  "files. Give a new directory (or an empty one).")
        _sweep(out, own_dead=before is not None and file_identity(path) == before)
        yield out
    finally:
        with stops_held():  # the lock file goes with the lock, whatever signal comes meanwhile
            with contextlib.suppress(OSError):
                path.unlink()  # a waiter that opened it before checks the inode after locking (biomjepa._files.lock)
            held.release()
            with _CLAIMED_GUARD:
                _CLAIMED.discard(str(out))


def _sweep(out: Path, *, own_dead: bool = False) -> None:
    """Remove, with a warning naming each, the scratch directories (with their copy of the cells' counts) that
    adapts killed outright (SIGKILL, a power cut) left beside ``out``, where a lock proves their adapt dead: the lock
    file of their ``out_dir`` was there (a killed adapt leaves it, a finished one removes it) and is free, this call's
    own name's when ``own_dead`` (this call took the lock file it found), another name's when this process can take
    its lock. A scratch directory whose lock file is missing stays: its adapt may run, its lock file deleted by hand;
    and so does one whose adapt runs, in another process or another thread of this one."""
    from .._files import LockBusy, lock
    from .._lockfile import UnsafeLockFile

    try:
        entries = sorted(out.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        match = SCRATCH.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        name = match["name"]
        if name == out.name:
            if own_dead:
                _remove_stale(entry)
            continue
        lock_path = out.parent / f".{name}.adapt.lock"
        with _CLAIMED_GUARD:  # the file lock is re-entrant within a process: another thread's adapt is told apart here
            if os.path.realpath(out.parent / name) in {os.path.realpath(c) for c in _CLAIMED}:
                continue
            found = file_identity(lock_path)
            if found is None:  # no lock file: nothing proves that adapt dead (never create one to take)
                continue
            try:
                held = lock(lock_path, what=f"out_dir={str(out.parent / name)!r}", fix="It is running.", remove=True)
            except (LockBusy, UnsafeLockFile):  # running, or a lock file that proves nothing (a planted link)
                continue
        with held:
            if held.locked and file_identity(lock_path) == found:  # the very lock file the killed adapt left
                _remove_stale(entry)


def _remove_stale(entry: Path) -> None:
    shutil.rmtree(entry, ignore_errors=True)
    if not entry.exists():
        logger.warning("removed %s, the scratch directory (with a copy of the cells' counts) of a bj.tl.adapt that was "
                       "killed before it could remove it", entry)


def _mkdir(path: Path, name: str, fix: str | None = None) -> Path:
    """``path`` made (with its parents), or an ``OSError`` (``NotADirectoryError``, ``PermissionError``) naming
    ``name`` where it cannot be, and ``fix`` (default: give another ``name``)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # the path itself, or a folder above it, is a file
        raise NotADirectoryError(f"{name}: {str(path)!r} (or a folder above it) is a file, not a directory; "
                                 + (fix or f"give a {name} whose parent folders are directories.")) from None
    except PermissionError:
        raise PermissionError(f"{name}: cannot create {str(path)!r} (permission denied); "
                              + (fix or f"give a {name} in a folder you can write to.")) from None
    except OSError as err:  # a read-only file system, a name too long, ...
        raise OSError(f"{name}: cannot create {str(path)!r} ({err.strerror}); "
                      + (fix or f"give a {name} in a folder you can write to.")) from None
    return path


def _discard(out: Path, *, made: bool, placed: bool) -> None:
    """Remove what this call put at ``out``: the default directory it made, or the checkpoint it ``placed`` there.
    Whatever else is there (another writer's files) stays: ``out`` was empty when claimed, and is not ours."""
    if out.is_dir() and (made or placed):
        shutil.rmtree(out, ignore_errors=True)


def _scratch(out: Path) -> str:
    try:
        return tempfile.mkdtemp(prefix=f".{out.name}.adapt-", dir=out.parent)
    except PermissionError:
        raise PermissionError(f"out_dir: cannot write to {str(out.parent)!r} (permission denied), where adapt assembles "
                              "the checkpoint before it appears as out_dir; give an out_dir in a folder you can "
                              "write to.") from None
