"""Training speed of two source trees on a real corpus, side by side (issue 55): cells/s from the runs' own logs.

``bench_train.py`` times one code version on synthetic cells, whose random gene graph makes the block search
cheap. This runs the real loop of each ``--tree NAME=SRC`` (a checkout's ``src`` directory, put first on
``PYTHONPATH``, so another commit needs only ``git worktree add``) on the corpus of ``--config`` for ``--steps``
steps, in fresh processes that take turns (``--rounds``, alternating order) on the same cores. Each run has its
own output and corpus cache directory under ``--work`` (the cache is built in its first round; speeds are logged
per step, so building it is not timed); a tree's figure is the median of the logged ``cells_per_s`` after ``--skip`` warm-up steps, over all
its rounds, and ``ratio`` is that median over the first tree's. Rows (with the CPU's name and flags) go to
``results/<--out>``. CPU-heavy: run it on idle cores.

    git worktree add /tmp/bj-12c76dc 12c76dc
    python benchmarks/speed/train_side_by_side.py --config models/biomjepa-mini-v0.5.yaml \\
        --tree 12c76dc=/tmp/bj-12c76dc/src --tree main=src --steps 80 --rounds 3 --out train_side_by_side.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import machine, write_csv


def _run(src: Path, config: str, work: Path, steps: int, threads: int) -> Path:
    """Train ``steps`` steps with the package in ``src``; the run's log.csv."""
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "OMP_NUM_THREADS": str(threads)}
    sets = [f"run.out_dir={work / 'runs'}", f"data.cache_dir={work / 'cache'}", "run.run_name=bench",
            f"run.steps={steps}", "loop.checkpoint_every=100000", "loop.progress=false"]
    cmd = [sys.executable, "-m", "biomjepa.train", config] + [a for s in sets for a in ("--set", s)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return work / "runs" / "bench" / "log.csv"


def _speeds(log: Path, skip: int) -> list[float]:
    with open(log, newline="") as f:
        return [float(r["cells_per_s"]) for r in csv.DictReader(f) if int(r["step"]) >= skip]


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
    if a.skip >= a.steps:
        p.error(f"--skip {a.skip} leaves no timed step of --steps {a.steps}: give --steps above --skip")
    trees = dict(t.split("=", 1) for t in a.tree)
    speeds: dict[str, list[float]] = {name: [] for name in trees}
    rows = []
    for r in range(a.rounds):
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]
        for name in order:
            work = Path(a.work) / name
            subprocess.run(["rm", "-rf", str(work / "runs")], check=True)
            got = _speeds(_run(Path(trees[name]), a.config, work, a.steps, a.threads), a.skip)
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
