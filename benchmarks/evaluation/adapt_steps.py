"""How many steps ``bj.tl.adapt`` needs: its embedding after runs of several lengths, on the validation tissues.

Each length is a whole run (its own warm-up and cosine schedule), not a read-out partway through a longer one: the
learning rate has decayed at its end, as it has for a user who asks for that many steps.
Everything else is ``tl.adapt``'s default recipe; the scores are ``adapt_vs_scvi.py``'s (few-shot k = 5 F1, Leiden
ARI with scanpy's defaults, mean and s.d. over 10 seeds), so its rows at the default length sit beside these::

    python benchmarks/evaluation/adapt_steps.py --steps 50,75 --csv adapt_steps_validation.csv

The test cells (``pancreas_test``) are refused: the length is chosen on validation cells only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import commit, machine, write_csv
from benchmarks.evaluation.adapt_vs_scvi import ADAPT, DEFAULT_SETS, INPUT, LEGACY, adapted, score
from benchmarks.protocol import load


def run(sets: tuple[str, ...], steps: list[int]) -> list[dict]:
    """One row per (set, length), each from a fresh copy of the set's cells."""
    rows = []
    for name in sets:
        for n in steps:
            a, labels, _, _ = load(LEGACY[name])
            Z, extra = adapted(a, INPUT[name], n)
            rows.append(score(name, labels, ADAPT, Z, extra))
            print({k: rows[-1][k] for k in ("set", "steps", "seconds", "f1", "leiden_ari_mean")}, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", required=True, help="comma-separated run lengths, e.g. 50,75")
    p.add_argument("--sets", default=",".join(DEFAULT_SETS), help=f"comma-separated (default {','.join(DEFAULT_SETS)})")
    p.add_argument("--csv", default="adapt_steps_validation.csv", help="file name under benchmarks/results")
    args = p.parse_args(argv)
    sets = tuple(s.strip() for s in args.sets.split(",") if s.strip())
    if "pancreas_test" in sets:
        raise SystemExit("adapt_steps.py chooses a length: run it on validation sets only (pancreas_test is the test).")
    unknown = [s for s in sets if s not in INPUT]
    if unknown:
        raise SystemExit(f"unknown set(s) {unknown}; choose from {sorted(INPUT)}.")
    try:
        steps = [int(s) for s in args.steps.split(",")]
    except ValueError:
        raise SystemExit(f"--steps must be comma-separated integers, got {args.steps!r}.") from None
    if not steps or min(steps) < 1:
        raise SystemExit(f"--steps must be positive integers, got {args.steps!r}.")
    info = machine() | {"commit": commit()}
    print(write_csv([r | info for r in run(sets, steps)], args.csv))


if __name__ == "__main__":
    main()
