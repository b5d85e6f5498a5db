"""The validation panel (issues 37, 54 and 69): checkpoints against PCA-50 and a trivial baseline, tissue by tissue.

Validation tissues (what recipes, readouts and checkpoints are chosen on; never the test cells), all kept out of
every corpus, loaded and scored with ``benchmarks/protocol.py`` (its docstring describes them): ``pbmc`` (1,072
held-out sorted PBMCs), ``brain`` (Darmanis, 420 cells, read counts as molecule equivalents), ``immune`` (Tabula
Muris mouse immune, 1,000 cells), ``kidney`` (Tabula Muris mouse kidney, 517 cells, reads); ``chemistry`` (technical robustness, not a tissue of the rule): 900 cells of the
10x 3' v2 / 3' v3 / 5' PBMC set with marker types.

Per representation and set: few-shot k = 5 macro-F1 (``bj.bench.annotation``, seeds 42–46), Leiden ARI with
scanpy's defaults on the embedding as ``bj.tl.embed`` returns it (mean over ``--leiden-seeds`` seeds), the number of
Leiden clusters, 15-NN label agreement, the 20 %-thinned agreement (``bj.bench.depth_robustness``: thinned cells'
nearest full-depth neighbour has their label; droplet sets only: thinning reads by 20 % leaves their molecule
equivalents nearly unchanged) and, on the chemistry set, chemistry mixing within a type (``bj.bench.integration``:
``cross_batch_share_within_label``). ``pca50`` is the package's PCA-50 path (``bj.bench.add_baselines``) on the same
cells; ``depth`` (log library size and log detected genes) is the trivial baseline.

``--resolutions 0.25 0.5 1 2`` adds Leiden ARI at those resolutions and their best (``leiden_ari_best``; issue 69:
a choice must not hinge on one resolution's cluster count). ``--rule NEW OLD`` evaluates the shipping rule (:func:`shipping_rule`)
over ``--tissues`` (default all four): NEW ahead of OLD on the mean of the tissues in F1 and Leiden ARI (the best
resolution's mean over seeds when ``--resolutions`` is given, else resolution 1's), and behind OLD on no tissue by
more than ``--tol`` (0.02) in either.

    python benchmarks/evaluation/validation_tissues.py v0.4=biomjepa-mini-v0.4 v0.5=DIR [--leiden-seeds 10] \
        [--sets pbmc brain immune kidney chemistry] [--resolutions 0.25 0.5 1 2] [--rule v0.5 v0.4]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv
from benchmarks.protocol import F1_SEEDS, KNN_K, SETS, TISSUES, add_depth, knn_agreement, leiden_scores


def score_set(name: str, checkpoints: dict[str, str], leiden_seeds: int, thinned: bool = True,
              resolutions=None) -> list[dict]:
    """Rows per representation of the set ``name``: the model checkpoints, PCA-50 and the depth baseline.
    ``thinned=False`` leaves out the 20 %-thinned agreement (a second embedding pass of every checkpoint);
    ``resolutions`` adds Leiden ARI columns per resolution (``leiden_ari_mean_r<r>``, :func:`leiden_scores`)."""
    import pandas as pd

    import biomjepa as bj
    from biomjepa.bench.baselines import BASELINE_KEYS

    loader, kind, batch_key, mapping = SETS[name]
    adata = loader()
    bj.pp.map_vocab(adata, **mapping)
    labelled = adata.obs["cell_type"].notna().to_numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the standard path's own warnings (HVG flavour, ...)
        bj.bench.add_baselines(adata, ["pca"])
    reps = [BASELINE_KEYS["pca"], add_depth(adata)]
    for model, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=ck, input=kind, key_added=f"X_{model}")
        reps.append(f"X_{model}")
    sub = adata[labelled].copy()
    parts = [bj.bench.annotation(sub, label_key="cell_type", use_reps=reps, shots=(5,), seeds=F1_SEEDS)]
    if kind == "counts" and thinned:
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
        rows[r] |= leiden_scores(sub.obsm[r], labels, tuple(range(leiden_seeds)), resolutions)
        rows[r]["knn15_agreement"] = knn_agreement(sub.obsm[r], labels, k=KNN_K)
    return list(rows.values())


def ari_column(table) -> str:
    """Leiden ARI column of ``score_set``'s rows: the best over ``--resolutions`` of the mean over seeds when the
    rows have it (issue 69), else resolution 1's mean over seeds with ``--leiden-seeds`` > 1, else seed 0's."""
    for col in ("leiden_ari_best", "leiden_ari_mean"):
        if col in table and table[col].notna().all():
            return col
    return "leiden_ari"


def shipping_rule(table, new: str, old: str, tol: float = 0.02, tissues=TISSUES):
    """``(met, diffs)``: the shipping rule of ``new`` against ``old`` on the rows of ``tissues``.

    ``diffs`` (index the tissues and ``mean``; columns ``f1`` and the Leiden ARI column of :func:`ari_column`)
    holds ``new - old``; ``mean`` is the difference of the means over the tissues. Met when ``new`` is ahead on
    the mean of the tissues in both metrics and behind on no tissue by more than ``tol`` in either metric (up to
    float rounding)."""
    import pandas as pd

    tissues = list(tissues)
    sub = table[table["set"].isin(tissues)]
    cols = ["f1", ari_column(sub)]
    have = sub.set_index(["representation", "set"])[cols].sort_index()
    missing = [(r, s) for r in (new, old) for s in tissues if (r, s) not in have.index]
    if missing:
        raise ValueError(f"shipping rule: no rows for {missing} (it needs every tissue of {tissues} for both)")
    per = (have.loc[new] - have.loc[old]).loc[tissues]
    met = bool((per.mean() > 0).all() and (per >= -tol - 1e-12).all().all())
    return met, pd.concat([per, per.mean().to_frame("mean").T])


def main() -> None:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CHECKPOINT (a registry name or a directory)")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    p.add_argument("--leiden-seeds", type=int, default=10)
    p.add_argument("--tissues", nargs="+", default=list(TISSUES), choices=[s for s in SETS if s != "chemistry"],
                   help="the validation tissues of the means and of --rule")
    p.add_argument("--resolutions", nargs="+", type=float, help="also Leiden ARI at these resolutions (the rule: 1)")
    p.add_argument("--out", default="validation_tissues.csv")
    p.add_argument("--rule", nargs=2, metavar=("NEW", "OLD"), default=None,
                   help="evaluate the shipping rule: NEW ahead of OLD on the mean of --tissues in F1 and Leiden "
                        "ARI, and behind on no tissue by more than --tol in either; prints MET / NOT MET")
    p.add_argument("--tol", type=float, default=0.02, help="the rule's largest allowed shortfall per tissue")
    args = p.parse_args()
    checkpoints = dict(c.split("=", 1) for c in args.checkpoints)
    if args.rule:
        known = {*checkpoints, "pca50", "depth"}
        if set(args.rule) - known:
            p.error(f"--rule: NEW and OLD must be among {sorted(known)}")
        if set(args.tissues) - set(args.sets):
            p.error(f"--rule needs --sets to include every tissue of --tissues ({' '.join(args.tissues)})")
    res = sorted({1.0, *args.resolutions}) if args.resolutions else None
    rows = [r for s in args.sets for r in score_set(s, checkpoints, args.leiden_seeds, resolutions=res)]
    write_csv(rows, args.out)
    t = pd.DataFrame(rows)
    cols = [c for c in ("f1", ari_column(t), "knn15_agreement", "n_clusters", "thinned_agreement", "chemistry_mixing")
            if c in t] + [c for c in t if c.startswith(("leiden_ari_mean_r", "n_clusters_mean_r"))]
    print(t.pivot_table(index="representation", columns="set", values=cols).round(3).to_string())
    tissues = t[t.set.isin(args.tissues)]
    if len(tissues):
        both = tissues.groupby("representation")[["f1", ari_column(tissues), "knn15_agreement"]].mean()
        print(f"\nmean of the tissues {' '.join(args.tissues)}\n" + both.round(3).to_string())
    if args.rule:
        new, old = args.rule
        met, diffs = shipping_rule(t, new, old, args.tol, args.tissues)
        print(f"\n{new} - {old} per tissue and on the mean of the tissues\n{diffs.round(3).to_string()}\n"
              f"shipping rule ({new} ahead on the mean in both metrics, behind by at most {args.tol} per tissue): "
              f"{'MET' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
