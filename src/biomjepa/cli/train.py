"""``biomjepa train CONFIG`` and ``python -m biomjepa.train CONFIG`` (or ``torchrun ... -m biomjepa.train``)."""

from __future__ import annotations

import argparse
import logging

from .errors import Stopped, check_usage, run_command
from .types import TRAIN_PRESETS, train_config

#: the library's argument names in messages -> the options of both training commands
TRAIN_FLAGS = {"^an override must": "--set must", "^override ": "--set ", "overwrite=True": "--export-overwrite"}
#: help of the arguments shared by ``biomjepa train`` and ``python -m biomjepa.train``
CONFIG_HELP = f"YAML config file or preset name ({', '.join(TRAIN_PRESETS)}); see biomjepa/configs/*.yaml"
SET_HELP = "override a config key, value parsed as YAML, e.g. --set corpus=data/*.h5ad (repeatable)"
EXPORT_HELP = "after training, export the teacher encoder as an inference checkpoint to DIR"
EXPORT_OVERWRITE_HELP = "replace DIR when it already holds a checkpoint (refused otherwise, before training)"
TRAIN_EPILOG = ("exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments, "
                "missing files, an existing --export DIR), 128+N stopped by signal N (143 SIGTERM, 130 SIGINT; 75 "
                "when another rank got it): the state is saved and nothing is exported; run the same command "
                "again to resume")


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``train`` subcommand on an ``argparse`` subparsers object; its ``func`` is :func:`run_train_command`."""
    t = subparsers.add_parser(
        "train", help="pretrain from a YAML config or preset (see biomjepa/configs)", epilog=TRAIN_EPILOG,
        description="Pretrain BioM-JEPA (block-level JEPA) as `python -m biomjepa.train` does; a run "
        "resumes from its latest checkpoint. For many GPUs use `torchrun --nproc_per_node=N -m "
        "biomjepa.train CONFIG ...`. Prints the run directory.")
    t.add_argument("config", type=train_config, help=CONFIG_HELP)
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help=SET_HELP)
    t.add_argument("--export", metavar="DIR", default=None, help=EXPORT_HELP)
    t.add_argument("--export-overwrite", action="store_true", help=EXPORT_OVERWRITE_HELP)
    t.set_defaults(func=run_train_command, parser=t, flags=TRAIN_FLAGS)
    return t


def build_train_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m biomjepa.train``."""
    parser = argparse.ArgumentParser(prog="python -m biomjepa.train", description="Pretrain BioM-JEPA.",
                                     epilog=TRAIN_EPILOG)
    parser.add_argument("config", help=CONFIG_HELP)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    parser.add_argument("--export", metavar="DIR", help=EXPORT_HELP)
    parser.add_argument("--export-overwrite", action="store_true", help=EXPORT_OVERWRITE_HELP)
    return parser


def train_main(argv: list[str] | None = None) -> int:
    """Run ``python -m biomjepa.train`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code
    (usage errors exit 2). Errors are logged with their traceback (training logs at INFO level)."""
    parser = build_train_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_command(lambda: run_train(parser, args.config, args.overrides, args.export, args.export_overwrite),
                       prog=parser.prog, verbose=True, flags=TRAIN_FLAGS)


def run_train_command(args: argparse.Namespace) -> None:
    """Run ``biomjepa train``: :func:`run_train` with the subcommand's arguments."""
    run_train(args.parser, args.config, args.set or [], args.export, args.export_overwrite)


def run_train(parser: argparse.ArgumentParser, config: str, overrides: list[str], export_dir: str | None,
              export_overwrite: bool) -> None:
    """Pretrain from ``config`` + ``overrides``, export the teacher to ``export_dir`` (rank 0), print the run directory.

    An ``export_dir`` that already holds a checkpoint, without ``export_overwrite``, is a usage error
    (``parser.error``, exit code 2) raised before training, not after hours of it. A run stopped by
    SIGTERM/SIGINT (on any rank) has its state saved and is *not* exported: :class:`~.errors.Stopped`
    with exit code ``128 + signum`` (75 on a rank the signal did not reach), so a batch system sees
    that the work is not done and the same command resumes it. That line (the state file saved, and how to
    resume) is the one report of the stop: the loop only acknowledges the signal when it arrives.
    """
    import os

    from ..train import export, load_config, pretrain
    from ..train.checkpoint import check_export_dir

    if export_dir:
        check_usage(parser, lambda: check_export_dir(export_dir, overwrite=export_overwrite),
                    errors=(FileExistsError,), flags=TRAIN_FLAGS)
    cfg = load_config(config, overrides)
    hook = None
    if cfg.probe.path is not None:
        from ..bench.probe import probe_hook

        hook = probe_hook(cfg)
    run_dir = pretrain(cfg, on_checkpoint=hook, report_stop=False)  # a stop is said once, by _raise_if_stopped
    print(run_dir, flush=True)
    _raise_if_stopped(cfg, run_dir, export_dir)
    if export_dir and int(os.environ.get("RANK", "0")) == 0:
        export(run_dir, export_dir, overwrite=export_overwrite)


def _raise_if_stopped(cfg, run_dir, export_dir: str | None) -> None:
    """:class:`~.errors.Stopped` when the run ended before its last step (a stop signal on some rank)."""
    import re

    from ..train.checkpoint import latest_state
    from ..train.signals import last_stop_signal, stop_exit_code

    signum = last_stop_signal()
    latest = latest_state(run_dir)
    match = re.fullmatch(r"step_(\d+)\.pt", latest.name) if latest is not None else None
    step = int(match.group(1)) if match else 0
    end = min(cfg.run.steps, cfg.run.stop_at or cfg.run.steps)
    if signum is None and step >= end:
        return
    import signal

    name = signal.Signals(signum).name if signum is not None else "a stop signal on another rank"
    skipped = f"; nothing was exported to {export_dir}" if export_dir else ""
    saved = f"the state of step {step} is saved in {latest}" if latest is not None else f"no state was saved yet in {run_dir}"
    raise Stopped(f"stopped on {name} after step {step} of {end}: {saved}{skipped}. Run the same command again to "
                  "resume.", stop_exit_code(signum))
