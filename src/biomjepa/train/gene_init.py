"""Gene-embedding initialization from the pretraining corpus (``gene_init: pca``).

A departure from the paper (random init), measured in ``docs/pretraining_notes.md``: every gene's
input embedding starts as its loading vector on the leading principal components of the corpus'
log-normalized expression (the same ``log(1 + 1e4·c/Σc)`` values the encoder reads), scaled to a
fixed standard deviation. A cell's gene tokens then start out pointing along the directions in
which cells of the corpus differ, instead of along random directions that only depth separates.
Only the training corpus is read, so held-out cells stay held out. Genes detected in fewer than
``min_detected`` of the sampled cells keep a small random embedding (scale ``scale / 10``).
"""

from __future__ import annotations

import logging

import numpy as np
from scipy import sparse

logger = logging.getLogger(__name__)


def corpus_lognorm(corpus, *, max_cells: int, seed: int) -> sparse.csr_matrix:
    """Up to ``max_cells`` corpus cells (uniform without replacement) as ``log1p(1e4·c/Σc)`` CSR ``[n, V]``."""
    from ..data.tokenize import tokenize

    n = corpus.n_cells
    keep = np.zeros(n, dtype=bool)
    keep[np.random.default_rng(seed).choice(n, size=min(n, max_cells), replace=False)] = True
    blocks, start = [], 0
    for counts, totals in corpus.iter_counts():
        rows = np.flatnonzero(keep[start : start + counts.shape[0]])
        start += counts.shape[0]
        if len(rows):
            blocks.append(tokenize(counts[rows], totals[rows]).to_csr(counts.shape[1]))
    return sparse.vstack(blocks).tocsr()


def pca_gene_embedding(
    corpus,
    vocab_size: int,
    d_model: int,
    *,
    scale: float = 0.02,
    max_cells: int = 20_000,
    min_detected: float = 0.005,
    seed: int = 0,
    instead: str = "random",
    unit: bool = False,
) -> np.ndarray:
    """``[vocab_size, d_model]`` float32 gene embeddings from the corpus' principal-component loadings.

    Loadings are ``components · sqrt(explained variance)`` (so leading components weigh more),
    then the whole matrix is rescaled to standard deviation ``scale`` over the detected genes.
    ``unit=True`` (``gene_init: pca_unit``, issue 69) gives every detected gene's row the same norm before that
    rescaling: the direction of its loadings is kept, their length (the gene's variance on the leading components,
    largest for the hormones, ribosomal and mitochondrial genes) is not, so no gene starts with a token state that
    takes the per-feature maximum of every cell that detects it. Deterministic for a given corpus and ``seed``. A corpus too small for PCA is refused, advising
    ``model.gene_init: {instead}`` (``checkpoint`` for a run with ``model.init_from``, which refuses ``random``).
    """
    from sklearn.decomposition import PCA

    X = corpus_lognorm(corpus, max_cells=max_cells, seed=seed)
    detected = np.asarray((X > 0).mean(axis=0)).ravel()
    cols = np.flatnonzero(detected >= min_detected)
    k = min(d_model, len(cols), X.shape[0]) - 1
    if k < 1:
        raise ValueError(
            f"model.gene_init: pca needs a corpus with at least 2 cells and 2 genes detected in {min_detected:.1%} "
            f"of cells; set model.gene_init: {instead} for this corpus"
            + (" (keep the gene embeddings of model.init_from)." if instead == "checkpoint" else ".")
        )
    dense = X[:, cols].toarray().astype(np.float32)
    pca = PCA(n_components=k, svd_solver="randomized", random_state=seed).fit(dense)
    load = (pca.components_.T * np.sqrt(pca.explained_variance_)[None, :]).astype(np.float32)
    if unit:
        load /= np.maximum(np.linalg.norm(load, axis=1, keepdims=True), np.finfo(np.float32).tiny)
    rng = np.random.default_rng(seed)
    E = (rng.standard_normal((vocab_size, d_model)) * scale / 10).astype(np.float32)
    E[cols, :k] = load / load.std() * scale
    E[cols, k:] = 0.0
    logger.info("gene_init=pca: %d cells, %d genes, %d components (%.1f%% variance)",
                X.shape[0], len(cols), k, 100 * pca.explained_variance_ratio_.sum())
    return E
