"""Device and precision choice shared by inference and training."""

from __future__ import annotations

import contextlib
import functools
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


def autocast(device, precision: str | None = None):
    """The package's one precision choice: bf16 autocast where ``precision`` resolves to ``"bf16"``, else a
    no-op context (float32).

    ``precision`` is ``"fp32"``, ``"bf16"`` or ``"auto"`` (:func:`resolve_precision`); ``None`` means
    ``bj.settings.precision``. Inference (:mod:`biomjepa.nn.inference`), fine-tuning and pretraining
    (``loop.precision``) all enter it; :func:`dtype_label` names what it chose. Under it the encoder's
    GEMMs run in bf16 while its residual stream, pooling and readout stay float32.
    """
    import torch

    device = torch.device(device)
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def resolve_precision(precision: str | None, device) -> str:
    """``"fp32"`` or ``"bf16"``: what ``precision`` (``None``: ``bj.settings.precision``) means on ``device``.

    ``"auto"`` is bf16 on CUDA and on a CPU that multiplies bf16 natively (:func:`cpu_bf16_native`: AMX or
    AVX512-BF16 reported by the CPU *and* a bf16 GEMM measured faster than float32 in this process),
    float32 elsewhere (other CPUs, MPS), so ``"auto"`` never makes a CPU without bf16 units slower.
    """
    import torch

    from ._settings import check_precision, settings

    precision = check_precision(settings.precision if precision is None else precision, "precision")
    if precision != "auto":
        return precision
    device = torch.device(device)
    if device.type == "cuda" or (device.type == "cpu" and cpu_bf16_native()):
        return "bf16"
    return "fp32"


def dtype_label(device, precision: str | None = None) -> str:
    """The precision :func:`autocast` runs in on ``device``, as recorded in ``params["dtype"]``."""
    return "bfloat16-autocast" if resolve_precision(precision, device) == "bf16" else "float32"


@functools.cache
def cpu_bf16_units() -> tuple[str, ...]:
    """The bf16 matrix units this CPU reports: ``amx_bf16`` (Intel AMX, Sapphire Rapids and later) and/or
    ``avx512_bf16`` (Cooper Lake, Zen 4 and later); empty where it reports none.

    From torch's own CPU feature checks where this torch has them, else from ``/proc/cpuinfo``'s flags.
    """
    import torch

    cpu = getattr(torch, "cpu", None)
    checks = {"amx_bf16": "_is_amx_tile_supported", "avx512_bf16": "_is_avx512_bf16_supported"}
    if cpu is not None and all(hasattr(cpu, f) for f in checks.values()):
        return tuple(name for name, f in checks.items() if getattr(cpu, f)())
    flags = _cpuinfo_flags()
    return tuple(name for name in checks if name in flags)


def _cpuinfo_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: GEMM shapes (M × K × N) of the check: the mini encoder's FFN (tokens × d → d_ff and back)
CHECK_SHAPES = ((8192, 128, 512), (8192, 512, 128))
#: bf16 must multiply at least this much faster than float32 in the check for ``"auto"`` to pick it
CHECK_MIN_SPEEDUP = 1.25


@functools.cache
def cpu_bf16_speedup() -> float:
    """Measured float32 / bf16 time of :data:`CHECK_SHAPES` on this CPU (best of 3 each), once per process.

    About 0.1 s on a 2-core Xeon; logged at debug level.
    """
    import time

    import torch

    def best(a, b) -> float:
        a @ b  # warm-up: oneDNN builds its kernel on the first call
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
        return min(times)

    g = torch.Generator().manual_seed(0)
    fp32 = bf16 = 0.0
    with torch.inference_mode():
        for m, k, n in CHECK_SHAPES:
            a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
            fp32 += best(a, b)
            bf16 += best(a.bfloat16(), b.bfloat16())
    ratio = fp32 / max(bf16, 1e-9)
    logger.debug("bf16 GEMM check: %.2fx float32 (%s threads)", ratio, torch.get_num_threads())
    return ratio


def cpu_bf16_native() -> bool:
    """Whether this CPU multiplies bf16 natively: it reports bf16 units (:func:`cpu_bf16_units`) and a bf16
    GEMM of the encoder's shapes ran at least :data:`CHECK_MIN_SPEEDUP` × float32 here (:func:`cpu_bf16_speedup`,
    measured once per process). A CPU that reports none is never measured and never gets bf16 from ``"auto"``."""
    return bool(cpu_bf16_units()) and cpu_bf16_speedup() >= CHECK_MIN_SPEEDUP


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
