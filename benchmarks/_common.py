"""Shared helpers for the benchmark scripts: analytic FLOP counts, a same-run GEMM baseline, the machine and
commit a row was measured on, resident memory (RSS) probes and log–log exponent fits.

Memory is read from ``/proc/self/status`` (Linux): ``VmRSS`` is the current resident set, ``VmHWM``
its high-water mark. Writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM`` to the current
RSS, so "peak above baseline" = ``VmHWM`` after the work − ``VmRSS`` just before it, without an
earlier peak (imports, input construction) masking it. Without ``/proc`` (macOS) the fallback is
``resource.getrusage(RUSAGE_SELF).ru_maxrss``, which cannot be reset.

Every script in the subfolders (``speed/``, ``evaluation/``, ``pretraining/``, ``gpu/``) starts with one
line that puts the checkout on ``sys.path``, so ``benchmarks`` imports as a package from any folder::

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package
    from benchmarks._common import write_csv

and reaches the others the same way (``from benchmarks.speed import bench_embed``).
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SHARED = REPO.parent / "shared" / "data"
RESULTS = BENCH / "results"


def encoder_flops_per_token(cfg) -> float:
    """Forward FLOPs per token (multiply-add = 2) of the encoder, analytically.

    Per layer: q,k,v,o projections 8·d², FFN 4·d·d_ff, linear-attention core 4·d·(d_h + 1)
    (key–value summary and its application, normalizer column included). Plus the value
    embedding 2·b + 2·b² + 2·b·d (b = value bins). LayerNorms, GELU and biases are ignored.
    """
    d, f, b = cfg.d_model, cfg.d_ff, cfg.n_value_bins
    dh = d // cfg.n_heads
    per_layer = 8 * d * d + 4 * d * f + 4 * d * (dh + 1)
    return cfg.n_layers * per_layer + 2 * b + 2 * b * b + 2 * b * d


def gemm_gflops(m: int, k: int, n: int, repeats: int = 5, device: str = "cpu") -> float:
    """Achieved GFLOP/s of a ``[m, k] @ [k, n]`` matmul measured now (best of ``repeats``).

    float32 on CPU; bf16 on CUDA (what autocast runs the model's matmuls in), synchronized.
    """
    import torch

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a, b = torch.randn(m, k, device=dev, dtype=dtype), torch.randn(k, n, device=dev, dtype=dtype)
    best = float("inf")
    for i in range(repeats + 1):  # the first call is a warm-up
        sync(dev)
        t0 = time.perf_counter()
        a @ b
        sync(dev)
        if i:
            best = min(best, time.perf_counter() - t0)
    return 2 * m * k * n / best / 1e9


def peak_gemm_gflops(device: str = "cpu", size: int | None = None) -> float:
    """The best GEMM rate the device reaches here: a large square matmul (8,192 on CUDA, 2,048 on CPU)."""
    size = size or (8192 if str(device).startswith("cuda") else 2048)
    return gemm_gflops(size, size, size, repeats=5, device=device)


def sync(device) -> None:
    """Wait for queued CUDA work (timings on CUDA are otherwise launch times)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def best_time(fn, repeats: int = 3) -> float:
    """Best wall time of ``repeats`` calls of ``fn`` (the caller has already warmed it up)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


#: the CPU flags that decide bf16 and SIMD speed, as :func:`machine` writes them
FLAGS = ("amx_bf16", "amx_tile", "amx_int8", "avx512_bf16", "avx512_fp16", "avx512f", "avx2")


def machine(*keys: str) -> dict:
    """CPU name, its bf16-relevant flags (``/proc/cpuinfo``), torch's capability and version, threads (only ``keys``
    when given)."""
    import platform

    import torch

    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine(), platform.processor()):
                name = line.split(":", 1)[1].strip()
            elif line.startswith(("flags", "Features")) and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    info = {"cpu": name, "cpu_flags": " ".join(f for f in FLAGS if f in flags) or "none",
            "torch_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}
    return {k: info[k] for k in keys} if keys else info


def commit() -> str:
    """``git describe --always --dirty`` of the checkout (empty without git)."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


@contextlib.contextmanager
def precision(value: str):
    """``bj.settings.precision = value`` for the body; the setting is put back."""
    import biomjepa as bj

    before = bj.settings.precision
    bj.settings.precision = value
    try:
        yield
    finally:
        bj.settings.precision = before


def write_csv(rows: list[dict], name: str) -> Path:
    import pandas as pd

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _status_mib(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _ru_maxrss_mib() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024.0  # bytes on macOS, KiB on Linux


def rss_mib() -> float:
    """Current resident set size (``VmRSS``) in MiB; falls back to the peak where ``/proc`` is absent."""
    v = _status_mib("VmRSS")
    return _ru_maxrss_mib() if v is None else v


def peak_rss_mib() -> float:
    """Resident-set high-water mark (``VmHWM``, or ``ru_maxrss`` without ``/proc``) in MiB."""
    v = _status_mib("VmHWM")
    return _ru_maxrss_mib() if v is None else v


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0); ``False`` if that is not possible here."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


class RssSampler:
    """Background thread recording the largest ``VmRSS`` seen (or value of ``read()``: MiB, NaN when it cannot be
    read), sampled every ``interval`` s.

    Use as a context manager; ``peak`` (MiB) is the sampled maximum. A sampler can miss a spike
    shorter than ``interval``: pair it with :func:`peak_rss_mib` (exact, kernel-maintained).
    """

    def __init__(self, interval: float = 0.05, read=rss_mib) -> None:
        self.interval, self.read, self.samples = interval, read, 0
        self.peak = read()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = _larger(self.peak, self.read())
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = _larger(self.peak, self.read())


def _larger(a: float, b: float) -> float:
    """The larger of two readings, a NaN (not read) losing to a number."""
    return b if math.isnan(a) or b > a else a


def reset_peak_memory(device) -> bool:
    """Start a peak-memory window: CUDA's allocator statistics, or the process's ``VmHWM`` on the CPU (``False``
    where it cannot be reset)."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return reset_peak_rss()
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    return True


def memory_mib(device) -> float:
    """Memory in use now: ``memory_allocated`` on CUDA, the process's RSS on the CPU."""
    import torch

    dev = torch.device(device)
    return torch.cuda.memory_allocated(dev) / 2**20 if dev.type == "cuda" else rss_mib()


def peak_memory_mib(device) -> float:
    """Peak since :func:`reset_peak_memory`: ``max_memory_allocated`` on CUDA, peak RSS (whole process) on the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        return torch.cuda.max_memory_allocated(dev) / 2**20
    return peak_rss_mib()


def keep_per_row(indptr, n: int, rng):
    """A mask over a CSR matrix's entries that keeps ``n`` random entries of each row (a shorter row whole)."""
    from itertools import pairwise

    import numpy as np

    keep = np.zeros(int(indptr[-1]), dtype=bool)
    for s, e in pairwise(indptr):
        keep[s + rng.choice(e - s, size=min(n, e - s), replace=False)] = True
    return keep


def thin_counts(X, n: int, seed: int = 0):
    """``X`` as CSR with ``n`` random nonzero entries of each row kept (the 400-gene cells of the paper's hPancreas)."""
    import numpy as np

    X = X.tocsr()
    X.data = np.where(keep_per_row(X.indptr, n, np.random.default_rng(seed)), X.data, 0)
    X.eliminate_zeros()
    return X


def fit_exponent(n, y, n_min: float = 0) -> float:
    """Least-squares slope of log y on log n over points with ``n >= n_min`` (NaN if < 2 points)."""
    import numpy as np

    n, y = np.asarray(n, dtype=float), np.asarray(y, dtype=float)
    ok = (n >= n_min) & np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(n[ok]), np.log(y[ok]), 1)[0])
