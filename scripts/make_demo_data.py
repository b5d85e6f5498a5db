"""Build the bundled demo dataset and the held-out cell lists (run from the repo root).

Held-out split (never used for pretraining the bundled model, used for its evaluation):
50% of each cell type of Baron 2016 human pancreas (``cell_type1``) and of the 10x sorted PBMCs
(``sorted_celltype``), drawn with ``numpy.random.default_rng(0)``. The demo dataset is the Baron
held-out half with raw counts (MIT-licensed source: PyPI ``came`` 0.1.13 sample data).
"""

from __future__ import annotations

from pathlib import Path

import anndata as ad
import numpy as np

SHARED = Path("../shared/data/scrna")
OUT = Path("src/biomjepa/datasets/_data")


def held_out(labels, seed: int = 0, frac: float = 0.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(labels), dtype=bool)
    for lab in sorted(set(labels)):
        idx = np.flatnonzero(labels == lab)
        n = int(np.ceil(frac * len(idx))) if len(idx) > 1 else 1
        keep[rng.choice(idx, size=n, replace=False)] = True
    return keep


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    baron = ad.read_h5ad(SHARED / "baron2016_pancreas_2142cells_raw.h5ad")
    mask = held_out(baron.obs["cell_type1"].astype(str).to_numpy())
    demo = baron[mask].copy()
    demo.obs = demo.obs[["cell_type1", "donor"]].rename(columns={"cell_type1": "cell_type"})
    demo.var = demo.var.iloc[:, :0]
    demo.uns = {"source": "Baron et al. 2016 (GSE84133), via PyPI came 0.1.13 sample data (MIT)"}
    demo.X = demo.X.astype(np.float32)
    demo.write_h5ad(OUT / "pancreas_baron_demo.h5ad", compression="gzip")
    Path(OUT / "heldout_baron2016_pancreas.txt").write_text("\n".join(demo.obs_names) + "\n")
    pbmc = ad.read_h5ad(SHARED / "pbmc_sorted_2140cells_raw.h5ad", backed="r")
    pmask = held_out(pbmc.obs["sorted_celltype"].astype(str).to_numpy())
    Path(OUT / "heldout_pbmc_sorted.txt").write_text("\n".join(pbmc.obs_names[pmask]) + "\n")
    print(f"demo: {demo.n_obs} cells; PBMC sorted held out: {pmask.sum()}")


if __name__ == "__main__":
    main()
