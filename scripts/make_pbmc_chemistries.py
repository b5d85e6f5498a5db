"""Build ``src/biomjepa/datasets/_data/pbmc_chemistries_lognorm.h5ad`` (run from the repository root).

``bj.datasets.pbmc_chemistries()``: 900 10x PBMCs, 300 from each of three chemistries, stored the way
many portals ship data — log-normalized values only, no counts anywhere:

- source: ``../shared/data/scrna/pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad`` (raw UMI counts of
  10x Genomics' public "1k PBMCs" v2 and v3 chemistry datasets and a 1,000-cell subset of a 10x 5′
  PBMC dataset, joined on genes with 0 fill by the carrier, baj12/scWGParis @ 4a3ea76);
- cells: 300 per chemistry drawn with ``numpy.random.default_rng(0)`` (no replacement, in file
  order), every gene of the file kept (19,974 symbols);
- ``obs["total_counts"]``: each cell's library size (sum of its counts over all genes of the file),
  computed *before* normalizing; ``obs["chemistry"]``: ``3prime_v2``, ``3prime_v3``, ``5prime``;
- ``X``: ``log1p(normalize_total(counts, target_sum=1e4))`` (scanpy), float32 CSR; ``uns["log1p"]``
  as ``sc.pp.log1p`` writes it; no ``layers``, no ``raw``.

The output is deterministic (gzip, fixed seed); re-running it rewrites the same cells and values.
"""

from __future__ import annotations

import json
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scanpy as sc
from scipy import sparse

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "scrna" / "pbmc_10x_1kv2_1kv3_5prime_2860cells_raw.h5ad"
OUT = ROOT / "src" / "biomjepa" / "datasets" / "_data" / "pbmc_chemistries_lognorm.h5ad"
PER_CHEMISTRY = 300
SEED = 0
CHEMISTRY = {  # carrier's batch name -> obs["chemistry"]
    "10x_pbmc_1k_v2": "3prime_v2",
    "10x_pbmc_1k_v3": "3prime_v3",
    "10x_pbmc_5prime_8k_subset1k": "5prime",
}
SOURCE_NOTE = (
    "900 PBMCs (300 per 10x chemistry: 3' v2, 3' v3, 5'), log1p(normalize_total(target_sum=1e4)) of the raw UMI "
    "counts, no counts stored; obs['total_counts'] = library size before normalizing. Data: 10x Genomics public "
    "datasets (1k PBMCs v2 and v3 chemistry; a 1,000-cell subset of a 5' PBMC dataset), via baj12/scWGParis @ "
    "4a3ea76 (GPL-2 repository). Built by scripts/make_pbmc_chemistries.py (numpy default_rng(0))."
)


def build(source: Path = SOURCE) -> ad.AnnData:
    """The bundled AnnData from the raw-count source file (nothing written)."""
    raw = ad.read_h5ad(source)
    batch = raw.obs["batch"].astype(str).to_numpy()
    unknown = sorted(set(batch) - set(CHEMISTRY))
    if unknown:
        raise ValueError(f"unexpected batches in {source}: {unknown}")
    rng = np.random.default_rng(SEED)
    picked = []
    for name in CHEMISTRY:  # fixed order, so the draws do not depend on the file's category order
        idx = np.flatnonzero(batch == name)
        picked.append(np.sort(rng.choice(idx, size=PER_CHEMISTRY, replace=False)))
    rows = np.concatenate(picked)
    counts = sparse.csr_matrix(raw.X[rows], dtype=np.float32)
    if not np.array_equal(counts.data, np.rint(counts.data)):
        raise ValueError(f"{source}: X is not integer counts")
    total = np.asarray(counts.sum(axis=1), dtype=np.float64).ravel()
    obs = pd.DataFrame(
        {
            "chemistry": pd.Categorical(
                [CHEMISTRY[b] for b in batch[rows]], categories=list(CHEMISTRY.values())
            ),
            "total_counts": total.astype(np.float32),
        },
        index=raw.obs_names[rows].astype(str),
    )
    adata = ad.AnnData(counts, obs=obs, var=pd.DataFrame(index=raw.var_names.astype(str)))
    sc.pp.normalize_total(adata, target_sum=1e4)
    sc.pp.log1p(adata)
    adata.X = sparse.csr_matrix(adata.X, dtype=np.float32)
    adata.X.sort_indices()
    adata.uns = {
        "log1p": {"base": None},
        "source": SOURCE_NOTE,
        "provenance": json.loads(raw.uns["provenance"]),
    }
    return adata


def main() -> None:
    adata = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    adata.write_h5ad(OUT, compression="gzip", compression_opts=9)
    print(
        f"{OUT.relative_to(ROOT)}: {adata.n_obs} cells x {adata.n_vars} genes, "
        f"{adata.X.nnz:,} stored values, {OUT.stat().st_size / 1e6:.2f} MB"
    )
    print(adata.obs["chemistry"].value_counts().to_string())


if __name__ == "__main__":
    main()
