"""BioM-JEPA against the baselines a user would pick instead (PCA-50, HVG, scVI) on PBMCs from five 10x runs.

One AnnData from the shared PBMC sets, joined on the genes every set measured (inner join; in the 1k/5′
set only genes all three of its batches measured), ``obs["batch"]`` = source run:

- ``pbmc4k`` (10x 3′ v2, 2,170 cells, labelled), ``sorted`` (10x FACS-sorted populations of Zheng 2017,
  2,140 cells, labelled by the sort), ``1k_v2``, ``1k_v3``, ``5prime`` (10x 1k PBMC v2 and v3 chemistry
  and a 1,000-cell subset of the 5′ kit: three chemistries, no labels).
- ``obs["cell_type"]``: the two labelled sets harmonized to five types (CD4 T, CD8 T, B, NK, monocyte/DC);
  pbmc4k's "?" cells and the unlabelled runs are NaN.

Every representation is computed on all cells: BioM-JEPA (``bj.tl.embed``, ``--checkpoint``, default the bundled) and
``bj.bench.add_baselines(["pca", "hvg", "scvi"], batch_key="batch")`` (scVI told the run of each cell,
its default epochs unless ``--scvi-epochs``). Scores, each with the same protocol for every rep:

- ``annotation`` (few-shot SVM macro-F1, k = 1/5/9, seeds 42–46) and ``clustering`` (k-means ARI) on the
  labelled cells;
- ``integration`` on all cells over the five runs (``cells=all``: cross-batch neighbour share, no labels)
  and on the labelled cells (``cells=labelled``: within-type share, label / batch ASW);
- ``--scib``: scib-metrics' Benchmarker on the labelled cells with Leiden NMI/ARI switched on.

    python benchmarks/evaluation/bench_baselines.py                  # writes benchmarks/results/bench_baselines.csv
    python benchmarks/evaluation/bench_baselines.py --scvi-epochs 50 --cache /tmp/pbmc_reps.h5ad   # what was measured
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import anndata as ad
import numpy as np
import pandas as pd

import biomjepa as bj
from benchmarks._common import RESULTS, SHARED

SETS = {  # batch: (file, label column or None, batch value in a multi-batch file)
    "pbmc4k": ("pbmc4k_2170cells_raw.h5ad", "Annotation", None),
    "sorted": ("pbmc_sorted_2140cells_raw.h5ad", "sorted_celltype", None),
    "1k_v2": ("pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad", None, "10x_pbmc_1k_v2"),
    "1k_v3": ("pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad", None, "10x_pbmc_1k_v3"),
    "5prime": ("pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad", None, "10x_pbmc_5prime_8k_subset1k"),
}
TYPES = {
    "T_CD4": "CD4 T", "T_CD8": "CD8 T", "B": "B", "NK": "NK", "MNP": "monocyte/DC",
    "thelper": "CD4 T", "memoryt": "CD4 T", "regulatoryt": "CD4 T", "naivet": "CD4 T",
    "cytotoxict": "CD8 T", "naivecytotoxic": "CD8 T", "bcells": "B", "nk": "NK", "monocytes": "monocyte/DC",
}
REPS = {"X_biomjepa": "BioM-JEPA", "X_pca50": "PCA-50", "X_hvg": "HVG", "X_scvi": "scVI"}


def load() -> ad.AnnData:
    """The five runs on their common measured genes, with ``batch`` and harmonized ``cell_type``."""
    parts = []
    for batch, (file, label, value) in SETS.items():
        a = ad.read_h5ad(SHARED / "scrna" / file)
        if value is not None:
            measured = a.var[[c for c in a.var.columns if c.startswith("in_")]].all(1).to_numpy()
            a = a[a.obs["batch"] == value, measured].copy()
        a.var_names_make_unique()
        labels = a.obs[label].astype(str).map(TYPES) if label else pd.Series(np.nan, index=a.obs_names)
        a.obs = pd.DataFrame({"batch": batch, "cell_type": labels.to_numpy()}, index=[f"{batch}:{c}" for c in a.obs_names])
        parts.append(a)
    out = ad.concat(parts, join="inner")
    out.obs["batch"] = pd.Categorical(out.obs["batch"], categories=list(SETS))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scvi-epochs", type=int, default=None,
                   help="scVI max_epochs (default: scvi-tools' heuristic, 400 epochs for these 7,170 cells)")
    p.add_argument("--no-scib", action="store_true", help="skip scib-metrics' Benchmarker")
    p.add_argument("--cache", default=None, help="h5ad keeping the computed representations (reused when it exists)")
    p.add_argument("--checkpoint", default=None, help="registry name or directory (default: the bundled model; a --cache keeps its own embedding)")
    p.add_argument("--out", default=str(RESULTS / "bench_baselines.csv"))
    args = p.parse_args(argv)
    bj.settings.verbosity = 1
    if args.cache and Path(args.cache).exists():
        adata = ad.read_h5ad(args.cache)
        times = dict(adata.uns["seconds"])
    else:
        adata = load()
        times = {}
    print(adata.n_obs, "cells,", adata.n_vars, "common genes;", adata.obs["batch"].value_counts(sort=False).to_dict(),
          "| labelled:", adata.obs["cell_type"].value_counts().to_dict(), flush=True)
    if "X_biomjepa" not in adata.obsm:
        t = time.perf_counter()
        bj.pp.map_vocab(adata)
        bj.tl.embed(adata, checkpoint=args.checkpoint)
        times["X_biomjepa"] = time.perf_counter() - t
    for b in ("pca", "hvg", "scvi"):
        if bj.bench.baselines.BASELINE_KEYS[b] not in adata.obsm:
            t = time.perf_counter()
            bj.bench.add_baselines(adata, [b], batch_key="batch", scvi_max_epochs=args.scvi_epochs)
            times[bj.bench.baselines.BASELINE_KEYS[b]] = time.perf_counter() - t
            if args.cache:
                adata.uns["seconds"] = times
                adata.write_h5ad(args.cache)
    print("seconds per representation:", {k: round(v, 1) for k, v in times.items()}, flush=True)
    reps = list(REPS)
    lab = adata[adata.obs["cell_type"].notna()].copy()
    frames = [
        bj.bench.annotation(lab, label_key="cell_type", use_reps=reps),
        bj.bench.clustering(lab, label_key="cell_type", use_reps=reps),
        bj.bench.integration(adata, batch_key="batch", use_reps=reps).assign(setting=lambda d: d["setting"] + ",cells=all"),
        bj.bench.integration(lab, batch_key="batch", label_key="cell_type", use_reps=reps)
        .assign(setting=lambda d: d["setting"] + ",cells=labelled"),
    ]
    if not args.no_scib:
        from scib_metrics.benchmark import BioConservation

        frames.append(bj.bench.scib_scores(lab, batch_key="batch", label_key="cell_type", use_reps=reps,
                                           benchmarker_kwargs={"bio_conservation_metrics":
                                                               BioConservation(nmi_ari_cluster_labels_leiden=True)}))
    df = pd.concat(frames, ignore_index=True)
    extra = [dict(task="time", rep=r, setting="fit", metric="seconds", value=v) for r, v in times.items()]
    epochs = args.scvi_epochs or min(400, round(400 * 20_000 / adata.n_obs))  # scvi-tools' heuristic when None
    extra.append(dict(task="config", rep="X_scvi", setting="fit", metric="scvi_max_epochs", value=epochs))
    extra = pd.DataFrame(extra).assign(seed=pd.array([pd.NA] * len(extra), dtype="Int64"))[df.columns]
    df = pd.concat([df, extra], ignore_index=True)
    df.to_csv(args.out, index=False)
    print(f"wrote {args.out}\n{headline(df).to_string()}")


def headline(df: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds of the headline metrics, one column per representation."""
    rows = [("annotation", "top5", "macro_f1", "few-shot macro-F1 (5 per type)"),
            ("clustering", "kmeans", "ari", "k-means ARI"),
            ("integration", "scib", "scib_nmi_ari_cluster_labels_leiden_ari", "Leiden ARI (scib-metrics)"),
            ("integration", "k=15,cells=all", "cross_batch_share", "cross-batch share, all cells"),
            ("integration", "k=15,cells=labelled", "cross_batch_share_within_label", "cross-batch share within type"),
            ("integration", "k=15,cells=labelled", "label_asw", "label ASW"),
            ("integration", "k=15,cells=labelled", "batch_asw", "batch ASW"),
            ("integration", "scib", "scib_bio_conservation", "scib bio conservation"),
            ("integration", "scib", "scib_batch_correction", "scib batch correction"),
            ("integration", "scib", "scib_total", "scib total"),
            ("time", "fit", "seconds", "seconds to compute")]
    s = df.groupby(["task", "setting", "metric", "rep"], sort=False)["value"].mean()
    out = {name: {REPS[r]: s.get((t, st, m, r), np.nan) for r in REPS} for t, st, m, name in rows}
    return pd.DataFrame(out).T.round(3)


if __name__ == "__main__":
    main()
