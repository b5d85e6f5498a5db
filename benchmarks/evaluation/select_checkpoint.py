"""Choose a pretraining checkpoint and readout on the validation probe (never on the test cells).

    python benchmarks/evaluation/select_checkpoint.py RUN_DIR [--min-rank 15] [--max-depth 0.3] [--out NAME.csv]

Reads ``RUN_DIR/probe.csv`` (written by the training loop when ``probe`` is set) and scores any
checkpoint ``RUN_DIR/checkpoints/step_*.pt`` it lacks with the same function
(:func:`biomjepa.bench.probe.probe_scores`, using the run's probe settings). Among the
(step, pooling) pairs whose effective rank is ≥ ``--min-rank`` and depth association
(``depth_nnz``) ≤ ``--max-depth`` (all pairs if none qualifies) it picks the highest validation
k = 5 macro-F1, prints the table and the choice, and writes the table to ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import write_csv


def score_missing(run: Path, have: set[int]) -> list[dict]:
    import torch

    from biomjepa.bench.probe import load_probe, probe_scores
    from biomjepa.nn.config import ModelConfig
    from biomjepa.nn.encoder import Encoder
    from biomjepa.train.checkpoint import load_state
    from biomjepa.train.config import TrainConfig

    cfg = TrainConfig.from_yaml(run / "config.yaml")
    if cfg.probe.path is None:
        raise SystemExit(f"{run}/config.yaml sets no `probe`; nothing to select on.")
    probe = None
    rows = []
    for path in sorted((run / "checkpoints").glob("step_*.pt")):
        step = int(re.findall(r"\d+", path.stem)[0])
        if step in have:
            continue
        probe = probe or load_probe(cfg.probe.path, obs=cfg.probe.obs, label_key=cfg.probe.label_key,
                                    max_cells=cfg.probe.cells, seed=cfg.run.seed)
        state = load_state(path)
        enc = Encoder(ModelConfig.from_dict(state["model_config"]))
        enc.load_state_dict(state["teacher"])
        with torch.no_grad():
            rows += probe_scores(enc, probe, step)
        print(f"scored step {step}", flush=True)
    return rows


def choose(table, min_rank: float = 15.0, max_depth: float = 0.3):
    """The row with the highest validation F1 among rows of rank ≥ ``min_rank`` and depth ≤ ``max_depth``.

    Returns ``(row, qualified)``; ``qualified`` is ``False`` when no row met both bounds (then the
    best of all rows is returned).
    """
    ok = table[(table.effective_rank >= min_rank) & (table.depth_nnz <= max_depth)]
    pool = ok if len(ok) else table
    return pool.loc[pool["macro_f1_k5"].idxmax()], bool(len(ok))


def main() -> None:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir")
    p.add_argument("--min-rank", type=float, default=15.0)
    p.add_argument("--max-depth", type=float, default=0.3)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    run = Path(args.run_dir)
    logged = pd.read_csv(run / "probe.csv") if (run / "probe.csv").is_file() else pd.DataFrame()
    have = set(logged["step"].astype(int)) if len(logged) else set()
    table = pd.concat([logged, pd.DataFrame(score_missing(run, have))], ignore_index=True)
    table = table.sort_values(["step", "pooling"]).reset_index(drop=True)
    best, qualified = choose(table, args.min_rank, args.max_depth)
    print(table.round(3).to_string(index=False))
    print(f"chosen: step {int(best.step)}, pooling {best.pooling} (validation F1 {best.macro_f1_k5:.3f}, "
          f"rank {best.effective_rank:.1f}, depth_nnz {best.depth_nnz:.2f}; "
          f"{'meets' if qualified else 'no pair meets'} rank ≥ {args.min_rank:g} and depth ≤ {args.max_depth:g})")
    out = args.out or f"checkpoint_selection_{run.name}.csv"
    print("wrote", write_csv(table.to_dict("records"), out))


if __name__ == "__main__":
    main()
