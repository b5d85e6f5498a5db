"""Real-data acceptance of the Fig. 6 analyses: Norman perturbation arithmetic, Baron max-token + ablation.

Usage::

    python benchmarks/evaluation/biology_pancreas_norman.py --part norman
    python benchmarks/evaluation/biology_pancreas_norman.py --part baron --checkpoint /path/to/checkpoint
    python benchmarks/evaluation/biology_pancreas_norman.py --part demo      # bundled model, held-out demo cells

(1) Norman 2019 (``dataset == "norman19"`` rows of the shared 500-gene subset; X is log-normalized):
``tl.perturbation_arithmetic`` on a 50-component PCA of X, and on the BioM-JEPA embedding of
``layers["counts_reconstructed"]`` when ``--checkpoint`` is given.
(2) Baron 2016 human pancreas: ``tl.max_token`` by ``cell_type1`` (+ Fig. 6a heat map) and
``tl.ablate_programme`` of the alpha/beta/delta/acinar/ductal marker programmes of
``priors/pancreas_markers_common_knowledge.tsv`` with matched identities (+ Fig. 6b), on the
cells of those five identities.

With a random-initialised checkpoint the Baron numbers (and the BioM-JEPA Norman numbers) only
exercise the pipeline: they carry no biological meaning.
Writes CSV/JSON tables and PNG figures to ``benchmarks/results/biology_*``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import biomjepa as bj
from benchmarks._common import RESULTS, SHARED

logger = logging.getLogger("biology")
IDENTITIES = ("alpha", "beta", "delta", "acinar", "ductal")
HIGHLIGHT = [("MAP2K3", "MAP2K6"), ("CEBPA", "CEBPE"), ("TBX2", "TBX3"), ("CEBPB", "MAPK1")]


def _save(ax, name: str) -> Path:
    path = RESULTS / name
    ax.figure.savefig(path, dpi=150, bbox_inches="tight")
    return path


def norman(checkpoint: str | None, seed: int) -> dict:
    import anndata as ad
    import scanpy as sc

    a = ad.read_h5ad(SHARED / "scrna" / "norman2019_mcfaline2023_subset_500genes.h5ad")
    a = a[a.obs["dataset"] == "norman19"].copy()
    sc.pp.pca(a, n_comps=50, random_state=seed)
    reps = {"pca50": "X_pca"}
    if checkpoint is not None:
        bj.pp.map_vocab(a)
        bj.tl.embed(a, checkpoint=checkpoint, layer="counts_reconstructed")
        reps["biomjepa"] = "X_biomjepa"
    out = {}
    for name, rep in reps.items():
        key = f"pa_{name}"
        bj.tl.perturbation_arithmetic(a, use_rep=rep, n_random=200, random_state=seed, key_added=key)
        res = a.uns[key]
        res["table"].to_csv(RESULTS / f"biology_norman_{name}.csv", index=False)
        _save(bj.pl.perturbation_arithmetic(a, key=key, highlight=HIGHLIGHT), f"biology_norman_{name}.png")
        out[name] = {k: v for k, v in res["summary"].items()}
        logger.info("Norman %s: %s", name, out[name])
    return out


def baron(checkpoint: str, seed: int, n_cells: int) -> dict:
    import anndata as ad
    import pandas as pd

    a = ad.read_h5ad(SHARED / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad")
    bj.pp.map_vocab(a)
    markers = pd.read_csv(SHARED / "priors" / "pancreas_markers_common_knowledge.tsv", sep="\t", comment="#")
    programmes = {c: markers.loc[markers["cell_type"] == c, "gene"].tolist() for c in IDENTITIES}
    bj.tl.max_token(a, groupby="cell_type1", checkpoint=checkpoint)
    A = a.uns["max_token"]["winner_fraction"]
    A.to_csv(RESULTS / "biology_baron_max_token.csv")
    _save(bj.pl.max_token(a, "cell_type1", n_genes=25), "biology_baron_max_token.png")
    top = {c: (A.loc[c].idxmax(), float(A.loc[c].max())) for c in A.index}

    sub = a[a.obs["cell_type1"].isin(IDENTITIES)].copy()
    bj.tl.ablate_programme(sub, programmes, groupby="cell_type1", matched={c: c for c in IDENTITIES},
                           n_cells=n_cells, checkpoint=checkpoint, random_state=seed)
    res = sub.uns["ablation"]
    res["matched"].to_csv(RESULTS / "biology_baron_ablation_matched.csv", index=False)
    res["groups"].to_csv(RESULTS / "biology_baron_ablation_groups.csv", index=False)
    res["null_sets"].to_csv(RESULTS / "biology_baron_ablation_null_sets.csv", index=False)
    _save(bj.pl.ablate_programme(sub), "biology_baron_ablation.png")
    return {"max_token_top_gene": top, "ablation_test": res["test"],
            "ablation_matched": res["matched"].to_dict(orient="records")}


CANONICAL = {"GCG": "alpha", "INS": "beta", "SST": "delta", "PPY": "gamma", "GHRL": "epsilon", "REG1A": "acinar"}


def demo(checkpoint: str) -> dict:
    """Max-token winners on the bundled (held-out) pancreas demo: do canonical markers win in their type?"""
    a = bj.datasets.pancreas()
    bj.pp.map_vocab(a)
    bj.tl.max_token(a, groupby="cell_type", checkpoint=checkpoint)
    A = a.uns["max_token"]["winner_fraction"]
    A.to_csv(RESULTS / "biology_demo_max_token.csv")
    _save(bj.pl.max_token(a, "cell_type", n_genes=25), "biology_demo_max_token.png")
    rows = []
    for gene, ctype in CANONICAL.items():
        if ctype not in A.index or gene not in A.columns:
            rows.append({"marker": gene, "cell_type": ctype, "present": False})
            continue
        row = A.loc[ctype]
        rows.append({"marker": gene, "cell_type": ctype, "present": True,
                     "winner_fraction": float(row[gene]), "rank_in_type": int((row > row[gene]).sum()) + 1,
                     "top_gene_in_type": row.idxmax(), "type_where_it_wins_most": A[gene].idxmax()})
    return {"n_cells": a.n_obs, "markers": rows}


def main(argv=None) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["norman", "baron", "demo", "all"], default="all")
    p.add_argument("--checkpoint", default=None, help="checkpoint dir/name (default bj.settings.checkpoint for Baron)")
    p.add_argument("--n-cells", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {"checkpoint": args.checkpoint}
    if args.part in ("norman", "all"):
        report["norman"] = norman(args.checkpoint, args.seed)
    if args.part in ("baron", "all"):
        report["baron"] = baron(args.checkpoint or bj.settings.checkpoint, args.seed, args.n_cells)
    if args.part in ("demo", "all"):
        report["demo"] = demo(args.checkpoint or bj.settings.checkpoint)
    path = RESULTS / f"biology_{args.part}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
