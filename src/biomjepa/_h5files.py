"""HDF5 files a command writes (``.h5ad``): whole or not at all, a full disk said in one line, no copy left behind.

:func:`h5_written` is :func:`~biomjepa._files.atomic_path` for an HDF5 file, and :func:`in_child` runs the write
itself in a forked child process. HDF5 cannot recover from a write that failed (a full disk): closing the file, or
collecting its objects, then crashes the process, after dozens of "Exception ignored" tracebacks, and leaves the
temporary file behind. The child leaves such a file open and ends without closing anything; its error comes back
whole, the temporary file is removed, and a full disk, which h5py reports without an ``errno`` (only its text says
``errno = 28``), becomes one message naming the directory, its free space and the fix (:func:`full_disk_error`,
through :func:`~biomjepa._files.no_space_error`, which training uses).

:func:`locked_output` takes the lock of a user's file (:func:`~biomjepa._files.output_lock`) and removes the partial
copies (``.NAME.<random>.h5ad`` beside it) that a writer killed outright (SIGKILL, a power cut) left, but only when
the lock proves that writer dead: its lock file was there before (a killed writer leaves it, a finished one removes
it) and no process holds it. A missing lock file proves nothing (the lock file of a running writer may have been
deleted by hand), so nothing is removed then.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import stat
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from ._files import NO_SPACE, Lock, atomic_path, no_space_error, output_lock

logger = logging.getLogger(__name__)


def disk_full(err: BaseException | None) -> int | None:
    """``errno.ENOSPC`` or ``errno.EDQUOT`` when ``err``, or an exception it was raised from, is a full disk or an
    exhausted quota: an ``OSError`` with that ``errno``, or an error whose text says so (h5py's: ``errno = 28,
    error message = 'No space left on device'``); else ``None``."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            return err.errno
        text = str(err)
        for code in sorted(NO_SPACE):
            if f"errno = {code}," in text or os.strerror(code) in text:
                return code
        err = err.__cause__ or err.__context__
    return None


def full_disk_error(err: BaseException, directory: str | os.PathLike, *, what: str, fix: str) -> OSError | None:
    """:func:`~biomjepa._files.no_space_error` for ``err`` when :func:`disk_full` finds a full disk in it (h5py's
    errors included): the directory, its free space, ``what`` could not be written and ``fix``; else ``None``."""
    code = disk_full(err)
    return None if code is None else no_space_error(OSError(code, os.strerror(code)), directory, what=what, fix=fix)


@contextlib.contextmanager
def h5_written(target: str | os.PathLike, *, what: str, fix: str,
               replaced: Callable[[], object] | None = None) -> Iterator[Path]:
    """A temporary file beside ``target`` for an HDF5 write, renamed over ``target`` when the block succeeds
    (:func:`~biomjepa._files.atomic_path`, ``replaced`` as there; the write itself goes through :func:`in_child`). A
    stop signal recorded while the block ran acts before the rename (:func:`biomjepa._stops.stop_point`). When the
    block fails or is stopped the file is removed, and a full disk in the block is an ``OSError`` saying so in one
    line: ``target``'s directory, its free space, ``what`` could not be written and ``fix``."""
    from ._stops import stop_point

    target = Path(target)
    with atomic_path(target, suffix=target.suffix or ".h5", replaced=replaced) as tmp:
        try:
            yield tmp
            stop_point()  # the copy is whole; a stop that came while it was written acts before the rename
        except OSError as err:  # the write's (not the rename's, nor the record's of ``replaced``)
            full = full_disk_error(err, target.parent.absolute(), what=what, fix=fix)
            if full is None:
                raise
            raise full from err


def in_child(write: Callable[[], object]) -> None:
    """Run ``write()``, an HDF5 write, in a child process (forked: it shares this process' memory, nothing is copied).

    HDF5 cannot recover from a write that failed (a full disk): closing the file then, or collecting its objects,
    crashes the process (a segmentation fault after dozens of tracebacks). In a child, a failed file is left open, the
    child ends without closing it, and its error comes back here whole (its type, errno and text; raised again); what
    it printed (warnings) is said here when the write succeeded. A stop signal the child received during the write
    is passed on to this process once it is done. Where there is no ``fork`` (Windows, macOS) the write runs here."""
    if not sys.platform.startswith("linux"):
        write()
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    said_r, said_w = os.pipe()  # the child's stderr
    report_r, report_w = os.pipe()  # its outcome, as JSON
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12: "fork() of a multi-threaded process"
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
        _child(write, said_r, said_w, report_r, report_w)
    os.close(said_w)
    os.close(report_w)
    try:
        said, report = _read_all(said_r), _read_all(report_r)
        status = os.waitpid(pid, 0)[1]
    except BaseException:  # a stop that raises here: the child goes too
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    finally:
        os.close(said_r)
        os.close(report_r)
    _outcome(said.decode(errors="replace"), json.loads(report) if report else None, status)


def _outcome(said: str, report: dict | None, status: int) -> None:
    """Act on the child's ``report`` (``None``: it ended without one) and exit ``status``: its stop signals passed on,
    its warnings said, its error raised again."""
    for signum in (report or {}).get("signals", [])[:1]:
        signal.raise_signal(signum)  # as if it came here: this process' handling decides
    if report is not None and report["ok"] and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        if said:
            sys.stderr.write(said)
        return
    logger.debug("the HDF5 write's process said: %s", said)
    if report is None or report["ok"]:
        how = f"signal {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status) else f"exit {status}"
        tail = " ".join(said.split()[-60:])
        raise OSError(f"The HDF5 write ended its process ({how}) before it finished: {tail}")
    raise _rebuilt(report)


def _rebuilt(report: dict) -> BaseException:
    """The child's error again: its type where it is a builtin one (an ``OSError`` with its ``errno``), its text."""
    import builtins

    kind, text = getattr(builtins, report["type"], None), report["text"]
    if not (isinstance(kind, type) and issubclass(kind, BaseException)):
        kind = OSError if report.get("errno") is not None else RuntimeError
    try:
        err = kind(text)
    except Exception:  # a builtin error that takes other arguments
        err = RuntimeError(text)
    if isinstance(err, OSError):
        err.errno = report.get("errno")
    return err


def _child(write, said_r: int, said_w: int, report_r: int, report_w: int):  # pragma: no cover - runs in the child
    """The forked child of :func:`in_child`: ``write()``, its outcome reported, then an exit that closes nothing."""
    code = 70
    try:
        os.close(said_r)
        os.close(report_r)
        os.dup2(said_w, 2)
        got: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):  # the parent decides what a stop does, once the write is over
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, lambda signum, frame: got.append(signum))
        _failed_files_stay_open()
        try:
            write()
            report = {"ok": True}
        except BaseException as err:
            report = {"ok": False, "type": type(err).__name__, "errno": getattr(err, "errno", None),
                      "text": str(err)[:20000]}
        report["signals"] = got
        os.write(report_w, json.dumps(report).encode())
        code = 0
    finally:
        os._exit(code)  # no clean-up: the failed file's objects are never closed nor collected


def _failed_files_stay_open() -> None:  # pragma: no cover - runs in the child
    """``with h5py.File(...)`` (anndata's write) closes the file when its block fails, which crashes HDF5 after a
    failed write: in the child, a file whose block failed is left open (the child exits without closing anything)."""
    h5py = sys.modules.get("h5py")
    if h5py is None:
        return
    close = h5py.File.__exit__

    def __exit__(self, *exc):
        return close(self, *exc) if exc[0] is None else None

    h5py.File.__exit__ = __exit__


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def copies_left(target: str | os.PathLike) -> list[Path]:
    """The temporary files of writers of ``target`` beside it (``.NAME.<8 random characters>.SUFFIX``, the names of
    :func:`~biomjepa._files.atomic_path`): regular files, links never."""
    target = Path(target)
    name = re.compile(rf"^\.{re.escape(target.name)}\.[a-z0-9_]{{8}}{re.escape(target.suffix or '.h5')}$")
    try:
        entries = sorted(target.parent.iterdir())
    except OSError:
        return []
    return [e for e in entries if name.match(e.name) and _regular(e)]


def locked_output(output: str | os.PathLike, *, what: str | None = None, fix: str | None = None) -> Lock:
    """:func:`~biomjepa._files.output_lock` of ``output`` (``what``/``fix``: its refusal), and the partial copies that a
    killed writer left beside the file removed, with a warning naming each, where the lock proves it dead (see the
    module docstring). The caller gives the lock back (``with`` or :meth:`~biomjepa._files.Lock.release`)."""
    target = Path(output).resolve() if Path(output).is_symlink() else Path(output)
    lock_file = target.with_name(f".{target.name}.lock")
    before = file_identity(lock_file)
    held = output_lock(output, what=what, fix=fix)
    try:
        if before is not None and held.locked and file_identity(lock_file) == before:
            for copy in copies_left(target):
                with contextlib.suppress(OSError):  # gone already, or not this user's to remove
                    copy.unlink()
                    logger.warning("removed %s, a partial copy of %s that a command killed while writing it left",
                                   copy, target)
    except BaseException:
        held.release()
        raise
    return held


def file_identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(device, inode)`` of the regular file at ``path`` (a link not followed); ``None`` when there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
