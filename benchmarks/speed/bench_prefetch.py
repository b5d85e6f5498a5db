"""Training inputs prepared in the loader's workers against in the main process, as a ratio in one process.

Issue 38, item 4: the CPU work of a micro-batch (the gene budget, the thinned student view, the graph BFS of the
target blocks, collation) runs in ``data.num_workers`` loader workers (``biomjepa.train.prepare``) while the model
steps, instead of on the step's critical path. Two trainers of the same recipe on the same prepared corpus, one with
``data.num_workers: 0`` (inputs prepared in the main process, as before) and one with ``--workers`` workers, step in
turn; each figure is the median cells/s of ``--steps`` whole optimizer steps after ``--warmup`` steps. Both train in
``--precision`` (float32 by default) with ``--threads`` torch threads.

    python benchmarks/speed/bench_prefetch.py --corpus /tmp/bj_v04/cache     # a prepared cache of the v0.4 corpus
    # -> benchmarks/results/bench_prefetch.csv
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks._common import write_csv

REPO = Path(__file__).resolve().parents[2]


def trainer(corpus: str, workers: int, out: Path, precision: str):
    import biomjepa.train.loop as loop
    from biomjepa.train import load_config

    cfg = load_config(REPO / "models" / "biomjepa-mini-v0.4.yaml", [
        f"data.corpus={corpus}", f"data.num_workers={workers}", f"run.out_dir={out}", f"run.run_name=w{workers}",
        "probe.path=null", "model.gene_init=random", f"loop.precision={precision}", "run.steps=100000"])
    t = loop.Trainer(cfg, loop.init_distributed("cpu"))
    return t, t.batches()


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="a prepared corpus cache directory")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--out", default="bench_prefetch.csv")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        runs = {w: trainer(args.corpus, w, Path(tmp), args.precision) for w in (0, args.workers)}
        times = {w: [] for w in runs}
        for i in range(args.warmup + args.steps):
            for w, (t, data) in runs.items():  # in turn: both see the same machine load
                t0 = time.perf_counter()
                t.train_step(data)
                t.step += 1
                if i >= args.warmup:
                    times[w].append(time.perf_counter() - t0)
    cells = runs[0][0].cfg.data.batch_size
    rate = {w: cells / statistics.median(v) for w, v in times.items()}
    from benchmarks._common import machine

    row = {**machine(), "precision": args.precision, "steps": args.steps, "cells_per_step": cells, "in_process_cells_per_s": rate[0],
           "workers": args.workers, "workers_cells_per_s": rate[args.workers],
           "ratio": rate[args.workers] / rate[0]}
    print(row, flush=True)
    write_csv([row], args.out)


if __name__ == "__main__":
    main()
