"""Readouts aligned with what training shapes, scored on the final checkpoint of each lever run (issue 28).

The package's centred readouts subtract each cell's mean token state before pooling; with targets that keep
the cell level (the paper's global centre, no cell centring) that mean is what the block targets carry. This
script exports each run's final encoder (the teacher, or the student where the run probed the student),
embeds the 1,072 validation PBMCs once and scores the package's readouts (:data:`biomjepa.nn.pooling.POOLINGS`,
among them ``mean_wmean``: the cell's mean state ‖ the weighted mean of the centred states, which this script
first measured on runs trained before it existed) and ``mean``, each cell's mean gene-token state ``[D]``
alone, the quantity a block target averages.

Columns as ``probe.csv`` (few-shot k = 5 macro-F1, effective rank, depth association); PCA-50 of the same cells
is the ``pca50`` row. Validation cells only: choose here, never on the test cells.

    python benchmarks/pretraining/readouts.py /tmp/bj_levers28/runs/lever-*-s42
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

from benchmarks._common import RESULTS

REPO = Path(__file__).resolve().parents[2]
EXTRA = ("mean",)  # beside the package's readouts, which include mean_wmean


def readouts(h, gene_mask, values) -> dict:
    """``{name: [B, ·]}``: the package's readouts (``mean_wmean`` among them) and the mean state alone."""
    from biomjepa.nn.pooling import POOLINGS, mean_state, pool

    out = {k: pool(h, gene_mask, values, k) for k in POOLINGS}
    out["mean"] = mean_state(h, gene_mask)
    return out


def embed_all(encoder, probe) -> dict:
    """One forward pass over the probe cells through the package's inference loop → ``{readout: [n, ·]}``."""
    import numpy as np

    from biomjepa._settings import settings
    from biomjepa.nn.inference import map_batches
    from biomjepa.nn.pooling import POOLINGS

    d = encoder.config.d_model
    names = (*POOLINGS, *EXTRA)
    width = {k: (d if k == "mean" else 2 * d) for k in names}
    out = {k: np.empty((len(probe.cells), width[k]), np.float32) for k in names}

    def fn(b):
        r = readouts(encoder(b.gene_ids, b.values, b.mask).float(), b.gene_mask, b.values)
        return tuple(r[k] for k in names)

    encoder.eval()
    map_batches(probe.cells, fn, tuple(out.values()), vocab_size=encoder.config.vocab_size, batch_size=32,
                device=next(encoder.parameters()).device, max_tokens=settings.max_batch_tokens)
    return out


def score(name: str, Z, probe) -> dict:
    from biomjepa.bench.geometry import depth_association, effective_rank
    from biomjepa.bench.probe import few_shot_f1

    d = depth_association(Z, probe.total_counts, probe.n_detected)
    return {"readout": name, "dims": Z.shape[1], "macro_f1_k5": few_shot_f1(Z, probe.labels),
            "effective_rank": effective_rank(Z), "depth_nnz": (d["abs_r_axis_nnz"] + d["abs_r_norm_nnz"]) / 2}


def pca50(cfg, n_cells: int):
    """PCA-50 of the probe cells with the package's baseline (``bj.bench.add_baselines``), the reference line."""
    import anndata as ad

    from biomjepa.bench import add_baselines

    c = cfg.probe
    adata = ad.read_h5ad(c.path)
    if c.obs is not None:
        adata = adata[adata.obs_names.isin(Path(c.obs).read_text().split())].copy()
    if adata.n_obs != n_cells:
        raise SystemExit(f"the probe subsamples {c.path} ({adata.n_obs} > probe.cells={c.cells}); the PCA row "
                         "needs the same cells: raise probe.cells")
    add_baselines(adata, ["pca"])
    return adata.obsm["X_pca50"]


def step0_encoder(cfg):
    """The encoder every lever starts from (its seed and gene initialisation), built by the training code."""
    from biomjepa.train.distributed import init_distributed
    from biomjepa.train.loop import Trainer

    tmp = tempfile.mkdtemp()
    return Trainer(cfg.replace(run_name="init", out_dir=tmp), init_distributed("cpu")).teacher


def main() -> None:
    import pandas as pd

    from biomjepa.bench.probe import load_probe
    from biomjepa.model import load_checkpoint
    from biomjepa.train import export, load_config

    os.chdir(REPO)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each with config.yaml and checkpoints/)")
    p.add_argument("--csv", type=Path, default=RESULTS / "pretrain_readouts_v03.csv")
    p.add_argument("--init", action="store_true", help="also score the step-0 encoder of the first run's config")
    args = p.parse_args()
    rows, probe = [], None
    for run in args.runs:
        cfg = load_config(run / "config.yaml")
        if probe is None:
            c = cfg.probe
            probe = load_probe(c.path, obs=c.obs, label_key=c.label_key, max_cells=c.cells, seed=cfg.run.seed)
            rows.append({"run": "pca50", "encoder": "", "step": 0, **score("pca50", pca50(cfg, len(probe.cells)), probe)})
            if args.init:
                for name, Z in embed_all(step0_encoder(cfg), probe).items():
                    rows.append({"run": "init", "encoder": "teacher", "step": 0, **score(name, Z, probe)})
        with tempfile.TemporaryDirectory() as tmp:
            out = export(run, Path(tmp) / "ckpt", which=cfg.probe.encoder)
            model = load_checkpoint(out)
            step = model.info["provenance"]["step"] if "provenance" in model.info else -1
            for name, Z in embed_all(model.encoder, probe).items():
                rows.append({"run": run.name, "encoder": cfg.probe.encoder, "step": step, **score(name, Z, probe)})
        print(pd.DataFrame(rows[-6:]).round(3).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    if args.csv.exists():
        old = pd.read_csv(args.csv)
        table = pd.concat([old[~old.run.isin(table.run)], table], ignore_index=True)
    tmp = args.csv.with_suffix(".tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(args.csv)
    print(f"wrote {args.csv}")


if __name__ == "__main__":
    main()
