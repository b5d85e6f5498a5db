"""``biomjepa train CONFIG`` and ``python -m biomjepa.train CONFIG`` (or ``torchrun ... -m biomjepa.train``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from pathlib import Path

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
    resume) is the one report of the stop: the loop only acknowledges the signal when it arrives. A stop while the
    run is set up (the corpus prepared) is one line too (:func:`stops_said`), and a wrong pin in ``model.init_from``
    is a usage error before the corpus is touched.
    """
    from ..train import export, load_config, pretrain
    from ..train.checkpoint import check_export_dir
    from ..train.setup import check_init_from

    if export_dir:
        check_usage(parser, lambda: check_export_dir(export_dir, overwrite=export_overwrite),
                    errors=(FileExistsError,), flags=TRAIN_FLAGS)
    cfg = load_config(config, overrides)
    check_usage(parser, lambda: check_init_from(cfg.model.init_from), flags=TRAIN_FLAGS)  # a wrong pin, before the corpus
    hook = None
    if cfg.probe.path is not None:
        from ..bench.probe import probe_hook

        hook = probe_hook(cfg)
    with stops_said(cfg, export_dir):  # a stop while the run is set up: one line, what this command made removed
        run_dir = pretrain(cfg, on_checkpoint=hook, report_stop=False)  # a stop in the loop: _raise_if_stopped
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


@contextlib.contextmanager
def stops_said(cfg, export_dir: str | None):
    """Run the training with SIGTERM/SIGINT acted on at safe points (:func:`biomjepa._stops.stops_at_safe_points`:
    between the corpus files' blocks while it is prepared; the loop takes a stop over at its first step boundary). A
    stop before the loop ends the command with :class:`~.errors.Stopped` (``stopped by SIGTERM; ...``, exit 143, 130
    for SIGINT), the run directory and corpus cache this command made (nothing trained in them) removed, a cache
    being prepared left without its temporary shard, and every lock given back."""
    from .._stops import stops_at_safe_points
    from .errors import stopped

    run_dir = _setup_run_dir(cfg)
    cache = _own_cache(cfg, run_dir)
    made = {d: kind for d, kind in ((cache, "cache"), (run_dir, "run")) if d is not None and not os.path.lexists(d)
            and int(os.environ.get("RANK", "0")) == 0}  # rank 0 makes them (and removes them)
    if run_dir in made and cache is not None and cache.is_relative_to(run_dir):
        made.pop(cache, None)  # removed with the run directory
    try:
        with stops_at_safe_points():
            yield
    except KeyboardInterrupt as err:
        raise stopped(err, _left(run_dir, made, export_dir)) from None


def _setup_run_dir(cfg) -> Path:
    from ..train.setup import run_dir_of

    return Path(os.path.abspath(run_dir_of(cfg)))


def _own_cache(cfg, run_dir: Path) -> Path | None:
    """The corpus cache the run prepares (``data.cache_dir``, else ``RUN_DIR/corpus``); ``None`` for a prepared one."""
    corpus = cfg.data.corpus
    if corpus is None or (isinstance(corpus, str) and (Path(corpus) / "manifest.json").is_file()):
        return None
    return Path(os.path.abspath(cfg.data.cache_dir)) if cfg.data.cache_dir else run_dir / "corpus"


def _left(run_dir: Path, made: dict[Path, str], export_dir: str | None) -> str:
    """What a stop before (or after) the training loop left: the saved state to resume from, else nothing, the
    directories this command made removed (each under its own lock: one another process took is left)."""
    from ..train.checkpoint import latest_state

    latest = latest_state(run_dir) if run_dir.is_dir() else None
    skipped = f"; nothing was exported to {export_dir}" if export_dir else ""
    if latest is not None:
        return f"the latest saved state is {latest}{skipped}. Run the same command again to resume."
    removed = [str(d) for d, kind in made.items() if _remove_made(d, kind)]
    gone = f" ({' and '.join(removed)}, made by this command, removed)" if removed else ""
    return f"nothing was trained{gone}{skipped}. Run the same command again to start."


def _remove_made(path: Path, kind: str) -> bool:
    """Remove ``path``, the corpus cache or run directory (``kind``) this command made, unless another process holds
    its lock now; whether it is gone."""
    import shutil

    from .._files import LockBusy, lock
    from ..train.runlock import RunDirectoryBusy, lock_run_dir, unlock_run_dir

    if not path.is_dir():
        return False
    try:
        if kind == "cache":
            with lock(path / ".lock", what=f"The corpus cache {path}", fix="It is in use."):
                shutil.rmtree(path, ignore_errors=True)
        else:
            lock_run_dir(path)
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                unlock_run_dir(path)
    except (LockBusy, RunDirectoryBusy, OSError):
        return False
    return not path.exists()
