"""Out-of-core ``tl`` tools: peak RSS of ``tl.embed``, ``tl.max_token`` and ``tl.ablate_programme`` on a backed file.

Every tool reads AnnData through the one streaming reader (:mod:`biomjepa.data.stream`), chunk
by chunk, so none should hold the dataset in memory. This measures it side by side, in one
process, on the synthetic backed ``.h5ad`` of ``bench_backed.py`` (same generator and cache: a
real-like raw-count CSR of ``--cells`` cells × ``--genes`` genes, ≈300 detected genes per cell).

The file is opened with ``anndata.read_h5ad(path, backed="r")``, ``bj.pp.map_vocab`` runs, a
``group`` column (10 groups) is added to ``obs`` and the bundled default checkpoint is loaded;
the baseline ``VmRSS`` is taken after that. Each tool then runs (default checkpoint, default
batch size, ``bj.settings.max_batch_tokens``) and its peak RSS is reported above the baseline and
above the RSS just before it (earlier tools' results stay in memory), both as the maximum of
``VmRSS`` sampled every 50 ms and as the kernel's high-water mark ``VmHWM`` (reset before each
tool). ``ablate_programme`` ablates 10 seeded vocabulary genes of the file with one matched
random set, ``--ablate-cells`` cells per group. Target (issue 14): < 2 GiB above the model.

    OMP_NUM_THREADS=1 python benchmarks/speed/bench_backed_tools.py [--cells 100000] [--genes 20000]
        [--tools embed max_token ablate_programme] [--workdir /tmp/bj_backed] [--threads 0]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import RssSampler, peak_rss_mib, reset_peak_rss, rss_mib, write_csv
from benchmarks.speed.bench_backed import add_file_arguments, ensure_file

TARGET_MIB = 2048.0
TOOLS = ("embed", "max_token", "ablate_programme")


def _programme(adata, seed: int) -> list[str]:
    """10 seeded gene symbols of the file that are in the vocabulary."""
    mapped = adata.var_names[adata.var["biomjepa_token"].to_numpy() >= 0]
    return sorted(np.random.default_rng(seed).choice(np.asarray(mapped), 10, replace=False).tolist())


def _run(tool: str, adata, args):
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_file_arguments(p)
    p.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS)
    p.add_argument("--ablate-cells", type=int, default=24, help="ablate_programme n_cells per group")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default bj.settings)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--interval", type=float, default=0.05, help="VmRSS sampling interval, s")
    p.add_argument("--out", default="bench_backed_tools.csv")
    args = p.parse_args()
    path, _ = ensure_file(args)

    import anndata as ad
    import torch

    import biomjepa as bj

    if args.threads:
        torch.set_num_threads(args.threads)
    rss0 = rss_mib()
    model = bj.load_model()
    rss_model = rss_mib()
    adata = ad.read_h5ad(path, backed="r")
    bj.pp.map_vocab(adata)
    adata.obs["group"] = (np.arange(adata.n_obs) % 10).astype(str)
    gc.collect()
    exact = reset_peak_rss()
    base = rss_mib()
    rows = []
    for tool in args.tools:
        gc.collect()
        before = rss_mib()
        reset_peak_rss()
        with RssSampler(args.interval) as sampler:
            t0 = time.perf_counter()
            what = _run(tool, adata, args)
            seconds = time.perf_counter() - t0
        hwm = peak_rss_mib()
        row = {
            "tool": tool, "cells": adata.n_obs, "genes": adata.n_vars, "checkpoint": model.info.get("name", "?"),
            "threads": torch.get_num_threads(), "max_batch_tokens": bj.settings.max_batch_tokens,
            "seconds": seconds, "cells_per_s": adata.n_obs / seconds, "result": what,
            "rss_before_model_mib": rss0, "model_rss_mib": rss_model - rss0, "baseline_rss_mib": base,
            "rss_before_tool_mib": before,
            "peak_above_baseline_sampled_mib": sampler.peak - base,
            "peak_above_baseline_hwm_mib": hwm - base if exact else float("nan"),
            "peak_above_tool_start_hwm_mib": hwm - before if exact else float("nan"),
            "hwm_reset": exact, "samples": sampler.samples, "target_mib": TARGET_MIB,
        }
        worst = max(row["peak_above_baseline_sampled_mib"], np.nan_to_num(row["peak_above_baseline_hwm_mib"]))
        row["pass"] = bool(worst < TARGET_MIB)
        rows.append(row)
        print(f"{tool:>16}: {seconds:7.1f} s, peak above model + backed file {worst:6.0f} MiB "
              f"({'PASS' if row['pass'] else 'MISS'} < {TARGET_MIB:.0f}); {what}", flush=True)
    adata.file.close()
    print("wrote", write_csv(rows, args.out))


if __name__ == "__main__":
    main()
