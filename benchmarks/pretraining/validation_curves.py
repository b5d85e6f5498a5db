"""Learning curves of a pretraining run on the validation tissues, against presentations (issues 43, 54 and 69).

For every saved training state whose step is a multiple of ``--every`` (step 0 included when it was saved), and
the last saved state whatever its step (what ``export_bundled.py`` exports by default), that the CSV does not
hold yet, the probed encoder (the EMA teacher; the student of a run with ``probe.encoder: student``) is exported
into a temporary directory once per readout of ``--readouts`` (:data:`biomjepa.nn.pooling.POOLINGS`), each with
fixed feature statistics of that readout over ``--feature-cells`` cells of the run's own corpus cache
(``scripts/export_bundled.py``'s ``readouts_from_corpus``: one embedding pass per state for all readouts) and
its weights stored as ``--dtype`` (float32 by default; ``bfloat16`` scores what ``export_bundled.py`` ships). The
exports are scored with ``validation_tissues.py``'s protocol (its ``score_set``, one call per tissue and
state: the 20 %-thinned PBMCs are drawn once per call and re-embedded by each export) on ``--tissues`` (default
the four validation tissues: ``pbmc``, the 1,072 held-out sorted PBMCs; ``brain``, the 420 Darmanis cells read
as reads; ``immune``, the 1,000 Tabula Muris mouse immune cells; ``kidney``, the 517 typed Tabula Muris mouse kidney
cells, read as reads): few-shot k = 5 macro-F1, Leiden ARI with
scanpy's defaults (mean and s.d. over ``--leiden-seeds`` seeds; with ``--resolutions`` also the best mean over
them, ``leiden_ari_best``), 15-NN label agreement, the number of Leiden
clusters and, on ``pbmc``, the 20 %-thinned agreement (``--no-thinned`` leaves it out: a quarter of a state's cost).

Rows ``step, presentations, readout, set, metric, value`` are appended to ``results/<--csv>`` after each
state, so it can follow a live run and be re-run (training states are only read; presentations = step ×
``batch_size`` × ``accumulation`` of the state's config × ``--world-size``). ``readout`` names the
representation: the readout for the run's rows; ``pca50`` and ``depth`` (PCA-50 and the trivial baseline of
the same cells, scored once) with ``step = -1``; each ``--reference NAME=CHECKPOINT``, scored once, as
``NAME`` with ``step = -2``, so the shipping rule (v0.4 against v0.3) reads from the same file.

At the end it prints, per tissue × readout × metric, the step where the curve stops rising (the first step
from which no later value exceeds it by more than ``--tol``), then per readout whether the mean over the
tissues of F1 and of Leiden ARI has passed its best by ``--patience`` probe points (the long run's stopping
rule, issue 54), and the last step next to PCA-50 and the references; ``--plot PNG`` draws F1, Leiden ARI and
15-NN agreement against presentations (a panel per tissue × metric, a line per readout, PCA-50 and the
references as horizontal lines). It is CPU-heavy: not beside a CPU training run.

    python benchmarks/pretraining/validation_curves.py /work/bj_v05/runs/biomjepa-mini-v0.5 [--every 500] \\
        [--readouts max_top5 mean_wmean] [--reference v0.4=biomjepa-mini-v0.4] [--leiden-seeds 10] \\
        [--resolutions 0.25 0.5 1 2] [--csv pretrain_curves_v0.5.csv] [--plot docs/figures/pretrain_curves_v0.5.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import pandas as pd

from benchmarks._common import RESULTS, write_csv
from benchmarks.evaluation.validation_tissues import score_set
from benchmarks.protocol import SETS, TISSUES

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))  # export_bundled

TITLES = {"pbmc": "sorted PBMCs", "brain": "Darmanis brain (reads)", "immune": "Tabula Muris immune (mouse)",
          "kidney": "Tabula Muris kidney (mouse, reads)"}
METRICS = ("f1", "leiden_ari_mean", "leiden_ari_sd", "knn15_agreement", "n_clusters", "thinned_agreement",
           "leiden_ari_best", "leiden_ari_best_sd", "leiden_res_best")
PLOTTED = {"f1": "few-shot k = 5 macro-F1", "leiden_ari_mean": "Leiden ARI (scanpy defaults)",
           "leiden_ari_best": "Leiden ARI, best resolution",
           "knn15_agreement": "15-NN label agreement"}
RULE = ("f1", "leiden_ari_mean")  # the curves the stopping rule and the shipping rule read
BASELINES = ("pca50", "depth")  # validation_tissues' names of PCA-50 and the depth baseline
BASELINE, REFERENCE = -1, -2  # the step of their rows, of the --reference rows


def state_step(path: Path) -> int:
    return int(path.stem.split("_")[1])


def states_to_score(paths, every: int) -> list[Path]:
    """The saved states whose step is a multiple of ``every``, and always the last one (a run that ended off a
    multiple, e.g. stopped at the end of a session, is exported from that state), sorted by step."""
    paths = sorted(paths, key=state_step)
    return [s for s in paths if state_step(s) % every == 0 or s == paths[-1]]


def stops_rising(steps, values, tol: float = 0.01) -> int:
    """The first step from which no later value exceeds the value there by more than ``tol``."""
    order = np.argsort(np.asarray(steps))
    s, v = np.asarray(steps)[order], np.asarray(values, float)[order]
    return next(int(s[i]) for i in range(len(v)) if not (v[i + 1:] > v[i] + tol).any())


def passed_best(steps, values, patience: int = 2) -> tuple[int, bool]:
    """``(best step, passed)``: where the curve is highest (the earliest such step), and whether ``patience`` or
    more later probe points follow it, none of them above it."""
    order = np.argsort(np.asarray(steps))
    s, v = np.asarray(steps)[order], np.asarray(values, float)[order]
    best = int(np.argmax(v))
    return int(s[best]), len(v) - 1 - best >= patience


def export_state(path: Path, run: Path, readouts: list[str], feature_cells: int, world: int,
                 tmp: str, dtype: str = "float32") -> tuple[int, int, dict[str, str]]:
    """``(step, presentations, {readout: checkpoint})``: the state's probed encoder exported once per readout, the
    feature statistics of every readout measured from one embedding pass over the corpus sample; weights in ``dtype``."""
    import torch
    from export_bundled import probed_encoder, readouts_from_corpus

    from biomjepa.train import export
    from biomjepa.train.checkpoint import load_state

    state = load_state(path)
    step, cfg = int(state["step"]), state["config"]
    which = probed_encoder(state)
    stats = readouts_from_corpus(state, run, readouts, feature_cells, which)
    out = {}
    for k in readouts:
        ck = Path(tmp) / f"step{step}_{k}"
        export(state, ck, which=which, pooling=k, readout=stats[k], dtype=getattr(torch, dtype))
        out[k] = str(ck)
    return step, step * int(cfg["batch_size"]) * int(cfg["accumulation"]) * world, out


def score(checkpoints: dict[str, str], tags: dict[str, tuple], leiden_seeds: int, tissues,
          thinned: bool = True, resolutions=None) -> list[dict]:
    """``score_set``'s rows on ``tissues``, long; only the representations in ``tags`` (→ step, presentations)."""
    rows = []
    for name in tissues:
        for r in score_set(name, checkpoints, leiden_seeds, thinned, resolutions):
            if r["representation"] not in tags:
                continue
            r.setdefault("leiden_ari_mean", r["leiden_ari"])  # a single seed
            step, presentations = tags[r["representation"]]
            rows += [{"step": step, "presentations": presentations, "readout": r["representation"], "set": name,
                      "metric": m, "value": r[m]} for m in METRICS if m in r]
    return rows


def stopping_rule(curves: pd.DataFrame, tissues, patience: int) -> None:
    """Per readout: the best step of the mean over ``tissues`` of each :data:`RULE` curve, and whether both have
    passed it by ``patience`` probe points (steps scored on every tissue only)."""
    print(f"\nthe mean over {', '.join(tissues)}: best step, and passed by {patience} probe points?")
    sub = curves[curves["set"].isin(tissues) & curves["metric"].isin(RULE)]
    for k, g in sub.groupby("readout"):
        mean = g.pivot_table(index="step", columns=["metric", "set"], values="value").dropna()
        verdicts = []
        for m in RULE:
            if m not in mean.columns.get_level_values(0):
                continue
            curve = mean[m][list(tissues)].mean(axis=1)
            best, passed = passed_best(curve.index, curve.to_numpy(), patience)
            verdicts.append(passed)
            print(f"{k:18s} {m:16s} best {curve.max():.3f} at step {best}; last {curve.iloc[-1]:.3f} at step "
                  f"{int(curve.index[-1])}: {'passed' if passed else 'not passed'}")
        print(f"{k:18s} both curves passed their best: {'yes' if verdicts and all(verdicts) else 'no'}")


def summarize(table: pd.DataFrame, tol: float, tissues, patience: int) -> None:
    """Where each curve stops rising, the stopping rule, and the last step next to PCA-50 and the references."""
    table = table[table["set"].isin(tissues)]
    curves = table[(table["step"] >= 0) & table["metric"].isin(PLOTTED)]
    if curves.empty:
        return
    print(f"\nwhere each curve stops rising (no later value above it by more than {tol})")
    for (name, k, m), g in curves.groupby(["set", "readout", "metric"]):
        at = stops_rising(g["step"], g["value"], tol)
        here = g[g["step"] == at].iloc[0]
        rising = "  (still rising at the last state)" if at == g["step"].max() and len(g) > 1 else ""
        print(f"{name:6s} {k:18s} {m:16s} step {at} ({int(here['presentations']):,} presentations): "
              f"{here['value']:.3f}, best {g['value'].max():.3f}{rising}")
    stopping_rule(curves, tissues, patience)
    last = int(curves["step"].max())
    show = table[((table["step"] == last) | (table["step"] < 0)) & table["metric"].isin(PLOTTED)]
    t = show.pivot_table(index="readout", columns=["metric", "set"], values="value")
    for m in PLOTTED:
        if m in t.columns.get_level_values(0):
            t[(m, "mean")] = t[m][[c for c in tissues if c in t[m]]].mean(axis=1)
    print(f"\nstep {last} (readouts) next to PCA-50, depth and the references\n"
          + t.sort_index(axis=1).round(3).to_string())


def with_mean(table: pd.DataFrame, tissues) -> pd.DataFrame:
    """``table`` plus rows of set ``mean``: per step, readout and metric, the mean over ``tissues`` where every
    tissue has a value (what the stopping and shipping rules read)."""
    sub = table[table["set"].isin(tissues) & table["metric"].isin(PLOTTED)]
    g = sub.groupby(["step", "readout", "metric"], dropna=False)
    mean = g["value"].mean()[g["set"].nunique() == len(tissues)].reset_index()
    mean["presentations"] = g["presentations"].first().reindex(pd.MultiIndex.from_frame(mean[["step", "readout",
                                                                                            "metric"]])).to_numpy()
    return pd.concat([table, mean.assign(set="mean")], ignore_index=True)


def plot(table: pd.DataFrame, png: str, tissues) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    readouts = sorted(table.loc[table["step"] >= 0, "readout"].unique())
    refs = sorted(table.loc[table["step"] == REFERENCE, "readout"].unique())
    table, rows = with_mean(table, tissues), [*tissues, "mean"]
    fig, axes = plt.subplots(len(rows), len(PLOTTED), figsize=(4.2 * len(PLOTTED), 2.9 * len(rows)), squeeze=False)
    for i, name in enumerate(rows):
        tissue = TITLES.get(name, f"mean of {len(tissues)} tissues" if name == "mean" else name)
        for j, (metric, label) in enumerate(PLOTTED.items()):
            ax, sub = axes[i, j], table[(table["set"] == name) & (table["metric"] == metric)]
            for c, k in enumerate(readouts):
                g = sub[(sub["readout"] == k) & (sub["step"] >= 0)].sort_values("presentations")
                ax.plot(g["presentations"], g["value"], "o-", color=f"C{c}", label=k)
            for c, k in enumerate(["pca50", *refs]):
                v = sub.loc[(sub["readout"] == k) & (sub["step"] < 0), "value"]
                if len(v):
                    ax.axhline(float(v.iloc[0]), ls="--" if k == "pca50" else ":", lw=1,
                               color="k" if k == "pca50" else f"C{len(readouts) + c}",
                               label="PCA-50" if k == "pca50" else k)
            ax.set_title(f"{tissue}: {label}", fontsize=9)
            ax.set_xlabel("cell presentations (thousands)", fontsize=8)
            ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}")  # 1000001200001400001 otherwise
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    Path(png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    print("wrote", png)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory (config.yaml, checkpoints/step_*.pt); only read")
    p.add_argument("--every", type=int, default=500,
                   help="score states whose step is a multiple of this (and always the last saved state)")
    p.add_argument("--readouts", nargs="+", default=["max_top5", "mean_wmean"],
                   help="readouts to export each state with (biomjepa.nn.pooling.POOLINGS)")
    p.add_argument("--reference", action="append", default=[], metavar="NAME=CHECKPOINT",
                   help="a checkpoint scored once as rows with step = -2 (repeatable), e.g. v0.4=biomjepa-mini-v0.4")
    p.add_argument("--tissues", nargs="+", default=list(TISSUES), choices=[s for s in SETS if s != "chemistry"])
    p.add_argument("--no-thinned", action="store_true", help="leave out the 20 %%-thinned PBMC agreement")
    p.add_argument("--patience", type=int, default=2, help="probe points after the best for the stopping rule")
    p.add_argument("--leiden-seeds", type=int, default=10)
    p.add_argument("--resolutions", nargs="+", type=float, default=None,
                   help="also Leiden ARI at these resolutions and their best (leiden_ari_best; issue 69: 0.25 0.5 1 2)")
    p.add_argument("--feature-cells", type=int, default=1024, help="corpus cells for the fixed feature statistics")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="storage dtype of the exported weights (bfloat16: what export_bundled.py ships)")
    p.add_argument("--world-size", type=int, default=1, help="processes the run trained on (states do not record it)")
    p.add_argument("--csv", default="pretrain_curves.csv", help="in benchmarks/results")
    p.add_argument("--plot", default=None, metavar="PNG", help="draw the curves into this figure")
    p.add_argument("--tol", type=float, default=0.01, help="a curve stops rising where no later value is above by more")
    args = p.parse_args()
    from biomjepa.nn.pooling import POOLINGS

    refs = dict(r.split("=", 1) for r in args.reference)
    if set(args.readouts) - set(POOLINGS):
        p.error(f"--readouts: choose from {POOLINGS}")
    if set(refs) & {*args.readouts, *BASELINES}:
        p.error("--reference: give a NAME that is not a readout, pca50 or depth")

    out = RESULTS / args.csv
    table = pd.read_csv(out) if out.exists() else pd.DataFrame(columns=["step", "readout"])
    done = table.groupby(["step", "readout"])["set"].agg(set) if len(table) else pd.Series(dtype=object)
    have = {(int(st), k) for (st, k), sets in done.items() if set(args.tissues) <= sets}
    pending = {n: ck for n, ck in refs.items() if (REFERENCE, n) not in have}
    baseline = not (table["step"] == BASELINE).any()
    states = states_to_score((Path(args.run_dir) / "checkpoints").glob("step_*.pt"), args.every)
    todo = [(s, [k for k in args.readouts if (state_step(s), k) not in have]) for s in states]
    todo = [(s, ks) for s, ks in todo if ks] or ([(None, [])] if pending or baseline else [])
    for path, readouts in todo:
        cks, tags = dict(pending), {n: (REFERENCE, None) for n in pending}
        if baseline:
            tags |= {b: (BASELINE, None) for b in BASELINES}
        with tempfile.TemporaryDirectory() as tmp:
            if path is not None:
                step, presentations, exported = export_state(path, Path(args.run_dir), readouts, args.feature_cells,
                                                             args.world_size, tmp, args.dtype)
                cks |= exported
                tags |= {k: (step, presentations) for k in exported}
            res = sorted({1.0, *args.resolutions}) if args.resolutions else None
            new = pd.DataFrame(score(cks, tags, args.leiden_seeds, args.tissues, not args.no_thinned, res))
        if len(table):  # a state scored before on fewer tissues: its old rows give way to the new ones
            key = ["step", "readout", "set"]
            old = table.set_index(key).index.isin(new.set_index(key).index)
            table = pd.concat([table[~old], new], ignore_index=True)
        else:
            table = new
        write_csv(table.to_dict("records"), args.csv)
        pending, baseline = {}, False
        t = new.pivot_table(index="readout", columns=["set", "metric"], values="value")
        print(f"{path.name if path else 'baselines and references'}\n" + t.round(3).to_string(), flush=True)
    print("results in", out)
    summarize(table, args.tol, args.tissues, args.patience)
    if args.plot:
        plot(table, args.plot, args.tissues)


if __name__ == "__main__":
    main()
