"""Progress bars that follow ``bj.settings.progress``: one place for how the package shows progress."""

from __future__ import annotations

import importlib.util


def progress_bar(iterable=None, *, total: int | None = None, desc: str | None = None, unit: str = "it", leave: bool = True):
    """A tqdm bar, shown when ``bj.settings.progress`` is on and once the loop has run :data:`PROGRESS_DELAY` s.

    Short loops therefore print nothing. In a notebook with ipywidgets the bar is a widget
    (``tqdm.auto``); elsewhere, and in a notebook without ipywidgets (where ``tqdm.auto`` would warn
    "IProgress not found"), it is tqdm's text bar on stderr. Where stderr is neither a terminal nor a
    notebook (redirected to a log file, a batch system's output), no bar is drawn: its carriage returns
    and redraws would only litter the log.
    """
    from ._settings import PROGRESS_DELAY, settings

    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        leave=leave,
        delay=PROGRESS_DELAY,
        disable=not (settings.show_progress and interactive()),
    )


def interactive() -> bool:
    """Whether a progress bar can redraw itself in place: stderr is a terminal, or a Jupyter kernel shows it."""
    import sys

    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        pass
    return "ipykernel" in sys.modules
