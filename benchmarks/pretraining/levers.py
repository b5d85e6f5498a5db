"""Pretraining levers at equal budget on a fast proxy of the mini recipe (issue 28, item 3).

Every lever starts from ``models/biomjepa-mini-v0.3.yaml`` (corpus, held-out cells, validation probe on the
1,072 held-out sorted PBMCs) with the proxy's budget (``--steps``, 64 cells per step) and only the lever's
keys changed. The loop scores the validation probe at step 0 and at every checkpoint (``probe.csv``) and
logs the target diagnostics at every step (``log.csv``: target RMS relative to token states, the
predictor's R² on the step's targets before it trains on them, the orthogonal-Procrustes cosine, the
prediction / target s.d., target energy and effective ranks). One row per (lever, seed, checkpoint) goes to
``benchmarks/results/pretrain_levers_v03.csv``: the probe's readouts beside the diagnostics averaged over
the 50 steps before the checkpoint. Choose on these validation numbers only.

    python benchmarks/pretraining/levers.py --levers signal paper decoder --steps 400 --seeds 42 43
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "models" / "biomjepa-mini-v0.3.yaml"
#: the keys every lever changes from the v0.3 recipe (v0.3 itself is the row ``v0.3``)
SIGNAL = ["teacher.target_centre=global", "teacher.cell_centre=false", "data.teacher_genes=512"]
GENE = ["teacher.target_centre=gene", "teacher.cell_centre=false", "data.teacher_genes=512", "teacher.centre_rate=0.99"]
ANCHOR = ["teacher.momentum_start=1.0", "teacher.momentum_end=1.0", "probe.encoder=student"]
LEVERS: dict[str, list[str]] = {
    "v0.3": [],
    "signal": SIGNAL,
    "paper": ["teacher.target_centre=global", "teacher.cell_centre=false", "data.teacher_genes=null",
              "loss.lambda_var=0.05", "loss.lambda_cov=0.01"],
    "decoder": [*SIGNAL, "loss.objective=decoder"],
    "gene-centre": ["teacher.target_centre=gene", "teacher.cell_centre=false", "data.teacher_genes=512",
                    "teacher.centre_rate=0.99"],
    "target-std": [*SIGNAL, "teacher.target_std=true"],
    "lambda-low": [*SIGNAL, "loss.lambda_var=0.05", "loss.lambda_cov=0.01"],
    "state-var": [*SIGNAL, "loss.lambda_state_var=1.0", "loss.lambda_state_cov=0.04"],
    "state-var+lambda-low": [*SIGNAL, "loss.lambda_var=0.05", "loss.lambda_cov=0.01", "loss.lambda_state_var=1.0",
                             "loss.lambda_state_cov=0.04"],
    "state-var-strong": [*SIGNAL, "loss.lambda_state_var=25", "loss.lambda_state_cov=1"],
    "ema-slow": [*SIGNAL, "teacher.momentum_start=0.999", "teacher.momentum_end=0.9999"],
    "depth-resid": [*SIGNAL, "teacher.depth_residual=true"],
    "depth-resid+std": [*SIGNAL, "teacher.depth_residual=true", "teacher.target_std=true"],
    "gene-centre+std": ["teacher.target_centre=gene", "teacher.cell_centre=false", "data.teacher_genes=512",
                        "teacher.centre_rate=0.99", "teacher.target_std=true"],
    "target-norm": [*SIGNAL, "teacher.target_norm=true"],
    "view-256+std": [*SIGNAL[:2], "data.teacher_genes=256", "teacher.target_std=true"],
    "view-1024+std": [*SIGNAL[:2], "data.teacher_genes=1024", "teacher.target_std=true"],
    "ema-slow+std": [*SIGNAL, "teacher.target_std=true", "teacher.momentum_start=0.999", "teacher.momentum_end=0.9999"],
    "lambda-low+std": [*SIGNAL, "teacher.target_std=true", "loss.lambda_var=0.05", "loss.lambda_cov=0.01"],
    "context-32+std": [*SIGNAL, "teacher.target_std=true", "data.context_genes=32"],
    "context-256": [*SIGNAL, "data.context_genes=256"],
    "pred-narrow": [*SIGNAL, "model.pred_width=64", "model.pred_heads=4", "model.pred_layers=2"],
    "pred-narrow+std": [*SIGNAL, "teacher.target_std=true", "model.pred_width=64", "model.pred_heads=4",
                        "model.pred_layers=2"],
    # the teacher anchored at its start (momentum 1: the frozen v0.2 encoder), so its targets cannot shrink
    # (the probe then scores the student: the teacher does not move)
    "anchored": [*SIGNAL, *ANCHOR],
    "anchored+std": [*SIGNAL, *ANCHOR, "teacher.target_std=true"],
    # depth-thinned student views: the teacher sees the cell as measured, the student f·counts, f ~ U(0.2, 1)
    "thin": [*SIGNAL, "data.thin_student=0.2"],
    "anchored+thin": [*SIGNAL, *ANCHOR, "data.thin_student=0.2"],
    "anchored+std+thin": [*SIGNAL, *ANCHOR, "teacher.target_std=true", "data.thin_student=0.2"],
    # the targets divided by one number (their batch RMS), so the hinge's γ = 1 and the targets share a scale
    # without lifting the near-empty dimensions that per-dimension standardization lifts
    "anchored+scale": [*SIGNAL, *ANCHOR, "teacher.target_scale=true"],
    "anchored+scale+thin": [*SIGNAL, *ANCHOR, "teacher.target_scale=true", "data.thin_student=0.2"],
    # VICReg on the student's states against meeting unit-scale targets with one grown direction (commit e7aa93f)
    "anchored+scale+state": [*SIGNAL, *ANCHOR, "teacher.target_scale=true", "loss.lambda_state_var=1.0",
                             "loss.lambda_state_cov=0.04"],
    # the lever after it: the depth-predictable part of the level (the direction the student grows) removed
    "anchored+scale+state+depth": [*SIGNAL, *ANCHOR, "teacher.target_scale=true", "teacher.depth_residual=true",
                                   "loss.lambda_state_var=1.0", "loss.lambda_state_cov=0.04"],
    # a cell-level contrastive term (InfoNCE, other cells of the batch as negatives) on targets with the
    # per-gene centre, so that targets that stop telling cells apart cost loss (commit f32b1f7)
    "nce": [*GENE, "loss.lambda_align=0", "loss.lambda_var=0", "loss.lambda_cov=0", "loss.lambda_nce=1.0"],
    # the same with the depth-predictable part of the targets' level removed and depth-thinned student views,
    # against the one depth-tracking direction that the pure contrast grew in the targets
    "nce+depth+thin": [*GENE, "loss.lambda_align=0", "loss.lambda_var=0", "loss.lambda_cov=0", "loss.lambda_nce=1.0",
                       "teacher.depth_residual=true", "data.thin_student=0.2"],
    # the contrast against targets that cannot grow: the teacher anchored at its start, the student probed
    "anchored+nce+thin": [*GENE, *ANCHOR, "loss.lambda_align=0", "loss.lambda_var=0", "loss.lambda_cov=0",
                          "loss.lambda_nce=1.0", "data.thin_student=0.2"],
    # two views of a cell must agree on the cell: the student's mean context state (thinned) picks out the
    # teacher's mean state over its own view among the batch's cells, beside the block objective
    "view+thin": [*SIGNAL, "loss.lambda_view_nce=1.0", "data.thin_student=0.2"],
    # not run yet: the control that tells the contrast's share from the thinning's
    "view": [*SIGNAL, "loss.lambda_view_nce=1.0"],
}


def train_one(name: str, steps: int, seed: int, out: Path, probe_every: int, extra: list[str]) -> Path:
    from biomjepa.bench import probe_hook
    from biomjepa.train import load_config, pretrain

    cfg = load_config(BASE, [
        *LEVERS[name], *extra, f"run.steps={steps}", f"run.seed={seed}", f"run.run_name=lever-{name}-s{seed}",
        f"run.out_dir={out / 'runs'}", f"data.cache_dir={out / 'cache'}", f"loop.checkpoint_every={probe_every}",
        f"optim.warmup_steps={max(steps // 8, 1)}", "loop.keep_checkpoints=1",
    ])
    return pretrain(cfg, on_checkpoint=probe_hook(cfg))


def rows_of(run: Path, name: str, seed: int, steps: int, window: int = 50) -> list[dict]:
    """Probe rows of ``run`` with the training log's diagnostics averaged over the window before each."""
    import pandas as pd

    probe = pd.read_csv(run / "probe.csv")
    log = pd.read_csv(run / "log.csv")
    diag = [c for c in log.columns if c.startswith(("tgt_", "pred_", "r2", "procrustes", "align", "cosine", "var", "nce", "view_nce"))]
    out = []
    for rec in probe.to_dict("records"):
        s = int(rec["step"])
        win = log[(log.step < s) & (log.step >= s - window)]
        rec.update({c: float(win[c].mean()) if len(win) else float("nan") for c in diag})
        rec.update(lever=name, seed=seed, budget_steps=steps, presentations=s * 64, overrides=" ".join(LEVERS[name]))
        out.append(rec)
    return out


def main() -> None:
    import pandas as pd

    os.chdir(REPO)  # the config's corpus paths are relative to the repository root
    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levers", nargs="+", default=["signal"], choices=list(LEVERS))
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--probe-every", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[42])
    p.add_argument("--set", nargs="*", default=[], help="extra overrides applied to every lever")
    p.add_argument("--out", type=Path, default=Path("/tmp/bj_levers28"))
    p.add_argument("--csv", type=Path, default=REPO / "benchmarks" / "results" / "pretrain_levers_v03.csv")
    args = p.parse_args()
    for seed in args.seeds:
        for name in args.levers:
            run = train_one(name, args.steps, seed, args.out, args.probe_every, args.set)
            new = pd.DataFrame(rows_of(run, name, seed, args.steps))
            old = pd.read_csv(args.csv) if args.csv.exists() else None
            if old is not None:
                old = old[~((old.lever == name) & (old.seed == seed) & (old.budget_steps == args.steps))]
            table = pd.concat([t for t in (old, new) if t is not None], ignore_index=True)
            tmp = args.csv.with_suffix(".tmp")
            table.to_csv(tmp, index=False)
            tmp.replace(args.csv)  # after every run: a partial table survives a stop
            print(new[["lever", "seed", "step", "pooling", "macro_f1_k5", "effective_rank", "depth_nnz"]]
                  .round(3).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
