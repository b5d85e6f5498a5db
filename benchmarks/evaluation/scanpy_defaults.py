"""What a user gets with scanpy's defaults on ``X_biomjepa``, next to the standard scanpy path (issue 29).

For each cell set: ``sc.pp.neighbors(adata, use_rep=...)`` with its defaults (15 neighbours, Euclidean),
then ``sc.tl.leiden(flavor="igraph", n_iterations=2, directed=False)`` at resolution 1 (seed 0); ARI and NMI
against the annotation. The standard path on the same cells: ``normalize_total``, ``log1p`` (skipped where X
is already log-normalized), 2,000 highly variable genes, PCA-50, the same neighbours and Leiden (both from
``benchmarks/protocol.py``: ``leiden_scores``, ``standard_path``).

Cell sets: the validation cells (1,072 held-out sorted PBMCs: what the readout transform is chosen on), the
900 multi-chemistry PBMCs (``bj.datasets.pbmc_chemistries()``, marker-derived coarse types), the test cells
(``bj.datasets.pancreas()``, reported only).

``--readout-candidates`` also scores fixed linear maps of a checkpoint's raw readout measured on a sample of
its own training corpus (the corpus files its config names; never the cells being embedded): per-feature
standardization and ZCA whitening (shrunk towards the identity), next to the cells' own standardization as
a reference that a shipped checkpoint cannot use.

    python benchmarks/evaluation/scanpy_defaults.py NAME=CHECKPOINT [...] [--readout-candidates CHECKPOINT] \
        [--sets validation_pbmc] [--leiden-seeds 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv
from benchmarks.protocol import leiden_scores, marker_types, standard_path, validation_cells

SETS = ("validation_pbmc", "chemistries_pbmc", "test_pancreas")


def cell_set(name: str) -> tuple:
    """``(adata, labels, lognorm)`` of one of ``SETS``: the validation, chemistry or test cells."""
    import biomjepa as bj

    if name == "validation_pbmc":
        a, lognorm = validation_cells(), False
    elif name == "chemistries_pbmc":
        a, lognorm = bj.datasets.pbmc_chemistries(), True
        a.obs["cell_type"] = marker_types(a)
        a = a[a.obs["cell_type"].notna().to_numpy()].copy()
    else:
        a, lognorm = bj.datasets.pancreas(), False
    return a, a.obs["cell_type"].astype(str).to_numpy(), lognorm


def embed(adata, checkpoint: str, *, lognorm: bool) -> np.ndarray:
    import biomjepa as bj

    a = adata.copy()
    bj.pp.map_vocab(a)
    kw = {"input": "lognorm"} if lognorm else {}
    bj.tl.embed(a, checkpoint=checkpoint, **kw)
    return a.obsm["X_biomjepa"]


def main() -> None:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help="NAME=CHECKPOINT (a registry name or a directory)")
    p.add_argument("--readout-candidates", default=None, help="checkpoint without readout whose candidates to score")
    p.add_argument("--corpus-cells", type=int, default=4096)
    p.add_argument("--csv", default="scanpy_defaults.csv")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS),
                   help="cell sets to score (choose readouts with --sets validation_pbmc only)")
    p.add_argument("--leiden-seeds", type=int, default=1,
                   help="Leiden seeds 0..N-1 (default 1: what a user gets); N > 1 adds their mean and s.d.")
    args = p.parse_args()
    seeds = tuple(range(args.leiden_seeds))
    rows = []
    for name in (s for s in SETS if s in args.sets):
        adata, labels, lognorm = cell_set(name)
        rows.append({"cells": name, "representation": "standard scanpy path (HVG 2000, PCA-50)",
                     **leiden_scores(standard_path(adata, lognorm=lognorm), labels, seeds)})
        for spec in args.models:
            label, ckpt = spec.split("=", 1)
            rows.append({"cells": name, "representation": label,
                         **leiden_scores(embed(adata, ckpt, lognorm=lognorm), labels, seeds)})
        if args.readout_candidates:
            rows += candidate_rows(name, adata, labels, lognorm, args.readout_candidates, args.corpus_cells, seeds)
        print(pd.DataFrame(rows).round(3).to_string(index=False), flush=True)
    write_csv(rows, args.csv)


_CORPUS: dict = {}


def candidate_rows(name, adata, labels, lognorm, ckpt, n_cells, seeds=(0,)) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from fix_readout import corpus_embeddings, readout_maps

    if ckpt not in _CORPUS:
        _CORPUS[ckpt] = readout_maps(corpus_embeddings(ckpt, n_cells))
    Z = embed(adata, ckpt, lognorm=lognorm)
    rows = [{"cells": name, "representation": f"{ckpt} raw readout", **leiden_scores(Z, labels, seeds)}]
    for kind, fn in _CORPUS[ckpt].items():
        rows.append({"cells": name, "representation": f"{ckpt} + corpus {kind}", **leiden_scores(fn(Z), labels, seeds)})
    own = (Z - Z.mean(0)) / np.maximum(Z.std(0), 1e-6)
    rows.append({"cells": name, "representation": f"{ckpt} + the cells' own standardization (reference)",
                 **leiden_scores(own, labels, seeds)})
    return rows


if __name__ == "__main__":
    main()
