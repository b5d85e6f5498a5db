"""bf16 against float32 on this CPU, side by side in one process: speed, the embedding's error, a training run.

    python benchmarks/speed/bench_precision.py [speed] [--cells 256 --train-steps 3 --repeats 2]   # bench_precision.csv
    python benchmarks/speed/bench_precision.py accuracy [--sets validation demo]      # precision_accuracy.csv
    python benchmarks/speed/bench_precision.py stages [--cells 256] [--variants "" blocks.3.ffn]   # bf16_error_stages.csv
    python benchmarks/speed/bench_precision.py train --steps 60 --batch 16 --window 15   # precision_train_proxy.csv

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

``stages`` (issue 45): the same batches through the model in float32 and under the package's bf16 autocast, every
stage compared: ``embedding`` (the input states), per block ``i`` ``block{i}.ln1`` (the attention's normalised
input), ``block{i}.attn`` (its output) and ``block{i}.out`` (the residual stream after the block), ``pool.max`` and
``pool.top5`` (the halves of ``max_top5``), ``pool`` and ``output`` (mapped by the checkpoint's fixed feature
statistics: what ``tl.embed`` returns). Token states: ``rel_rms`` = ‖bf16 − fp32‖ / ‖fp32‖ and the per-token cosine
over gene tokens; cell vectors also ``rel_spread`` = RMS of the difference over the RMS of the cell-to-cell spread
(what a standardizing map turns the error into). The ``floor`` rows are float32 at batch size 7 against 64.
``--variants`` compares mixed precision: each is a comma-separated list of encoder submodules (``value_embedding``,
``blocks.3.ffn``, ``blocks.3``, ...) run in float32 inside the bf16 autocast; ``""`` is plain bf16.

``train``: ``--steps`` steps of a run config (default ``models/biomjepa-mini-v0.4.yaml``, whose prepared corpus
cache must exist; ``--batch`` cells a step, warm-up ``--steps // 5``) per ``loop.precision`` and seed of ``--seeds``,
one after the other; for every logged quantity over the last ``--window`` steps, bf16 − fp32 of the same seed
against the difference between the float32 seeds. Writes every step of every run (``…_curves.csv``) too.

A bf16 teacher's error in the training targets: ``teacher_bf16_error.py``.
"""

from __future__ import annotations

import argparse
import contextlib
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


# --- stages -------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def recorded(encoder):
    """Forward hooks that keep the float32 copy of every stage's output (``{stage: tensor}``) for the body."""
    out: dict[str, torch.Tensor] = {}

    def keep(name: str, t: torch.Tensor) -> None:
        out[name] = t.detach().float().clone()

    handles = [encoder.blocks[0].register_forward_pre_hook(lambda m, a: keep("embedding", a[0]))]
    for i, block in enumerate(encoder.blocks):
        handles += [block.ln1.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.ln1", o)),
                    block.attn.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.attn", o)),
                    block.register_forward_hook(lambda m, a, o, i=i: keep(f"block{i}.out", o))]
    try:
        yield out
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def float32_islands(encoder, names: list[str]):
    """The named submodules of ``encoder`` run in float32 (inputs cast) under an enclosing bf16 autocast."""
    def float32(forward):
        def run(*args, **kwargs):
            args = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            with torch.autocast("cpu", enabled=False):
                return forward(*args, **kwargs)
        return run

    saved = [(mod, mod.forward) for mod in map(encoder.get_submodule, names)]
    for mod, forward in saved:
        mod.forward = float32(forward)
    try:
        yield
    finally:
        for mod, forward in saved:
            mod.forward = forward


def forward_stages(model, batch, prec: str) -> dict[str, torch.Tensor]:
    """Every stage of one batch in ``prec``: token states ``[B, T, D]`` and cell vectors ``[B, ·]``."""
    from biomjepa._device import autocast
    from biomjepa.nn.pooling import pool

    with recorded(model.encoder) as stages_out, torch.inference_mode(), autocast(torch.device("cpu"), prec):
        hidden = model.hidden(batch)
        pooled = pool(hidden, batch.gene_mask, batch.values, model.config.pooling).float()
    # the model's own map of its pooled output (BiomJEPA.forward), without a second pass through the encoder
    output = pooled if model.feature_mean is None else (pooled - model.feature_mean) / model.feature_scale
    if model.feature_whiten is not None:
        output = (output.double() @ model.feature_whiten.double()).float()
    d = pooled.shape[1] // 2
    return {**stages_out, "pool.max": pooled[:, :d], "pool.top5": pooled[:, d:], "pool": pooled, "output": output}


def token_diff(ref: torch.Tensor, got: torch.Tensor, gene_mask: torch.Tensor) -> dict:
    """``rel_rms`` and per-token cosine over the gene tokens of ``[B, T, D]`` states."""
    r, g = ref[gene_mask].double(), got[gene_mask].double()
    cos = torch.nn.functional.cosine_similarity(r, g, dim=1)
    return {"rel_rms": float((g - r).norm() / r.norm()), "cosine_min": float(cos.min()),
            "cosine_mean": float(cos.mean()), "n": int(r.shape[0])}


def cell_diff(ref: np.ndarray, got: np.ndarray) -> dict:
    """``rel_rms``, per-cell cosine and the error relative to the cell-to-cell spread of ``[n, d]`` vectors."""
    ref, got = ref.astype(np.float64), got.astype(np.float64)
    err = got - ref
    cos = (ref * got).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    spread = np.sqrt(np.mean(ref.std(0) ** 2))
    return {"rel_rms": float(np.linalg.norm(err) / np.linalg.norm(ref)), "cosine_min": float(cos.min()),
            "cosine_mean": float(cos.mean()), "rel_spread": float(np.sqrt(np.mean(err**2)) / spread), "n": len(ref)}


def tokenized(adata, n_cells: int, seed: int = 0):
    """``n_cells`` cells of ``adata`` (seeded sample, input order kept) as ``TokenizedCells``."""
    from biomjepa.data.stream import iter_tokenized
    from biomjepa.data.tokenize import concat_cells

    rows = np.sort(np.random.default_rng(seed).choice(adata.n_obs, min(n_cells, adata.n_obs), replace=False))
    return concat_cells([c for _, c in iter_tokenized(adata[rows].copy())])


def measure_stages(name: str, adata, n_cells: int, batch_size: int, variants: list[str],
                   checkpoint: str | None = None) -> list[dict]:
    """Stage rows of one cell set: each bf16 variant against float32, and the float32 batch-size floor."""
    from biomjepa._pretrained import load_model
    from biomjepa.data.collate import collate, sorted_batches
    from biomjepa.nn.inference import embed_cells

    model = load_model(checkpoint).eval()
    cells = tokenized(adata, n_cells)
    batches = [collate(cells.subset(rows), model.config.vocab_size) for rows in sorted_batches(cells.lengths, batch_size)]
    refs = [(batch, forward_stages(model, batch, "fp32")) for batch in batches]
    out = []
    for variant in variants:
        with float32_islands(model.encoder, [n for n in variant.split(",") if n]):
            got = [forward_stages(model, batch, "bf16") for batch in batches]
        out += [{"set": name, "variant": variant or "bf16", **r} for r in compare_stages(refs, got)]
    at64 = embed_cells(model, cells, batch_size=batch_size, precision="fp32")
    at7 = embed_cells(model, cells, batch_size=7, precision="fp32")
    out.append({"set": name, "variant": "fp32", "stage": f"floor: output, fp32 batch 7 vs {batch_size}", "kind": "cells",
                **cell_diff(at64, at7)})
    return out


def compare_stages(refs: list, got: list[dict]) -> list[dict]:
    """One row per stage: token stages pooled over batches (token-weighted), cell stages over all cells."""
    tokens: dict[str, list[dict]] = {}
    cells: dict[str, tuple[list, list]] = {}
    for (batch, ref), bf16 in zip(refs, got):
        for stage, r in ref.items():
            if r.dim() == 3:
                tokens.setdefault(stage, []).append(token_diff(r, bf16[stage], batch.gene_mask))
            else:
                pair = cells.setdefault(stage, ([], []))
                pair[0].append(r.numpy())
                pair[1].append(bf16[stage].numpy())
    rows = []
    for s, parts in tokens.items():
        n = np.array([p["n"] for p in parts], float)
        rows.append({"stage": s, "kind": "tokens",
                     "rel_rms": float(np.sqrt(np.average([p["rel_rms"] ** 2 for p in parts], weights=n))),
                     "cosine_min": min(p["cosine_min"] for p in parts),
                     "cosine_mean": float(np.average([p["cosine_mean"] for p in parts], weights=n)), "n": int(n.sum())})
    return rows + [{"stage": s, "kind": "cells", **cell_diff(np.concatenate(r), np.concatenate(g))}
                   for s, (r, g) in cells.items()]


def stages(args) -> None:
    import pandas as pd

    info, rows = machine(), []
    for name in present(args.sets):
        rows += [r | info for r in measure_stages(name, load_set(name), args.cells, args.batch_size,
                                                  args.variants, args.checkpoint)]
    t = pd.DataFrame(rows)
    print(t[["set", "variant", "stage", "kind", "rel_rms", "cosine_min", "cosine_mean", "rel_spread"]].round(5)
          .to_string(index=False))
    print(write_csv(rows, args.out))


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


# --- command line -------------------------------------------------------------------------------------------------

MODES = {"speed": speed, "accuracy": accuracy, "stages": stages, "train": train}


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
    for name, help_ in (("accuracy", "bf16 against float32 embeddings"), ("stages", "the error stage by stage")):
        a = sub.add_parser(name, help=help_)
        a.add_argument("--sets", nargs="+", default=["validation", "demo"], choices=["validation", "demo"])
        a.add_argument("--checkpoint", default=None, help="registry name or directory (default: the bundled model)")
    st = sub.choices["stages"]
    st.add_argument("--cells", type=int, default=256, help="cells per set (seeded sample)")
    st.add_argument("--batch-size", type=int, default=64)
    st.add_argument("--variants", nargs="+", default=[""],
                    help='float32 islands per variant: comma-separated encoder submodules ("" = plain bf16)')
    t = sub.add_parser("train", help="a short pretraining run in both precisions")
    t.add_argument("--config", default=str(REPO / "models" / "biomjepa-mini-v0.4.yaml"))
    t.add_argument("--steps", type=int, default=150)
    t.add_argument("--batch", type=int, default=32)
    t.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    t.add_argument("--window", type=int, default=30, help="last steps whose means are compared")
    for name, out in zip(MODES, ("bench_precision", "precision_accuracy", "bf16_error_stages", "precision_train_proxy")):
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
