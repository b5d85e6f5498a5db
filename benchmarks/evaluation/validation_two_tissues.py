"""The two-tissue validation table (issue 37, item 3): checkpoints against PCA-50 and a trivial baseline.

Validation tissues (what recipes, readouts and checkpoints are chosen on; never the test cells):

* ``pbmc``: the 1,072 held-out sorted PBMCs (``sorted_celltype``), droplet UMIs;
* ``brain``: Darmanis 2015 human brain, 420 cells (the 46 ``hybrid`` cells dropped; ``cell_type``), C1 read
  counts embedded as molecule equivalents (``input="reads"``); kept out of every corpus;
* ``chemistry`` (technical robustness, PBMC): 900 cells of the 10x 3' v2 / 3' v3 / 5' PBMC set with marker types.

Per representation and set: few-shot k = 5 macro-F1 (``bj.bench.annotation``, seeds 42–46), Leiden ARI with
scanpy's defaults on the embedding as ``bj.tl.embed`` returns it (``sc.pp.neighbors(use_rep=...)``, igraph Leiden,
resolution 1; mean over ``--leiden-seeds`` seeds), the 20 %-thinned agreement (``bj.bench.depth_robustness``:
thinned cells' nearest full-depth neighbour has their label; droplet sets only: thinning reads by 20 % leaves their
molecule equivalents nearly unchanged) and, on the chemistry set, chemistry mixing within a type
(``bj.bench.integration``: ``cross_batch_share_within_label``). PCA-50 is the standard scanpy path on the same
cells; ``depth`` (log library size and log detected genes, 2 numbers per cell) is the trivial baseline.

    python benchmarks/evaluation/validation_two_tissues.py v0.3=biomjepa-mini-v0.3 v0.4=DIR [--leiden-seeds 10] \
        [--sets pbmc brain chemistry] [--out validation_two_tissues.csv]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import SHARED, write_csv
from benchmarks.evaluation.model_card_eval import chemistry_cells, validation_cells
from benchmarks.evaluation.scanpy_defaults import leiden_scores

REPO = Path(__file__).resolve().parents[2]


def brain_cells():
    import anndata as ad

    a = ad.read_h5ad(SHARED / "scrna" / "darmanis2015_brain_466cells_raw.h5ad")
    names = (REPO / "src" / "biomjepa" / "datasets" / "_data" / "validation_darmanis_brain.txt").read_text().split()
    a = a[a.obs_names.isin(names)].copy()
    a.obs["cell_type"] = a.obs["cell_type"].astype(str)
    return a


#: set -> (loader, input kind of its counts, batch key)
SETS = {"pbmc": (validation_cells, "counts", None), "brain": (brain_cells, "reads", None),
        "chemistry": (chemistry_cells, "counts", "batch")}


def add_depth(adata) -> str:
    from scipy import sparse

    X = sparse.csr_matrix(adata.X)
    adata.obsm["X_depth"] = np.c_[np.log1p(np.asarray(X.sum(1)).ravel()), np.log1p(np.diff(X.indptr))].astype(np.float32)
    return "X_depth"


def score_set(name: str, checkpoints: dict[str, str], leiden_seeds: int) -> list[dict]:
    import pandas as pd

    import biomjepa as bj
    from biomjepa.bench.baselines import BASELINE_KEYS

    loader, kind, batch_key = SETS[name]
    adata = loader()
    bj.pp.map_vocab(adata)
    labelled = adata.obs["cell_type"].notna().to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the standard path's own warnings (HVG flavour, ...)
        bj.bench.add_baselines(adata, ["pca"])
    reps = [BASELINE_KEYS["pca"], add_depth(adata)]
    for model, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=ck, input=kind, key_added=f"X_{model}")
        reps.append(f"X_{model}")
    sub = adata[labelled].copy()
    parts = [bj.bench.annotation(sub, label_key="cell_type", use_reps=reps, shots=(5,), seeds=(42, 43, 44, 45, 46))]
    if kind == "counts":
        thin = [r for r in reps if r != "X_depth"]
        parts.append(bj.bench.depth_robustness(sub, label_key="cell_type", use_reps=thin, fractions=(0.2,)))
    if batch_key is not None:
        parts.append(bj.bench.integration(sub, batch_key=batch_key, label_key="cell_type", use_reps=reps))
    table = bj.bench.summarize(pd.concat(parts))
    keep = {"macro_f1": "f1", "nn_label_agreement": "thinned_agreement",
            "cross_batch_share_within_label": "chemistry_mixing"}
    rows = {r: {"set": name, "representation": r.removeprefix("X_"), "n_cells": int(sub.n_obs)} for r in reps}
    for rec in table.to_dict("records"):
        if rec["metric"] in keep and rec["rep"] in rows:
            rows[rec["rep"]][keep[rec["metric"]]] = rec["mean"]
    labels = sub.obs["cell_type"].to_numpy()
    for r in reps:
        rows[r] |= leiden_scores(sub.obsm[r], labels, tuple(range(leiden_seeds)))
    return list(rows.values())


def main() -> None:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CHECKPOINT (a registry name or a directory)")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--leiden-seeds", type=int, default=10)
    p.add_argument("--out", default="validation_two_tissues.csv")
    args = p.parse_args()
    checkpoints = dict(c.split("=", 1) for c in args.checkpoints)
    rows = [r for s in args.sets for r in score_set(s, checkpoints, args.leiden_seeds)]
    write_csv(rows, args.out)
    t = pd.DataFrame(rows)
    cols = [c for c in ("f1", "leiden_ari_mean", "thinned_agreement", "chemistry_mixing") if c in t]
    print(t.pivot_table(index="representation", columns="set", values=cols).round(3).to_string())
    both = t[t.set.isin(["pbmc", "brain"])].groupby("representation")[["f1", "leiden_ari_mean"]].mean()
    print("\nmean of the two tissues\n" + both.round(3).to_string())


if __name__ == "__main__":
    main()
