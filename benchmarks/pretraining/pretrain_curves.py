"""Learning curves of a pretraining run on the validation cells, with PCA-50 on the same cells as a line.

For each saved training state (every ``--every`` steps) the probed encoder (the teacher, or the student of a
run with ``probe.encoder: student``) is exported with the chosen
readout and fixed feature statistics from its own corpus (``scripts/export_bundled.py``'s
``readout_from_corpus``), then scored with ``model_card_eval``'s protocol on
- the held-out sorted-PBMC validation cells: few-shot k = 5 macro-F1, effective rank, depth
  association (``depth_nnz``) and the 20 %-thinned same-type nearest full-depth neighbour
  (``nn_label_agreement`` at ``f=0.2``);
- the held-out multi-chemistry PBMC cells: chemistry mixing (``cross_batch_share_within_label``) and
  label separation (``label_asw``) of marker-gene types.
Rows are appended to ``results/<--csv>`` (steps already there are skipped, so it can follow a live
run); PCA-50 rows have ``step = -1``. Test cells are never touched here.

    python benchmarks/pretraining/pretrain_curves.py /tmp/bj_v03/runs/biomjepa-mini-v0.3 --every 500 \\
        --pooling centred_wmean_max --csv pretrain_curves_v0.3.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import pandas as pd

from benchmarks._common import RESULTS

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

METRICS = {"macro_f1", "effective_rank", "depth_nnz", "nn_label_agreement", "cross_batch_share_within_label",
           "cross_batch_share", "label_asw"}


def _rows(step: int, presentations: int, table: list[dict], cells: str) -> list[dict]:
    return [{"step": step, "presentations": presentations, "cells": cells, "rep": r["rep"], "metric": r["metric"],
             "setting": r["setting"], "value": r["mean"]} for r in table if r["metric"] in METRICS]


def score_state(path: Path, run: Path, pooling: str, feature_cells: int, seeds) -> tuple[int, list[dict], list[dict]]:
    from export_bundled import probed_encoder, readout_from_corpus

    from benchmarks.evaluation import model_card_eval as mce
    from biomjepa.train import export
    from biomjepa.train.checkpoint import load_state

    state = load_state(path)
    step = int(state["step"])
    cfg = state["config"]
    presentations = step * int(cfg["batch_size"]) * int(cfg["accumulation"])
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ck"
        which = probed_encoder(state)  # the student where the run anchored its teacher
        export(state, ck, which=which, pooling=pooling,
               readout=readout_from_corpus(state, run, pooling, feature_cells, which))
        out = _rows(step, presentations, mce.score(mce.validation_cells(), {"model": str(ck)}, seeds,
                                                   fractions=(0.2,)), "validation")
        out += _rows(step, presentations, mce.score(mce.chemistry_cells(), {"model": str(ck)}, seeds,
                                                    batch_key="batch", fractions=()), "chemistry")
    return step, [r for r in out if r["rep"] != "X_pca50"], out  # model rows, all rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--every", type=int, default=500, help="score states whose step is a multiple of this")
    p.add_argument("--pooling", default="centred_wmean_max")
    p.add_argument("--feature-cells", type=int, default=1024)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46])
    p.add_argument("--csv", default="pretrain_curves.csv")
    p.add_argument("--max-states", type=int, default=0, help="score at most this many new states (0: all)")
    p.add_argument("--steps", type=int, nargs="*", default=None, help="score only these steps")
    args = p.parse_args()
    run = Path(args.run_dir)
    out = RESULTS / args.csv
    done = pd.read_csv(out) if out.exists() else pd.DataFrame(columns=["step", "rep"])
    mine = (done["rep"] == "model") & (done.get("pooling", pd.Series(index=done.index, dtype=object)) == args.pooling)
    have = set(done.loc[mine, "step"].astype(int))
    states = sorted((run / "checkpoints").glob("step_*.pt"))
    todo = [s for s in states if int(s.stem.split("_")[1]) % args.every == 0 and int(s.stem.split("_")[1]) not in have]
    if args.steps:
        todo = [s for s in todo if int(s.stem.split("_")[1]) in set(args.steps)]
    if args.max_states:
        todo = todo[: args.max_states]
    for path in todo:
        step, rows, everything = score_state(path, run, args.pooling, args.feature_cells, tuple(args.seeds))
        if not (done["rep"] == "X_pca50").any():
            rows += [{**r, "step": -1, "presentations": 0} for r in everything if r["rep"] == "X_pca50"]
        for r in rows:
            r["rep"] = "model" if r["rep"] == "X_model" else r["rep"]
            r["pooling"] = args.pooling
        new = pd.DataFrame(rows)
        done = pd.concat([done, new], ignore_index=True) if len(done) else new
        done.to_csv(out, index=False)
        v = new[new["rep"] == "model"].set_index(["cells", "metric"])["value"]
        print(f"step {step}: " + ", ".join(f"{c}/{m} {x:.3f}" for (c, m), x in v.items()), flush=True)
    print("wrote", out)


if __name__ == "__main__":
    main()
