"""The paper's Fig. 3 at small scale: block-JEPA and its three objective controls (token-IJEPA,
random block, decoder-only) trained with the same budget on the same corpus, then scored on the
held-out Baron cells (few-shot k = 5 macro-F1, seeds 42–46; effective rank; depth association).

Every run starts from the bundled model's config (``models/biomjepa-mini-v0.1.yaml``: corpus,
held-out cells, loss settings) with only ``objective``, ``steps`` and the run name changed.

    python benchmarks/pretraining/pretrain_controls.py --steps 1000 --out /tmp/bj_controls
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv

REPO = Path(__file__).resolve().parents[2]
OBJECTIVES = ("block", "token", "random_block", "decoder")


def train_one(objective: str, steps: int, out: Path) -> Path:
    from biomjepa.train import export, load_config, pretrain

    cfg = load_config(REPO / "models" / "biomjepa-mini-v0.1.yaml",
                      [f"objective={objective}", f"steps={steps}", f"run_name=control-{objective}",
                       f"out_dir={out / 'runs'}", f"checkpoint_every={steps}", "warmup_steps=100"])
    run = pretrain(cfg)
    return export(run, out / "export" / objective)


def score(checkpoints: dict[str, Path], seeds: tuple[int, ...]):
    import pandas as pd

    import biomjepa as bj

    adata = bj.datasets.pancreas()
    bj.pp.map_vocab(adata)
    bj.bench.add_baselines(adata, ["pca"])
    reps = ["X_pca50"]
    for name, ck in checkpoints.items():
        bj.tl.embed(adata, checkpoint=str(ck), key_added=f"X_{name}")
        reps.append(f"X_{name}")
    ann = bj.bench.annotation(adata, label_key="cell_type", use_reps=reps, shots=(5,), seeds=seeds)
    geo = bj.bench.geometry(adata, use_reps=reps)
    table = bj.bench.summarize(pd.concat([ann, geo]))
    keep = table["metric"].isin(["macro_f1", "effective_rank", "depth_mean"])
    return table[keep]


def main() -> None:
    import os

    os.chdir(REPO)  # the config's corpus paths are relative to the repository root
    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44, 45, 46])
    p.add_argument("--out", default="/tmp/bj_controls")
    args = p.parse_args()
    out = Path(args.out)
    cks = {obj: train_one(obj, args.steps, out) for obj in args.objectives}
    table = score(cks, tuple(args.seeds))
    table.insert(0, "steps", args.steps)
    wide = table.pivot_table(index="rep", columns="metric", values="mean")
    print(wide.round(3).to_string())
    print("wrote", write_csv(table.to_dict("records"), "pretrain_controls.csv"))


if __name__ == "__main__":
    main()
