"""Pretraining step throughput of recipes side by side: cells/s, tokens/s and GFLOP/s against a same-run GEMM.

Synthetic cells (``--genes`` observed genes each, drawn from a random graph's component) go
through the real loop (:class:`biomjepa.train.loop.Trainer`: gene budget, block sampling, teacher
forward, student + predictor forward and backward, AdamW, EMA and centre updates), timed per
optimizer step after one warm-up step. Each ``--recipe NAME=YAML`` takes the step-cost keys of a
run config (``RECIPE_KEYS``: batch size, token budgets, predictor shape, targets) from that file;
block sizes are scaled to the synthetic gene universe, so every recipe sees the same cells. The
recipes run one after the other in this process, and the first one is the baseline of the
``speedup`` column. ``--profile`` adds where a step's time goes, over the timed steps: ``data_s`` (the next
prepared batch: gene budget, views, blocks, collation, in this process with ``num_workers: 0``), ``teacher_s``
(the EMA teacher's forward), ``objective_s`` (the whole forward with the loss, teacher included),
``optimizer_s`` (AdamW), ``ema_s`` and ``rest_s`` (backward, gradient clipping, logging: the step minus the
others); and, from one more step under ``torch.profiler``, the share of time in matrix products
(``matmul_share``: mm/addmm/bmm/baddbmm/linear/matmul/einsum kernels, self time) and in the remaining torch ops
(``other_ops_share``; element-wise, reductions, indexing). FLOPs are counted, not estimated: one extra step runs under
:class:`torch.utils.flop_counter.FlopCounterMode`. The reference is a float32 GEMM of shape
``[batch·genes, d] @ [d, d_ff]`` measured in the same process. Prints a table, writes
``results/<--out>``.

    python benchmarks/speed/bench_train.py --recipe v0.2=models/biomjepa-mini-v0.2.yaml \\
        --recipe v0.3=models/biomjepa-mini-v0.3.yaml --steps 5 --out bench_train_recipes.csv
    python benchmarks/speed/bench_train.py --preset base --steps 2 --genes 1800 --batch 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import torch
import yaml

from benchmarks._common import REPO

sys.path.insert(0, str(REPO / "tests" / "train"))  # _kit: the synthetic cells and graph of the training tests

#: The keys of a run config that set the cost of a step (everything else is taken from ``--preset``).
RECIPE_KEYS = ("model", "model_overrides", "batch_size", "accumulation", "teacher_genes", "context_genes",
               "n_targets", "pred_layers", "pred_heads", "pred_width", "objective", "target_centre", "cell_centre")


def _step_tokens(row: dict) -> float:
    """Teacher + student tokens of the step a loop row describes (its rates times its own duration)."""
    return row["tokens_per_s"] / row["cells_per_s"] * row["_cells"]


def recipe_overrides(spec: str) -> tuple[str, dict]:
    """``NAME=YAML`` → (name, the YAML's :data:`RECIPE_KEYS`); ``NAME`` alone → the preset as it is."""
    name, _, path = spec.partition("=")
    if not path:
        return name, {}
    from biomjepa.train import TrainConfig

    written = yaml.safe_load(Path(path).read_text()) or {}
    flat = TrainConfig.from_yaml(path).flat()  # the recipe with its preset applied, sections or flat keys alike
    # a recipe with a preset takes all its step-cost keys from it; one without, only those it sets
    return name, {k: flat[k] for k in RECIPE_KEYS if written.get("preset") or _sets(written, k)}


def _sets(written: dict, key: str) -> bool:
    """Whether a YAML mapping (by section or flat) sets the flat key ``key``."""
    from biomjepa.train.sections import FLAT

    section, name = FLAT[key]
    return key in written or name in (written.get(section) if isinstance(written.get(section), dict) else {})


def make_corpus(tmp: Path, n: int, genes: int, universe: int, V: int) -> str:
    from scipy import sparse

    rng = np.random.default_rng(0)
    g = np.stack([np.sort(rng.choice(universe, genes, replace=False)) for _ in range(n)])
    counts = rng.integers(1, 6, size=g.size).astype(np.float32)
    X = sparse.csr_matrix((counts, g.ravel(), np.arange(0, g.size + 1, genes)), shape=(n, V))
    (tmp / "d").mkdir(parents=True, exist_ok=True)
    np.savez(tmp / "d" / "s.npz", data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
             totals=np.asarray(X.sum(1)).ravel() * 1.1, rows=np.arange(n))
    return str(tmp / "d" / "s.npz")


def measure(name: str, over: dict, args, tmp: Path, graph: str, universe: int) -> dict:
    """Time ``args.steps`` optimizer steps of one recipe (after a warm-up) and count one step's FLOPs."""
    import _kit
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks._common import gemm_gflops, peak_memory_mib, reset_peak_memory
    from biomjepa.train import preset
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    over = {"batch_size": args.batch, "accumulation": 1, **over}
    cells = over["batch_size"] * over["accumulation"]
    corpus = make_corpus(tmp / name, cells * (args.steps + 2), args.genes, universe, _kit.V)
    cfg = preset(args.preset).replace(
        **over, corpus=[corpus], cache_dir=str(tmp / name / "c"), graph=graph, out_dir=str(tmp / name / "r"),
        steps=args.steps + 2, min_block=int(0.1 * universe), max_block=int(0.4 * universe), min_context=64,
        progress=False, tensorboard=False, checkpoint_every=10**9, gene_init="random", probe=None)
    tr = Trainer(cfg, init_distributed(cfg.loop.device))
    data = tr.batches()

    def step() -> tuple[dict, float]:
        t0 = time.perf_counter()
        row = tr.train_step(data)
        dt = time.perf_counter() - t0
        tr.step += 1
        return row | {"_cells": cells}, dt

    reset_peak_memory(tr.info.device)
    step()  # warm-up
    clock = _PhaseClock(tr) if getattr(args, "profile", False) else None
    if clock is not None:
        data = clock.wrap(data)
    timed = [step() for _ in range(args.steps)]
    phases = clock.phases(sum(t for _, t in timed)) if clock is not None else {}
    if clock is not None:
        clock.close()
        phases |= _op_shares(step)
    peak = peak_memory_mib(tr.info.device)
    with FlopCounterMode(display=False) as counter:
        counted, _ = step()
    flops_per_token = counter.get_total_flops() / _step_tokens(counted)
    dt = float(np.mean([t for _, t in timed]))
    tokens = float(np.mean([_step_tokens(r) for r, _ in timed]))
    mc = cfg.model_config()
    gflops = flops_per_token * tokens / dt / 1e9
    gemm = gemm_gflops(cfg.data.batch_size * args.genes, mc.d_model, mc.d_ff, device=str(tr.info.device))
    return {
        "recipe": name, "preset": args.preset, "device": str(tr.info.device), "threads": torch.get_num_threads(),
        "batch_size": cfg.data.batch_size, "accumulation": cfg.data.accumulation,
        "teacher_genes": cfg.data.teacher_genes, "context_genes": cfg.data.context_genes, "genes_per_cell": args.genes, "timed_steps": args.steps, "step_s": dt,
        "cells_per_s": cells / dt, "tokens_per_cell": tokens / cells, "tokens_per_s": tokens / dt,
        "flops_per_token": flops_per_token, "gflops_per_cell": flops_per_token * tokens / cells / 1e9,
        "gflops": gflops, "gemm_gflops": gemm, "fraction_of_gemm": gflops / gemm,
        "loss_first": timed[0][0]["loss"], "loss_last": timed[-1][0]["loss"], "peak_mib": peak, **phases,
    }


class _PhaseClock:
    """Seconds spent in the data stream, the teacher, the objective, AdamW and the EMA during the timed steps."""

    def __init__(self, tr) -> None:
        import biomjepa.train.loop as loop

        self.loop, self.sec = loop, {"data": 0.0, "teacher": 0.0, "objective": 0.0, "optimizer": 0.0, "ema": 0.0}
        self.real = {"compute_objective": loop.compute_objective, "ema_update": loop.ema_update}
        loop.compute_objective = self._timed("objective", loop.compute_objective)
        loop.ema_update = self._timed("ema", loop.ema_update)
        tr.optimizer.step = self._timed("optimizer", tr.optimizer.step)
        self.hooks = [tr.teacher.register_forward_pre_hook(lambda *a: self._mark()),
                      tr.teacher.register_forward_hook(lambda *a: self._add("teacher"))]

    def _mark(self) -> None:
        self.t = time.perf_counter()

    def _add(self, key: str) -> None:
        self.sec[key] += time.perf_counter() - self.t

    def _timed(self, key: str, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.sec[key] += time.perf_counter() - t
        return run

    def wrap(self, data):
        while True:
            t = time.perf_counter()
            batch = next(data)
            self.sec["data"] += time.perf_counter() - t
            yield batch

    def phases(self, total: float) -> dict:
        s = self.sec
        rest = total - s["data"] - s["objective"] - s["optimizer"] - s["ema"]
        return {f"{k}_s": v for k, v in {**s, "rest": rest}.items()}

    def close(self) -> None:
        self.loop.compute_objective, self.loop.ema_update = self.real["compute_objective"], self.real["ema_update"]
        for h in self.hooks:
            h.remove()


#: torch ops counted as matrix products in ``matmul_share`` (self CPU time)
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul",
              "aten::einsum", "aten::_addmm_activation")


def _op_shares(step) -> dict:
    """Shares of one step's time in matrix-product ops and in the other torch ops (``torch.profiler``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        step()
        total = time.perf_counter() - t0
    self_us = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    matmul = sum(v for k, v in self_us.items() if k in MATMUL_OPS or "mkldnn" in k or "gemm" in k) / 1e6
    ops = sum(v for k, v in self_us.items() if k.startswith("aten::")) / 1e6
    return {"profiled_step_s": total, "matmul_share": matmul / total, "other_ops_share": (ops - matmul) / total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mini", choices=["mini", "base"])
    ap.add_argument("--recipe", action="append", default=None,
                    help="NAME=CONFIG.yaml (repeatable; the first is the baseline); default: the preset alone")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps (after one warm-up)")
    ap.add_argument("--genes", type=int, default=1500, help="observed genes per synthetic cell")
    ap.add_argument("--batch", type=int, default=8, help="batch size of recipes that do not set one")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (CUDA: bf16 autocast, as the loop runs)")
    ap.add_argument("--out", default=None, help="CSV name under results/ (default bench_train_<preset>.csv)")
    ap.add_argument("--profile", action="store_true", help="add where a step's time goes (phases, matmul share)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import _kit

    from benchmarks._common import write_csv

    universe = _kit.UNIVERSE = max(4000, 2 * args.genes)
    tmp = Path(tempfile.mkdtemp())
    graph = _kit.make_graph(tmp)
    rows = [measure(name, {"device": args.device, **over}, args, tmp, graph, universe)
            for name, over in map(recipe_overrides, args.recipe or [args.preset])]
    for r in rows:
        r["speedup"] = r["cells_per_s"] / rows[0]["cells_per_s"]
    path = write_csv(rows, args.out or f"bench_train_{args.preset}.csv")
    print(f"preset={args.preset} threads={rows[0]['threads']} genes/cell={args.genes} device={rows[0]['device']}")
    for r in rows:
        print(f"{r['recipe']:>8}: batch {r['batch_size']:>3} | step {r['step_s']:.3f} s | {r['cells_per_s']:7.1f} cells/s "
              f"(x{r['speedup']:.2f}) | {r['tokens_per_cell']:.0f} tokens/cell | {r['gflops_per_cell']:.2f} GFLOP/cell | "
              f"{r['gflops']:.1f} GFLOP/s = {r['fraction_of_gemm']:.2f} of same-run GEMM ({r['gemm_gflops']:.1f})")
        if args.profile:
            n = r["timed_steps"]
            print("          per step: " + ", ".join(f"{k[:-2]} {r[k] / n:.3f} s" for k in
                  ("data_s", "teacher_s", "objective_s", "optimizer_s", "ema_s", "rest_s"))
                  + f"; matmul {r['matmul_share']:.0%}, other torch ops {r['other_ops_share']:.0%} of a step")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
