"""Partial fine-tuning throughput (the paper's protocol) on Baron pancreas at batch 8.

The paper (Table 1, A100, bf16, hPancreas, batch 8) reports 24.37 train cells/s (forward +
backward + optimizer step) and the held-out rate (no-grad encoding + the shared head). This script
times the same two quantities with :mod:`biomjepa.nn.finetune` — the code ``bj.tl.finetune``
runs — on Baron 2016 (``cell_type1``; classes with < 3 cells dropped → 2,140 cells, 13 classes,
≈1.8k genes/cell), split 0.6 / 0.2 / 0.2 per class like ``tl.finetune``.

**Weights are randomly initialised** (seed 0): throughput does not depend on the weights, so no
trained checkpoint is needed; the accuracy printed by ``--api`` is therefore meaningless.
One untimed warm-up step precedes each timed phase. ``--train-cells`` / ``--heldout-cells`` cap
the timed cells per config (CPU time); ``--genes 400`` subsamples each cell to 400 genes like the
paper's hPancreas. Achieved GFLOP/s counts matmuls: forward of every layer, activation gradients
through every layer, weight gradients of the final block only, plus the head (×3).

    PYTHONPATH=src python benchmarks/speed/bench_finetune.py                      # mini 48 + base 8 train cells
    PYTHONPATH=src python benchmarks/speed/bench_finetune.py --configs mini --train-cells 0 --api  # full epoch via tl
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import SHARED, encoder_flops_per_token, thin_counts, write_csv

PAPER_TRAIN_CELLS_PER_S = 24.37  # A100-SXM4-80GB, bf16, hPancreas, batch 8


def load_baron(genes: int | None, seed: int = 0):
    import anndata as ad

    import biomjepa as bj

    adata = ad.read_h5ad(SHARED / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad")
    counts = adata.obs["cell_type1"].value_counts()
    adata = adata[adata.obs["cell_type1"].isin(counts.index[counts >= 3])].copy()
    bj.pp.map_vocab(adata)
    if genes is not None:  # keep `genes` random nonzero entries per cell
        adata.X = thin_counts(adata.X, genes, seed)
    return adata


def train_flops_per_cell(cfg, n_tokens: float, n_classes: int) -> float:
    """Matmul FLOPs of one training presentation of a cell with ``n_tokens`` tokens."""
    d, f = cfg.d_model, cfg.d_ff
    layer = 8 * d * d + 4 * d * f + 4 * d * (d // cfg.n_heads + 1)
    per_token = encoder_flops_per_token(cfg) + cfg.n_layers * layer + layer
    head = 2 * (4 * d * 8 * d + 8 * d * n_classes)
    return per_token * n_tokens + 3 * head


def time_config(name: str, cells, codes, split, n_train: int, n_heldout: int, batch: int, device: str = "cpu") -> dict:
    import torch

    from biomjepa.nn import Encoder, ModelConfig
    from biomjepa.nn import finetune as ft

    cfg = ModelConfig.preset(name)
    n_classes = int(codes.max()) + 1
    torch.manual_seed(0)
    dev = torch.device(device)
    model = ft.FinetuneModel(Encoder(cfg), n_classes).to(dev)
    counts = ft.mark_trainable(model)
    opt = ft.make_optimizer(model)
    rng = np.random.default_rng(0)
    train = rng.permutation(np.flatnonzero(split == "train"))
    held = rng.permutation(np.flatnonzero(split != "train"))
    warm = train[-batch:]
    ft.train_epoch(model, cells.subset(warm), codes[warm], opt, batch_size=batch, rng=rng, device=dev)
    tr = train[: n_train or len(train) - batch]
    stats = ft.train_epoch(model, cells.subset(tr), codes[tr], opt, batch_size=batch, rng=rng, device=dev)
    ft.predict_proba(model, cells.subset(held[-batch:]), batch_size=batch, device=dev)
    ho = held[: n_heldout or len(held)]
    _, held_s = ft.predict_proba(model, cells.subset(ho), batch_size=batch, device=dev)
    tokens = float(cells.lengths[tr].mean() + 2)
    flops = train_flops_per_cell(cfg, tokens, n_classes) * len(tr)
    return {
        "config": name,
        "batch_size": batch,
        "train_cells": len(tr),
        "heldout_cells": len(ho),
        "tokens_per_cell": round(tokens, 1),
        "train_cells_per_s": len(tr) / stats["seconds"],
        "heldout_cells_per_s": len(ho) / held_s,
        "train_gflops_per_s": flops / stats["seconds"] / 1e9,
        "trainable_encoder": counts["encoder"],
        "trainable_total": counts["total"],
        "paper_train_cells_per_s_a100": PAPER_TRAIN_CELLS_PER_S,
    }


def run_api(adata, batch: int, device: str = "cpu") -> dict:
    """Full one-epoch ``bj.tl.finetune`` with a random-init ``mini`` checkpoint (end-to-end path)."""
    import tempfile

    import torch

    from biomjepa.model import BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig
    from biomjepa.tl._finetune import finetune

    torch.manual_seed(0)
    path = save_checkpoint(
        BiomJEPA(ModelConfig.preset("mini")), tempfile.mkdtemp(), provenance={"kind": "random-init"}
    )
    t0 = time.perf_counter()
    finetune(adata, label_key="cell_type1", checkpoint=str(path), batch_size=batch, device=device)
    res = adata.uns["biomjepa_finetune"]
    return {
        "config": "mini (tl.finetune, full epoch)",
        "batch_size": batch,
        "train_cells": res["metrics"]["train"]["n_cells"],
        "heldout_cells": res["metrics"]["valid"]["n_cells"] + res["metrics"]["test"]["n_cells"],
        "train_cells_per_s": res["throughput"]["train_cells_per_s"],
        "heldout_cells_per_s": res["throughput"]["heldout_cells_per_s"],
        "trainable_total": res["n_trainable"]["total"],
        "wall_s": time.perf_counter() - t0,
        "test_macro_f1_random_init": res["metrics"]["test"]["macro_f1"],
    }


def main() -> None:
    import pandas as pd
    import torch

    from biomjepa.data.stream import gather
    from biomjepa.tl._finetune import _labels, stratified_split

    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", nargs="+", default=["mini", "base"])
    ap.add_argument("--train-cells", type=int, nargs="+", default=[48, 8], help="per config; 0 = whole split")
    ap.add_argument("--heldout-cells", type=int, nargs="+", default=[48, 8])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--genes", type=int, default=None, help="subsample cells to this many genes")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--api", action="store_true", help="also run the full tl.finetune epoch (mini)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (CUDA: bf16 autocast)")
    ap.add_argument("--precision", default=None, choices=["fp32", "bf16", "auto"],
                    help="bj.settings.precision of tl.finetune (default: auto on CUDA, i.e. bf16; fp32 on CPU)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import biomjepa as bj

    bj.settings.precision = args.precision or ("auto" if args.device.startswith("cuda") else "fp32")
    adata = load_baron(args.genes)
    codes, _ = _labels(adata, "cell_type1")
    split = stratified_split(codes, 0.6, 0.2, 0)
    cells = gather(adata, np.arange(adata.n_obs))
    rows = []
    for i, name in enumerate(args.configs):
        n_tr = args.train_cells[min(i, len(args.train_cells) - 1)]
        n_ho = args.heldout_cells[min(i, len(args.heldout_cells) - 1)]
        rows.append(time_config(name, cells, codes, split, n_tr, n_ho, args.batch_size, args.device))
    if args.api:
        rows.append(run_api(adata, args.batch_size, args.device))
    machine = f"{platform.processor() or platform.machine()}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    data = "baron" + (f"-{args.genes}genes" if args.genes else "")
    for r in rows:
        r.update(device=args.device, machine=machine, data=data, weights="random-init")
    print(f"Partial fine-tuning throughput on {data} ({len(cells)} cells, {args.device}, {machine}); random-init weights")
    cols = ["config", "train_cells_per_s", "heldout_cells_per_s", "train_gflops_per_s", "tokens_per_cell", "trainable_total"]
    print(pd.DataFrame(rows).reindex(columns=cols).round(2).to_string(index=False))
    print(f"paper (A100, bf16, hPancreas): {PAPER_TRAIN_CELLS_PER_S} train cells/s")
    print("wrote", write_csv(rows, f"bench_finetune_{data}.csv"))


if __name__ == "__main__":
    main()
