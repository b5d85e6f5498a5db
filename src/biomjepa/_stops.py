"""Stop signals while the package writes files: every clean-up runs, and none is cut in two.

Python's default SIGTERM ends the process with no ``finally`` clause run, leaving temporary files behind:
:func:`sigterm_interrupts` turns it into :class:`KeyboardInterrupt`, as SIGINT is, while a tool writes. A
signal that raises can still land inside the clean-up itself, or between a rename and the note that it
happened, and leave half of each: :func:`stops_held` holds SIGTERM and SIGINT back during such a short step
and acts on them once it is over.
"""

from __future__ import annotations

import contextlib
import signal
import threading

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def sigterm_interrupts(message: str):
    """Run the body with SIGTERM raising ``KeyboardInterrupt(message)``, as SIGINT does, so that every clean-up
    runs; the previous handler comes back after (blocks nest). Only the main thread installs handlers;
    elsewhere, and where SIGTERM was inherited as ignored, the body runs with the process' handling unchanged."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(message)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:  # None: a handler set outside Python (an embedding host), which Python cannot put back
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


@contextlib.contextmanager
def stops_held():
    """Run the body (a short step: a rename and the note that it happened, a clean-up) with SIGTERM and SIGINT
    held back: one arriving meanwhile is recorded, and once the body is over the handlers it met come back and
    the first such signal is raised again, so it acts then (a ``KeyboardInterrupt`` after the body, or the end of
    the process where SIGTERM has its default handling). Signals inherited as ignored stay ignored; outside the
    main thread the body runs with the process' handling unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {}
    try:
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])
