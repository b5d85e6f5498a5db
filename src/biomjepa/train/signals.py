"""SIGTERM and SIGINT end a training run at a step boundary, with its state saved.

A batch system (or Ctrl-C) stopping a run mid-step, or mid-save, would lose the steps since the last
checkpoint. Inside :class:`GracefulStop` the first SIGTERM/SIGINT only records the signal; the
loop finishes its step, saves the state and returns. A second signal restores the previous
handlers and re-raises itself, i.e. stops at once (the state files are written atomically, so this
leaves the previous state intact). Handlers can only be installed in the main thread; elsewhere
the block runs with the process' handlers unchanged. A signal that arrived before the block, while a command
recorded it to act on at a safe point (:func:`biomjepa._stops.stops_at_safe_points`: setting the run up), is taken
over: the run stops at its first step boundary. A signal the process was started with set to
*ignored* (``SIG_IGN``: SIGINT of a job started with ``&`` by a non-interactive shell, or under a
batch system that shields its jobs from Ctrl-C) stays ignored, as Python itself leaves it: the run
does not depend on, nor change, the disposition it inherited.

:func:`last_stop_signal` tells the caller (the command line, which must not export a stopped run
and exits with :func:`stop_exit_code`) which signal ended the most recent block. The first signal is acknowledged at once (a warning: the run
finishes its step and saves); the report of the stop is said once at the end, by the loop
(:func:`log_stopped`) or, where it says it itself, by its caller (the command line).
"""

from __future__ import annotations

import logging
import signal
import threading

logger = logging.getLogger(__name__)
SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: exit code of a run that stopped because another rank received the signal (BSD ``EX_TEMPFAIL``: try again)
EX_TEMPFAIL = 75
_last: dict[str, int | None] = {"signum": None}


def last_stop_signal() -> int | None:
    """The signal that ended the most recent :class:`GracefulStop` block of this process (None: none did)."""
    return _last["signum"]


def stop_exit_code(signum: int | None) -> int:
    """The exit code of a run stopped by ``signum``: ``128 + signum`` as a shell reports a process killed
    by it (143 for SIGTERM, 130 for SIGINT), or :data:`EX_TEMPFAIL` (75) when the signal reached another rank."""
    return 128 + int(signum) if signum is not None else EX_TEMPFAIL


class GracefulStop:
    """Context manager: ``signum`` is set when SIGTERM/SIGINT arrived; the previous handlers come back on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> GracefulStop:
        from .._stops import take_over_stop

        _last["signum"] = None
        self.signum = take_over_stop()  # one a command recorded while setting the run up: stop at the first boundary
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:  # inherited as ignored: keep it so
                    continue
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        from .._stops import give_back_stop

        _last["signum"] = self.signum
        self._restore()
        give_back_stop()

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "a stop signal on another rank"

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:  # the second one: stop now, as the previous handler would
            self._restore()
            signal.raise_signal(signum)
            return
        self.signum = signum
        logger.warning("received %s: finishing the current step, then saving the state and stopping "
                       "(send it again to stop at once, without saving)", signal.Signals(signum).name)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()


def log_stopped(stop: GracefulStop, step: int, checkpoints, *, asked: bool, resumable: bool,
                caller_says: bool = False) -> None:
    """Say why a run ended before its last step: the caller's ``stop_when``, or a signal (with the advice to
    resume where the run directory is kept: ``resumable``). ``caller_says``: the caller reports a signal stop
    itself (the command line's one line, :func:`biomjepa.cli.train.run_train`), so it is only logged at DEBUG
    level here, not said twice."""
    if asked and stop.signum is None:
        logger.info("stopped after step %d: the caller's stop condition (stop_when) was met", step)
    elif caller_says:
        logger.debug("stopped on %s after step %d; the caller reports it", stop.name, step)
    elif resumable:
        logger.warning("stopped on %s after step %d; the state is saved in %s: run the same command again to "
                       "resume", stop.name, step, checkpoints)
    else:
        logger.warning("stopped on %s after step %d", stop.name, step)
