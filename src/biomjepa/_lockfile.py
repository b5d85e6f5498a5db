"""Opening a lock file so that it cannot be turned against the user (issue 68).

A lock file's holder writes its pid and command into it (:func:`biomjepa._files.lock`,
:func:`biomjepa.train.runlock.lock_run_dir`), and its name is known in advance (``.OUT.h5ad.lock``,
``cache/.lock``), so whoever can write into the directory could plant a symlink or a hard link under
that name and make the package overwrite another file. :func:`open_lock_file` creates a new lock file
exclusively (``O_CREAT | O_EXCL``, as :func:`biomjepa._files.atomic_path` creates its temporary
files), and opens one that is there without following a link (``O_NOFOLLOW``), for writing only when
``fstat`` shows a regular file of this user's with one name; anything else is an
:class:`UnsafeLockFile` naming it, and the file behind it is never opened for writing.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

#: what a path is when it is not a regular file, by its mode (also :func:`biomjepa._files.special_kind`'s words)
FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
              (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))

logger = logging.getLogger(__name__)
_NOFOLLOW = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


class UnsafeLockFile(OSError):
    """A lock file that is a link, not a regular file, another user's, or one of several names of a file: taking it
    could change another file, so it is refused; the message names it and says to remove it."""


def open_lock_file(path: str | os.PathLike) -> int | None:
    """A descriptor on the lock file ``path``, never through a link: a new file created exclusively, else the file
    there, checked (:func:`_open_existing`); ``None`` when neither can be opened (a read-only place without one).

    Raises
    ------
    UnsafeLockFile
        ``path`` is a symlink, not a regular file, or (to be written) another user's or a file with other names.
    """
    path, why = Path(path), None
    for _ in range(5):  # its holder may remove it between our two tries: then create it again
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
        except OSError as err:  # one is there (or a link), or the place is read-only
            why = err
        try:
            return _open_existing(path)
        except FileNotFoundError:
            if not isinstance(why, FileExistsError):
                break
        except UnsafeLockFile:
            raise
        except OSError as err:
            why = err
            break
    logger.debug("cannot open the lock file %s (%s); running without a lock", path, why)
    return None


def _open_existing(path: Path) -> int:
    """The lock file at ``path``, refused unless a regular file (checked before it is opened, without following a
    link, and on the file opened); opened for writing when it is this user's with one name, read-only (never
    written) where this user can only read it."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, st)  # a link, a FIFO, a device: never opened
    flags, writable = _NOFOLLOW | os.O_NONBLOCK, True
    try:
        fd = os.open(path, os.O_RDWR | flags)
    except OSError:  # a place this user can only read (EACCES, EROFS)
        fd, writable = os.open(path, os.O_RDONLY | flags), False
    st = os.fstat(fd)  # the file opened: the name may have been replaced since
    if not stat.S_ISREG(st.st_mode) or (writable and (st.st_uid != os.geteuid() or st.st_nlink != 1)):
        os.close(fd)
        raise _unsafe(path, st)
    return fd


def _unsafe(path: Path, st: os.stat_result) -> UnsafeLockFile:
    if stat.S_ISLNK(st.st_mode):
        what = f"is a symbolic link (to {os.path.realpath(path)!r}), not a regular file"
    elif not stat.S_ISREG(st.st_mode):
        what = f"is {next((kind for test, kind in FILE_KINDS if test(st.st_mode)), 'a special file')}, not a regular file"
    elif st.st_uid != os.geteuid():
        what = f"belongs to another user (uid {st.st_uid}), not to this one (uid {os.geteuid()})"
    else:
        what = f"has {st.st_nlink} names (hard links): it is also a file elsewhere"
    return UnsafeLockFile(f"The lock file {str(path)!r} {what}. biomjepa writes the holder's pid and command into its "
                          "lock files, so it never takes one that could change another file. Remove it (removing a "
                          "link or a second name leaves the file behind it as it is) and run again.")
