"""The one error handler of every command: an exception becomes an exit code and a message on stderr.

Exit codes: 0 success, 1 error while running (``PROG: error: MESSAGE`` on stderr), 2 usage error
(``argparse``: bad arguments, missing files, or a check run before any work), and a command's own
code for work stopped on purpose and left to be resumed (:class:`Stopped`: ``biomjepa train`` stopped
by SIGTERM/SIGINT exits ``128 + signum``). A command that writes files says what a stop left (:func:`stopped`,
143/130); any other Ctrl-C is one line and exit code 130, not a traceback. The library names
its Python arguments in its messages (``overwrite=True``), never a command's options; a command
passes ``flags``, a mapping of those phrases to its own options, so its user reads ``--overwrite``.
Warnings raised while a command runs go the same way: each distinct one printed once, as
``PROG: warning: MESSAGE`` in the command's options, without Python's ``file:line:`` and source line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping

#: exceptions that end a command with exit code 1 and a one-line message (anything else is a bug: traceback)
RUNTIME_ERRORS = (ValueError, KeyError, TypeError, RuntimeError, OSError)


def error_message(err: BaseException, flags: Mapping[str, str] | None = None) -> str:
    """The text of ``err`` for a command's user: a ``KeyError``'s message unquoted, Python argument
    names replaced by the command's options (:func:`in_flags`)."""
    return in_flags(str(err.args[0] if isinstance(err, KeyError) and err.args else err), flags)


def in_flags(message: str, flags: Mapping[str, str] | None = None) -> str:
    """``message`` with the library's Python phrases replaced by a command's options (``flags``, in order; a
    phrase starting with ``^`` only at the start, one starting with ``~`` a regular expression whose flag may
    refer to its groups, ``\\1``)."""
    import re

    for phrase, flag in (flags or {}).items():
        if phrase.startswith("~"):
            message = re.sub(phrase[1:], flag, message)
        elif phrase.startswith("^"):
            message = flag + message[len(phrase) - 1 :] if message.startswith(phrase[1:]) else message
        else:
            message = message.replace(phrase, flag)
    return message


@contextlib.contextmanager
def plain_warnings(prog: str, flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """While the block runs, each distinct warning is printed once on stderr as ``PROG: warning: MESSAGE``
    in the command's options (``flags``), not as Python's ``FILE:LINE: UserWarning: ...`` plus a source line
    (the same warning raised from two places of the library is one message to the command's user). The
    warning filters (``python -W``) still decide which warnings are shown."""
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = in_flags(str(message), flags)
        if text not in seen:
            seen.add(text)
            print(f"{prog}: warning: {text}", file=sys.stderr)

    with warnings.catch_warnings():  # puts the previous showwarning back after the block
        warnings.showwarning = show
        yield


class Stopped(Exception):
    """Raised by a command whose work was stopped on purpose (a stop signal) and can be resumed:
    ``PROG: MESSAGE`` on stderr and exit code ``code`` (not 0: the work is not done)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = int(code)


def stop_signal(err: KeyboardInterrupt) -> signal.Signals:
    """The signal behind ``err``: SIGTERM where the package raised it for one (:func:`biomjepa._stops.sigterm_interrupts`
    and the adapt loop name it in the message), else SIGINT (Ctrl-C)."""
    return signal.SIGTERM if "SIGTERM" in str(err) else signal.SIGINT


def stopped(err: KeyboardInterrupt, left: str) -> Stopped:
    """The :class:`Stopped` of a command that ``err`` (a stop signal) ended: ``stopped by SIGTERM; LEFT`` (what is
    on disk now), exit code ``128 + signum`` (143 for SIGTERM, 130 for SIGINT)."""
    sig = stop_signal(err)
    return Stopped(f"stopped by {sig.name}; {left}", 128 + sig)


def run_command(func: Callable[[], object], *, prog: str, verbose: bool = False,
                flags: Mapping[str, str] | None = None) -> int:
    """Run ``func()``; 0 when it returns, 1 with ``PROG: error: MESSAGE`` on stderr when it raises one of
    :data:`RUNTIME_ERRORS` (with the traceback logged too when ``verbose``), ``err.code`` for :class:`Stopped`,
    ``128 + signum`` with ``PROG: stopped by SIGINT.`` for a stop signal no command said more about.
    Its warnings are printed once each, in ``flags`` (:func:`plain_warnings`)."""
    try:
        with plain_warnings(prog, flags):
            func()
    except Stopped as err:
        print(f"{prog}: {error_message(err, flags)}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt as err:  # one line, not a traceback
        print(f"{prog}: stopped by {stop_signal(err).name}.", file=sys.stderr)
        return 128 + stop_signal(err)
    except RUNTIME_ERRORS as err:
        if verbose:
            logging.getLogger("biomjepa").exception("traceback")
        print(f"{prog}: error: {error_message(err, flags)}", file=sys.stderr)
        return 1
    return 0


def check_usage(parser: argparse.ArgumentParser, check: Callable[[], object],
                errors: tuple[type[BaseException], ...] = (ValueError, OSError),
                flags: Mapping[str, str] | None = None) -> None:
    """Run ``check()`` before any work; one of ``errors`` is a usage error (``parser.error``: exit code 2)."""
    try:
        with plain_warnings(parser.prog, flags):
            check()
    except errors as err:
        parser.error(error_message(err, flags))
