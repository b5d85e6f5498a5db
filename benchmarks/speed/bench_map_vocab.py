"""``pp.map_vocab`` throughput on a synthetic 100k-cell × 33k-gene CSR with real-like sparsity.

Genes are real vocabulary symbols (plus unmapped names, like a 10x feature list); ≈1.8k nonzeros
per cell (Baron-like), counts Poisson-ish. Reports nonzeros/s of the whole call, next to a plain
scipy column-sum of the same matrix in the same run as the baseline.

    python benchmarks/speed/bench_map_vocab.py [--cells 100000] [--genes 33000] [--nnz-per-cell 1800]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import write_csv


def main() -> None:
    import anndata as ad
    from scipy import sparse

    import biomjepa as bj
    from biomjepa.data.vocab import Vocab

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=100_000)
    p.add_argument("--genes", type=int, default=33_000)
    p.add_argument("--nnz-per-cell", type=int, default=1800)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    n, m, k = args.cells, args.genes, args.nnz_per_cell
    symbols = Vocab.default().symbols
    names = np.concatenate([symbols, [f"LINC{i:05d}" for i in range(max(0, m - len(symbols)))]])[:m]
    indptr = np.arange(0, (n + 1) * k, k, dtype=np.int64)
    indices = rng.integers(0, m, n * k).astype(np.int32)
    data = rng.geometric(0.6, n * k).astype(np.float32)
    X = sparse.csr_matrix((data, indices, indptr), shape=(n, m))
    X.sum_duplicates()
    adata = ad.AnnData(X)
    adata.var_names = names
    t0 = time.perf_counter()
    np.asarray(X.sum(axis=0))
    t_base = time.perf_counter() - t0
    t0 = time.perf_counter()
    bj.pp.map_vocab(adata)
    t = time.perf_counter() - t0
    row = {"cells": n, "genes": m, "nnz": X.nnz, "seconds": t, "nnz_per_s": X.nnz / t,
           "colsum_nnz_per_s": X.nnz / t_base, "ratio_to_colsum": t_base / t}
    print({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in row.items()})
    print("wrote", write_csv([row], "bench_map_vocab.csv"))


if __name__ == "__main__":
    main()
