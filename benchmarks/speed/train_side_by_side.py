"""Training speed of source trees on a real corpus, side by side (issue 55): cells/s from the runs' own logs.

Each ``--tree NAME=SRC`` (a checkout's ``src``, first on ``PYTHONPATH``: another commit needs only ``git worktree
add``) trains ``--steps`` steps on ``--config``'s corpus in fresh processes taking turns (``--rounds``, order
alternating) on the same cores, each with its own run and cache directory under ``--work`` (speeds are logged per
step, so building a cache is not timed). A tree's figure is the median logged ``cells_per_s`` after ``--skip``
steps over its rounds; ``ratio`` is over the first tree's. Rows, with the CPU's name and flags, go to
``results/<--out>``. Unlike ``bench_train.py``'s synthetic cells, the corpus's real gene graph sets the block search's
cost. CPU-heavy: idle cores only.

    git worktree add /tmp/bj-12c76dc 12c76dc
    python benchmarks/speed/train_side_by_side.py --config models/biomjepa-mini-v0.5.yaml \\
        --tree 12c76dc=/tmp/bj-12c76dc/src --tree main=src --steps 80 --rounds 3 --out train_side_by_side.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import machine, write_csv


def _speeds(src: Path, config: str, work: Path, a: argparse.Namespace) -> list[float]:
    """Train ``--steps`` steps with the package in ``src``; the logged cells/s from step ``--skip`` on."""
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "OMP_NUM_THREADS": str(a.threads)}
    sets = [f"run.out_dir={work / 'runs'}", f"data.cache_dir={work / 'cache'}", "run.run_name=bench",
            f"run.steps={a.steps}", "loop.checkpoint_every=100000", "loop.progress=false", "probe.path=null"]
    cmd = [sys.executable, "-m", "biomjepa.train", config] + [x for s in sets for x in ("--set", s)]
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"training with {src} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    with open(work / "runs" / "bench" / "log.csv", newline="") as f:
        return [float(r["cells_per_s"]) for r in csv.DictReader(f) if int(r["step"]) >= a.skip]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="a training YAML (its corpus and recipe)")
    p.add_argument("--tree", action="append", required=True, metavar="NAME=SRC",
                   help="a source tree's src directory (repeatable; the first is the baseline)")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--skip", type=int, default=20, help="warm-up steps left out of the median")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", default="/tmp/train_side_by_side")
    p.add_argument("--out", default="train_side_by_side.csv")
    a = p.parse_args(argv)
    if not 0 <= a.skip < a.steps or a.rounds < 1:
        p.error(f"--skip {a.skip}, --steps {a.steps}, --rounds {a.rounds}: give 0 <= skip < steps and rounds >= 1")
    pairs = [t.partition("=")[::2] for t in a.tree]
    if not all(name and src for name, src in pairs) or len({n for n, _ in pairs}) < len(pairs):
        p.error(f"--tree {' '.join(a.tree)}: give distinct NAME=SRC pairs, e.g. --tree old=/tmp/old/src --tree main=src")
    trees, rows = dict(pairs), []
    speeds: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(a.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            shutil.rmtree(Path(a.work) / name / "runs", ignore_errors=True)
            got = _speeds(Path(trees[name]), a.config, Path(a.work) / name, a)
            speeds[name] += got
            rows.append({"tree": name, "round": r + 1, "median_cells_per_s": statistics.median(got)})
            print(f"round {r + 1} {name}: {rows[-1]['median_cells_per_s']:.1f} cells/s", flush=True)
    base = statistics.median(speeds[next(iter(trees))])
    info = machine("cpu", "cpu_flags", "torch_capability", "torch")
    for name, got in speeds.items():
        rows.append({"tree": name, "round": "all", "median_cells_per_s": statistics.median(got),
                     "ratio": statistics.median(got) / base})
        print(f"{name}: median {rows[-1]['median_cells_per_s']:.1f} cells/s, {rows[-1]['ratio']:.2f}x")
    write_csv([{**row, "config": a.config, "steps": a.steps, "skip": a.skip, "src": trees[row["tree"]], **info}
               for row in rows], a.out)


if __name__ == "__main__":
    main()
