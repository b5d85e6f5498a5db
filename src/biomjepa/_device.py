"""Device and precision choice shared by inference and training."""

from __future__ import annotations

import contextlib
import logging
import os

logger = logging.getLogger("biomjepa")


def resolve_device(device: str | None = "auto"):
    """``"auto"`` → CUDA if available else CPU; an explicit CUDA request without CUDA is an error."""
    import torch

    from ._settings import check_device, settings

    device = settings.device if device in (None, "auto") and settings.device != "auto" else device
    if device is not None:
        device = check_device(device, "device")
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    check_available(dev, f"device={device!r}", "Use device='cpu' or 'auto'")
    return dev


def check_available(dev, asked: str, fix: str) -> None:
    """A ``RuntimeError`` when the torch device ``dev`` cannot be used here (CUDA without CUDA, a GPU index past
    the GPUs, MPS off Apple silicon): ``asked`` names what was asked in the caller's words (``device='cuda'``,
    ``loop.device=cuda``), ``fix`` what to set instead (``"Use device='cpu' or 'auto'"``)."""
    import torch

    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{asked} was requested but CUDA is not available (torch {torch.__version__}, CUDA build: "
                           f"{torch.version.cuda}). {fix}, or install a CUDA build of torch.")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"{asked} was requested but this machine has {torch.cuda.device_count()} CUDA device(s) "
                           f"(indices 0..{torch.cuda.device_count() - 1}). {fix}, or a GPU index that exists.")
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            why = "this torch was not built with MPS" if mps is None or not mps.is_built() else \
                "MPS needs macOS 12.3+ on Apple silicon"
            raise RuntimeError(f"{asked} was requested but the MPS (Apple GPU) backend is not available here ({why}). "
                               f"{fix}.")


def autocast(device, *, enabled: bool = True):
    """The package's one precision choice: bf16 autocast on CUDA; a no-op context (fp32) on CPU.

    ``enabled=False`` (training with ``bf16: false``) gives the no-op context on CUDA too. Inference
    (:mod:`biomjepa.nn.inference`), fine-tuning and pretraining all enter it; :func:`dtype_label`
    names what it chose.
    """
    import torch

    if device.type == "cuda" and enabled:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def dtype_label(device) -> str:
    """The precision :func:`autocast` runs inference in on ``device``, as recorded in ``params["dtype"]``."""
    return "bfloat16-autocast" if device.type == "cuda" else "float32"


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from ``/proc/stat``, or ``None`` where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def auto_threads(limit: int, *, window: float = 0.1) -> int:
    """Torch threads for ``bj.settings.num_threads = "auto"``: the cores other processes leave idle.

    The busy share of all CPUs is read from ``/proc/stat`` over ``window`` seconds while this process
    sleeps, so it counts other processes only; the result is between 1 and ``limit`` (torch's own
    thread count). Without ``/proc/stat`` (macOS, Windows) it is ``limit``.
    """
    import time

    before = _cpu_ticks()
    if before is None:
        return limit
    time.sleep(window)
    after = _cpu_ticks()
    if after is None or after[1] <= before[1]:
        return limit
    n_cpu = os.cpu_count() or 1
    busy_cores = n_cpu * (after[0] - before[0]) / (after[1] - before[1])
    idle = int(min(_usable_cores(), n_cpu - busy_cores) + 0.5)  # a core at least half idle counts
    return max(1, min(limit, idle))


@contextlib.contextmanager
def cpu_threads(device):
    """Run the body with ``bj.settings.num_threads`` torch threads on the CPU; torch's count is put back.

    A no-op for a GPU ``device`` and for ``num_threads=None``.
    """
    import torch

    from ._settings import settings

    wanted = settings.num_threads
    if device.type != "cpu" or wanted is None:
        yield
        return
    before = torch.get_num_threads()
    n = auto_threads(before) if wanted == "auto" else int(wanted)
    logger.debug("torch threads: %d (bj.settings.num_threads=%r)", n, wanted)
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
