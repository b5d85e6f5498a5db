"""The one error handler of every command: an exception becomes an exit code and a message on stderr.

Exit codes: 0 success, 1 error while running (``PROG: error: MESSAGE`` on stderr), 2 usage error
(``argparse``: bad arguments, missing files, or a check run before any work), and a command's own
code for work stopped on purpose and left to be resumed (:class:`Stopped`: ``biomjepa train`` stopped
by SIGTERM/SIGINT exits ``128 + signum``). The library names
its Python arguments in its messages (``overwrite=True``), never a command's options; a command
passes ``flags``, a mapping of those phrases to its own options, so its user reads ``--overwrite``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping

#: exceptions that end a command with exit code 1 and a one-line message (anything else is a bug: traceback)
RUNTIME_ERRORS = (ValueError, KeyError, TypeError, RuntimeError, OSError)


def error_message(err: BaseException, flags: Mapping[str, str] | None = None) -> str:
    """The text of ``err`` for a command's user: a ``KeyError``'s message unquoted, Python argument
    names replaced by the command's options (``flags``; a phrase starting with ``^`` only at the start, one
    starting with ``~`` a regular expression whose flag may refer to its groups, ``\\1``)."""
    import re

    message = str(err.args[0] if isinstance(err, KeyError) and err.args else err)
    for phrase, flag in (flags or {}).items():
        if phrase.startswith("~"):
            message = re.sub(phrase[1:], flag, message)
        elif phrase.startswith("^"):
            message = flag + message[len(phrase) - 1 :] if message.startswith(phrase[1:]) else message
        else:
            message = message.replace(phrase, flag)
    return message


class Stopped(Exception):
    """Raised by a command whose work was stopped on purpose (a stop signal) and can be resumed:
    ``PROG: MESSAGE`` on stderr and exit code ``code`` (not 0: the work is not done)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = int(code)


def run_command(func: Callable[[], object], *, prog: str, verbose: bool = False,
                flags: Mapping[str, str] | None = None) -> int:
    """Run ``func()``; 0 when it returns, 1 with ``PROG: error: MESSAGE`` on stderr when it raises one of
    :data:`RUNTIME_ERRORS` (with the traceback logged too when ``verbose``), ``err.code`` for :class:`Stopped`."""
    try:
        func()
    except Stopped as err:
        print(f"{prog}: {error_message(err, flags)}", file=sys.stderr)
        return err.code
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
        check()
    except errors as err:
        parser.error(error_message(err, flags))
