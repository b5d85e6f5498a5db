"""Steps c-g of ``gpu_suite.py``: embedding, attention (and flash-linear-attention), fine-tuning, training, atlas.

Each step calls the functions of the existing benchmark scripts (``bench_embed.run``,
``bench_attention.measure``/``run_child``, ``bench_finetune.time_config``, ``bench_train.measure``) or runs the
atlas command line, and reports through the :class:`_suite.Suite` it is given.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from benchmarks.gpu._suite import PAPER


# ---------------------------------------------------------------------- c: embedding
def step_c(s) -> None:
    """bench_embed: base and the bundled model, full-length and 400-gene cells, vs a same-run GEMM."""
    import biomjepa as bj
    from benchmarks._common import peak_gemm_gflops
    from benchmarks.speed import bench_embed as be

    n = s.pick(8, 512)
    sets = {"baron_full": be.load_cells(n, None), "baron_400": be.load_cells(n, 400)}
    peak = peak_gemm_gflops(s.device, size=s.pick(512, None))
    s.figure("c", "peak_gemm_gflops", peak, "GFLOP/s", None, "best square GEMM, same run (bf16 on CUDA)")
    models = {s.pick("mini", "base"): None, "bundled": bj.load_model()}
    rows = []
    for name, model in models.items():
        for bs in s.pick((4,), (8, 64)):
            for label, cells in sets.items():
                r = be.run(name, cells, bs, label, s.device, peak, s.pick(1, 3), model=model)
                rows.append({"model": name, **r})
                s.figure("c", f"{name}_{label}_b{bs}_fraction_of_gemm", r["fraction_of_gemm"], "", 0.5,
                         f"{r['cells_per_s']:.1f} cells/s, {r['gflops']:.1f} GFLOP/s, {r['mean_tokens']} tokens/cell; goal >= 0.5")
                s.free()
    s.rows("embed", "c", rows)


# ---------------------------------------------------------------------- d: attention
def _measure_attention(s, spec: dict) -> dict:
    """One ``bench_attention`` measurement: in this process on CUDA (exact peak statistics), a fresh one on CPU."""
    from benchmarks.speed import bench_attention as ba

    if not s.cuda:
        return ba.run_child(spec)
    from biomjepa.nn.attention import LinearSelfAttention

    forward = LinearSelfAttention.forward  # the dense measurement patches it
    try:
        return ba.measure(spec)
    finally:
        LinearSelfAttention.forward = forward
        s.free()


def step_d(s) -> None:
    """bench_attention: linear vs dense SDPA, linear alone to 64k, the longest cell, flash-linear-attention."""
    cfg = s.pick("mini", "base")
    base = {"config": cfg, "layers": 1, "repeats": s.pick(1, 3), "threads": 0, "dense_backend": "auto",
            "malloc_reuse": False, "device": s.device}
    lengths = s.pick([256], [512, 1024, 2048, 4096, 8192, 16384]) + s.pick([1024], [32768, 65536])
    dense_max = s.pick(256, 16384)
    rows = []
    for n in lengths:
        row = {"part": "linear_vs_dense" if n <= dense_max else "linear_only", "config": cfg, "tokens": n}
        for scope in ("core", "encoder"):
            for kind in ("linear", "dense") if n <= dense_max else ("linear",):
                r = _measure_attention(s, base | {"n": n, "scope": scope, "kind": kind})
                row[f"{scope}_{kind}_ms"], row[f"{scope}_{kind}_mib"] = 1e3 * r["seconds"], r["peak_mib"]
            if n <= dense_max:
                row[f"{scope}_speedup"] = row[f"{scope}_dense_ms"] / row[f"{scope}_linear_ms"]
        rows.append(row)
        s.log.info("attention %s", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    top = max(n for n in lengths if n <= dense_max)
    for scope in ("core", "encoder"):
        s.figure("d", f"{scope}_speedup_at_{top}", rows[lengths.index(top)][f"{scope}_speedup"], "x", None,
                 f"dense SDPA time / linear time, {cfg}, one cell of {top} tokens")
    far = rows[-1]
    s.figure("d", f"encoder_linear_ms_at_{far['tokens']}", far["encoder_linear_ms"], "ms", None,
             f"one {cfg} block, peak {far['encoder_linear_mib']:.0f} MiB")
    long = _longest(s, cfg)
    rows += long
    rows += fla_rows(s)
    s.rows("attention", "d", rows)


def _longest(s, cfg: str) -> list[dict]:
    spec = {"config": cfg, "layers": 0, "repeats": 1, "threads": 0, "dense_backend": "auto", "malloc_reuse": False,
            "device": s.device, "scope": "longest", "kind": "linear", "n": s.pick(256, 65536),
            "max_n": s.pick(1024, 1 << 24), "max_s": s.pick(20.0, 60.0)}
    r = _measure_attention(s, spec)
    s.figure("d", "longest_cell_tokens", r["longest"], "tokens", None,
             f"whole {cfg} encoder (all layers), one cell, doubling until out of memory or > {spec['max_s']:g} s "
             f"(or {spec['max_n']:,} tokens)")
    return [{"part": "longest_cell", "config": cfg, "tokens": x["tokens"], "encoder_all_layers_s": x["seconds"],
             "encoder_all_layers_mib": x["peak_mib"], "fits": x["fits"]} for x in r["rows"]]


def bidirectional_from_state(q, k, v, state_fn, eps: float = 1e-6):
    """Bidirectional linear attention ``[B, H, T, d_h]`` from a kernel that returns the key-value state.

    ``state_fn(φq, φk, v)`` must return Σ_t φ(k_t) v_tᵀ ``[B, H, d_h, d_h]`` over all tokens, the final
    state of a causal scan. The output is ``φ(q) S / (φ(q) · Σ_t φ(k_t) + eps)``, as
    :func:`biomjepa.nn.attention.linear_attention` (no padding here).
    """
    from biomjepa.nn.attention import feature_map

    fq, fk = feature_map(q), feature_map(k)
    S = state_fn(fq, fk, v).to(fq.dtype)
    z = fk.sum(-2, dtype=fk.dtype)
    return (fq @ S) / ((fq * z[..., None, :]).sum(-1, keepdim=True) + eps)


def fla_candidates(s) -> tuple[dict, str]:
    """``{name: state_fn}`` of the flash-linear-attention ops that can serve a bidirectional layer, and a note.

    fla's linear-attention ops are causal: the output at token t sees tokens ≤ t. Their one use for a
    bidirectional layer is the final state (``output_final_state=True``), Σ over all tokens of kᵀv,
    which :func:`bidirectional_from_state` applies to every query; the causal outputs are discarded.
    """
    if not s.cuda:
        note = "no CUDA: fla's Triton kernels not measured"
        if s.quick:  # the composition is still exercised, with the reduction fla would compute done by torch
            return {"torch_state_standin": lambda fq, fk, v: fk.transpose(-1, -2) @ v}, note
        return {}, note
    try:
        import fla
        from fla.ops import linear_attn
    except Exception as err:  # not installed, or broken against this torch/triton
        return {}, f"fla not importable: {type(err).__name__}: {err}"
    found = {}
    for name in ("chunk_linear_attn", "fused_chunk_linear_attn", "fused_recurrent_linear_attn"):
        op = getattr(linear_attn, name, None)
        if op is not None:
            found[f"fla.ops.linear_attn.{name}"] = _fla_state(op)
    return found, f"fla {getattr(fla, '__version__', '?')}"


def _fla_state(op):
    def state(fq, fk, v):  # fla takes [B, T, H, d]; returns (causal output, final state [B, H, d_k, d_v])
        t = (x.transpose(1, 2).contiguous() for x in (fq, fk, v))
        _, S = op(*t, scale=1.0, output_final_state=True, normalize=False)
        return S
    return state


def fla_rows(s) -> list[dict]:
    """Time and error of every fla candidate against the torch path, same q, k, v (bf16 on CUDA)."""
    cands, note = fla_candidates(s)
    s.figure("d", "fla_kernels_measured", len(cands), "kernels", None, note + "; fla's ops are causal: only their "
             "final state (sum over all tokens of k v^T) applies to a bidirectional layer")
    rows = []
    for n in (s.pick([256], [1024, 4096, 16384, 65536]) if cands else []):
        rows += _fla_at(s, n, cands)
        s.free()
    wins = sorted({r["kernel"] for r in rows if r.get("faster_and_equal")})
    s.figure("d", "fla_equal_and_faster", len(wins), "kernels", None, ", ".join(wins) or "none")
    return rows


def _timed(fn, dev, *args) -> None:
    from benchmarks._common import sync

    fn(*args)
    sync(dev)


def _fla_at(s, n: int, cands: dict) -> list[dict]:
    """Rows of every candidate on one ``[1, H, n, d_h]`` problem; the reference is float32 torch."""
    from functools import partial

    import torch

    from benchmarks._common import best_time
    from biomjepa.nn import ModelConfig
    from biomjepa.nn.attention import linear_attention

    cfg = ModelConfig.preset(s.pick("mini", "base"))
    dev, dtype = torch.device(s.device), torch.bfloat16 if s.cuda else torch.float32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, cfg.n_heads, n, cfg.d_model // cfg.n_heads, generator=g).to(dev, dtype) for _ in range(3))
    rows = []
    with torch.inference_mode():
        ref = linear_attention(q.float(), k.float(), v.float())
        err_t = float((linear_attention(q, k, v).float() - ref).abs().max())
        t_torch = best_time(partial(_timed, linear_attention, dev, q, k, v), s.pick(1, 5))
        for name, fn in cands.items():
            try:
                out = bidirectional_from_state(q, k, v, fn)
                t = best_time(partial(_timed, bidirectional_from_state, dev, q, k, v, fn), s.pick(1, 5))
            except Exception as err:
                s.log.warning("fla candidate %s failed at %d tokens: %s", name, n, err)
                rows.append({"part": "fla", "kernel": name, "tokens": n, "error": f"{type(err).__name__}: {err}"})
                continue
            err_c = float((out.float() - ref).abs().max())
            equal = err_c <= max(2 * err_t, 1e-5)
            rows.append({"part": "fla", "kernel": name, "tokens": n, "torch_ms": 1e3 * t_torch, "kernel_ms": 1e3 * t,
                         "speedup_vs_torch": t_torch / t, "max_abs_err": err_c, "torch_max_abs_err": err_t,
                         "equal": equal, "faster_and_equal": equal and t < t_torch})
            s.figure("d", f"fla_speedup_{name.rsplit('.', 1)[-1]}_{n}", t_torch / t, "x", None,
                     f"torch {1e3 * t_torch:.2f} ms vs {1e3 * t:.2f} ms; max |err| {err_c:.2e} (torch {err_t:.2e}); "
                     f"equal {equal}")
    return rows


# ---------------------------------------------------------------------- e: fine-tuning
def step_e(s) -> None:
    """bench_finetune: base, batch 8, train and held-out cells/s next to the paper's A100 rates."""
    from benchmarks.speed import bench_finetune as bf
    from biomjepa.data.stream import gather
    from biomjepa.tl._finetune import _labels, stratified_split

    rows = []
    for genes in s.pick((400,), (None, 400)):
        adata = bf.load_baron(genes)
        codes, _ = _labels(adata, "cell_type1")
        split = stratified_split(codes, 0.6, 0.2, 0)
        cells = gather(adata, np.arange(adata.n_obs))
        name, n = s.pick("mini", "base"), s.pick(8, 512)
        r = bf.time_config(name, cells, codes, split, n, n, 8, s.device)
        data = "baron" + (f"-{genes}genes" if genes else "")
        rows.append({"bench": "finetune", "data": data, "device": s.device, **r})
        for k in ("train_cells_per_s", "heldout_cells_per_s"):
            s.figure("e", f"{name}_{data}_{k}", r[k], "cells/s", PAPER[f"finetune_{k}"],
                     "batch 8, random-init weights; reference: the paper's A100 bf16 hPancreas (~400 genes/cell)")
        s.free()
    s.rows("throughput", "e", rows)


# ---------------------------------------------------------------------- f: pretraining throughput
def step_f(s) -> None:
    """bench_train: base, mini and the default recipe at batch 8 and at the largest batch that fits."""
    from benchmarks.speed import bench_train as bt

    recipe = bt.recipe_overrides(f"recipe={s.args.recipe}")[1]
    plans = [("base", "base", {}, s.pick(0, 512)), ("mini", "mini", {}, s.pick(8, 8192)),
             ("recipe", recipe.get("preset", "mini"), recipe, s.pick(16, 8192))]
    rows = []
    for name, preset, over, cap in plans:
        rows += search_batches(s, name, preset, over, cap)  # base is skipped on CPU (cap 0): minutes per step
    s.rows("throughput", "f", rows)


def _bench_train_setup(s) -> SimpleNamespace:
    """Synthetic-cell universe and gene graph of ``bench_train`` (made once per suite)."""
    from benchmarks.speed.bench_train import synthetic

    if "bench_train" not in s.state:
        s.state["bench_train"] = synthetic(s.pick(200, 1500), s.work)
    return s.state["bench_train"]


def search_batches(s, name: str, preset: str, over: dict, cap: int) -> list[dict]:
    """``bench_train.measure`` at batch 8, 16, 32 … ≤ ``cap`` until one fails (out of memory) or gets slow.

    The last batch that ran is marked ``largest`` and kept in ``s.state["train_<name>"]``.
    """
    from benchmarks.speed import bench_train as bt

    env = _bench_train_setup(s)
    args = SimpleNamespace(preset=preset, steps=s.pick(1, 3), genes=env.genes, batch=8)
    rows, batch, t0 = [], 8, time.perf_counter()
    while batch <= cap:
        try:
            r = bt.measure(f"{name}-b{batch}", {**over, "batch_size": batch, "device": s.device}, args, env.tmp,
                           env.graph, env.universe)
        except Exception as err:  # out of memory ends the search; anything else too, logged
            s.log.info("bench_train %s batch %d did not run: %s: %s", name, batch, type(err).__name__,
                       str(err).splitlines()[0][:200] if str(err) else "")
            break
        finally:
            s.free()
        rows.append({"bench": "train", **r, "recipe": name, "searched_up_to": cap, "largest": False})
        if batch == 8:
            _train_figures(s, name, r, "batch 8")
        if r["step_s"] > s.pick(30.0, 3.0) or time.perf_counter() - t0 > s.pick(60.0, 60.0):
            break
        batch *= 2
    if rows:
        rows[-1]["largest"] = True
        _train_figures(s, name, rows[-1], "largest batch that ran")
        s.state[f"train_{name}"] = rows[-1]
    return rows


def search_recipe(s) -> dict | None:
    """The largest batch of the recipe of step h (when step f did not run)."""
    from benchmarks.speed import bench_train as bt

    recipe = bt.recipe_overrides(f"recipe={s.args.recipe}")[1]
    rows = search_batches(s, "recipe", recipe.get("preset", "mini"), recipe, s.pick(8, 8192))
    s.rows("throughput", "h", rows)
    return rows[-1] if rows else None


def _train_figures(s, name: str, r: dict, what: str) -> None:
    s.figure("f", f"{name}_b{r['batch_size']}_cells_per_s", r["cells_per_s"], "cells/s", None,
             f"{what}; {r['gflops']:.1f} GFLOP/s, peak {r['peak_mib']:.0f} MiB")
    s.figure("f", f"{name}_b{r['batch_size']}_fraction_of_gemm", r["fraction_of_gemm"], "", None,
             f"{what}; same-run GEMM {r['gemm_gflops']:.1f} GFLOP/s")


# ---------------------------------------------------------------------- g: atlas
def atlas_inputs(s, cells: int, files: int, genes: int | None) -> list[Path]:
    """``files`` names for ``cells`` resampled real cells: one generated file, hard-linked (or copied) under each name."""
    import shutil

    from benchmarks.speed import bench_atlas as bat

    one = -(-cells // files)
    work = s.work / (f"atlas_{one}x{files}" + ("" if genes is None else f"_{genes}genes"))
    work.mkdir(parents=True, exist_ok=True)
    src = bat.generate(work, one, 1)[0]
    if genes is not None and not (work / "thinned").exists():  # toy sizes for --quick
        import anndata as ad

        from benchmarks._common import thin_counts

        a = ad.read_h5ad(src)
        a.X = thin_counts(a.X, genes)
        a.write_h5ad(src)
        (work / "thinned").touch()
    paths = []
    for f in range(files):
        p = work / f"cells{f:02d}.h5ad"
        if not p.exists():
            try:
                os.link(src, p)
            except OSError:
                shutil.copy(src, p)
        paths.append(p)
    return paths


def gpu_used_mib() -> float:
    """``nvidia-smi``'s used memory (all processes on the GPU), MiB; NaN where it cannot be read."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.split()
        return max(float(x) for x in out)
    except (OSError, ValueError, subprocess.SubprocessError):
        return float("nan")


def step_g(s) -> None:
    """Atlas embedding of >= 300,000 real cells through torchrun -m biomjepa.embed into a zarr store."""
    import shutil

    from benchmarks._common import RssSampler
    from benchmarks.speed import bench_atlas as bat
    from biomjepa.embed import read_atlas

    cells = s.args.atlas_cells or s.pick(400, 300_000)
    nproc = s.args.atlas_procs or s.pick(1, 4)
    files = s.pick(2, 6)
    inputs = atlas_inputs(s, cells, files, s.pick(50, None))
    expected = files * -(-cells // files)
    store = s.work / "atlas.zarr"
    shutil.rmtree(store, ignore_errors=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "biomjepa.embed", *inputs, "--store", store, "--device", "auto" if s.cuda else "cpu",
           "--precision", "auto" if s.cuda else "fp32",
           "--block-rows", s.pick(128, 8192)]
    threads = max(1, (os.cpu_count() or 1) // nproc)
    t0 = time.perf_counter()
    with RssSampler(0.5, gpu_used_mib) if s.cuda else contextlib.nullcontext(SimpleNamespace(peak=np.nan)) as gpu:
        _, out = s.run(cmd, env={**s.env(), "OMP_NUM_THREADS": str(s.pick(1, threads))}, timeout=s.pick(240, 900))
    wall = time.perf_counter() - t0
    ranks = [m.groups() for m in bat.LINE.finditer(out)]
    done = read_atlas(store)
    n_obs = sum(a.n_obs for a in done.values())
    finite = all(np.isfinite(a.obsm["X_biomjepa"]).all() for a in done.values())
    embed_s = max(float(r[4]) for r in ranks) if ranks else float("nan")
    row = {"cells": n_obs, "files": files, "nproc": nproc, "threads_per_rank": s.pick(1, threads), "wall_s": wall,
           "embed_s_max_rank": embed_s, "cells_per_s_wall": n_obs / wall, "cells_per_s_embed": n_obs / embed_s,
           "peak_rss_mib_per_rank": ";".join(r[5] for r in sorted(ranks)), "gpu_peak_used_mib": gpu.peak,
           "all_finite": finite, "device": s.device, "genes_per_cell": "all observed" if not s.quick else 50}
    s.rows("atlas", "g", [row])
    s.figure("g", "atlas_cells_per_s", n_obs / wall, "cells/s", None,
             f"{n_obs:,} cells, {nproc} torchrun process(es), wall time incl. start-up; embedding alone "
             f"{n_obs / embed_s:.0f} cells/s")
    s.figure("g", "atlas_peak_rss_mib_max_rank", max((float(r[5]) for r in ranks), default=float("nan")), "MiB")
    s.figure("g", "atlas_gpu_peak_mib", gpu.peak, "MiB", None, "nvidia-smi memory.used, sampled every 0.5 s")
    if n_obs != expected or not finite:
        raise RuntimeError(f"the store holds {n_obs} cells (all finite: {finite}); expected {expected}")
