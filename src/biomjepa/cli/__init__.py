"""The command lines of biomjepa: ``biomjepa demo|embed|train|graph|bench``, ``python -m biomjepa.train``
and ``python -m biomjepa.embed`` (also under ``torchrun``).

One module per command: :mod:`~biomjepa.cli.demo`, :mod:`~biomjepa.cli.embed` (one file),
:mod:`~biomjepa.cli.atlas` (``embed ... --store``), :mod:`~biomjepa.cli.train`, :mod:`~biomjepa.cli.graph`,
:mod:`~biomjepa.cli.bench`; the ``biomjepa`` parser in :mod:`~biomjepa.cli.app`, argument types in
:mod:`~biomjepa.cli.types` and the one error handler in :mod:`~biomjepa.cli.errors`. Only this package
parses arguments or turns exceptions into exit codes.

Exit codes: 0 success, 1 runtime error (message on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

from .app import build_parser, main

__all__ = ["build_parser", "main"]
