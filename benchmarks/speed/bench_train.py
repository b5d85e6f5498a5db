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

Every row also holds the CPU's name and flags (``cpu``, ``cpu_flags``, ``torch_capability``, as
``_common.machine`` reads them) and the precision the loop ran in (``precision``: ``loop.precision``,
``--precision`` when given, resolved on this device; ``auto`` is bf16 on CPUs with bf16 units). ``--teacher-genes
256,512`` runs every recipe once per teacher view (rows ``NAME-t256``, ``NAME-t512``), so ``teacher_s`` and
``step_s`` are measured per view size; ``--rounds N`` makes the recipes take turns in this process, ``--steps`` timed
steps each per round, in alternating order (every recipe sees the same machine load; each recipe's figures are
over all its rounds, ``step_s_min``/``step_s_max`` the spread of its per-round means).

    python benchmarks/speed/bench_train.py --recipe v0.2=models/biomjepa-mini-v0.2.yaml \\
        --recipe v0.3=models/biomjepa-mini-v0.3.yaml --steps 5 --out bench_train_recipes.csv
    python benchmarks/speed/bench_train.py --preset base --steps 2 --genes 1800 --batch 2
    python benchmarks/speed/bench_train.py --recipe v0.5=models/biomjepa-mini-v0.5.yaml --teacher-genes 512,256 \\
        --genes 2000 --precision fp32 --steps 2 --rounds 3 --profile --out bench_train_teacher_view.csv
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

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


def synthetic(genes: int, work: Path | None = None) -> SimpleNamespace:
    """The synthetic cells' gene universe and gene graph (``tests/train/_kit``), in a new directory under ``work``."""
    import _kit

    _kit.UNIVERSE = universe = max(4000, 2 * genes)
    tmp = Path(tempfile.mkdtemp(dir=work, prefix="bench_train_"))
    return SimpleNamespace(tmp=tmp, graph=_kit.make_graph(tmp), universe=universe, genes=genes)


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
    run = RecipeRun(name, over, args, tmp, graph, universe)
    run.timed_steps(args.steps)
    return run.result()


class RecipeRun:
    """One recipe's :class:`~biomjepa.train.loop.Trainer` on its synthetic cells, warmed up by one step, then timed
    in chunks of steps (:meth:`timed_steps`), so that several recipes can take turns in one process."""

    def __init__(self, name: str, over: dict, args, tmp: Path, graph: str, universe: int, *, rounds: int = 1) -> None:
        import _kit

        from benchmarks._common import reset_peak_memory
        from biomjepa.train import preset
        from biomjepa.train.distributed import init_distributed
        from biomjepa.train.loop import Trainer

        self.name, self.args, self.profile = name, args, getattr(args, "profile", False)
        over = {"batch_size": args.batch, "accumulation": 1, "min_context": 64, **over}
        self.cells = over["batch_size"] * over["accumulation"]
        steps = rounds * args.steps + 2  # the timed steps, the warm-up and the FLOP-counted step (the stream cycles)
        corpus = make_corpus(tmp / name, self.cells * steps, args.genes, universe, _kit.V)
        self.cfg = preset(args.preset).replace(
            **over, corpus=[corpus], cache_dir=str(tmp / name / "c"), graph=graph, out_dir=str(tmp / name / "r"),
            steps=steps, min_block=int(0.1 * universe), max_block=int(0.4 * universe),
            progress=False, tensorboard=False, checkpoint_every=10**9, gene_init="random", probe=None)
        self.tr = Trainer(self.cfg, init_distributed(self.cfg.loop.device))
        self.data = self.tr.batches()
        self.timed: list[tuple[dict, float]] = []
        self.chunks: list[float] = []  # mean step time of every chunk (round)
        self.sec: dict[str, float] = {}
        reset_peak_memory(self.tr.info.device)
        self.step()  # warm-up

    def step(self) -> tuple[dict, float]:
        t0 = time.perf_counter()
        row = self.tr.train_step(self.data)
        dt = time.perf_counter() - t0
        self.tr.step += 1
        return row | {"_cells": self.cells}, dt

    def timed_steps(self, n: int) -> None:
        """``n`` more timed steps (with ``--profile``, their phases are added to the recipe's)."""
        clock, data = (_PhaseClock(self.tr) if self.profile else None), self.data
        if clock is not None:
            self.data = clock.wrap(data)
        try:
            chunk = [self.step() for _ in range(n)]
        finally:
            if clock is not None:
                clock.close()
                self.data = data
        self.timed += chunk
        self.chunks.append(float(np.mean([t for _, t in chunk])))
        if clock is not None:
            for k, v in clock.sec.items():
                self.sec[k] = self.sec.get(k, 0.0) + v

    def result(self) -> dict:
        """The recipe's row: its timed steps' rates, one FLOP-counted step, and the phases when profiled."""
        from torch.utils.flop_counter import FlopCounterMode

        from benchmarks._common import gemm_gflops, machine, peak_memory_mib

        timed, tr, cells = self.timed, self.tr, self.cells
        phases = {}
        if self.profile:
            total = sum(t for _, t in timed)
            s = self.sec
            rest = total - s["data"] - s["objective"] - s["optimizer"] - s["ema"]
            phases = {f"{k}_s": v for k, v in {**s, "rest": rest}.items()} | _op_shares(self.step)
        peak = peak_memory_mib(tr.info.device)
        with FlopCounterMode(display=False) as counter:
            counted, _ = self.step()
        flops_per_token = counter.get_total_flops() / _step_tokens(counted)
        dt = float(np.mean([t for _, t in timed]))
        tokens = float(np.mean([_step_tokens(r) for r, _ in timed]))
        cfg, args = self.cfg, self.args
        mc = cfg.model_config()
        gflops = flops_per_token * tokens / dt / 1e9
        gemm = gemm_gflops(cfg.data.batch_size * args.genes, mc.d_model, mc.d_ff, device=str(tr.info.device))
        return {
            "recipe": self.name, "preset": args.preset, "device": str(tr.info.device), "threads": torch.get_num_threads(),
            "precision": "bf16" if counted.get("bf16") else "fp32",
            "batch_size": cfg.data.batch_size, "accumulation": cfg.data.accumulation,
            "teacher_genes": cfg.data.teacher_genes, "context_genes": cfg.data.context_genes, "genes_per_cell": args.genes, "timed_steps": len(timed), "step_s": dt,
            "rounds": len(self.chunks), "step_s_min": min(self.chunks), "step_s_max": max(self.chunks),
            "cells_per_s": cells / dt, "tokens_per_cell": tokens / cells, "tokens_per_s": tokens / dt,
            "flops_per_token": flops_per_token, "gflops_per_cell": flops_per_token * tokens / cells / 1e9,
            "gflops": gflops, "gemm_gflops": gemm, "fraction_of_gemm": gflops / gemm,
            "loss_first": timed[0][0]["loss"], "loss_last": timed[-1][0]["loss"], "peak_mib": peak, **phases,
            **machine("cpu", "cpu_flags", "torch_capability", "torch"),
        }


class _PhaseClock:
    """Seconds spent in the data stream, the teacher, the objective, AdamW and the EMA during the timed steps."""

    def __init__(self, tr) -> None:
        import biomjepa.train.loop as loop

        self.loop, self.sec = loop, {"data": 0.0, "teacher": 0.0, "objective": 0.0, "optimizer": 0.0, "ema": 0.0}
        self.tr = tr
        self.real = {"compute_objective": loop.compute_objective, "ema_update": loop.ema_update,
                     "step": tr.optimizer.step}
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

    def close(self) -> None:
        self.loop.compute_objective, self.loop.ema_update = self.real["compute_objective"], self.real["ema_update"]
        self.tr.optimizer.step = self.real["step"]
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


def runs(recipes: list[str] | None, preset: str, teacher_genes: str | None) -> list[tuple[str, dict]]:
    """``(name, overrides)`` of every run: each ``--recipe`` (default: the preset), once per ``--teacher-genes``."""
    out = list(map(recipe_overrides, recipes or [preset]))
    if not teacher_genes:
        return out
    views = [int(v) for v in teacher_genes.split(",")]
    return [(f"{name}-t{v}", {**over, "teacher_genes": v}) for name, over in out for v in views]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mini", choices=["mini", "base"])
    ap.add_argument("--recipe", action="append", default=None,
                    help="NAME=CONFIG.yaml (repeatable; the first is the baseline); default: the preset alone")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps (after one warm-up), per round")
    ap.add_argument("--rounds", type=int, default=1, help="rounds in which the recipes take turns (alternating order)")
    ap.add_argument("--teacher-genes", default=None, help="comma-separated teacher views, e.g. 256,512: every recipe "
                    "once per view")
    ap.add_argument("--precision", default=None, choices=["auto", "fp32", "bf16"],
                    help="loop.precision of every recipe (default: the preset's, auto)")
    ap.add_argument("--genes", type=int, default=1500, help="observed genes per synthetic cell")
    ap.add_argument("--batch", type=int, default=8, help="batch size of recipes that do not set one")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (CUDA: bf16 autocast, as the loop runs)")
    ap.add_argument("--out", default=None, help="CSV name under results/ (default bench_train_<preset>.csv)")
    ap.add_argument("--profile", action="store_true", help="add where a step's time goes (phases, matmul share)")
    args = ap.parse_args()
    if args.steps < 1 or args.rounds < 1:
        ap.error("--steps and --rounds must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from benchmarks._common import write_csv

    env = synthetic(args.genes)
    fixed = {"device": args.device} | ({"precision": args.precision} if args.precision else {})
    recipes = [RecipeRun(name, {**fixed, **over}, args, env.tmp, env.graph, env.universe, rounds=args.rounds)
               for name, over in runs(args.recipe, args.preset, args.teacher_genes)]
    for r in range(args.rounds):
        for run in recipes if r % 2 == 0 else recipes[::-1]:  # in turn: every recipe sees the same machine load
            run.timed_steps(args.steps)
    rows = [run.result() for run in recipes]
    for r in rows:
        r["speedup"] = r["cells_per_s"] / rows[0]["cells_per_s"]
    path = write_csv(rows, args.out or f"bench_train_{args.preset}.csv")
    print(f"preset={args.preset} threads={rows[0]['threads']} genes/cell={args.genes} device={rows[0]['device']} "
          f"rounds={args.rounds}; {rows[0]['cpu']} ({rows[0]['cpu_flags']}; torch {rows[0]['torch']}, "
          f"{rows[0]['torch_capability']})")
    for r in rows:
        print(f"{r['recipe']:>8}: batch {r['batch_size']:>3} | {r['precision']} | step {r['step_s']:.3f} s "
              f"[{r['step_s_min']:.3f}-{r['step_s_max']:.3f}] | {r['cells_per_s']:7.1f} cells/s "
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
