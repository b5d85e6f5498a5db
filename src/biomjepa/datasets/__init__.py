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

    The source spells symbols as R's ``make.names`` does (``HLA.A``); the 128 such names that are a
    vocabulary symbol once ``.`` is read as ``-`` carry that symbol here (``HLA-A``, ``NKX2-2``), so
    ``bj.pp.map_vocab`` maps them without a warning (``scripts/make_demo_data.py``; counts unchanged).

    Returns
    -------
    AnnData with raw counts in ``X`` (CSR, 20,125 gene symbols), ``obs["cell_type"]`` (14 types),
    ``obs["donor"]`` and ``var["original_name"]`` (the source's spelling of the 128 renamed genes,
    missing for the others).
    """
    import anndata as ad

    return ad.read_h5ad(_path("pancreas_baron_demo.h5ad"))


def pbmc_chemistries():
    """900 human PBMCs from three 10x Genomics chemistries, **log-normalized only** (no counts).

    The form many portals ship: ``X = log1p(normalize_total(counts, target_sum=1e4))`` (scanpy
    ``sc.pp.normalize_total`` + ``sc.pp.log1p``), float32 CSR, with each cell's library size in
    ``obs["total_counts"]``; no counts in ``X``, ``layers`` or ``raw``. Embed it with
    ``bj.tl.embed(adata, input="lognorm", library_size_key="total_counts")`` (tutorial 6).

    Source: 10x Genomics public datasets — "1k PBMCs from a healthy donor" with v2 and with v3
    chemistry, and a 1,000-cell subset of a 10x 5′ PBMC dataset — as raw UMI counts joined on
    genes (0 fill) by baj12/scWGParis @ 4a3ea76 (``data/*.rds``; a GPL-2 repository). 10x Genomics
    publishes these datasets for reuse with attribution; cite "10x Genomics, 1k PBMCs from a
    Healthy Donor (v2 / v3 chemistry), Single Cell Gene Expression Dataset by Cell Ranger" (sources
    and licences: ``biomjepa/datasets/_data/ATTRIBUTION.md``).

    What was done (``scripts/make_pbmc_chemistries.py``, deterministic): 300 cells per chemistry
    drawn with ``numpy.random.default_rng(0)``; all 19,974 genes kept; library size = each cell's
    sum of counts over those genes, stored before normalizing; then normalized to 10⁴ per cell and
    ``log1p``-transformed; the counts were discarded. There are **no cell-type labels**. The
    default ``biomjepa-mini`` v0.5, v0.4 and v0.3 never saw these cells (their corpora hold the source file out, so
    they are held-out cells for them); the earlier v0.2 / v0.2.1 checkpoints saw all 2,860 cells of the source
    file (these 900 included) during self-supervised pretraining, without any labels.

    Returns
    -------
    AnnData ``900 × 19,974`` with log-normalized ``X`` (gene symbols as ``var_names``),
    ``obs["chemistry"]`` (``"3prime_v2"``, ``"3prime_v3"``, ``"5prime"``; 300 each),
    ``obs["total_counts"]`` (library size) and ``uns["log1p"]``, ``uns["source"]``.
    """
    import anndata as ad

    return ad.read_h5ad(_path("pbmc_chemistries_lognorm.h5ad"))


def heldout_cells(dataset: str) -> list[str]:
    """Obs names held out from pretraining the bundled model (``"baron2016_pancreas"``, ``"pbmc_sorted"``)."""
    path = _path(f"heldout_{dataset}.txt")
    if not path.is_file():
        raise ValueError(f"No held-out list for {dataset!r}; known: 'baron2016_pancreas', 'pbmc_sorted'.")
    return path.read_text().split()


__all__ = ["heldout_cells", "pancreas", "pbmc_chemistries"]
