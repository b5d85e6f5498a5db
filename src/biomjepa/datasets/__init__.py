"""Small real datasets bundled with the package (no download needed)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _path(name: str) -> Path:
    return Path(str(resources.files("biomjepa.datasets") / "_data" / name))


def pancreas():
    """1,074 human pancreas cells (Baron et al. 2016) with raw counts and cell-type labels.

    The held-out half (stratified by cell type, seed 0) of the 2,142-cell Baron subset shipped by
    PyPI ``came`` 0.1.13 (MIT); these cells were excluded from pretraining the bundled model.

    Returns
    -------
    AnnData with raw counts in ``X`` (CSR, 20,125 gene symbols), ``obs["cell_type"]`` (14 types)
    and ``obs["donor"]``.
    """
    import anndata as ad

    return ad.read_h5ad(_path("pancreas_baron_demo.h5ad"))


def heldout_cells(dataset: str) -> list[str]:
    """Obs names held out from pretraining the bundled model (``"baron2016_pancreas"``, ``"pbmc_sorted"``)."""
    path = _path(f"heldout_{dataset}.txt")
    if not path.is_file():
        raise ValueError(f"No held-out list for {dataset!r}; known: 'baron2016_pancreas', 'pbmc_sorted'.")
    return path.read_text().split()


__all__ = ["heldout_cells", "pancreas"]
