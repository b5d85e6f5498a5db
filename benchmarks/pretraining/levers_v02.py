"""Each depth lever of ``biomjepa-mini`` v0.2 against the v0.1 recipe at equal budget, and the
objective controls (token-IJEPA, random block, decoder-only) with the v0.2 recipe.

Every run starts from ``models/biomjepa-mini-v0.2.yaml`` (corpus, held-out cells, validation probe)
with only the variant's keys, ``steps`` and the run name changed; the training loop scores the
validation probe (held-out sorted PBMC) at step 0 and at every checkpoint, for every readout, so the
table is the effective-rank / depth / F1 trajectory of each variant (the paper's Fig. 2b/3 at mini scale).

    python benchmarks/pretraining/levers_v02.py --steps 400 --out /tmp/bj_levers [--variants v0.1-recipe ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv

REPO = Path(__file__).resolve().parents[2]
V01 = ["gene_init=random", "cell_centre=false", "target_norm=true"]
VARIANTS = {
    "v0.1-recipe": V01,
    "+pca-init": ["gene_init=pca", "cell_centre=false", "target_norm=true"],
    "+cell-centre": ["gene_init=random", "cell_centre=true", "target_norm=false"],
    "v0.2-recipe": [],
    "+target-scale": ["target_scale=true"],
    "depth-only-cell-centre": ["cell_centre=false", "cell_centre_depth=true"],
    "token": ["objective=token"],
    "random_block": ["objective=random_block"],
    "decoder": ["objective=decoder"],
}


def train_one(name: str, steps: int, out: Path, probe_cells: int) -> Path:
    from biomjepa.bench import probe_hook
    from biomjepa.train import load_config, pretrain

    cfg = load_config(REPO / "models" / "biomjepa-mini-v0.2.yaml", [
        *VARIANTS[name], f"steps={steps}", f"run_name=lever-{name}", f"out_dir={out / 'runs'}",
        f"checkpoint_every={steps // 2}", "warmup_steps=100", f"probe_cells={probe_cells}", "keep_checkpoints=2",
    ])
    return pretrain(cfg, on_checkpoint=probe_hook(cfg))


def main() -> None:
    import os

    import pandas as pd

    os.chdir(REPO)  # the config's corpus paths are relative to the repository root
    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--probe-cells", type=int, default=512)
    p.add_argument("--out", type=Path, default=Path("/tmp/bj_levers"))
    p.add_argument("--csv", default="pretrain_levers.csv")
    args = p.parse_args()
    frames = []
    for name in args.variants:
        run = train_one(name, args.steps, args.out, args.probe_cells)
        t = pd.read_csv(run / "probe.csv").assign(variant=name, budget_steps=args.steps)
        frames.append(t)
        table = pd.concat(frames, ignore_index=True)
        write_csv(table.to_dict("records"), args.csv)  # after every run: a partial table survives a stop
        print(t.round(3).to_string(index=False), flush=True)


if __name__ == "__main__":
    main()
