"""Files the package writes: temporary files that cannot be redirected, and locks between processes.

:func:`atomic_path` hands out a fresh temporary file next to a target and renames it over the
target once written. Its name is random and it is created exclusively (:func:`tempfile.mkstemp`,
``O_EXCL``), so another user who can write to the directory cannot plant a symlink under a name
the package is about to write and make it overwrite a file elsewhere. :func:`atomic_dir` does the
same for a whole directory.

:func:`lock` takes an ``flock`` on a lock file: exclusive for a process that writes a store or
cache, shared for processes that read one. The kernel releases it when the process ends, so a
crash never leaves a stale lock. Within one process the locks on one file are counted (a reader
that then (re)writes upgrades its own shared lock); a process refused a lock gets a
:class:`LockBusy` naming the holders (from ``/proc/locks`` where there is one, else the record an
exclusive holder writes into the lock file: pid, host and command; :mod:`biomjepa._lockfile` opens it so that no
link planted under its name can redirect that record). Platforms without ``fcntl`` (Windows) run unlocked.
Stop signals while writing: :mod:`biomjepa._stops`; HDF5 files written whole: :mod:`biomjepa._h5files`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ._lockfile import FILE_KINDS as _KINDS
from ._stops import stops_held

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)


# -- temporary files ------------------------------------------------------------------------------
def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # pragma: no cover - no /proc
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, *, suffix: str = ".tmp",
                replaced: Callable[[], object] | None = None) -> Iterator[Path]:
    """A new, empty temporary file in ``target``'s directory, renamed over ``target`` when the block succeeds.

    The name is random (``.<target name>.<random><suffix>``) and the file is created exclusively,
    so it never follows a symlink planted in the directory. It gets the permissions of the file it
    replaces, else ``0o666`` less the umask (as ``open`` would give), also when the writer recreated
    it. When the block raises, the temporary file is removed and ``target`` is left as it was. A
    ``target`` that exists and is not a regular file (``/dev/null``, a FIFO, a link to one) is refused
    before anything is created (:func:`check_regular_target`). ``replaced()`` (the caller's record of the new
    file) runs right after the rename with stop signals held over both, so a stop never parts them.

    Examples
    --------
    >>> with atomic_path(out, suffix=".h5ad") as tmp:  # doctest: +SKIP
    ...     adata.write_h5ad(tmp)
    """
    target = Path(target)
    check_regular_target(target)
    tmp = None
    try:
        with stops_held():  # created and named in one step: a stop never leaves it behind, unknown to the clean-up
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
            os.close(fd)
            tmp = Path(name)
        try:
            mode = os.stat(target).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        yield tmp
        os.chmod(tmp, mode)  # a writer that recreated the file (safetensors does, 0600) gets the mode back
        with stops_held():
            os.replace(tmp, target)
            if replaced is not None:
                replaced()
    except BaseException:
        with stops_held():  # the clean-up is not cut short by another stop signal
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        raise




def special_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists and is not a regular file (its link followed): ``"a directory"``,
    ``"a character device"`` (``/dev/null``, a terminal), ``"a FIFO (named pipe)"`` (``/dev/stdout`` into a
    pipe), ...; ``None`` for a regular file or a path that does not exist."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((kind for test, kind in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a regular file")


class NotRegularFile(OSError):
    """An output path that exists and is not a regular file (a device, a FIFO, a socket, a directory)."""


def check_regular_target(path: str | os.PathLike, *, what: str = "The output") -> None:
    """Refuse, before any work, an output ``path`` that exists and is not a regular file.

    Writing goes to a new file renamed over the target, which would put a regular file in place of
    ``/dev/null``, a FIFO or a socket (and a link to one would be written through); so such a path
    is a :class:`NotRegularFile` naming it and what it is. A missing path or a regular file passes.
    """
    kind = special_kind(path)
    if kind is None:
        return
    link = f" (a link to {os.path.realpath(path)!r})" if os.path.islink(path) else ""
    error = IsADirectoryError if kind == "a directory" else NotRegularFile
    raise error(f"{what} {str(path)!r}{link} is {kind}, not a regular file: the result is written to a new file "
                "renamed over it, which would replace it. Give the path of a regular file to create or replace.")


NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk, an exhausted quota


def no_space_error(err: BaseException, directory: str | os.PathLike, *, what: str, fix: str) -> OSError | None:
    """When ``err`` is a full disk or quota, an ``OSError`` (same ``errno``) saying so in words: the
    ``directory`` written to, its free space, ``what`` could not be written and ``fix``; else ``None``."""
    if not isinstance(err, OSError) or err.errno not in NO_SPACE:
        return None
    try:
        free = f"{shutil.disk_usage(directory).free / 1e6:,.0f} MB free"
    except OSError:
        free = "free space unknown"
    kind = "its quota is exhausted" if err.errno == errno.EDQUOT else "it is full"
    return NoSpaceError(err.errno, f"No space left to write {what} in {directory} ({kind}: {free}). {fix}")


class NoSpaceError(OSError):
    """A full disk or quota, said in words: its text is the message alone (no ``[Errno 28]`` before it)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """A new, empty directory beside ``target`` (random name), swapped in for ``target`` when the block succeeds.

    The directory ``target`` (if any) is replaced only once the new one is complete; when the block
    raises, the new directory is removed and ``target`` is left as it was.
    """
    target = Path(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old = tmp.with_name(tmp.name + ".old")
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if target.exists():
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except OSError:
            if old.exists():
                os.rename(old, target)
            raise
    except BaseException:
        with stops_held():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_text_atomic(target: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``target`` through :func:`atomic_path`."""
    with atomic_path(target) as tmp:
        tmp.write_text(text)


# -- locks ----------------------------------------------------------------------------------------
class LockBusy(RuntimeError):
    """Another process holds a lock this process needs; the message names it and what to do."""


@dataclass
class _Held:
    fd: int
    pid: int
    shared: int = 0
    exclusive: int = 0
    remove: str | None = None  # the lock file to remove at the last release (lock(remove=True))


_HELD: dict[str, _Held] = {}  # lock file (real path) → this process' descriptor and counts


class Lock:
    """One acquisition of :func:`lock`; :meth:`release` (or leaving a ``with`` block) gives it back."""

    def __init__(self, key: str, shared: bool) -> None:
        self.key, self.shared, self._released = key, shared, False

    def release(self) -> None:
        """Give this acquisition back (idempotent; the file stays locked while others of this process hold it)."""
        if self._released:
            return
        self._released = True
        _release(self.key, self.shared)

    @property
    def locked(self) -> bool:
        """Whether this process holds the file's lock through it (``False`` once released, and where the lock file
        could not be opened or there are no locks: :func:`lock` then runs unlocked)."""
        held = _HELD.get(self.key)
        return not self._released and held is not None and held.pid == os.getpid()

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def output_lock(output: str | os.PathLike, *, what: str | None = None, fix: str | None = None) -> Lock:
    """The lock of every writer of a user's file (``embed IN OUT``, ``--embed``, ``write_obsm``): ``.NAME.lock`` beside
    the file ``output`` names (a link followed), removed when given back (:func:`lock`; ``what``/``fix``: its refusal)."""
    target = Path(output).resolve() if Path(output).is_symlink() else Path(output)
    return lock(target.with_name(f".{target.name}.lock"), what=what or f"The output {output}", remove=True,
                fix=fix or "Two commands writing one file keep only one's result: wait for that one to finish, or "
                           "give this one another output file.")


def lock(path: str | os.PathLike, *, shared: bool = False, what: str, fix: str, remove: bool = False) -> Lock:
    """Lock ``path`` (created if needed): exclusive, or ``shared`` with other readers; never waits.

    Parameters
    ----------
    what
        What is locked, for the error (``"The atlas store OUT.zarr"``).
    fix
        What the user can do instead, appended to the error.
    remove
        Remove the lock file when this process gives back its last exclusive hold on it (still holding the lock:
        a process that opened the file meanwhile locks the file then at the path, :func:`_locked_fd`), so a
        finished command leaves no lock file with its command line. A killed process leaves it, unlocked.

    Raises
    ------
    LockBusy
        Another process holds the lock in a conflicting mode; the message names it.
    biomjepa._lockfile.UnsafeLockFile
        ``path`` is a link, not a regular file, or another user's or hard-linked file; nothing is written into it.
    """
    path = Path(path)
    key = os.path.realpath(path)
    held = _HELD.get(key)
    if held is not None and held.pid != os.getpid():  # inherited through fork: the parent's, not ours
        _HELD.pop(key)
        os.close(held.fd)
        held = None
    if fcntl is None:  # pragma: no cover - Windows
        return Lock(key, shared)
    if held is None:
        fd = _locked_fd(path, shared, what, fix)
        if fd is None:
            return Lock(key, shared)
        held = _HELD[key] = _Held(fd, os.getpid())
    elif not shared and not held.exclusive:  # this process reads it: upgrade, if no other process does
        try:
            fcntl.flock(held.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _relock_shared(held, key)  # a failed conversion drops the shared lock: take it back
            raise LockBusy(_busy_message(path, what, fix)) from None
    if shared:
        held.shared += 1
    else:
        held.exclusive += 1
        held.remove = str(path) if remove else held.remove
        _write_record(held.fd)
    return Lock(key, shared)


def _locked_fd(path: Path, shared: bool, what: str, fix: str, tries: int = 5) -> int | None:
    """A descriptor holding the flock on the file now at ``path``. A holder that removes the lock file before it
    releases the lock (adapt's, beside ``out_dir``) lets a waiter lock the removed file: the inode is compared after
    locking, and the lock taken again on the file that is there."""
    for _ in range(tries):
        fd = _open(path)
        if fd is None:
            return None
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockBusy(_busy_message(path, what, fix)) from None
        try:
            if os.fstat(fd).st_ino == os.lstat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the file was removed (or replaced) between our open and our lock: lock the one there now
    raise LockBusy(_busy_message(path, what, fix))


def _open(path: Path) -> int | None:
    """A descriptor on the lock file, never through a link nor into another file (:func:`biomjepa._lockfile.
    open_lock_file`); read-only on an existing file in a read-only place; ``None`` when neither."""
    from ._lockfile import open_lock_file

    return open_lock_file(path)


def _release(key: str, shared: bool) -> None:
    held = _HELD.get(key)
    if held is None or held.pid != os.getpid():
        return
    if shared:
        held.shared -= 1
    else:
        held.exclusive -= 1
    if held.shared <= 0 and held.exclusive <= 0:
        if held.remove and not shared:  # this process held it alone (exclusive) until now
            with contextlib.suppress(OSError):
                os.unlink(held.remove)  # the name locked, never a link's target
        fcntl.flock(held.fd, fcntl.LOCK_UN)
        os.close(held.fd)
        _HELD.pop(key)
    elif not shared and not held.exclusive:  # still read by this process: back to a shared lock
        _relock_shared(held, key)


def _relock_shared(held: _Held, key: str) -> None:
    try:
        fcntl.flock(held.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        logger.warning("lost the shared lock on %s to another process", key)


def _write_record(fd: int) -> None:
    """Record the exclusive holder (pid, host, command) in the lock file (one :func:`_open` created or checked)."""
    record = f"pid {os.getpid()} on {socket.gethostname()}: {_command(os.getpid())}\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode(), 0)
    except OSError:  # a read-only lock file
        pass


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        text = " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    except OSError:
        text = " ".join(sys.argv) if pid == os.getpid() else ""
    text = " ".join(text.split())  # one line, whatever the arguments held
    return (text[:200] + "…") if len(text) > 200 else (text or "unknown command")


def holders(path: str | os.PathLike) -> list[str]:
    """Other processes holding an ``flock`` on ``path``, from ``/proc/locks`` (empty where it cannot tell)."""
    try:
        st = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK" or parts[5] != dev:  # "->" lines (waiters) have another layout
            continue
        pid = parts[4]
        if pid == str(os.getpid()):  # this process' own lock (e.g. the shared one it tried to upgrade)
            continue
        mode = "reading it" if parts[3] == "READ" else "writing it"
        out.append(f"pid {pid} ({_command(int(pid)) if pid.isdigit() else 'unknown command'}), {mode}")
    return out


def _busy_message(path: Path, what: str, fix: str) -> str:
    who = holders(path)
    if not who:  # no /proc: the record of the last exclusive holder
        with contextlib.suppress(OSError):
            who = [line for line in path.read_text().splitlines() if line.strip()][:1]
    names = "; ".join(dict.fromkeys(who)) or "unknown process"
    return f"{what} is in use by another process ({names}). {fix}"
