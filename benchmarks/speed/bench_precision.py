"""bf16 against float32 on this CPU, side by side in one process: speed, the embedding's error, training, the teacher.

    python benchmarks/speed/bench_precision.py [speed] [--cells 256 --train-steps 3 --repeats 2]   # bench_precision.csv
    python benchmarks/speed/bench_precision.py accuracy [--sets validation demo]      # precision_accuracy.csv
    python benchmarks/speed/bench_precision.py train --steps 60 --batch 16 --window 15   # precision_train_proxy.csv
    python benchmarks/speed/bench_precision.py teacher [--config CONFIG.yaml] [--batches 6]   # teacher_bf16_error.csv

``speed`` (the default mode), rows with a float32 and a bf16 figure and their ratio, and the CPU's name, its
bf16-relevant flags, torch's SIMD capability and the thread count on every row:

* ``gemm``: GFLOP/s of ``[M, K] @ [K, N]`` for the encoder's shapes (issue 38: tokens × d → d_ff and back, d → d,
  and ``base``'s FFN), best of ``--repeats`` each, the two dtypes alternating;
* ``embed``: ``bj.tl.embed`` cells/s of the bundled model on the bundled demo cells (``bj.datasets.pancreas()``,
  1,074 cells; ``--cells`` fewer), ``bj.settings.precision`` ``"fp32"`` against ``"bf16"``, best of ``--repeats``
  alternating rounds;
* ``train``: pretraining cells/s of the ``mini`` preset on synthetic cells of ``--genes`` observed genes,
  ``loop.precision`` ``fp32`` against ``bf16``: two trainers (``bench_train.RecipeRun``) stepping in turn, the
  median of ``--train-steps`` steps each after a warm-up (the whole optimizer step). On a CPU without bf16 units the
  bf16 rows measure the emulated path (what ``"auto"`` avoids there).

``accuracy``: on the validation cells (the held-out sorted PBMCs, ``../shared/data``; skipped without it) and the
demo cells, ``tl.embed`` in float32 and in bf16 at batch size 64, and in bf16 at batch size 7 (batch-size invariance
within the bf16 tolerance). One row per set and comparison: per-cell cosine (min, 1st percentile, mean), max
|difference| relative to the float32 embedding's largest entry, 10-NN overlap and, on the labelled sets, the
few-shot (k = 5) macro-F1 of each (``protocol.few_shot_f1``). The float32 batch-7 row is what batch size alone
changes in float32. ``tests/nn/test_precision_accuracy.py`` holds bf16 on the demo cells to the bounds measured here.

``train``: ``--steps`` steps of a run config (default ``models/biomjepa-mini-v0.4.yaml``, whose prepared corpus
cache must exist; ``--batch`` cells a step, warm-up ``--steps // 5``) per ``loop.precision`` and seed of ``--seeds``,
one after the other; for every logged quantity over the last ``--window`` steps, bf16 − fp32 of the same seed
against the difference between the float32 seeds. Writes every step of every run (``…_curves.csv``) too.

``teacher``: what a bf16 teacher (CPU autocast) would change in the training targets; the step computes the teacher's
token states in float32 whatever its precision (``train.jepa.teacher_token_states``). On ``--batches`` micro-batches
of a run config's corpus (its prepared cache must exist) with that config's teacher view and blocks: the block
targets ``mean_{g∈T_k} h_g − c`` (``c`` the mean block state over the batches) and the view contrast's per-cell mean
state, from the same inputs through a float32 and a bf16 teacher, for a trained teacher (``--checkpoint``'s encoder,
default the bundled) and a freshly initialised one (step 0). Per teacher: ``target_rms`` (RMS of the float32 centred
targets), ``within_cell_rms`` (what is left after each cell's mean target: the part that tells a cell's blocks
apart), ``error_rms`` (bf16 − float32) and its ratios ``error_over_target``, ``error_over_within`` (energy ratios are
the squares); the same for the per-cell view states (``view_*``).

The bf16 error stage by stage inside the encoder, with float32 islands (issue 45: ``bf16_error_stages*.csv``), was
the ``stages`` mode of ``566751f:benchmarks/speed/bench_precision.py``.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np
import torch

from benchmarks._common import REPO, best_time, machine, precision, write_csv

#: (M, K, N): mini tokens × d → d_ff, d_ff → d, d → d (36,864 tokens: 64 cells of 576), base FFN (issue 38's table)
GEMM_SHAPES = ((36864, 128, 512), (36864, 512, 128), (36864, 128, 128), (4096, 768, 3072))
PRECISIONS = ("fp32", "bf16")


# --- speed --------------------------------------------------------------------------------------------------------

def gemm_rows(repeats: int) -> list[dict]:
    rows = []
    for m, k, n in GEMM_SHAPES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        calls = {"fp32": partial(torch.matmul, a, b), "bf16": partial(torch.matmul, a.bfloat16(), b.bfloat16())}
        best = dict.fromkeys(PRECISIONS, float("inf"))
        for _ in range(repeats):  # alternate: load from other processes hits both alike
            for p, fn in calls.items():
                fn()  # warm-up
                best[p] = min(best[p], best_time(fn, 1))
        fp32, bf16 = (2 * m * k * n / best[p] / 1e9 for p in PRECISIONS)
        rows.append({"kind": "gemm", "what": f"{m}x{k}x{n}", "unit": "GFLOP/s", "fp32": fp32, "bf16": bf16})
    return rows


def embed_rows(n_cells: int | None, repeats: int) -> list[dict]:
    import biomjepa as bj

    adata = bj.datasets.pancreas()
    adata = adata[: n_cells or adata.n_obs].copy()
    bj.pp.map_vocab(adata)
    bj.settings.progress = False
    best = dict.fromkeys(PRECISIONS, float("inf"))
    for p in PRECISIONS:  # warm-up of both paths (and the model load)
        with precision(p):
            bj.tl.embed(adata[:16].copy(), device="cpu")
    for _ in range(repeats):
        for p in PRECISIONS:
            with precision(p):
                seconds = best_time(lambda: bj.tl.embed(adata, device="cpu", copy=True), 1)
            best[p] = min(best[p], seconds)
            print(f"embed {p}: {seconds:.1f} s", flush=True)
    return [{"kind": "embed", "what": f"tl.embed, bundled model, {adata.n_obs} demo cells", "unit": "cells/s",
             "fp32": adata.n_obs / best["fp32"], "bf16": adata.n_obs / best["bf16"],
             "fp32_seconds": best["fp32"], "bf16_seconds": best["bf16"]}]


def train_rows(steps: int, genes: int) -> list[dict]:
    from benchmarks.speed.bench_train import RecipeRun, synthetic
    from biomjepa.train import preset

    env, base = synthetic(genes), preset("mini").flat()
    cells = base["batch_size"] * base["accumulation"]
    fixed = {k: base[k] for k in ("batch_size", "accumulation", "min_context")} | {"device": "cpu"}
    args = SimpleNamespace(preset="mini", steps=1, genes=genes, batch=base["batch_size"])
    runs = {p: RecipeRun(p, {**fixed, "precision": p}, args, env.tmp, env.graph, env.universe, rounds=steps)
            for p in PRECISIONS}  # each warmed up by one step
    for _ in range(steps):
        for run in runs.values():  # in turn, one step each
            run.timed_steps(1)
    for p, run in runs.items():
        assert all(r["bf16"] == float(p == "bf16") and np.isfinite(r["loss"]) for r, _ in run.timed)
    med = {p: statistics.median(run.chunks) for p, run in runs.items()}
    return [{"kind": "train", "what": f"mini preset step, {cells} cells of {genes} genes", "unit": "cells/s",
             "fp32": cells / med["fp32"], "bf16": cells / med["bf16"], "fp32_seconds": med["fp32"],
             "bf16_seconds": med["bf16"]}]


def speed(args) -> None:
    import biomjepa as bj

    if args.threads:
        torch.set_num_threads(args.threads)
    bj.settings.num_threads = None  # the threads above, not the idle-core count
    rows = gemm_rows(args.repeats) + embed_rows(args.cells, args.repeats)
    if args.train_steps:
        rows += train_rows(args.train_steps, args.genes)
    info = machine()
    for r in rows:
        r |= {"ratio": r["bf16"] / r["fp32"], **info}
    print(f"{info['cpu']} ({info['cpu_flags']}; torch {info['torch']} {info['torch_capability']}, {info['threads']} threads)")
    for r in rows:
        print(f"{r['kind']:>5} {r['what']:<48} fp32 {r['fp32']:9.1f}  bf16 {r['bf16']:9.1f} {r['unit']:<8} x{r['ratio']:.2f}")
    print(f"wrote {write_csv(rows, args.out)}")


# --- accuracy -----------------------------------------------------------------------------------------------------

def load_set(name: str):
    """The ``validation`` or ``demo`` cells (``obs["cell_type"]``), mapped to the vocabulary."""
    import biomjepa as bj
    from benchmarks.protocol import test_cells, validation_cells

    a = test_cells() if name == "demo" else validation_cells()
    bj.pp.map_vocab(a)
    return a


def present(sets: list[str]) -> list[str]:
    """The sets whose cells are here (the validation cells need ``../shared/data``)."""
    from benchmarks._common import SHARED

    missing = set() if (SHARED / "scrna" / "pbmc_sorted_2140cells_raw.h5ad").is_file() else {"validation"}
    for name in missing & set(sets):
        print(f"{name}: ../shared/data not found, skipped")
    return [s for s in sets if s not in missing]


def embed(adata, prec: str, batch_size: int, checkpoint: str | None = None) -> tuple[np.ndarray, float]:
    import biomjepa as bj

    with precision(prec):
        t0 = time.perf_counter()
        out = bj.tl.embed(adata, checkpoint=checkpoint, device="cpu", batch_size=batch_size, copy=True)
        seconds = time.perf_counter() - t0
    assert out.uns["biomjepa"]["params"]["precision"] == prec
    return out.obsm["X_biomjepa"], seconds


def compare(ref: np.ndarray, got: np.ndarray, k: int = 10) -> dict:
    """Per-cell cosine, relative max difference and k-NN overlap of ``got`` against ``ref`` (``[n, d]`` each)."""
    from biomjepa.bench.reconstruction import knn_overlap

    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    return {"cosine_min": float(cos.min()), "cosine_p01": float(np.percentile(cos, 1)), "cosine_mean": float(cos.mean()),
            "max_abs_rel": float(np.abs(got - ref).max() / np.abs(ref).max()), f"knn{k}_overlap": knn_overlap(ref, got, k)}


def measure(name: str, checkpoint: str | None = None) -> list[dict]:
    from benchmarks.protocol import few_shot_f1

    adata = load_set(name)
    labels = adata.obs["cell_type"].astype(str).to_numpy()
    Z, secs = {}, {}
    for c in (("fp32", 64), ("bf16", 64), ("bf16", 7), ("fp32", 7)):
        Z[c], secs[c] = embed(adata, *c, checkpoint)
        print(f"{name}: {c[0]} batch {c[1]}: {secs[c]:.1f} s", flush=True)
    f1 = {c: few_shot_f1(Z[c], labels) for c in (("fp32", 64), ("bf16", 64))}
    rows = []
    for got, ref, what in ((("bf16", 64), ("fp32", 64), "bf16 vs fp32 (batch 64)"),
                           (("bf16", 7), ("fp32", 64), "bf16 batch 7 vs fp32 batch 64"),
                           (("bf16", 7), ("bf16", 64), "bf16 batch 7 vs bf16 batch 64 (batch invariance)"),
                           (("fp32", 7), ("fp32", 64), "fp32 batch 7 vs fp32 batch 64 (reference)")):
        row = {"set": name, "n_cells": adata.n_obs, "comparison": what, **compare(Z[ref], Z[got]),
               "seconds_ref": secs[ref], "seconds": secs[got]}
        if what.startswith("bf16 vs fp32"):
            row |= {"f1_fp32": f1["fp32", 64], "f1_bf16": f1["bf16", 64], "f1_diff": f1["bf16", 64] - f1["fp32", 64]}
        rows.append(row)
        print({k: round(v, 5) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    return rows


def accuracy(args) -> None:
    import biomjepa as bj
    from biomjepa._device import cpu_bf16_units

    bj.settings.progress = False
    rows = [r for name in present(args.sets) for r in measure(name, args.checkpoint)]
    for r in rows:
        r |= {"torch": torch.__version__, "bf16_units": " ".join(cpu_bf16_units()) or "none"}
    print(f"wrote {write_csv(rows, args.out)}")


# --- train --------------------------------------------------------------------------------------------------------

QUANTITIES = ("loss", "align", "cosine", "var", "view_nce", "view_nce_acc", "effective_rank", "cells_per_s")


def run(config: str, prec: str, seed: int, args, out: Path):
    import pandas as pd

    import biomjepa as bj

    cfg = bj.train.load_config(config, [
        f"run.out_dir={out}", f"run.run_name={prec}_{seed}", f"run.seed={seed}", f"run.steps={args.steps}",
        f"data.batch_size={args.batch}", f"optim.warmup_steps={max(1, args.steps // 5)}", f"loop.precision={prec}",
        "loop.checkpoint_every=1000000", "loop.tensorboard=false", "loop.progress=false", "probe.path=null"])
    log = pd.read_csv(bj.train.pretrain(cfg) / "log.csv")
    print(f"{prec} seed {seed}: loss {log['loss'].iloc[-args.window:].mean():.4f}, "
          f"{log['cells_per_s'].median():.1f} cells/s", flush=True)
    return log.assign(precision=prec, seed=seed)


def compare_runs(curves, seeds: list[int], window: int) -> list[dict]:
    """Last-``window`` means per run; bf16 − fp32 per seed against the float32 seeds' spread."""
    last = curves[curves["step"] >= curves["step"].max() - window + 1]
    means = last.groupby(["precision", "seed"])[[q for q in QUANTITIES if q in last]].mean()
    rows = []
    for q in means.columns:
        fp32, bf16 = ([means.loc[(p, s), q] for s in seeds] for p in PRECISIONS)
        diff = np.max(np.abs(np.subtract(bf16, fp32)))
        spread = float(np.ptp(fp32)) if len(seeds) > 1 else float("nan")
        rows.append({"quantity": q, "fp32_mean": float(np.mean(fp32)), "bf16_mean": float(np.mean(bf16)),
                     "bf16_minus_fp32_max_abs": float(diff), "fp32_seed_spread": spread,
                     "within_spread": bool(diff <= spread) if len(seeds) > 1 else None})
    return rows


def train(args) -> None:
    import pandas as pd

    out = Path(tempfile.mkdtemp())
    curves = pd.concat([run(args.config, p, seed, args, out) for seed in args.seeds for p in PRECISIONS])
    rows = compare_runs(curves, args.seeds, args.window)
    for r in rows:
        print(r)
    write_csv(curves.to_dict("records"), args.out.replace(".csv", "_curves.csv"))
    print(f"wrote {write_csv(rows, args.out)}")


# --- teacher ------------------------------------------------------------------------------------------------------

def teacher_states(teacher, inputs, n_units: int, bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Target-gene states ``[M, D]`` and per-cell mean states ``[n, D]`` (float32 results either way)."""
    from biomjepa.nn.pooling import mean_state

    t = inputs.teacher
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        h = teacher(t.gene_ids, t.values.float(), t.mask).float()
    n, T, D = h.shape
    cell = torch.div(inputs.tgt_unit, n_units, rounding_mode="floor")
    return h.reshape(n * T, D)[cell * T + inputs.tgt_pos], mean_state(h, t.gene_mask)


def micro_batches(cfg, n: int) -> list:
    """``n`` micro-batches of the run's inputs (blocks, teacher view), as the training step receives them."""
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    tr = Trainer(cfg, init_distributed("cpu"))
    data = tr.batches()
    one_arg = len(inspect.signature(tr._micro).parameters) == 1  # prepared by the loader, or prepared here
    out = []
    for i in range(n):
        tr.step = i
        out.append(tr._micro(next(data)) if one_arg else tr._micro(next(data), 0))
    return out


def teacher_error(teacher, batches: list, label: str) -> dict:
    """One row: the bf16 teacher's error in the centred block targets and the view states, against their energy."""
    from biomjepa.train.targets import unit_means

    per = []
    for inputs in batches:
        n_units = inputs.valid.shape[1]
        rows = inputs.valid.numel()
        valid = inputs.valid.reshape(-1)
        got = {}
        for bf16 in (False, True):
            states, cell_state = teacher_states(teacher, inputs, n_units, bf16)
            means, _ = unit_means(states, inputs.tgt_unit, rows)
            got[bf16] = (means[valid], cell_state)
        cell = torch.arange(inputs.valid.shape[0]).repeat_interleave(n_units)[valid]
        per.append((got[False], got[True], cell))
    centre = torch.cat([f[0] for f, _, _ in per]).mean(0)  # the global centre the run's EMA tracks
    t32 = torch.cat([f[0] - centre for f, _, _ in per])
    t16 = torch.cat([b[0] - centre for _, b, _ in per])
    within = []
    for f, _, cell in per:
        t = f[0] - centre
        level, _ = unit_means(t, cell, int(cell.max()) + 1)
        within.append(t - level[cell])
    v32 = torch.cat([f[1] - f[1].mean(0) for f, _, _ in per])  # the view contrast centres on the batch
    v16 = torch.cat([b[1] - f[1].mean(0) for f, b, _ in per])
    rms = lambda x: float(x.pow(2).mean().sqrt())  # noqa: E731
    err, verr = rms(t16 - t32), rms(v16 - v32)
    return {"teacher": label, "units": len(t32), "target_rms": rms(t32), "within_cell_rms": rms(torch.cat(within)),
            "error_rms": err, "error_over_target": err / rms(t32), "error_over_within": err / rms(torch.cat(within)),
            "view_rms": rms(v32), "view_error_rms": verr, "view_error_over_view": verr / rms(v32),
            "token_rms": rms(torch.cat([f[0] for f, _, _ in per]))}


def teacher(args) -> None:
    import biomjepa as bj
    from biomjepa._device import cpu_bf16_units
    from biomjepa.nn import Encoder
    from biomjepa.train import load_config

    cfg = load_config(args.config, [f"run.out_dir={tempfile.mkdtemp()}", "loop.tensorboard=false",
                                    "loop.progress=false", "probe.path=null", "model.gene_init=random"])
    batches = micro_batches(cfg, args.batches)
    model = bj.load_model(args.checkpoint)
    trained = model.encoder.eval()
    torch.manual_seed(0)
    fresh = Encoder(trained.config).eval()
    rows = [teacher_error(trained, batches, f"trained ({model.info.get('name', 'checkpoint')})"),
            teacher_error(fresh, batches, "fresh (step 0)")]
    for r in rows:
        r |= {"config": Path(args.config).name, "batches": args.batches,
              "cpu_bf16_units": " ".join(cpu_bf16_units()) or "none"}
        print({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()})
    print(f"wrote {write_csv(rows, args.out)}")


# --- command line -------------------------------------------------------------------------------------------------

MODES = {"speed": speed, "accuracy": accuracy, "train": train, "teacher": teacher}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The mode and its options; without a mode, ``speed`` (the commands written before the modes)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode")
    s = sub.add_parser("speed", help="GEMM, tl.embed and training-step throughput")
    s.add_argument("--cells", type=int, default=None, help="demo cells to embed (default: all 1,074)")
    s.add_argument("--train-steps", type=int, default=5, help="timed training steps per precision (0: none)")
    s.add_argument("--genes", type=int, default=1500, help="observed genes per synthetic training cell")
    s.add_argument("--repeats", type=int, default=3, help="alternating rounds of the GEMM and embed timings")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = sub.add_parser("accuracy", help="bf16 against float32 embeddings")
    a.add_argument("--sets", nargs="+", default=["validation", "demo"], choices=["validation", "demo"])
    t = sub.add_parser("train", help="a short pretraining run in both precisions")
    t.add_argument("--config", default=str(REPO / "models" / "biomjepa-mini-v0.4.yaml"))
    t.add_argument("--steps", type=int, default=150)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    t.add_argument("--window", type=int, default=30, help="last steps whose means are compared")
    te = sub.add_parser("teacher", help="a bf16 teacher's error in the training targets")
    te.add_argument("--config", default=str(REPO / "models" / "biomjepa-mini-v0.4.yaml"))
    te.add_argument("--batches", type=int, default=6)
    for name in ("accuracy", "teacher"):
        sub.choices[name].add_argument("--checkpoint", default=None,
                                       help="registry name or directory (default: the bundled model)")
    for name, out in zip(MODES, ("bench_precision", "precision_accuracy", "precision_train_proxy", "teacher_bf16_error")):
        sub.choices[name].add_argument("--out", default=f"{out}.csv", help="CSV name under benchmarks/results/")
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in MODES and argv[0] not in ("-h", "--help")):
        argv = ["speed", *argv]
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    MODES[args.mode](args)


if __name__ == "__main__":
    main()
