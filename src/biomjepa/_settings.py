"""Global, user-adjustable settings (``bj.settings``)."""

from __future__ import annotations

import logging
import numbers
import os
import re
from pathlib import Path
from typing import Literal

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
PROGRESS_DELAY = 2.0  # seconds a loop runs before its progress bar appears


def check_device(value, name: str = "device") -> str:
    """``value`` as a device string, or a ValueError naming ``name`` and the accepted values."""
    text = str(value) if type(value).__name__ == "device" else value  # a torch.device
    if not isinstance(text, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", text.strip().lower()):
        raise ValueError(
            f"{name}={value!r} is not a device; use one of 'auto', 'cpu', 'cuda', 'cuda:N' (N = GPU index, "
            "e.g. 'cuda:0') or 'mps'."
        )
    return text.strip().lower()


PRECISIONS = ("fp32", "bf16", "auto")
#: read-only attributes of ``bj.settings`` → the setting to set instead
READ_ONLY = {"show_progress": "progress"}


def check_precision(value, name: str = "precision") -> str:
    """``value`` as one of :data:`PRECISIONS`, or a ValueError naming ``name`` and the accepted values."""
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in PRECISIONS:
        raise ValueError(f"{name}={value!r} is not a precision; use 'fp32', 'bf16' or 'auto' (bf16 on CUDA and on "
                         "CPUs with bf16 matrix units, float32 elsewhere).")
    return text


class Settings:
    """Package-wide defaults.

    Attributes
    ----------
    device
        ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``;
        anything else is refused when set.
    batch_size
        Default number of cells per forward pass in :func:`biomjepa.tl.embed`.
    max_batch_tokens
        A batch is also cut when cells × longest cell would exceed this many tokens, which bounds
        activation memory for long cells (results do not depend on it).
    cachedir
        Where downloaded checkpoints are stored (``$BIOMJEPA_CACHE`` or ``~/.cache/biomjepa``).
    checkpoint
        Default checkpoint: a registry name, a local directory, or an ``http(s)://`` URL; ``"NAME#sha256=HEX"``,
        ``"DIR#sha256=HEX"`` or ``"URL#sha256=HEX"`` pins the whole checkpoint (:func:`biomjepa.model.checkpoint_sha256`).
        A value that is no reference (``None``, a number, an empty string, a malformed pin) is refused when set.
    verbosity
        0 errors, 1 warnings (default), 2 info, 3 debug.
    progress
        ``True`` (default): tqdm progress bars for the loops that take more than a few seconds
        (:func:`biomjepa.tl.embed` and the other ``tl`` tools, checkpoint downloads, ``biomjepa demo`` and
        ``biomjepa embed``); a bar appears once its loop has run for :data:`PROGRESS_DELAY` seconds (text
        on stderr; a widget in a notebook that has ipywidgets). ``bj.settings.progress = False`` turns
        them all off (``--no-progress`` on the command line).
    num_threads
        CPU threads of torch while a ``tl`` tool runs the model on the CPU; torch's own setting is put
        back afterwards. ``"auto"`` (default): the CPU cores that other processes leave idle, at least 1
        and at most ``torch.get_num_threads()`` (:func:`biomjepa._device.auto_threads`); an integer fixes
        the count; ``None`` leaves torch's setting alone. Not torch's default (one thread per core)
        because on cores that other work keeps busy torch's threads wait for each other: ``bj.tl.embed``
        of the 1,074 bundled pancreas cells on 2 cores kept busy by a training job took 464 s with 1
        thread and 2,876 s with 2 (6.2× slower; ``docs/performance.md``).
    precision
        What the encoder multiplies in for inference (every ``tl`` tool, ``biomjepa embed``, the training
        probe): ``"fp32"`` (default: float32, the same embeddings on every machine, the stored golden values),
        ``"bf16"`` (bf16 autocast: GEMMs in bf16, the residual stream, pooling and readout in float32) or
        ``"auto"`` (bf16 on CUDA and on a CPU with bf16 matrix units, AMX or AVX512-BF16, measured faster
        than float32 once per process; float32 elsewhere; :func:`biomjepa._device.resolve_precision`).
        On a 2-core Xeon with AMX bf16 multiplies 3-7x faster and embeds the bundled model about 1.5x faster,
        per-cell cosine ≥ 0.994 (mean 0.998) to float32 (``docs/performance.md``). What was used is recorded in ``uns[...]["params"]["precision"]``.
        Pretraining has its own ``loop.precision`` (default ``"auto"``).
    download_timeout
        Seconds a checkpoint download (all its files) may take before it stops with an error
        (default 1800); a server that stops sending is given up after at most 60 s.
    """

    def __init__(self) -> None:
        self._device: str = "auto"
        self._batch_size: int = 64
        self._max_batch_tokens: int = 32_768
        # an empty $BIOMJEPA_CACHE is unset (as POSIX tools read empty variables), not the working directory
        self._cachedir = Path(os.environ.get("BIOMJEPA_CACHE") or Path.home() / ".cache" / "biomjepa").expanduser()
        self.checkpoint: str = "biomjepa-mini"
        self._verbosity: int = 1
        self._download_timeout: float = 1800.0
        self._progress: bool = True
        self._num_threads: int | str | None = "auto"
        self._precision: str = "fp32"

    @property
    def device(self) -> str:
        return self._device

    @device.setter
    def device(self, value: str) -> None:
        self._device = check_device(value, "bj.settings.device")

    def __setattr__(self, name: str, value) -> None:
        """Refuse a name that is no setting (``bj.settings.cache_dir = ...`` would otherwise do nothing), and a
        read-only one (``show_progress``, which reports ``progress``) in words instead of Python's own message."""
        if name.startswith("_") or not self.__dict__.get("_sealed"):
            return super().__setattr__(name, value)
        known = sorted({n for n in dir(type(self)) if not n.startswith("_") and n not in READ_ONLY}
                       | {n for n in self.__dict__ if not n.startswith("_")})
        if name in READ_ONLY:
            raise AttributeError(f"bj.settings.{name} cannot be set: it reports `bj.settings.{READ_ONLY[name]}`. Set "
                                 f"`bj.settings.{READ_ONLY[name]} = {value!r}` instead. The settings are {known}.")
        if not hasattr(type(self), name) and name not in self.__dict__:
            import difflib

            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6) or [
                k for k in known if k.replace("_", "") == name.replace("_", "")]
            hint = f"Did you mean `bj.settings.{close[0]}`? " if close else ""
            raise AttributeError(f"bj.settings has no setting {name!r}: {hint}The settings are {known}.")
        return super().__setattr__(name, value)

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._batch_size = _positive_int("bj.settings.batch_size", value, "cells per forward pass, e.g. 64")

    @property
    def max_batch_tokens(self) -> int:
        return self._max_batch_tokens

    @max_batch_tokens.setter
    def max_batch_tokens(self, value: int) -> None:
        self._max_batch_tokens = _positive_int("bj.settings.max_batch_tokens", value, "tokens per batch, e.g. 32768")

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: Literal["fp32", "bf16", "auto"]) -> None:
        self._precision = check_precision(value, "bj.settings.precision")

    @property
    def checkpoint(self) -> str:
        return self._checkpoint

    @checkpoint.setter
    def checkpoint(self, value: str | os.PathLike) -> None:
        from ._references import check_form

        self._checkpoint = check_form(value, "bj.settings.checkpoint")

    @property
    def cachedir(self) -> Path:
        return self._cachedir

    @cachedir.setter
    def cachedir(self, value: str | os.PathLike) -> None:
        if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
            raise ValueError(f"bj.settings.cachedir must be a directory path, got {value!r} (an empty path would put "
                             "downloads in the working directory).")
        self._cachedir = Path(value).expanduser()

    @property
    def verbosity(self) -> int:
        return self._verbosity

    @verbosity.setter
    def verbosity(self, value: Literal[0, 1, 2, 3]) -> None:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value not in _LEVELS:
            raise ValueError(f"bj.settings.verbosity must be one of the integers 0 (errors), 1 (warnings), 2 (info), "
                             f"3 (debug); got {value!r}.")
        self._verbosity = int(value)
        logging.getLogger("biomjepa").setLevel(_LEVELS[self._verbosity])

    @property
    def download_timeout(self) -> float:
        return self._download_timeout

    @download_timeout.setter
    def download_timeout(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < float("inf"):
            raise ValueError(
                f"bj.settings.download_timeout must be a positive, finite number of seconds; got {value!r}."
            )
        self._download_timeout = float(value)

    @property
    def progress(self) -> bool:
        return self._progress

    @progress.setter
    def progress(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise ValueError(f"bj.settings.progress must be True or False; got {value!r}.")
        self._progress = value

    @property
    def show_progress(self) -> bool:
        """Whether long loops show a tqdm progress bar (``bj.settings.progress``)."""
        return self._progress

    @property
    def num_threads(self) -> int | str | None:
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int | Literal["auto"] | None) -> None:
        fixed = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
        if not (fixed or value is None or value == "auto"):
            raise ValueError(
                "bj.settings.num_threads must be 'auto', a positive integer, or None (keep torch's own "
                f"setting); got {value!r}."
            )
        cores = _cpu_cores()
        if fixed and value > cores:
            raise ValueError(
                f"bj.settings.num_threads={value} is more than the {cores} CPU cores this process may use: threads "
                f"beyond the cores only wait for each other (many times slower). Pass at most {cores}, 'auto' (the "
                "idle cores) or None."
            )
        self._num_threads = int(value) if fixed else value

    def __repr__(self) -> str:
        return (
            f"biomjepa settings: device={self.device!r}, batch_size={self.batch_size}, "
            f"max_batch_tokens={self.max_batch_tokens}, cachedir={str(self.cachedir)!r}, checkpoint={self.checkpoint!r}, "
            f"verbosity={self.verbosity}, progress={self.progress}, num_threads={self.num_threads!r}, "
            f"precision={self.precision!r}"
        )


def _positive_int(name: str, value, what: str) -> int:
    """``value`` as an integer >= 1, or a ValueError naming the setting (``-1``, ``0.5``, ``"8k"`` are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer ({what}), got {value!r}.")
    return int(value)


settings = Settings()
settings._sealed = True  # from here on an unknown setting's name is refused (Settings.__setattr__)


def _cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity where the platform tells it)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
