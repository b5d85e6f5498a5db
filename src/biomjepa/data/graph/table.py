"""The gene graph as data: directed neighbour tables, the two-table :class:`GeneGraph`, and BFS over it.

* :class:`NeighbourTable` — out-neighbour lists in CSR layout, saved as ``{name}.npz`` + ``{name}.json``.
* :class:`GeneGraph` — the block table (union, for BFS) and the coexpression 64-NN table (for DMT).
* :func:`bfs_blocks` (:mod:`.bfs`) — batched breadth-first blocks (the pretraining target sampler's search);
  :func:`bfs_programme` — the deterministic block around one seed gene (a graph programme).
* ``_row_topk`` / ``_symmetric_topk`` — the sparse top-k helpers shared by both graph sources.

numpy/scipy only.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from .bfs import bfs_blocks

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- sparse top-k
def _row_topk(m: sparse.spmatrix, k: int) -> sparse.csr_matrix:
    """Keep the ``k`` largest entries of each row (ties: lower column first); vectorised."""
    m = sparse.coo_matrix(m)
    order = np.lexsort((m.col, -m.data, m.row))
    row, col, val = m.row[order], m.col[order], m.data[order]
    starts = np.searchsorted(row, np.arange(m.shape[0]))
    keep = (np.arange(len(row)) - starts[row]) < k
    return sparse.csr_matrix((val[keep], (row[keep], col[keep])), shape=m.shape)


def _symmetric_topk(rows, cols, vals, V: int, top_k: int) -> sparse.csr_matrix:
    """Undirected edges → drop self, dedupe (max), row top-k, symmetrize (max)."""
    rows, cols, vals = np.asarray(rows), np.asarray(cols), np.asarray(vals, dtype=np.float32)
    ok = (rows >= 0) & (cols >= 0) & (rows != cols)
    r = np.concatenate([rows[ok], cols[ok]])
    c = np.concatenate([cols[ok], rows[ok]])
    v = np.concatenate([vals[ok], vals[ok]])
    df = pd.DataFrame({"r": r, "c": c, "v": v}).groupby(["r", "c"], sort=False)["v"].max().reset_index()
    full = sparse.coo_matrix((df["v"].to_numpy(), (df["r"].to_numpy(), df["c"].to_numpy())), shape=(V, V))
    top = _row_topk(full, top_k)
    out = top.maximum(top.T).tocsr()
    out.sort_indices()
    return out


# --------------------------------------------------------------------------- neighbour tables
@dataclass(frozen=True, eq=False)
class NeighbourTable:
    """Directed out-neighbour lists over ``V`` genes in CSR layout.

    ``indices[indptr[g]:indptr[g + 1]]`` (int32, ascending) are the out-neighbours of gene ``g``;
    ``weights`` (float32, same layout) their edge strengths; ``meta`` free-form provenance.
    """

    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_csr(cls, matrix, meta: dict | None = None) -> NeighbourTable:
        """Wrap a square sparse matrix (rows = source genes); explicit zeros are dropped."""
        m = sparse.csr_matrix(matrix, dtype=np.float32, copy=True)
        m.eliminate_zeros()
        m.sum_duplicates()
        m.sort_indices()
        return cls(m.indptr.astype(np.int64), m.indices.astype(np.int32), m.data, dict(meta or {}))

    @property
    def n_genes(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def to_csr(self) -> sparse.csr_matrix:
        """``[V, V]`` float32 CSR of the weights."""
        V = self.n_genes
        return sparse.csr_matrix((self.weights, self.indices, self.indptr), shape=(V, V))

    def neighbours(self, g: int) -> np.ndarray:
        """Out-neighbours of gene ``g`` (int32, ascending vocabulary index)."""
        return self.indices[self.indptr[g] : self.indptr[g + 1]]

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)

    @property
    def content_hash(self) -> str:
        """sha256 of ``indptr`` (int64) + ``indices`` (int32) bytes; weights excluded."""
        h = hashlib.sha256(self.indptr.astype(np.int64).tobytes())
        h.update(self.indices.astype(np.int32).tobytes())
        return h.hexdigest()

    def topk(self, k: int) -> NeighbourTable:
        """Row-wise top-``k`` by weight (ties: lower vocabulary index first)."""
        return NeighbourTable.from_csr(_row_topk(self.to_csr(), k), {**self.meta, "top_k": k})

    def stats(self) -> dict:
        """``nnz``; mean out-degree over all ``V`` genes and over covered genes (≥ 1 neighbour)."""
        deg = self.degrees()
        covered = int((deg > 0).sum())
        m = self.to_csr()
        reciprocal = int(m.multiply(m.T).nnz) if self.nnz else 0
        return {
            "n_genes": self.n_genes,
            "nnz": self.nnz,
            "genes_covered": covered,
            "mean_out_degree_all": self.nnz / max(self.n_genes, 1),
            "mean_out_degree_covered": self.nnz / max(covered, 1),
            "max_out_degree": int(deg.max()) if len(deg) else 0,
            "reciprocal_fraction": reciprocal / max(self.nnz, 1),
            "content_hash": self.content_hash,
        }

    def save(self, path: str | Path, name: str = "graph") -> Path:
        """Write ``{path}/{name}.npz`` (``scipy.sparse.save_npz`` CSR) and ``{name}.json`` (stats, meta)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        sparse.save_npz(path / f"{name}.npz", self.to_csr(), compressed=True)
        info = {"stats": self.stats(), "meta": self.meta}
        (path / f"{name}.json").write_text(json.dumps(info, indent=1, default=_json_default))
        return path

    @classmethod
    def load(cls, path: str | Path, name: str = "graph") -> NeighbourTable:
        """Inverse of :meth:`save`; checks the stored content hash."""
        path = Path(path)
        table = cls.from_csr(sparse.load_npz(path / f"{name}.npz"))
        info_file = path / f"{name}.json"
        if info_file.exists():
            info = json.loads(info_file.read_text())
            if info["stats"]["content_hash"] != table.content_hash:
                raise ValueError(f"{path / name}.npz does not match the content hash in {info_file}.")
            table = cls(table.indptr, table.indices, table.weights, info.get("meta", {}))
        return table


@dataclass(eq=False)
class GeneGraph:
    """The block graph (union, directed, for BFS) and the coexpression 64-NN table (for DMT)."""

    blocks: NeighbourTable
    coexp: NeighbourTable
    meta: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_genes(self) -> int:
        return self.blocks.n_genes

    def coexp_topk(self, k: int) -> NeighbourTable:
        """The coexpression table truncated to ``k`` neighbours per gene (cached)."""
        if k not in self._cache:
            deg = self.coexp.degrees()
            self._cache[k] = self.coexp if (deg.max(initial=0) <= k) else self.coexp.topk(k)
        return self._cache[k]

    def stats(self) -> dict:
        return {"blocks": self.blocks.stats(), "coexp": self.coexp.stats(), **self.meta}

    def save(self, path: str | Path) -> Path:
        """Write ``graph.npz/json`` (block table; sources, parameters in meta) + ``coexp.npz/json``."""
        self.blocks.save(path, "graph")
        self.coexp.save(path, "coexp")
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> GeneGraph:
        blocks = NeighbourTable.load(path, "graph")
        return cls(blocks, NeighbourTable.load(path, "coexp"), dict(blocks.meta))


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _vocab(vocab):
    if vocab is not None:
        return vocab
    from ..vocab import Vocab

    return Vocab.default()


# --------------------------------------------------------------------------- breadth-first blocks
def bfs_programme(graph: GeneGraph | NeighbourTable, seed_gene: str | int, size: int, *, vocab=None) -> np.ndarray:
    """The BFS block of ``size`` genes around ``seed_gene``: a gene programme taken from the graph.

    The same breadth-first search as the target-block sampler (:func:`bfs_blocks`, used by
    :func:`biomjepa.train.blocks.sample_blocks`) over the block table's out-neighbours, made
    deterministic: the last level is truncated to the genes with the lowest vocabulary index. If
    the seed's component holds fewer than ``size`` genes the programme stops short (logged).

    Parameters
    ----------
    graph
        A :class:`GeneGraph` (its ``blocks`` table is searched) or a :class:`NeighbourTable`.
    seed_gene
        Gene symbol (looked up in ``vocab``) or vocabulary index.
    size
        Requested number of genes, seed included (≥ 1).
    vocab
        :class:`~biomjepa.data.vocab.Vocab` for symbol look-up; default ``Vocab.default()``.

    Returns
    -------
    int64 ``[≤ size]`` vocabulary indices in BFS order (seed first, then level by level, ascending
    vocabulary index within a level).
    """
    table = graph.blocks if isinstance(graph, GeneGraph) else graph
    if not isinstance(table, NeighbourTable):
        raise TypeError(f"graph must be a GeneGraph or NeighbourTable, got {type(graph).__name__}.")
    if int(size) < 1:
        raise ValueError(f"size must be >= 1, got {size}.")
    V = table.n_genes
    if isinstance(seed_gene, str):
        seed = int(_vocab(vocab).index_of([seed_gene])[0])
        if seed < 0:
            raise KeyError(f"Seed gene {seed_gene!r} is not in the vocabulary.")
    else:
        seed = int(seed_gene)
    if not 0 <= seed < V:
        raise ValueError(f"Seed gene index {seed} is outside the graph's {V} genes.")
    _, genes = bfs_blocks(table.indptr, table.indices, np.array([seed]), np.array([int(size)]), V, rng=None)
    if len(genes) < size:
        logger.info("bfs_programme(%s, %d): the seed's component holds only %d genes", seed_gene, size, len(genes))
    return genes.astype(np.int64)
