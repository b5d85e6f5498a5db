"""Adaptation curves (issue 39): few-shot F1 and Leiden ARI of ``bj.tl.adapt``'s recipes against steps and seconds.

Each tissue is adapted on its own cells only (labels are scored, never trained on), with the training half of
``bj.tl.adapt`` (:func:`biomjepa.train.adapt`'s config on the bundled ``biomjepa-mini``), and the teacher and
the student are read out every ``--every`` steps, with the checkpoint's readout (``max_top5``) and with
``mean_wmean`` (:data:`EXTRA_POOLINGS`). Scores, next to PCA-50 of 2,000 HVGs (scanpy's standard
path) and the base checkpoint's zero-shot embedding of the same cells:

* ``f1``: few-shot k = 5 macro-F1 (``biomjepa.bench.probe.few_shot_f1``, 5 seeds) on the embedding a user
  gets (adapted: standardized with statistics of these cells, as ``tl.adapt`` exports it; zero-shot: the
  base checkpoint's fixed statistics);
* ``leiden_ari``: Leiden with scanpy's defaults (15 neighbours, resolution 1, seed 0) on that embedding;
  ``leiden_ari_mean`` / ``leiden_ari_sd`` over seeds 0-9 on the same neighbour graph (:data:`LEIDEN_SEEDS`).

Sets: ``validation`` = the 1,072 held-out sorted PBMCs (``sorted_celltype``) and Darmanis brain (420 cells, the
46 ``hybrid`` cells dropped; C1 read counts, written as molecule equivalents, :data:`INPUT`, since 2026-11-27: the
brain rows of ``adapt_curve_validation.csv`` predate it and read them as UMI counts); ``test`` = the 1,074 pancreas cells (``bj.datasets.pancreas()``), scored once with
the recipe chosen on the validation rows. Three steps, so the training can run where a GPU is::

    python benchmarks/evaluation/adapt_curve.py prepare DIR --sets validation   # shards, labels, PCA-50 rows
    python benchmarks/evaluation/adapt_curve.py train DIR --recipes keep,keep_lr3e-3,pca [--device cuda] [--jobs 2]
    python benchmarks/evaluation/adapt_curve.py score DIR --csv adapt_curve_validation.csv

``train`` needs only torch and the training code (no anndata); it runs every (set, recipe) in its own
process, one CPU thread each, and records the seconds of training (read-outs excluded) and the device.
``cpu-time --steps N`` times ``bj.tl.adapt`` itself on the pancreas cells on one CPU thread (with the shard,
the gene graph and the embedding pass; its `phases` record splits the time).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "scrna"
SETS = {"validation": ("pbmc_val", "brain_val"), "test": ("pancreas_test",)}
#: recipe name → entries of biomjepa.train.adapt.RECIPE
RECIPES = {
    "keep": {"gene_init": "checkpoint", "lr": 1e-3},
    "keep_lr3e-3": {"gene_init": "checkpoint", "lr": 3e-3},
    "keep_lr3e-4": {"gene_init": "checkpoint", "lr": 3e-4},
    "pca": {"gene_init": "pca", "lr": 1e-3},
    # issue 44's levers on the step's cost and a short run's teacher (read out with both readouts)
    "keep_lr3e-3_t256": {"gene_init": "checkpoint", "lr": 3e-3, "teacher_genes": 256},
    "keep_lr3e-3_m99": {"gene_init": "checkpoint", "lr": 3e-3, "momentum_start": 0.99, "momentum_end": 0.999},
    "pca_lr3e-3_t256": {"gene_init": "pca", "lr": 3e-3, "teacher_genes": 256},
}
#: readouts of every state besides the checkpoint's own (``max_top5`` for the bundled model): encoder keys
#: ``teacher``/``student`` are the checkpoint's readout, ``teacher_<pooling>``/``student_<pooling>`` these
EXTRA_POOLINGS = ("mean_wmean",)
BASE = "biomjepa-mini"
#: Leiden seeds of every row (issue 44: the mean over 10 seeds; seed 0 is what a user gets)
LEIDEN_SEEDS = tuple(range(10))
#: what each set's counts are (``input=``): Darmanis brain is C1 read counts, learnt as molecule equivalents
INPUT = {"pbmc_val": "counts", "brain_val": "reads", "pancreas_test": "counts"}


def load_set(name: str):
    """``(adata, labels)`` of a cell set (raw counts)."""
    import anndata as ad

    import biomjepa as bj

    if name == "pbmc_val":
        a = ad.read_h5ad(SHARED / "pbmc_sorted_2140cells_raw.h5ad")
        a = a[a.obs_names.isin(bj.datasets.heldout_cells("pbmc_sorted"))].copy()
        labels = a.obs["sorted_celltype"]
    elif name == "brain_val":
        a = ad.read_h5ad(SHARED / "darmanis2015_brain_466cells_raw.h5ad")
        a = a[(a.obs["cell_type"] != "hybrid").to_numpy()].copy()
        labels = a.obs["cell_type"]
    else:
        a = bj.datasets.pancreas()
        labels = a.obs["cell_type"]
    return a, labels.astype(str).to_numpy()


def prepare(root: Path, names: list[str]) -> None:
    """Per set: the cells as a corpus shard, their labels, and the PCA-50 and timing rows (CPU)."""
    import biomjepa as bj
    from benchmarks.evaluation.scanpy_defaults import standard_path
    from biomjepa.data.anndata_source import counts_view
    from biomjepa.data.shard_file import write_shard

    for name in names:
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        a, labels = load_set(name)
        bj.pp.map_vocab(a)
        rows = write_shard(counts_view(a, input=INPUT[name]), d / "cells.npz")
        assert len(rows) == a.n_obs, "every cell has a mapped gene"
        np.save(d / "labels.npy", labels[rows].astype("U"))
        t0 = time.perf_counter()
        Z = standard_path(a, lognorm=False)
        np.save(d / "pca50.npy", Z.astype(np.float32))
        (d / "pca50.json").write_text(json.dumps({"seconds": time.perf_counter() - t0}))
        print(f"{name}: {len(rows)} cells, {len(set(labels))} types", flush=True)


def train(root: Path, recipes: list[str], steps: int, every: int, device: str, seed: int, jobs: int | None = None,
          threads: int = 1, sets: list[str] | None = None) -> None:
    """Every (set, recipe) in its own process (``threads`` CPU threads each), at most ``jobs`` at a time (default:
    all); ``sets``: only these set directories (default: every prepared one)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    todo = [(d, r) for d in sorted(p for p in root.iterdir() if (p / "cells.npz").is_file())
            if sets is None or d.name in sets for r in recipes]
    running, bad = [], []
    while todo or running:
        while todo and len(running) < (jobs or len(todo) + len(running)):
            d, r = todo.pop(0)
            cmd = [sys.executable, str(Path(__file__).resolve()), "_one", str(d), r, str(steps), str(every), device, str(seed)]
            running.append((d.name, r, subprocess.Popen(cmd, env=env)))
        done = next(((s, r, q) for s, r, q in running if q.poll() is not None), None)
        if done is None:
            time.sleep(1)
            continue
        running.remove(done)
        if done[2].returncode != 0:
            bad.append(done[:2])
    if bad:
        raise SystemExit(f"runs failed: {bad}")


def train_one(d: Path, recipe: str, steps: int, every: int, device: str, seed: int) -> None:
    """One adaptation run; teacher and student read out at steps 0, ``every`` and each quarter of ``steps``
    (states are saved every ``every`` steps, so those must be multiples of it)."""
    import shutil

    import torch

    from biomjepa._pretrained import load_model
    from biomjepa.train.adapt import RECIPE, _config
    from biomjepa.train.loop import pretrain

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))  # set by `train --threads`
    work = d / f"work_{recipe}"
    shutil.rmtree(work, ignore_errors=True)
    rec = {**RECIPE, **RECIPES[recipe]}
    cfg = _config(d / "cells.npz", work, load_model(BASE).config.to_dict(), BASE, steps, seed, rec, device, False,
                  "fp32")  # float32 everywhere: the CPU's arithmetic
    cfg = cfg.replace(checkpoint_every=every)
    out, clock = {}, {"paused": 0.0, "t0": time.perf_counter(), "seconds": {}}

    def hook(step, teacher, run_dir):
        t = time.perf_counter()
        clock["seconds"][step] = t - clock["t0"] - clock["paused"]
        if step in reads:
            for which, Z in _readouts(cfg, run_dir, teacher, device).items():
                out[f"{which}_{step}"] = Z.astype(np.float16)
            info = {"recipe": rec, "steps": steps, "seconds": clock["seconds"], "device": _device_name(device)}
            np.savez(d / f"curve_{recipe}.npz", info=np.array(json.dumps(info)), **out)  # partial curves survive
        clock["paused"] += time.perf_counter() - t

    reads = {0, every, *range(steps // 4, steps + 1, max(1, steps // 4))}  # 400, 50: 0, 50, 100, 200, 300, 400
    pretrain(cfg, on_checkpoint=hook)
    shutil.rmtree(work, ignore_errors=True)


def _readouts(cfg, run_dir: Path, teacher, device: str) -> dict[str, np.ndarray]:
    """Raw pooled readouts of all cells by the teacher and the student of the state just saved (at step 0,
    before any state: the teacher, which the student equals then)."""
    from biomjepa._device import resolve_device
    from biomjepa.data.shards import Corpus
    from biomjepa.model import BiomJEPA
    from biomjepa.nn.config import ModelConfig
    from biomjepa.nn.inference import embed_cells
    from biomjepa.train.checkpoint import encoder_weights, load_latest_state

    latest = load_latest_state(run_dir)
    weights = {"teacher": teacher.state_dict()} if latest is None else \
        {w: encoder_weights(latest[1], w) for w in ("teacher", "student")}
    corpus = Corpus(cfg.data.cache_dir)
    cells = corpus.cells(0, np.arange(corpus.n_cells))
    corpus.close()
    arch = cfg.model_config().to_dict()
    out = {}
    for pooling in (None, *EXTRA_POOLINGS):
        model = BiomJEPA(ModelConfig.from_dict(arch if pooling is None else {**arch, "pooling": pooling}))
        for which, w in weights.items():
            model.encoder.load_state_dict({k: v.detach().cpu() for k, v in w.items()})
            key = which if pooling is None else f"{which}_{pooling}"
            out[key] = embed_cells(model, cells, batch_size=64, device=resolve_device(device))
    return out


def _device_name(device: str) -> str:
    import torch

    from biomjepa._device import resolve_device

    dev = resolve_device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"


def _row(name: str, labels: np.ndarray, rep: str, Z: np.ndarray, **extra) -> dict:
    from benchmarks.evaluation.scanpy_defaults import leiden_scores
    from biomjepa.bench.probe import few_shot_f1

    r = {"set": name, "representation": rep, "n_cells": len(labels), **extra, "f1": few_shot_f1(Z, labels)}
    r |= leiden_scores(Z, labels, seeds=LEIDEN_SEEDS)
    print(r, flush=True)
    return r


def _with_both(Zs) -> dict[str, np.ndarray]:
    """Every saved read-out standardized with its own cells' statistics (as ``tl.adapt`` exports it), plus
    ``<encoder>_both_<step>``: the standardized ``max_top5`` ‖ the standardized ``mean_wmean`` of the same state
    (issue 44's "both" readout, ``[n, 4D]``)."""
    from biomjepa.nn.readout import feature_stats

    out = {}
    for key in (k for k in Zs.files if k != "info"):
        Z = Zs[key].astype(np.float32)
        m, s = feature_stats(Z)
        out[key] = (Z - m) / s
    for key in list(out):
        which, step = key.rsplit("_", 1)
        if which in ("teacher", "student") and f"{which}_mean_wmean_{step}" in out:
            out[f"{which}_both_{step}"] = np.concatenate([out[key], out[f"{which}_mean_wmean_{step}"]], axis=1)
    return out


def score(root: Path, csv: str) -> None:
    """F1 and Leiden ARI of every read-out, PCA-50 and the zero-shot base; one CSV."""
    from benchmarks._common import write_csv
    from biomjepa._pretrained import load_model

    base = load_model(BASE)
    mean, scale = base.feature_mean.numpy(), base.feature_scale.numpy()
    rows = []
    for d in sorted(p for p in root.iterdir() if (p / "labels.npy").is_file()):
        labels = np.load(d / "labels.npy")
        row = partial(_row, d.name, labels)

        pca_seconds = json.loads((d / "pca50.json").read_text())["seconds"]
        rows.append(row("PCA-50", np.load(d / "pca50.npy"), seconds=pca_seconds, device="cpu"))
        for f in sorted(d.glob("curve_*.npz")):
            Zs = np.load(f)
            info = json.loads(str(Zs["info"]))
            name = f.stem.removeprefix("curve_")
            if info["recipe"]["gene_init"] == "checkpoint" and not any(r["set"] == d.name and r.get("step") == 0 for r in rows):
                Z0 = Zs["teacher_0"].astype(np.float32)  # step 0 of a kept start: the base, as tl.embed reads it out
                rows.append(row("zero-shot " + BASE, (Z0 - mean) / scale, step=0, seconds=0.0))
            for key, Z in _with_both(Zs).items():
                which, step = key.rsplit("_", 1)
                if int(step) == 0:
                    continue
                rows.append(row(f"adapt {name} {which}", Z, recipe=name, encoder=which, step=int(step),
                                seconds=round(info["seconds"][step], 1), lr=info["recipe"]["lr"],
                                gene_init=info["recipe"]["gene_init"], device=info["device"]))
    print(write_csv(rows, csv))


def cpu_time(steps: int) -> None:
    """Wall time of ``bj.tl.adapt`` itself on the pancreas test cells, one torch thread (adapt_cpu_time.csv)."""
    import shutil
    import tempfile

    import torch

    import biomjepa as bj
    from benchmarks._common import write_csv

    torch.set_num_threads(1)
    a = bj.datasets.pancreas()
    out = Path(tempfile.mkdtemp()) / "ck"
    t0 = time.perf_counter()
    bj.tl.adapt(a, steps=steps, out_dir=out)
    total = time.perf_counter() - t0
    rec = a.uns["biomjepa"]["adapt"]
    shutil.rmtree(out.parent)
    row = {"cells": a.n_obs, "steps": rec["steps_done"], "threads": 1, "total_s": round(total, 1),
           "train_s": rec["seconds"], "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count()}
    print(row, write_csv([row], f"adapt_cpu_time_{steps}.csv"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare")
    a.add_argument("root", type=Path)
    a.add_argument("--sets", choices=sorted(SETS), default="validation")
    t = sub.add_parser("train")
    t.add_argument("root", type=Path)
    t.add_argument("--recipes", default="keep,keep_lr3e-3,pca")
    t.add_argument("--steps", type=int, default=400)
    t.add_argument("--every", type=int, default=50)
    t.add_argument("--device", default="auto")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--jobs", type=int, default=None, help="runs at a time (default: all at once; on a CPU: its cores)")
    t.add_argument("--threads", type=int, default=1, help="CPU threads of each run (default 1)")
    t.add_argument("--only", default=None, help="comma-separated set directories to train (default: all prepared)")
    s = sub.add_parser("score")
    s.add_argument("root", type=Path)
    s.add_argument("--csv", default="adapt_curve_validation.csv")
    c = sub.add_parser("cpu-time")
    c.add_argument("--steps", type=int, default=20)
    o = sub.add_parser("_one")
    for name in ("d", "recipe", "steps", "every", "device", "seed"):
        o.add_argument(name)
    args = p.parse_args()
    if args.cmd == "prepare":
        prepare(args.root, list(SETS[args.sets]))
    elif args.cmd == "train":
        train(args.root, args.recipes.split(","), args.steps, args.every, args.device, args.seed, args.jobs,
              args.threads, args.only.split(",") if args.only else None)
    elif args.cmd == "score":
        score(args.root, args.csv)
    elif args.cmd == "cpu-time":
        cpu_time(args.steps)
    else:
        train_one(Path(args.d), args.recipe, int(args.steps), int(args.every), args.device, int(args.seed))


if __name__ == "__main__":
    main()
