"""Out of core: peak RSS of ``pp.map_vocab`` + ``tl.embed``, or of each ``tl`` tool, on a generated ≥100k-cell backed .h5ad.

The file (cached under ``--workdir``; regenerated only when missing or with ``--regenerate``) holds
a real-like raw-count CSR: ``--genes`` features (all 19,264 vocabulary symbols, topped up with
unmapped ``LINC…`` names, shuffled like a 10x feature list), cells whose UMIs are multinomial
draws from a skewed (log-normal, σ = 2) gene-frequency profile at a log-normal depth calibrated so
the mean number of detected genes per cell is ``--genes-per-cell`` (default 300: ≈160–430 for the
5–95 % of cells, mostly counts of 1, like shallow 10x data). It is written in row chunks
(``anndata.io.write_elem`` + ``sparse_dataset(...).append``) in a separate process, so generation
stays small in memory too (its peak RSS is reported).

The measurement loads the bundled default checkpoint (``bj.load_model()``), opens the file with
``anndata.read_h5ad(path, backed="r")`` and takes the baseline ``VmRSS`` after both. Each phase's peak RSS above
that baseline is read two ways: the maximum of ``VmRSS`` sampled every ``--interval`` s (50 ms) by a background
thread, and the kernel's exact high-water mark ``VmHWM`` (reset with ``/proc/self/clear_refs`` before the phase).

* Default (issue 7, ``bench_backed.csv``): ``bj.pp.map_vocab`` and ``bj.tl.embed`` (default checkpoint, default
  batch size), one row with each phase's peak; the result itself (``obsm``: cells × 256 float32, ≈98 MiB per 100k
  cells for ``biomjepa-mini``) is included.
* ``--tools embed max_token ablate_programme`` (issue 14, ``bench_backed_tools.csv``): after ``map_vocab`` and a
  ``group`` column (10 groups), each tool in turn (default batch size, ``bj.settings.max_batch_tokens``), one row
  each, its peak also above the RSS just before it (earlier tools' results stay in memory). Every tool reads
  AnnData through the one streaming reader, chunk by chunk, so none should hold the dataset in memory.
  ``ablate_programme`` ablates 10 seeded vocabulary genes of the file with one matched random set,
  ``--ablate-cells`` cells per group.

Target: < 2 GiB above the model and the backed file.

    python benchmarks/speed/bench_backed.py [--cells 100000] [--genes 20000] [--genes-per-cell 300]
        [--workdir /tmp/bj_backed] [--regenerate]
    OMP_NUM_THREADS=1 python benchmarks/speed/bench_backed.py --tools embed max_token ablate_programme [--threads 0]
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import queue
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import RssSampler, peak_rss_mib, reset_peak_rss, rss_mib, write_csv

TARGET_MIB = 2048.0
TOOLS = ("embed", "max_token", "ablate_programme")


def _file_nnz(path: Path) -> int:
    """Stored nonzeros of the file's CSR ``X`` (a cached file was not generated in this run)."""
    import h5py

    with h5py.File(path, "r") as f:
        return int(f["X"]["data"].shape[0])


def _gene_names(n_genes: int, rng: np.random.Generator) -> np.ndarray:
    from biomjepa.data.vocab import Vocab

    symbols = Vocab.default().symbols
    extra = [f"LINC{i:05d}" for i in range(max(0, n_genes - len(symbols)))]
    names = np.concatenate([symbols, np.asarray(extra, dtype=object)])[:n_genes]
    return names[rng.permutation(n_genes)]


def _sample_block(n: int, depth: float, cdf: np.ndarray, rng: np.random.Generator):
    """``n`` cells of multinomial UMIs (log-normal depth around ``depth``) → CSR counts."""
    from scipy import sparse

    G = len(cdf)
    reads = np.maximum(1, depth * rng.lognormal(0.0, 0.35, n)).astype(np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), reads)
    genes = np.minimum(np.searchsorted(cdf, rng.random(int(reads.sum())) * cdf[-1]), G - 1)
    key, counts = np.unique(rows * G + genes, return_counts=True)  # sorted by (cell, gene): CSR order
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // G, minlength=n), out=indptr[1:])
    return sparse.csr_matrix((counts.astype(np.float32), (key % G).astype(np.int32), indptr), shape=(n, G))


def _calibrate_depth(target: float, cdf: np.ndarray, seed: int, pilot: int = 2000) -> float:
    """Read depth whose mean number of detected genes per cell is ``target`` (bisection on a pilot)."""
    lo, hi = target, 50.0 * target
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        nnz = _sample_block(pilot, mid, cdf, np.random.default_rng(seed + 1)).getnnz(axis=1).mean()
        lo, hi = (mid, hi) if nnz < target else (lo, mid)
        if hi / lo < 1.005:
            break
    return (lo * hi) ** 0.5


def generate(path: str, cells: int, genes: int, genes_per_cell: float, seed: int, chunk: int, out) -> None:
    """Child process: write the synthetic backed .h5ad at ``path`` (atomically); report its stats."""
    import anndata as ad
    import h5py
    import pandas as pd
    from anndata.io import sparse_dataset, write_elem

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    names = _gene_names(genes, rng)
    weights = rng.lognormal(0.0, 2.0, genes)
    cdf = np.cumsum(weights / weights.sum())
    depth = _calibrate_depth(genes_per_cell, cdf, seed)
    obs = pd.DataFrame(index=pd.Index([f"cell{i:07d}" for i in range(cells)]))
    var = pd.DataFrame(index=pd.Index(names))
    tmp = Path(path).with_suffix(".partial.h5ad")
    ad.AnnData(obs=obs, var=var).write_h5ad(tmp)  # obs/var/uns skeleton; X appended below
    nnz = 0
    with h5py.File(tmp, "a") as f:
        for start in range(0, cells, chunk):
            block = _sample_block(min(chunk, cells - start), depth, cdf, rng)
            nnz += block.nnz
            if start == 0:
                write_elem(f, "X", block, dataset_kwargs={"chunks": (1 << 16,)})
            else:
                sparse_dataset(f["X"]).append(block)
    os.replace(tmp, path)
    out.put(
        {
            "gen_seconds": time.perf_counter() - t0,
            "gen_peak_rss_mib": peak_rss_mib(),
            "depth": depth,
            "nnz": nnz,
        }
    )


def ensure_file(args) -> tuple[Path, dict]:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"synthetic_{args.cells}x{args.genes}_g{args.genes_per_cell:g}_s{args.seed}.h5ad"
    if path.exists() and not args.regenerate:
        print(f"using cached {path}")
        return path, {}
    print(f"generating {path} ({args.cells:,} cells × {args.genes:,} genes) in a child process …", flush=True)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(
        target=generate,
        args=(str(path), args.cells, args.genes, args.genes_per_cell, args.seed, args.chunk, q),
    )
    proc.start()
    while True:  # a crashed child never puts: poll instead of blocking on the queue
        try:
            stats = q.get(timeout=1.0)
            break
        except queue.Empty:
            if not proc.is_alive():
                raise RuntimeError(
                    f"generation failed (exit {proc.exitcode}); see the traceback above"
                ) from None
    proc.join()
    print(
        f"  generated in {stats['gen_seconds']:.1f} s, nnz {stats['nnz']:,}, peak RSS {stats['gen_peak_rss_mib']:.0f} MiB"
    )
    return path, stats


def open_file(path: Path, threads: int):
    """The bundled model loaded, then the file opened backed: ``(adata, model name, RSS columns)``."""
    import anndata as ad
    import torch

    import biomjepa as bj

    if threads:
        torch.set_num_threads(threads)
    rss0 = rss_mib()
    model = bj.load_model()
    rss = {"rss_before_model_mib": rss0, "model_rss_mib": rss_mib() - rss0}
    return ad.read_h5ad(path, backed="r"), model.info.get("name", "?"), rss


def phase(fn, interval: float) -> SimpleNamespace:
    """``fn()`` timed, with its peak RSS sampled every ``interval`` s and the kernel's ``VmHWM`` (reset first)."""
    gc.collect()
    exact = reset_peak_rss()
    with RssSampler(interval) as sampler:
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
    return SimpleNamespace(out=out, seconds=seconds, sampled=sampler.peak, hwm=peak_rss_mib(), exact=exact,
                           samples=sampler.samples)


def verdict(row: dict) -> float:
    """The worst of the row's two peaks above the baseline; sets ``row["pass"]`` against :data:`TARGET_MIB`."""
    worst = max(row["peak_above_baseline_sampled_mib"], np.nan_to_num(row["peak_above_baseline_hwm_mib"]))
    row["pass"] = bool(worst < TARGET_MIB)
    return worst


def embed_row(adata, path: Path, gen: dict, name: str, rss: dict, args) -> dict:
    """``map_vocab`` then ``embed``, each phase's peak above the baseline (the default measurement)."""
    import torch

    import biomjepa as bj

    gc.collect()
    base = rss_mib()
    m = phase(lambda: bj.pp.map_vocab(adata), args.interval)
    e = phase(lambda: bj.tl.embed(adata, batch_size=args.batch_size), args.interval)
    hwm = max(m.hwm, e.hwm) if m.exact else e.hwm
    Z = adata.obsm["X_biomjepa"]
    assert Z.shape[0] == adata.n_obs and np.isfinite(Z).all()
    row = {"cells": adata.n_obs, "genes": adata.n_vars, "nnz": int(gen.get("nnz", 0)) or _file_nnz(path),
           "genes_per_cell_median": adata.uns["biomjepa"]["params"]["n_genes_median"],
           "file_mib": path.stat().st_size / 2**20, "checkpoint": name, "threads": torch.get_num_threads(),
           "map_vocab_s": m.seconds, "embed_s": e.seconds, "total_s": m.seconds + e.seconds,
           "cells_per_s": adata.n_obs / e.seconds, **rss, "baseline_rss_mib": base,
           "peak_above_baseline_sampled_mib": max(m.sampled, e.sampled) - base, "peak_above_baseline_hwm_mib": hwm - base,
           "map_vocab_peak_hwm_mib": m.hwm - base if m.exact else None, "embed_peak_hwm_mib": e.hwm - base,
           "hwm_reset": m.exact, "samples": m.samples + e.samples, "obsm_mib": Z.nbytes / 2**20, "target_mib": TARGET_MIB}
    row |= {k: v for k, v in gen.items() if k != "nnz"}
    worst = verdict(row)
    print(f"\nbacked out-of-core embed ({name}, {row['threads']} threads): {path}")
    width = max(len(k) for k in row)
    for k, v in row.items():
        print(f"  {k:<{width}}  {v:.4g}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    if not m.exact:
        print("note: VmHWM could not be reset; the HWM figure is a process-lifetime peak")
    print(f"peak RSS above model + backed file: {worst:.0f} MiB {'<' if row['pass'] else '>='} "
          f"{TARGET_MIB:.0f} MiB target: {'PASS' if row['pass'] else 'MISS'}")
    return row


def _programme(adata, seed: int) -> list[str]:
    """10 seeded gene symbols of the file that are in the vocabulary."""
    mapped = adata.var_names[adata.var["biomjepa_token"].to_numpy() >= 0]
    return sorted(np.random.default_rng(seed).choice(np.asarray(mapped), 10, replace=False).tolist())


def run_tool(tool: str, adata, args) -> str:
    import biomjepa as bj

    if tool == "embed":
        bj.tl.embed(adata, batch_size=args.batch_size)
        return f"obsm {adata.obsm['X_biomjepa'].shape}"
    if tool == "max_token":
        bj.tl.max_token(adata, groupby="group", batch_size=args.batch_size)
        return f"{adata.obs['max_token_gene'].nunique()} winner genes"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # undetected programme genes are reported, not fatal
        bj.tl.ablate_programme(adata, _programme(adata, args.seed), groupby="group", n_cells=args.ablate_cells,
                               n_random=1, batch_size=args.batch_size)
    return f"{len(adata.uns['ablation']['cells'])} ablated cells"


def tool_rows(adata, name: str, rss: dict, args) -> list[dict]:
    """Each of ``args.tools`` in turn on the mapped file (``--tools``): its peak above the baseline and its start."""
    import torch

    import biomjepa as bj

    bj.pp.map_vocab(adata)
    adata.obs["group"] = (np.arange(adata.n_obs) % 10).astype(str)
    gc.collect()
    base = rss_mib()
    rows = []
    for tool in args.tools:
        gc.collect()
        before = rss_mib()
        r = phase(lambda tool=tool: run_tool(tool, adata, args), args.interval)
        nan = float("nan")
        row = {"tool": tool, "cells": adata.n_obs, "genes": adata.n_vars, "checkpoint": name,
               "threads": torch.get_num_threads(), "max_batch_tokens": bj.settings.max_batch_tokens,
               "seconds": r.seconds, "cells_per_s": adata.n_obs / r.seconds, "result": r.out, **rss,
               "baseline_rss_mib": base, "rss_before_tool_mib": before,
               "peak_above_baseline_sampled_mib": r.sampled - base,
               "peak_above_baseline_hwm_mib": r.hwm - base if r.exact else nan,
               "peak_above_tool_start_hwm_mib": r.hwm - before if r.exact else nan,
               "hwm_reset": r.exact, "samples": r.samples, "target_mib": TARGET_MIB}
        worst = verdict(row)
        rows.append(row)
        print(f"{tool:>16}: {r.seconds:7.1f} s, peak above model + backed file {worst:6.0f} MiB "
              f"({'PASS' if row['pass'] else 'MISS'} < {TARGET_MIB:.0f}); {r.out}", flush=True)
    adata.file.close()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=100_000)
    p.add_argument("--genes", type=int, default=20_000)
    p.add_argument("--genes-per-cell", type=float, default=300, help="mean detected genes per cell")
    p.add_argument("--workdir", default="/tmp/bj_backed")
    p.add_argument("--regenerate", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=int, default=10_000, help="rows per generated block")
    p.add_argument("--tools", nargs="+", default=None, choices=TOOLS,
                   help="measure each of these tl tools instead of map_vocab + embed (issue 14)")
    p.add_argument("--ablate-cells", type=int, default=24, help="ablate_programme n_cells per group (--tools)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default bj.settings)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--interval", type=float, default=0.05, help="VmRSS sampling interval, s")
    p.add_argument("--out", default=None, help="CSV name (default bench_backed.csv; with --tools bench_backed_tools.csv)")
    args = p.parse_args()
    path, gen = ensure_file(args)
    adata, name, rss = open_file(path, args.threads)
    if args.tools:
        rows = tool_rows(adata, name, rss, args)
    else:
        rows = [embed_row(adata, path, gen, name, rss, args)]
    print("wrote", write_csv(rows, args.out or ("bench_backed_tools.csv" if args.tools else "bench_backed.csv")))


if __name__ == "__main__":
    main()
