"""Every number of the model card: checkpoints vs PCA-50 on the validation and the test cells.

Validation: the 1,072 held-out sorted-PBMC cells (what recipes and checkpoints are chosen on).
Chemistry (validation for technical robustness, held out of v0.3's corpus): 900 cells (300 per
chemistry, seeded) of the 10x PBMC set with 3' v2, 3' v3 and 5' chemistries; its cells carry no
annotation, so coarse types (T, B, NK, monocyte) come from marker genes (:func:`marker_types`), and
``bj.bench.integration`` reports chemistry mixing next to label separation.
Test: the 1,074 held-out Baron pancreas cells, ``bj.datasets.pancreas()`` (reported only).
Per representation: few-shot k = 5 macro-F1 (``bj.bench.annotation``, seeds 42–46), effective rank
and depth association (``bj.bench.geometry``: ``depth_nnz`` = mean |r| of the leading axis and of the
norm with detected genes), ``bj.bench.depth_robustness`` (thinning to 50 % and 20 %) and Leiden ARI / NMI
with scanpy's defaults on the labelled cells (``protocol.leiden_scores``; mean and s.d. over
``--leiden-seeds`` seeds, default 10; ``task="clustering"``). On the test cells also the max-token winners per
cell type against the trivial baseline (each cell's most-expressed gene) and, for a type with a canonical marker
(:data:`MARKERS`), the marker's share of the type's winners, its rank among them and the type where it wins most.
``--baselines scvi`` needs scvi-tools, checked before any work (install it in the benchmark's own venv: see the
error message).

    python benchmarks/evaluation/model_card_eval.py NAME=CHECKPOINT [NAME=CHECKPOINT ...] [--tag v0.2] \
        [--sets test] [--baselines pca hvg scvi] [--leiden-seeds 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks import protocol
from benchmarks._common import write_csv


def leiden_rows(adata, reps, leiden_seeds: int) -> list[dict]:
    """Leiden ARI and NMI with scanpy's defaults (``protocol.leiden_scores``: default neighbour graph on
    the representation, igraph Leiden at resolution 1) of each of ``reps`` on the labelled cells, as summarized
    rows (``task="clustering"``, ``setting="scanpy_defaults"``): the mean over Leiden seeds ``0..leiden_seeds-1``,
    the s.d. of ARI (NaN for NMI and for one seed) and ``n`` the number of seeds."""
    labelled = adata.obs["cell_type"].notna().to_numpy()
    labels = adata.obs["cell_type"].to_numpy()[labelled].astype(str)
    seeds = tuple(range(leiden_seeds))
    out = []
    for r in reps:
        s = protocol.leiden_scores(adata.obsm[r][labelled], labels, seeds)
        for m in ("leiden_ari", "leiden_nmi"):
            out.append({"task": "clustering", "rep": r, "setting": "scanpy_defaults", "metric": m,
                        "mean": s.get(f"{m}_mean", s[m]), "sd": s.get(f"{m}_sd", float("nan")), "n": len(seeds)})
    return out


def score(adata, checkpoints: dict[str, str], seeds, *, batch_key: str | None = None,
          fractions=(0.5, 0.2), baselines=("pca",), leiden_seeds: int = 0) -> list[dict]:
    """Summarized rows (``task, rep, setting, metric, mean, sd, n``) of the checkpoints and ``baselines`` on
    ``adata``; with ``leiden_seeds`` > 0 also :func:`leiden_rows` (0, the default for other scripts: none)."""
    import pandas as pd

    import biomjepa as bj
    from biomjepa.bench.baselines import BASELINE_KEYS

    bj.pp.map_vocab(adata)
    bj.bench.add_baselines(adata, list(baselines))
    reps = [BASELINE_KEYS[b] for b in baselines]
    for name, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=ck, key_added=f"X_{name}")
        reps.append(f"X_{name}")
    ann = bj.bench.annotation(adata, label_key="cell_type", use_reps=reps, shots=(5,), seeds=seeds)
    geo = bj.bench.geometry(adata, use_reps=reps)
    parts = [ann, geo]
    if fractions:
        # only PCA-50 and the models can be re-derived from thinned counts (HVG values and scVI are not refitted)
        thin = [r for r in reps if r not in (BASELINE_KEYS["hvg"], BASELINE_KEYS["scvi"])]
        parts.append(bj.bench.depth_robustness(adata, label_key="cell_type", use_reps=thin, fractions=fractions))
    if batch_key is not None:
        parts.append(bj.bench.integration(adata, batch_key=batch_key, label_key="cell_type", use_reps=reps))
    table = bj.bench.summarize(pd.concat(parts))
    keep = ["macro_f1", "effective_rank", "depth_nnz", "depth_mean", "nn_label_agreement", "self_match",
            "relative_shift", "cross_batch_share", "cross_batch_share_within_label", "label_asw", "batch_asw"]
    leiden = leiden_rows(adata, reps, leiden_seeds) if leiden_seeds > 0 else []
    return table[table["metric"].isin(keep)].to_dict("records") + leiden


#: the canonical marker of a test-cell type (the pancreas's hormones and an acinar enzyme)
MARKERS = {"alpha": "GCG", "beta": "INS", "delta": "SST", "gamma": "PPY", "epsilon": "GHRL", "acinar": "REG1A"}


def max_token_table(adata, checkpoints: dict[str, str]) -> list[dict]:
    """Per cell type: the commonest winner and the commonest most-expressed gene, with their shares; for a type of
    :data:`MARKERS`, its marker's share of the type's winners, its rank among them and where it wins most."""
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
            if (marker := MARKERS.get(str(ct))) is not None:
                wins = (obs["mt_gene"] == marker).groupby(obs["cell_type"], observed=True).mean()
                rows[-1] |= {"marker": marker, "marker_winner_share": win.get(marker, 0) / len(g),
                             "marker_rank_in_type": int((win > win.get(marker, 0)).sum()) + 1,
                             "marker_wins_most_in": wins.idxmax() if wins.max() > 0 else None}
    return rows


def main() -> None:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="NAME=CHECKPOINT (registry name or directory)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(protocol.F1_SEEDS))
    p.add_argument("--tag", default="model_card")
    p.add_argument("--sets", nargs="+", default=["validation", "chemistry", "test"],
                   choices=["validation", "chemistry", "test"])
    p.add_argument("--baselines", nargs="+", default=["pca"], choices=["pca", "hvg", "scvi"],
                   help="baseline rows (bj.bench.add_baselines): PCA-50 always belongs; hvg = the 2,000 "
                        "log-normalized HVGs themselves; scvi = scVI's latent (needs scvi-tools)")
    p.add_argument("--no-max-token", action="store_true", help="skip the test cells' max-token table")
    p.add_argument("--leiden-seeds", type=int, default=10,
                   help="Leiden seeds 0..N-1 of the Leiden ARI / NMI rows (scanpy's defaults): their mean and s.d.")
    args = p.parse_args()
    if args.leiden_seeds < 1:
        p.error("--leiden-seeds must be at least 1")
    if "scvi" in args.baselines and importlib.util.find_spec("scvi") is None:
        p.error(f"--baselines scvi: {protocol.SCVI_INSTALL}")
    cks = dict(c.split("=", 1) for c in args.checkpoints)
    rows = []
    for which in args.sets:
        if which == "chemistry":
            chem = score(protocol.chemistry_cells(), cks, tuple(args.seeds), batch_key="batch", fractions=(),
                         baselines=args.baselines, leiden_seeds=args.leiden_seeds)
            rows += [{"cells": which, **r} for r in chem]
            continue
        adata = protocol.validation_cells() if which == "validation" else protocol.test_cells()
        rows += [{"cells": which, **r} for r in score(adata, cks, tuple(args.seeds), baselines=args.baselines,
                                                      leiden_seeds=args.leiden_seeds)]
        if which == "test" and not args.no_max_token:
            mt = pd.DataFrame(max_token_table(adata, cks))
            print(mt.round(2).to_string(index=False))
            write_csv(mt.to_dict("records"), f"{args.tag}_max_token.csv")
    table = pd.DataFrame(rows)
    wide = table.pivot_table(index=["cells", "rep"], columns=["metric", "setting"], values="mean")
    print(wide.round(3).to_string())
    print("wrote", write_csv(rows, f"{args.tag}.csv"))


if __name__ == "__main__":
    main()
