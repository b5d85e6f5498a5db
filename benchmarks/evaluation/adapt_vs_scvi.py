"""``bj.tl.adapt`` against scVI on the same cells, same machine, one run: wall times and scores (issue 44, item 3).

Per cell set, in one process, one after another, each timed with ``time.perf_counter()`` around the calls a
user makes and nothing else (data loading and scoring are outside every clock):

* ``zero-shot``: ``bj.pp.map_vocab`` and ``bj.tl.embed`` with the base checkpoint (``bj.settings.checkpoint``);
* ``adapt``: ``bj.tl.adapt`` with its defaults (steps: ``default_steps``, 24 passes, 300–1,000 steps; ``--steps``
  overrides), into a temporary ``out_dir`` removed afterwards; the genes are already mapped by the zero-shot call;
* ``scVI``: ``bj.bench.add_baselines(adata, ["scvi"])``: 2,000 HVGs (scanpy ``flavor="seurat"`` on the
  log-normalized cells), scvi-tools ``SCVI`` (10 latent dimensions, its other defaults, no batch: each set is
  one source) on their raw counts, for scvi-tools' default epochs (``min(400, 400 · 20,000 / n_cells)``) unless
  ``--scvi-epochs``; its latent mean;
* ``PCA-50``: scanpy's standard path (``normalize_total``, ``log1p``, 2,000 HVGs, PCA-50;
  ``scanpy_defaults.standard_path``);
* ``depth``: log library size and log detected genes, 2 numbers per cell (``validation_tissues``' trivial
  baseline).

Each representation is scored with the same protocol: few-shot k = 5 macro-F1 (linear SVM,
``biomjepa.bench.probe.few_shot_f1``, seeds 42–46) and Leiden with scanpy's defaults (15 neighbours,
resolution 1, igraph; ``scanpy_defaults.leiden_scores``) over seeds 0–9 on the same neighbour graph.

Sets (``adapt_curve.load_set``): ``pbmc_val`` = the 1,072 held-out sorted PBMCs (droplet UMIs);
``brain_val`` = Darmanis brain, 420 cells (46 ``hybrid`` dropped), C1 read counts, so every call gets
``input="reads"`` (molecule equivalents for the model, raw reads for scVI and PCA, as ``validation_tissues``
reads them); ``pancreas_test`` = the 1,074 bundled pancreas cells (UMIs), the test cells: reported once, only
when asked for by name. scvi-tools lives in the benchmark's own environment, never in biomjepa's dependencies::

    python -m venv --system-site-packages .venv-scvi && .venv-scvi/bin/pip install "scvi-tools>=1.1"
    .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py                     # pbmc_val, brain_val
    .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py --sets pancreas_test   # the test cells, once
    CUDA_VISIBLE_DEVICES= .venv-scvi/bin/python benchmarks/evaluation/adapt_vs_scvi.py --threads 4   # a laptop

Both models run on ``bj.settings.device`` (``"auto"``: a GPU where there is one; hide it for CPU figures).
Writes ``benchmarks/results/adapt_vs_scvi_<sets>.csv`` (``--csv``). Columns of a representation row: ``set``,
``representation``, ``n_cells``, ``seconds`` (wall time of its calls), ``f1``, ``leiden_ari`` (seed 0: what a
user gets), ``leiden_ari_mean`` and ``leiden_ari_sd`` (seeds 0–9), ``leiden_nmi``, ``n_clusters``; on ``adapt``
rows ``steps``, ``steps_done``, ``train_seconds`` (adapt's own ``seconds``: from the call's start to the end of
training), ``precision`` and ``phase_<name>`` (seconds per phase, where adapt records them); on ``scVI`` rows
``scvi_max_epochs``; on every row ``input``, ``load_average_1min`` (before the set) and the machine: ``cpu``,
``cpu_flags``, ``torch_capability``, ``torch``, ``threads`` (torch's), ``bj_threads`` (``bj.settings.num_threads``),
``cpu_count``, ``device``, ``scvi_tools``, ``commit``, ``date``. One ``summary`` row per set: ``adapt_over_scvi_seconds``,
``adapt_over_pca_seconds``, ``f1_adapt_minus_scvi``, ``f1_adapt_minus_pca``, ``ari_adapt_minus_scvi`` and
``ari_adapt_minus_pca`` (differences of ``leiden_ari_mean``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import REPO, write_csv
from benchmarks.evaluation.adapt_curve import INPUT, load_set
from benchmarks.evaluation.scanpy_defaults import leiden_scores, standard_path
from benchmarks.evaluation.validation_tissues import add_depth

DEFAULT_SETS = ("pbmc_val", "brain_val")
ZERO_SHOT, ADAPT, SCVI, PCA, DEPTH = "zero-shot", "adapt", "scVI", "PCA-50", "depth"
LEIDEN_SEEDS = tuple(range(10))
SCVI_INSTALL = ('scvi-tools is not importable here. Install it in the benchmark\'s own environment, not as a '
                'biomjepa dependency:\n  python -m venv --system-site-packages .venv-scvi && '
                '.venv-scvi/bin/pip install "scvi-tools>=1.1"\nthen run this script with .venv-scvi/bin/python.')


def zero_shot(a, kind: str) -> tuple[np.ndarray, dict]:
    """The base checkpoint's embedding (``map_vocab`` + ``embed``) and its wall time."""
    import biomjepa as bj

    t0 = time.perf_counter()
    bj.pp.map_vocab(a)
    bj.tl.embed(a, input=kind)
    return a.obsm["X_biomjepa"], {"seconds": time.perf_counter() - t0, "checkpoint": str(bj.settings.checkpoint)}


def adapted(a, kind: str, steps: int | None) -> tuple[np.ndarray, dict]:
    """``bj.tl.adapt``'s embedding (``obsm["X_adapt"]``), its wall time and its own record."""
    import biomjepa as bj

    tmp = Path(tempfile.mkdtemp(prefix="adapt_vs_scvi-"))
    try:
        t0 = time.perf_counter()
        bj.tl.adapt(a, input=kind, steps=steps, out_dir=tmp / "adapted", key_added="X_adapt")
        seconds = time.perf_counter() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec = a.uns["X_adapt"]["adapt"]
    extra = {"seconds": seconds, "steps": rec["steps"], "steps_done": rec["steps_done"],
             "train_seconds": rec["seconds"], "precision": rec["precision"]}
    extra |= {f"phase_{k}": v for k, v in (rec.get("phases") or {}).items()}
    return a.obsm["X_adapt"], extra


def scvi_default_epochs(n_cells: int) -> int:
    """scvi-tools' ``max_epochs`` when none is given: ``min(400, round(400 · 20,000 / n_cells))``."""
    return int(min(400, round(400 * 20_000 / n_cells)))


def scvi_latent(a, kind: str, epochs: int | None) -> tuple[np.ndarray, dict]:
    """scVI's latent mean through ``bj.bench.add_baselines`` (HVGs, training, inference) and its wall time."""
    import biomjepa as bj
    from biomjepa.bench.baselines import BASELINE_KEYS

    t0 = time.perf_counter()
    bj.bench.add_baselines(a, ["scvi"], input=kind, scvi_max_epochs=epochs)
    seconds = time.perf_counter() - t0
    return a.obsm[BASELINE_KEYS["scvi"]], {"seconds": seconds,
                                           "scvi_max_epochs": epochs or scvi_default_epochs(a.n_obs)}


def pca_path(a) -> tuple[np.ndarray, dict]:
    """Scanpy's standard path (PCA-50 of 2,000 HVGs) and its wall time."""
    t0 = time.perf_counter()
    Z = standard_path(a, lognorm=False)
    return Z, {"seconds": time.perf_counter() - t0}


def depth_only(a) -> tuple[np.ndarray, dict]:
    """The trivial baseline: log library size and log detected genes."""
    t0 = time.perf_counter()
    key = add_depth(a)
    return a.obsm[key], {"seconds": time.perf_counter() - t0}


def score(name: str, labels: np.ndarray, rep: str, Z: np.ndarray, extra: dict) -> dict:
    """One row: few-shot k = 5 F1 and Leiden ARI (seed 0, mean and s.d. over :data:`LEIDEN_SEEDS`)."""
    from biomjepa.bench.probe import few_shot_f1

    leiden = leiden_scores(Z, labels, seeds=LEIDEN_SEEDS)
    r = {"set": name, "representation": rep, "n_cells": len(labels), "seconds": extra.pop("seconds"),
         "f1": few_shot_f1(Z, labels)}
    r |= {k: leiden[k] for k in ("leiden_ari", "leiden_ari_mean", "leiden_ari_sd", "leiden_nmi", "n_clusters")}
    return r | extra


def run_set(name: str, steps: int | None, scvi_epochs: int | None) -> list[dict]:
    """Every representation of one set, computed one after another (timed), then scored alike."""
    a, labels = load_set(name)
    kind = INPUT[name]
    common = {"input": kind, "load_average_1min": os.getloadavg()[0]}
    reps = {ZERO_SHOT: zero_shot(a, kind), ADAPT: adapted(a, kind, steps), SCVI: scvi_latent(a, kind, scvi_epochs),
            PCA: pca_path(a), DEPTH: depth_only(a)}  # a dict literal: computed in this order
    return [score(name, labels, rep, Z, {**extra, **common}) for rep, (Z, extra) in reps.items()]


def summary(rows: list[dict]) -> dict:
    """adapt against scVI and PCA-50 in one set's rows: wall-time ratios, F1 and mean-ARI differences."""
    by = {r["representation"]: r for r in rows}
    ad, sv, pc = by[ADAPT], by[SCVI], by[PCA]
    out = {"set": ad["set"], "representation": "summary", "n_cells": ad["n_cells"],
           "adapt_over_scvi_seconds": ad["seconds"] / sv["seconds"],
           "adapt_over_pca_seconds": ad["seconds"] / pc["seconds"]}
    for metric, col in (("f1", "f1"), ("ari", "leiden_ari_mean")):
        out[f"{metric}_adapt_minus_scvi"] = ad[col] - sv[col]
        out[f"{metric}_adapt_minus_pca"] = ad[col] - pc[col]
    return out


def commit() -> str:
    """``git describe --always --dirty`` of the checkout (empty without git)."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return ""


def machine() -> dict:
    """CPU, torch's capability and threads, cores, device, scvi-tools version, commit and date."""
    from importlib.metadata import version

    import biomjepa as bj
    from benchmarks.speed.bench_precision import machine as cpu_and_torch

    return {**cpu_and_torch(), "bj_threads": bj.settings.num_threads, "cpu_count": os.cpu_count(),
            "device": bj.settings.device, "scvi_tools": version("scvi-tools"), "commit": commit(),
            "date": time.strftime("%Y-%m-%d")}


def parse_sets(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in INPUT]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown sets {bad}: choose from {', '.join(INPUT)} (comma-separated)")
    return names


def main(argv: list[str] | None = None) -> None:
    import importlib.util

    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sets", type=parse_sets, default=DEFAULT_SETS,
                   help=f"comma-separated, of {', '.join(INPUT)} (default {','.join(DEFAULT_SETS)}; the test cells "
                        "pancreas_test only by name)")
    p.add_argument("--steps", type=int, default=None, help="adapt's steps (default: its own, default_steps)")
    p.add_argument("--scvi-epochs", type=int, default=None, help="scVI max_epochs (default: scvi-tools' own)")
    p.add_argument("--threads", type=int, default=None, help="torch threads for every model (default: as is)")
    p.add_argument("--csv", default=None, help="file name under benchmarks/results (default adapt_vs_scvi_<sets>.csv)")
    args = p.parse_args(argv)
    if importlib.util.find_spec("scvi") is None:
        raise SystemExit(SCVI_INSTALL)
    if args.threads is not None:
        import torch

        import biomjepa as bj

        torch.set_num_threads(args.threads)
        bj.settings.num_threads = args.threads  # the tl tools' own thread setting: the same count
    info, rows = machine(), []
    for name in args.sets:
        set_rows = run_set(name, args.steps, args.scvi_epochs)
        total = summary(set_rows)
        rows += [r | info for r in [*set_rows, total]]
        print(pd.DataFrame(set_rows).iloc[:, :9].round(3).to_string(index=False), flush=True)
        print(pd.Series(total).to_string(), flush=True)
    print(write_csv(rows, args.csv or f"adapt_vs_scvi_{'_'.join(args.sets)}.csv"))


if __name__ == "__main__":
    main()
