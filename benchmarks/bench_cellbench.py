"""CellBench-style acceptance run of ``bj.bench`` on the real data in ../shared/data.

Scores PCA-50 (and ``--embed`` the bundled BioM-JEPA checkpoint when one exists) on Baron pancreas
(``cell_type1``), PBMC sorted (``sorted_celltype``) and PBMC 4k (``Annotation``): annotation, clustering,
reconstruction, geometry; and the Norman 2019 subset perturbation response for PCA-50. Prints mean ± s.d.
tables and writes ``benchmarks/results/cellbench_<dataset>.csv`` (tidy) and ``..._summary.csv``.

    python benchmarks/bench_cellbench.py                    # paper protocol (slow on 2 CPU cores)
    python benchmarks/bench_cellbench.py --seeds 2 --budgets 100 500 --max-epochs 30
"""

from __future__ import annotations

import argparse
import time

import anndata as ad
import pandas as pd
from _common import RESULTS, SHARED

import biomjepa as bj

DATASETS = {
    "baron": ("baron2016_pancreas_2142cells_raw.h5ad", "cell_type1"),
    "pbmc_sorted": ("pbmc_sorted_2140cells_raw.h5ad", "sorted_celltype"),
    "pbmc4k": ("pbmc4k_2170cells_raw.h5ad", "Annotation"),
}
NORMAN = "norman2019_mcfaline2023_subset_500genes.h5ad"


def _table(summary: pd.DataFrame) -> str:
    s = summary.assign(value=[f"{m:.3f} ± {sd:.3f}" if pd.notna(sd) else f"{m:.3f}" for m, sd in zip(summary["mean"], summary["sd"])])
    parts = []
    for _, t in s.groupby("task", sort=False):
        wide = t.pivot_table(index=["task", "rep", "setting"], columns="metric", values="value", aggfunc="first", sort=False)
        parts.append(wide[list(dict.fromkeys(t["metric"]))].to_string())
    return "\n\n".join(parts)


def _save(df: pd.DataFrame, name: str) -> pd.DataFrame:
    RESULTS.mkdir(parents=True, exist_ok=True)
    df.to_csv(RESULTS / f"cellbench_{name}.csv", index=False)
    summary = bj.bench.summarize(df)
    summary.to_csv(RESULTS / f"cellbench_{name}_summary.csv", index=False)
    print(f"\n=== {name} ===\n{_table(summary)}", flush=True)
    return summary


def _embed(adata) -> list[str]:
    try:
        bj.pp.map_vocab(adata)
        bj.tl.embed(adata)
    except Exception as err:  # no bundled checkpoint yet
        print(f"BioM-JEPA embedding skipped: {err}")
        return []
    return ["X_biomjepa"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="*", default=[*DATASETS, "norman"], choices=[*DATASETS, "norman"])
    p.add_argument("--seeds", type=int, default=5, help="number of seeds from 42 (default 5)")
    p.add_argument("--budgets", type=int, nargs="+", default=[100, 500, 700, 900])
    p.add_argument("--max-epochs", type=int, default=50)
    p.add_argument("--shots", type=int, nargs="+", default=[1, 5, 9])
    p.add_argument("--umap", action="store_true", help="also score the UMAP-of-PCA baseline")
    p.add_argument("--embed", action="store_true", help="also embed with the bundled BioM-JEPA checkpoint")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    seeds = tuple(range(42, 42 + args.seeds))
    baselines = ["pca", "umap"] if args.umap else ["pca"]
    for name in args.datasets:
        t0 = time.perf_counter()
        if name == "norman":
            a = ad.read_h5ad(SHARED / "scrna" / NORMAN)
            a = a[a.obs["dataset"] == "norman19"].copy()
            df = bj.bench.perturbation(a, use_reps=[], baselines=["pca"], layer="counts_reconstructed", shots=args.shots,
                                       seeds=seeds)
            print(f"Norman split: {df.attrs['split']}")
        else:
            fname, label = DATASETS[name]
            a = ad.read_h5ad(SHARED / "scrna" / fname)
            reps = _embed(a) if args.embed else []
            kw = {"annotation": {"shots": args.shots},
                  "reconstruction": {"budgets": args.budgets, "max_epochs": args.max_epochs}}
            df = bj.bench.run(a, label_key=label, use_reps=reps, baselines=baselines, seeds=seeds, task_kwargs=kw,
                              tasks=["annotation", "clustering", "reconstruction", "geometry"])
        _save(df, name)
        print(f"{name}: {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
