"""bf16 against float32 on this CPU, as ratios measured side by side in one process.

Three kinds of rows, each with a float32 and a bf16 figure and their ratio, and the CPU's name, its bf16-relevant
flags, torch's SIMD capability and the thread count on every row:

* ``gemm``: GFLOP/s of ``[M, K] @ [K, N]`` for the encoder's shapes (issue 38: tokens × d → d_ff and back, d → d,
  and ``base``'s FFN), best of ``--repeats`` each, the two dtypes alternating;
* ``embed``: ``bj.tl.embed`` cells/s of the bundled model on the bundled demo cells (``bj.datasets.pancreas()``,
  1,074 cells; ``--cells`` fewer), ``bj.settings.precision`` ``"fp32"`` against ``"bf16"``, best of ``--repeats``
  alternating rounds;
* ``train``: pretraining cells/s of the ``mini`` preset (the default recipe) on synthetic cells of ``--genes``
  observed genes, ``loop.precision`` ``fp32`` against ``bf16``: two trainers in this process stepping in turn,
  the median of ``--train-steps`` steps each after a warm-up (the whole optimizer step: block sampling, the
  teacher forward, student and predictor forward and backward, AdamW, EMA).

    python benchmarks/speed/bench_precision.py                       # results/bench_precision.csv
    python benchmarks/speed/bench_precision.py --cells 256 --train-steps 3 --repeats 2 --out x.csv   # quicker

On a CPU without bf16 units the bf16 rows measure the emulated path (what ``"auto"`` avoids there).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import REPO, machine, write_csv

#: (M, K, N): mini tokens × d → d_ff, d_ff → d, d → d (36,864 tokens: 64 cells of 576), base FFN (issue 38's table)
GEMM_SHAPES = ((36864, 128, 512), (36864, 512, 128), (36864, 128, 128), (4096, 768, 3072))


def _best(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def gemm_rows(repeats: int) -> list[dict]:
    import torch

    rows = []
    for m, k, n in GEMM_SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        ab, bb = a.bfloat16(), b.bfloat16()
        best = {"fp32": float("inf"), "bf16": float("inf")}
        for _ in range(repeats):  # alternate: load from other processes hits both alike
            best["fp32"] = min(best["fp32"], _best(lambda x=a, y=b: x @ y, 1))
            best["bf16"] = min(best["bf16"], _best(lambda x=ab, y=bb: x @ y, 1))
        fp32, bf16 = (2 * m * k * n / best[p] / 1e9 for p in ("fp32", "bf16"))
        rows.append({"kind": "gemm", "what": f"{m}x{k}x{n}", "unit": "GFLOP/s", "fp32": fp32, "bf16": bf16})
    return rows


def embed_rows(n_cells: int | None, repeats: int) -> list[dict]:
    import biomjepa as bj

    adata = bj.datasets.pancreas()
    adata = adata[: n_cells or adata.n_obs].copy()
    bj.pp.map_vocab(adata)
    bj.settings.progress = False
    best = {}
    for p in ("fp32", "bf16"):  # warm-up of both paths (and the model load)
        bj.settings.precision = p
        bj.tl.embed(adata[:16].copy(), device="cpu")
    for _ in range(repeats):
        for p in ("fp32", "bf16"):
            bj.settings.precision = p
            t0 = time.perf_counter()
            bj.tl.embed(adata, device="cpu", copy=True)
            best[p] = min(best.get(p, float("inf")), time.perf_counter() - t0)
            print(f"embed {p}: {time.perf_counter() - t0:.1f} s", flush=True)
    bj.settings.precision = "fp32"
    return [{"kind": "embed", "what": f"tl.embed, bundled model, {adata.n_obs} demo cells", "unit": "cells/s",
             "fp32": adata.n_obs / best["fp32"], "bf16": adata.n_obs / best["bf16"],
             "fp32_seconds": best["fp32"], "bf16_seconds": best["bf16"]}]


def train_rows(steps: int, genes: int) -> list[dict]:
    sys.path.insert(0, str(REPO / "tests" / "train"))
    import _kit

    from benchmarks.speed.bench_train import make_corpus
    from biomjepa.train import preset
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    universe = _kit.UNIVERSE = max(4000, 2 * genes)
    tmp = Path(tempfile.mkdtemp())
    graph = _kit.make_graph(tmp)
    base = preset("mini")
    cells = base.data.batch_size * base.data.accumulation
    corpus = make_corpus(tmp, cells * (steps + 2), genes, universe, _kit.V)
    trainers = {}
    for p in ("fp32", "bf16"):
        cfg = base.replace(precision=p, corpus=[corpus], cache_dir=str(tmp / "c"), graph=graph, out_dir=str(tmp / p),
                           steps=steps + 2, min_block=int(0.1 * universe), max_block=int(0.4 * universe),
                           progress=False, tensorboard=False, checkpoint_every=10**9, gene_init="random", probe=None)
        tr = Trainer(cfg, init_distributed("cpu"))
        trainers[p] = (tr, tr.batches())
    times = {p: [] for p in trainers}
    for i in range(steps + 1):  # step 0 of each is the warm-up
        for p, (tr, data) in trainers.items():
            t0 = time.perf_counter()
            row = tr.train_step(data)
            dt = time.perf_counter() - t0
            tr.step += 1
            assert row["bf16"] == float(p == "bf16") and np.isfinite(row["loss"])
            if i:
                times[p].append(dt)
    med = {p: statistics.median(t) for p, t in times.items()}
    return [{"kind": "train", "what": f"mini preset step, {cells} cells of {genes} genes", "unit": "cells/s",
             "fp32": cells / med["fp32"], "bf16": cells / med["bf16"], "fp32_seconds": med["fp32"],
             "bf16_seconds": med["bf16"]}]


def main(argv: list[str] | None = None) -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=None, help="demo cells to embed (default: all 1,074)")
    p.add_argument("--train-steps", type=int, default=5, help="timed training steps per precision (0: none)")
    p.add_argument("--genes", type=int, default=1500, help="observed genes per synthetic training cell")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds of the GEMM and embed timings")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--out", default="bench_precision.csv", help="CSV name under benchmarks/results/")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import biomjepa as bj

    bj.settings.num_threads = None  # the threads above, not the idle-core count
    rows = gemm_rows(args.repeats) + embed_rows(args.cells, args.repeats)
    if args.train_steps:
        rows += train_rows(args.train_steps, args.genes)
    info = machine()
    for r in rows:
        r["ratio"] = r["bf16"] / r["fp32"]
        r.update(info)
    print(f"{info['cpu']} ({info['cpu_flags']}; torch {info['torch']} {info['torch_capability']}, {info['threads']} threads)")
    for r in rows:
        print(f"{r['kind']:>5} {r['what']:<48} fp32 {r['fp32']:9.1f}  bf16 {r['bf16']:9.1f} {r['unit']:<8} x{r['ratio']:.2f}")
    print(f"wrote {write_csv(rows, args.out)}")


if __name__ == "__main__":
    main()
