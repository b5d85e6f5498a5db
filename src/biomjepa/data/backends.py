"""Blocks of an AnnData matrix as scipy sparse or numpy, whatever backend holds them (in memory,
backed h5ad, dask, pydata sparse): the one place that knows the backends' types."""

from __future__ import annotations

import numpy as np
from scipy import sparse


def is_dask(X) -> bool:
    """Whether ``X`` is a dask array (lazy AnnData: ``anndata.experimental.read_lazy``/``read_elem_lazy``)."""
    return type(X).__module__.startswith("dask.")


def materialize(block):
    """One block as scipy sparse or numpy, whatever the backend returned."""
    if is_dask(block):
        block = block.compute()
    if sparse.issparse(block) or isinstance(block, np.ndarray):
        return block
    if hasattr(block, "to_memory"):  # anndata's backed sparse dataset slice
        return sparse.csr_matrix(block.to_memory())
    if hasattr(block, "to_scipy_sparse"):  # pydata sparse (dask arrays of sparse.COO chunks)
        return sparse.csr_matrix(block.to_scipy_sparse())
    return np.asarray(block)
