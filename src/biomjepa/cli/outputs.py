"""The output file of a command that writes one (``biomjepa embed IN OUT``, ``biomjepa adapt --embed OUT``): one
writer at a time, and a stop that says what it left.

:func:`writing` locks the output (``.OUT.lock`` beside the file it names, a link followed; removed at the end) from
before the input is read until the command ends, so a second command writing the same file (``biomjepa embed
a.h5ad a.h5ad`` twice) is refused at once, naming the first, instead of one result silently replacing the other.
Inside it SIGTERM raises :class:`KeyboardInterrupt` as Ctrl-C does, so the temporary file of an interrupted write is
removed, and the command ends with one line saying what is on disk and exit code 143 (SIGTERM) or 130 (SIGINT). With
``at_safe_points`` (``embed``, ``adapt``, ``demo``: they write HDF5, whose library must not be cut anywhere) a stop
signal is only recorded, and acts between blocks of work or before the rename (:func:`biomjepa._stops.
stops_at_safe_points`). The partial copies a writer killed outright left beside the output are removed where its lock
proves it dead (:func:`biomjepa._h5files.locked_output`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

#: the exit codes of a stop, for a writing command's help (after ``types.EPILOG``)
STOP_CODES = "; 130/143 stopped by SIGINT/SIGTERM (one line says what it left written)"


def output_target(output: str | os.PathLike) -> Path:
    """The file a write to ``output`` replaces: the link's target where ``output`` is a symbolic link."""
    target = Path(output)
    return target.resolve() if target.is_symlink() else target


@contextlib.contextmanager
def writing(output: str | os.PathLike | None, left: Callable[[bool], str], *,
            at_safe_points: bool = False) -> Iterator[None]:
    """Run a command's work with ``output`` locked (none: nothing locked) and stop signals said in one line.

    ``left(written)`` says what a stop left on disk, ``written`` telling whether ``output`` was replaced since the
    block began (a complete file: it is written to a temporary file and renamed); the command then ends with
    :class:`~.errors.Stopped` (``stopped by SIGTERM; LEFT``, exit code 143, or 130 for SIGINT).

    Raises
    ------
    biomjepa._files.LockBusy
        Another process writes ``output``; the message names it.
    """
    from .._h5files import locked_output
    from .._stops import sigterm_interrupts, stops_at_safe_points
    from .errors import stopped

    target = output_target(output) if output is not None else None
    with contextlib.nullcontext() if output is None else locked_output(output):
        before = file_identity(target)
        try:
            with stops_at_safe_points() if at_safe_points else sigterm_interrupts("stopped by SIGTERM"):
                yield
        except KeyboardInterrupt as err:
            raise stopped(err, left(file_identity(target) != before)) from None


def file_identity(path: Path | None) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path`` (``None``: none there): a rename over it changes it."""
    try:
        st = os.stat(path) if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino)
