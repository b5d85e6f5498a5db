"""Tiny synthetic corpus, gene graph and config for the training tests (no shared data needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import sparse

V = 19264
UNIVERSE = 1500  # genes the synthetic cells express and the graph connects


def make_shards(root: Path, n_shards: int = 4, cells: int = 24, seed: int = 0) -> list[str]:
    """``n_shards`` CSR ``.npz`` shards in the cache format, 50–200 observed genes per cell."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        rows = []
        for _ in range(cells):
            g = np.sort(rng.choice(UNIVERSE, size=int(rng.integers(50, 200)), replace=False))
            rows.append((g, rng.integers(1, 20, size=len(g)).astype(np.float32)))
        indptr = np.r_[0, np.cumsum([len(g) for g, _ in rows])]
        X = sparse.csr_matrix((np.concatenate([c for _, c in rows]), np.concatenate([g for g, _ in rows]), indptr),
                              shape=(cells, V))
        p = root / f"synthetic_{s}.npz"
        totals = np.asarray(X.sum(1)).ravel() * 1.2
        np.savez(p, data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
                 totals=totals, rows=np.arange(cells))
        paths.append(str(p))
    return paths


def make_graph(root: Path, degree: int = 12, seed: int = 0) -> str:
    """A random directed graph over the first ``UNIVERSE`` genes (blocks) + a coexpression table."""
    from biomjepa.data.graph import GeneGraph, NeighbourTable

    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(UNIVERSE), degree)
    dst = rng.integers(0, UNIVERSE, size=src.size)
    keep = src != dst
    A = sparse.csr_matrix((rng.random(keep.sum()) + 0.1, (src[keep], dst[keep])), shape=(V, V))
    C = sparse.csr_matrix((rng.random(keep.sum()) + 0.1, (dst[keep], src[keep])), shape=(V, V))
    graph = GeneGraph(NeighbourTable.from_csr(A), NeighbourTable.from_csr(C))
    path = root / "graph"
    graph.save(path)
    return str(path)


def tiny_config(tmp: Path, **overrides):
    """The ``tiny`` preset on a synthetic corpus under ``tmp`` (cached across calls)."""
    from biomjepa.train import TrainConfig

    data = tmp / "data"
    shards = sorted(str(p) for p in data.glob("*.npz")) or make_shards(data)
    graph = str(tmp / "graph") if (tmp / "graph" / "graph.npz").is_file() else make_graph(tmp)
    base = {"corpus": shards, "cache_dir": str(tmp / "cache"), "graph": graph, "out_dir": str(tmp / "runs")}
    return TrainConfig.from_dict({"preset": "tiny", **base, **overrides})


def make_planted_shards(root: Path, *, types: int = 4, cells: int = 256, programme: int = 60,
                        seed: int = 0) -> list[str]:
    """Cells with planted structure: each of ``types`` cell types expresses its own ``programme`` genes
    highly (on top of a shared background of the universe), at depths that vary 4-fold; one shard."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    label = rng.integers(0, types, size=cells)
    rows = []
    for t in label:
        own = np.arange(t * programme, (t + 1) * programme)
        bg = rng.choice(np.arange(types * programme, UNIVERSE), size=int(rng.integers(40, 120)), replace=False)
        genes = np.sort(np.r_[own, bg])
        depth = rng.uniform(1.0, 4.0)
        counts = np.where(np.isin(genes, own), rng.poisson(12 * depth, genes.size), rng.poisson(2 * depth, genes.size))
        keep = counts > 0
        rows.append((genes[keep], counts[keep].astype(np.float32)))
    indptr = np.r_[0, np.cumsum([len(g) for g, _ in rows])]
    X = sparse.csr_matrix((np.concatenate([c for _, c in rows]), np.concatenate([g for g, _ in rows]), indptr),
                          shape=(cells, V))
    p = root / "planted_0.npz"
    np.savez(p, data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
             totals=np.asarray(X.sum(1)).ravel() * 1.2, rows=np.arange(cells))
    return [str(p)]
