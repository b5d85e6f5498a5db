"""A short pretraining proxy in bf16 against float32 at equal steps, next to the seed-to-seed spread of float32.

Runs ``--steps`` steps of a run config (default ``models/biomjepa-mini-v0.4.yaml``, whose prepared corpus cache
must exist; ``--batch`` cells a step, warm-up ``--steps // 5``) for each ``loop.precision`` in ``fp32``/``bf16`` and
each ``--seeds``, one after the other in this process, and compares their logged curves over the last
``--window`` steps: for every logged quantity, the bf16 − fp32 difference of the same seed against the
difference between the float32 seeds. Writes every step of every run (``…_curves.csv``) and the comparison.

    python benchmarks/speed/precision_train_proxy.py --steps 60 --batch 16 --window 15   # docs/performance.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import pandas as pd

from benchmarks._common import REPO, write_csv

QUANTITIES = ("loss", "align", "cosine", "var", "view_nce", "view_nce_acc", "effective_rank", "cells_per_s")


def run(config: str, precision: str, seed: int, args, out: Path) -> pd.DataFrame:
    import biomjepa as bj

    warm = max(1, args.steps // 5)
    cfg = bj.train.load_config(config, [
        f"run.out_dir={out}", f"run.run_name={precision}_{seed}", f"run.seed={seed}", f"run.steps={args.steps}",
        f"data.batch_size={args.batch}", f"optim.warmup_steps={warm}", f"loop.precision={precision}",
        "loop.checkpoint_every=1000000", "loop.tensorboard=false", "loop.progress=false", "probe.path=null"])
    log = pd.read_csv(bj.train.pretrain(cfg) / "log.csv")
    print(f"{precision} seed {seed}: loss {log['loss'].iloc[-args.window:].mean():.4f}, "
          f"{log['cells_per_s'].median():.1f} cells/s", flush=True)
    return log.assign(precision=precision, seed=seed)


def compare(curves: pd.DataFrame, seeds: list[int], window: int) -> list[dict]:
    """Last-``window`` means per run; bf16 − fp32 per seed against the float32 seeds' spread."""
    last = curves[curves["step"] >= curves["step"].max() - window + 1]
    means = last.groupby(["precision", "seed"])[[q for q in QUANTITIES if q in last]].mean()
    rows = []
    for q in means.columns:
        fp32 = [means.loc[("fp32", s), q] for s in seeds]
        diff = [means.loc[("bf16", s), q] - means.loc[("fp32", s), q] for s in seeds]
        spread = float(np.ptp(fp32)) if len(seeds) > 1 else float("nan")
        rows.append({"quantity": q, "fp32_mean": float(np.mean(fp32)), "bf16_mean": float(np.mean(
            [means.loc[("bf16", s), q] for s in seeds])), "bf16_minus_fp32_max_abs": float(np.max(np.abs(diff))),
            "fp32_seed_spread": spread, "within_spread": bool(np.max(np.abs(diff)) <= spread) if len(seeds) > 1 else None})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "models" / "biomjepa-mini-v0.4.yaml"))
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    p.add_argument("--window", type=int, default=30, help="last steps whose means are compared")
    p.add_argument("--out", default="precision_train_proxy.csv", help="CSV name under benchmarks/results/")
    args = p.parse_args(argv)
    out = Path(tempfile.mkdtemp())
    curves = pd.concat([run(args.config, prec, seed, args, out) for seed in args.seeds for prec in ("fp32", "bf16")])
    rows = compare(curves, args.seeds, args.window)
    for r in rows:
        print(r)
    write_csv(curves.to_dict("records"), args.out.replace(".csv", "_curves.csv"))
    print(f"wrote {write_csv(rows, args.out)}")


if __name__ == "__main__":
    main()
