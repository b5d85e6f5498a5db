"""Stop signals while the package writes files: every clean-up runs, and none is cut in two.

Python's default SIGTERM ends the process with no ``finally`` clause run, leaving temporary files behind:
:func:`sigterm_interrupts` turns it into :class:`KeyboardInterrupt`, as SIGINT is, while a tool writes. A
signal that raises can still land inside the clean-up itself, or between a rename and the note that it
happened, and leave half of each: :func:`stops_held` holds SIGTERM and SIGINT back during such a short step
and acts on them once it is over.

A command whose work runs through code that must not be cut anywhere (an HDF5 write, whose library finalizers would
swallow the stop or crash on it) runs it inside :func:`stops_at_safe_points`: a stop signal is only recorded, and
acted on at the next :func:`stop_point` (between the readers' chunks, between corpus files, before a temporary file is
renamed) or when the block ends, never inside a library's clean-up and never swallowed.
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


#: the stop signal a stops_at_safe_points block recorded; "owned": a loop with its own handling has taken it over
_PENDING: dict[str, int | bool | None] = {"signum": None, "owned": False}


@contextlib.contextmanager
def stops_at_safe_points():
    """Run the body with SIGTERM and SIGINT recorded, not raised where the code happens to be: :func:`stop_point`
    raises ``KeyboardInterrupt("stopped by SIGTERM")`` (or ``SIGINT``) for it between blocks of work, and so does the
    end of the body if none was reached since (a stop is never swallowed: the command never ends as if it had
    finished). A second signal, or one that reaches this handler while a loop with its own handling has taken the stop
    over (:func:`take_over_stop`: the previous handler it calls on a second signal), raises at once. Signals inherited
    as ignored stay ignored; outside the main thread the body runs with the process' handling unchanged. The previous
    handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def record(signum, frame):
        if _PENDING["signum"] is not None or _PENDING["owned"]:  # the user insists, or the loop says: stop now
            raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")
        _PENDING["signum"] = signum

    previous = {}
    try:
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, record)
        yield
        stop_point()  # a stop recorded after the last safe point
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        _PENDING.update(signum=None, owned=False)


def stop_point() -> None:
    """Act on a stop signal that :func:`stops_at_safe_points` recorded: ``KeyboardInterrupt("stopped by SIGTERM")``
    (its clean-ups then run as for Ctrl-C). Called where the work can stop whole (between the chunks of a reader,
    before a temporary file is renamed); a no-op when none is recorded, and outside the main thread."""
    signum = _PENDING["signum"]
    if signum is not None and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def take_over_stop() -> int | None:
    """For a loop with its own stop handling (:class:`biomjepa.train.signals.GracefulStop`), entered inside
    :func:`stops_at_safe_points`: the stop signal recorded and not yet acted on (``None``: none), now the loop's to act
    on, and until :func:`give_back_stop` a signal reaching the recorder (a second one, passed on by the loop) raises
    at once."""
    signum = _PENDING["signum"]
    _PENDING.update(signum=None, owned=True)
    return signum


def give_back_stop() -> None:
    """The loop of :func:`take_over_stop` has ended: signals are recorded again until a safe point."""
    _PENDING["owned"] = False
