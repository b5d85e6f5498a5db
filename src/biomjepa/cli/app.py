"""The ``biomjepa`` parser (one subcommand per module of :mod:`biomjepa.cli`) and :func:`main`."""

from __future__ import annotations

import argparse
import logging
import sys

from .errors import run_command
from .types import EPILOG


def build_parser() -> argparse.ArgumentParser:
    """The ``biomjepa`` argument parser with its ``demo``, ``embed``, ``train``, ``bench`` and ``graph`` subcommands."""
    from .adapt import add_adapt_parser
    from .demo import add_demo_parser
    from .embed import add_embed_parser
    from .graph import add_graph_parser
    from .train import add_train_parser

    p = argparse.ArgumentParser(prog="biomjepa", description="BioM-JEPA single-cell foundation model.",
                                epilog=EPILOG + ". `biomjepa COMMAND --help` explains a command.")
    _global_options(p, default=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo_parser(sub)
    add_embed_parser(sub)
    add_train_parser(sub)
    add_graph_parser(sub)
    add_adapt_parser(sub)
    try:
        from .bench import add_bench_parser

        add_bench_parser(sub)
    except ImportError:  # pragma: no cover - bench extras not installed
        pass
    for command in sub.choices.values():  # also after the command, as `embed ... --store` (atlas mode) takes them
        _global_options(command, default=argparse.SUPPRESS)
    return p


def _global_options(p: argparse.ArgumentParser, default) -> None:
    """``-v`` and ``--no-progress``, on ``biomjepa`` and on each command (``default=argparse.SUPPRESS`` there, so
    that leaving them out after the command keeps what was given before it)."""
    p.add_argument("-v", "--verbose", action="store_true", default=default, help="log what is done (INFO level)")
    p.add_argument("--no-progress", action="store_true", default=default,
                   help="no progress bars (shown on stderr by default for steps longer than 2 s; "
                   "bj.settings.progress in Python)")


def main(argv: list[str] | None = None) -> int:
    """Run ``biomjepa`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code (usage errors exit 2)."""
    from .atlas import atlas_argv
    from .atlas import main as atlas_main

    atlas = atlas_argv(sys.argv[1:] if argv is None else list(argv))  # `embed IN... --store OUT.zarr`
    if atlas is not None:
        return atlas_main(atlas)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import biomjepa as bj

    if args.verbose:
        bj.settings.verbosity = 2
    if args.no_progress:
        bj.settings.progress = False
    return run_command(lambda: args.func(args), prog=f"biomjepa {args.command}", verbose=args.verbose,
                       flags=getattr(args, "flags", None))
