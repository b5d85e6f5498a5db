"""Synthetic AnnData for fast ``bj.bench`` tests (Gaussian-blob embeddings, Poisson counts)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def blobs():
    """120 cells in 4 classes (40/40/30/10): obsm X_emb (separated blobs, 8-d), X_noise (pure noise, 5-d);
    200 genes (real Reactome genes) of Poisson counts with class-specific rates in X and layers['counts']."""
    import anndata as ad
    import numpy as np
    from scipy import sparse

    from biomjepa.bench import reactome_sets

    rng = np.random.default_rng(0)
    sizes = {"alpha": 40, "beta": 40, "delta": 30, "rare": 10}
    labels = np.repeat(list(sizes), list(sizes.values()))
    cls = np.unique(labels, return_inverse=True)[1]
    genes = sorted(set().union(*sorted(reactome_sets().values(), key=len)[-40:]))[:200]
    rates = rng.gamma(0.5, 2.0, size=(len(sizes), len(genes)))
    X = rng.poisson(rates[cls] * rng.uniform(0.5, 1.5, size=(len(labels), 1))).astype(np.float32)
    X[:, 0] += 1
    a = ad.AnnData(sparse.csr_matrix(X))
    a.var_names = genes
    a.obs_names = [f"c{i}" for i in range(len(labels))]
    a.obs["cell_type"] = labels
    a.layers["counts"] = a.X.copy()
    centres = rng.normal(0, 4, size=(len(sizes), 8))
    a.obsm["X_emb"] = (centres[cls] + rng.normal(size=(len(labels), 8))).astype(np.float32)
    a.obsm["X_noise"] = rng.normal(size=(len(labels), 5)).astype(np.float32)
    return a


@pytest.fixture
def screen():
    """A toy perturbation screen: 60 controls, 4 singles and 3 doubles (20 cells each), 60 genes of
    log-normalized expression in X with additive single-gene effects; obsm X_emb is 6-d noise."""
    import anndata as ad
    import numpy as np

    rng = np.random.default_rng(1)
    singles, doubles = ["A", "B", "C", "D"], ["A+B", "B+C", "C+D"]
    perts = ["control"] * 60 + [p for p in singles + doubles for _ in range(20)]
    base = rng.uniform(0.5, 2.0, size=60)
    effect = {g: rng.normal(0, 1.0, size=60) * (rng.random(60) < 0.3) for g in singles}
    X = np.stack([base + sum((effect[g] for g in p.split("+")), np.zeros(60)) if p != "control" else base for p in perts])
    X = np.clip(X + rng.normal(0, 0.2, size=X.shape), 0, None).astype(np.float32)
    a = ad.AnnData(X)
    a.var_names = [f"G{i}" for i in range(60)]
    a.obs["perturbation"] = perts
    a.obsm["X_emb"] = rng.normal(size=(len(perts), 6)).astype(np.float32)
    return a
