"""Draw the learning curves written by ``pretrain_curves.py`` (and the run's own probe.csv) into one figure.

    python benchmarks/pretraining/plot_pretrain_curves.py --csv pretrain_curves_v0.3.csv \\
        --probe models/biomjepa-mini-v0.3_probe.csv --out docs/figures/pretrain_curves_v0.3.png

Panels: few-shot k = 5 macro-F1, effective rank and depth association on the validation cells, the
20 %-thinned same-type agreement, and chemistry mixing on the held-out multi-chemistry cells, each
against cell presentations; PCA-50 on the same cells is the dashed line. With ``--probe`` the training
probe (every checkpoint, every readout, unstandardized) is drawn in the first three panels too. With
``--log RUN/log.csv`` a third row draws the run's target diagnostics (means over 50-step windows): the
predictor's held-out R² on its targets, the split-half Procrustes cosine, and the targets' energy and
effective rank (``biomjepa.train.health``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import pandas as pd

from benchmarks._common import RESULTS

PANELS = [("validation", "macro_f1", "few-shot k=5 macro-F1"), ("validation", "effective_rank", "effective rank"),
          ("validation", "depth_nnz", "depth association |r|"), ("validation", "nn_label_agreement",
                                                                   "20%-thinned: same-type NN"),
          ("chemistry", "cross_batch_share_within_label", "chemistry mixing (1 = chance)"),
          ("chemistry", "label_asw", "label ASW (marker types)")]
PROBE = {"macro_f1": "macro_f1_k5", "effective_rank": "effective_rank", "depth_nnz": "depth_nnz"}


def main() -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", default="pretrain_curves_v0.3.csv")
    p.add_argument("--probe", default=None, help="a run's probe.csv (steps × readouts)")
    p.add_argument("--cells-per-step", type=int, default=64)
    p.add_argument("--pooling", default="centred_wmean_max", help="readout of the exported states to draw")
    p.add_argument("--reference", default="model_card_v0.2_valchem.csv",
                   help="model_card_eval CSV under results/ whose non-PCA rep is drawn as a dotted line ('' for none)")
    p.add_argument("--out", default="docs/figures/pretrain_curves_v0.3.png")
    p.add_argument("--log", default=None, help="a run's log.csv with the target diagnostics (a third row of panels)")
    p.add_argument("--label", default="v0.3 run", help="legend name of the run")
    args = p.parse_args()
    df = pd.read_csv(RESULTS / args.csv)
    df = df[(df["rep"] != "model") | (df["pooling"] == args.pooling)]
    ref = pd.read_csv(RESULTS / args.reference) if args.reference else None
    probe = pd.read_csv(args.probe) if args.probe else None
    log = pd.read_csv(args.log) if args.log else None
    fig, axes = plt.subplots(3 if log is not None else 2, 3, figsize=(12, 9.5 if log is not None else 6.5))
    for ax, (cells, metric, title) in zip(axes.ravel(), PANELS):
        sub = df[(df["cells"] == cells) & (df["metric"] == metric)]
        model = sub[sub["rep"] == "model"].sort_values("presentations")
        ax.plot(model["presentations"], model["value"], "o-", color="C0", label=f"{args.label} ({args.pooling}, standardized)")
        pca = sub[sub["rep"] == "X_pca50"]["value"]
        if len(pca):
            ax.axhline(float(pca.iloc[0]), ls="--", color="k", label="PCA-50")
        if ref is not None:
            r = ref[(ref["cells"] == cells) & (ref["metric"] == metric) & (ref["rep"] != "X_pca50")
                    & ref["setting"].isin(set(sub["setting"]))]
            if len(r):
                ax.axhline(float(r["mean"].iloc[0]), ls=":", color="C3", label=f"{r['rep'].iloc[0][2:]} (shipped)")
        if probe is not None and metric in PROBE:
            for i, (kind, g) in enumerate(probe.groupby("pooling")):
                ax.plot(g["step"] * args.cells_per_step, g[PROBE[metric]], ".-", lw=0.8, alpha=0.6, color=f"C{i + 1}",
                        label=f"probe: {kind}")
        ax.set_title(f"{title} ({cells})", fontsize=9)
        ax.set_xlabel("cell presentations", fontsize=8)
        ax.tick_params(labelsize=7)
    if log is not None:
        _diagnostics(axes[2], log, args.cells_per_step)
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print("wrote", args.out)


def _diagnostics(axes, log, cells_per_step: int) -> None:
    """Target diagnostics of the training log, 50-step window means, against presentations."""
    w = log.assign(window=log["step"] // 50).groupby("window").mean(numeric_only=True)
    x = (w["step"] + 1) * cells_per_step
    axes[0].plot(x, w["r2"], "-", color="C0", label="held-out R² on targets")
    axes[0].axhline(0, ls="--", color="k", lw=0.8)
    axes[0].set_title("predictor R² on its targets (0 = the batch mean)", fontsize=9)
    axes[1].plot(x, w["procrustes_cos"], "-", color="C1")
    axes[1].set_title("Procrustes cosine, predictions vs targets (Fig. 2a)", fontsize=9)
    axes[2].plot(x, w["tgt_energy"], "-", color="C2", label="target energy")
    axes[2].set_title("target energy (green) and effective rank (red)", fontsize=9)
    twin = axes[2].twinx()
    twin.plot(x, w["tgt_rank"], "-", color="C3")
    twin.tick_params(labelsize=7)
    for ax in axes:
        ax.set_xlabel("cell presentations", fontsize=8)
        ax.tick_params(labelsize=7)


if __name__ == "__main__":
    main()
