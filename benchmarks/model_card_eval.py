"""Every number of the model card: checkpoints vs PCA-50 on the validation and the test cells.

Validation: the 1,072 held-out sorted-PBMC cells (what recipes and checkpoints are chosen on).
Test: the 1,074 held-out Baron pancreas cells, ``bj.datasets.pancreas()`` (reported only).
Per representation: few-shot k = 5 macro-F1 (``bj.bench.annotation``, seeds 42–46), effective rank
and depth association (``bj.bench.geometry``: ``depth_nnz`` = mean |r| of the leading axis and of the
norm with detected genes), and ``bj.bench.depth_robustness`` (thinning to 50 % and 20 %). On the test
cells also the max-token winners per cell type against the trivial baseline (each cell's
most-expressed gene).

    python benchmarks/model_card_eval.py NAME=CHECKPOINT [NAME=CHECKPOINT ...] [--tag v0.2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import write_csv

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "scrna"


def validation_cells():
    import anndata as ad

    import biomjepa as bj

    a = ad.read_h5ad(SHARED / "pbmc_sorted_2140cells_raw.h5ad")
    a = a[a.obs_names.isin(bj.datasets.heldout_cells("pbmc_sorted"))].copy()
    a.obs["cell_type"] = a.obs["sorted_celltype"].astype(str)
    return a


def score(adata, checkpoints: dict[str, str], seeds) -> list[dict]:
    import pandas as pd

    import biomjepa as bj

    bj.pp.map_vocab(adata)
    bj.bench.add_baselines(adata, ["pca"])
    reps = ["X_pca50"]
    for name, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=ck, key_added=f"X_{name}")
        reps.append(f"X_{name}")
    ann = bj.bench.annotation(adata, label_key="cell_type", use_reps=reps, shots=(5,), seeds=seeds)
    geo = bj.bench.geometry(adata, use_reps=reps)
    dep = bj.bench.depth_robustness(adata, label_key="cell_type", use_reps=reps, fractions=(0.5, 0.2))
    table = bj.bench.summarize(pd.concat([ann, geo, dep]))
    keep = ["macro_f1", "effective_rank", "depth_nnz", "depth_mean", "nn_label_agreement", "self_match",
            "relative_shift"]
    return table[table["metric"].isin(keep)].to_dict("records")


def max_token_table(adata, checkpoints: dict[str, str]) -> list[dict]:
    """Per cell type: the commonest winner and the commonest most-expressed gene, with their shares."""
    import biomjepa as bj

    rows = []
    for name, ck in checkpoints.items():
        bj.tl.max_token(adata, groupby="cell_type", checkpoint=ck, key_added="mt")
        obs = adata.obs
        for ct, g in obs.groupby("cell_type", observed=True):
            win = g["mt_gene"].value_counts()
            top = g["mt_top_expressed"].value_counts()
            rows.append({
                "model": name, "cell_type": ct, "n_cells": len(g),
                "top_winner": win.index[0], "top_winner_share": win.iloc[0] / len(g),
                "baseline_gene": top.index[0], "baseline_share": top.iloc[0] / len(g),
                "model_share_of_baseline_gene": float((g["mt_gene"] == top.index[0]).mean()),
                "winner_is_top_expressed": float(g["mt_is_top_expressed"].mean()),
            })
    return rows


def main() -> None:
    import pandas as pd

    import biomjepa as bj

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CHECKPOINT (registry name or directory)")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46])
    p.add_argument("--tag", default="model_card")
    p.add_argument("--sets", nargs="+", default=["validation", "test"], choices=["validation", "test"])
    args = p.parse_args()
    cks = dict(c.split("=", 1) for c in args.checkpoints)
    rows = []
    for which in args.sets:
        adata = validation_cells() if which == "validation" else bj.datasets.pancreas()
        rows += [{"cells": which, **r} for r in score(adata, cks, tuple(args.seeds))]
        if which == "test":
            mt = pd.DataFrame(max_token_table(adata, cks))
            print(mt.round(2).to_string(index=False))
            write_csv(mt.to_dict("records"), f"{args.tag}_max_token.csv")
    table = pd.DataFrame(rows)
    wide = table.pivot_table(index=["cells", "rep"], columns=["metric", "setting"], values="mean")
    print(wide.round(3).to_string())
    print("wrote", write_csv(rows, f"{args.tag}.csv"))


if __name__ == "__main__":
    main()
