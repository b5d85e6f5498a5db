"""The gene graph of BioM-JEPA: STRING ∪ corpus coexpression → a directed 64-neighbour table.

Follows the paper's Supplementary "Biological graph and target blocks":

* :func:`string_adjacency` — STRING v12 links with combined score ≥ 700, no self-edges, the 64
  highest-scoring neighbours per row, symmetrized by ``max``.
* :func:`coexpression_adjacency` — streamed centred random projections (256 dims) of the
  log-normalized corpus approximating |Pearson|; top-64 per gene, symmetrized by ``max``
  (implemented in :mod:`._coexp`, with :func:`build_from_h5ad`; re-exported here).
* :func:`build_graph` — binarized union, then row-wise top-64 → :class:`GeneGraph` holding the
  directed block table (for BFS) and the coexpression 64-NN table (for DMT pooling).
* :func:`bfs_programme` — the deterministic BFS block around a seed gene (a graph programme).

Tensor world: numpy/scipy only; AnnData is imported inside :func:`build_from_h5ad` only.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from ._coexp import SCALE, _row_topk, _symmetric_topk, build_from_h5ad, coexpression_adjacency

logger = logging.getLogger(__name__)

BUNDLED_STRING = "string_v12_human_ge700.tsv.gz"
_WARNED: set[str] = set()


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


# --------------------------------------------------------------------------- STRING
def _vocab(vocab):
    if vocab is not None:
        return vocab
    from ..data.vocab import Vocab

    return Vocab.default()


def _read_bundled(path: str | Path | None) -> pd.DataFrame:
    if path is None:
        if BUNDLED_STRING not in _WARNED:
            _WARNED.add(BUNDLED_STRING)
            logger.warning(
                "Using the bundled STRING v12 table (%s): its combined score was recomputed WITHOUT the "
                "text-mining channel, so it holds a subset of the official ≥700 edges. Pass the official "
                "9606.protein.links/info files for the paper's graph.",
                BUNDLED_STRING,
            )
        raw = resources.files("biomjepa._data").joinpath(BUNDLED_STRING).read_bytes()
        return pd.read_csv(io.BytesIO(gzip.decompress(raw)), sep="\t", keep_default_na=False)
    return pd.read_csv(path, sep="\t", keep_default_na=False)


def _string_protein_index(vocab, info, aliases) -> pd.Series:
    """STRING protein id → vocabulary index, by preferred name, then by unambiguous alias."""
    inf = pd.read_csv(info, sep="\t", dtype=str, keep_default_na=False)
    pid, name = inf.iloc[:, 0].to_numpy(), inf.iloc[:, 1].to_numpy()
    idx = pd.Series(vocab.index_of(name), index=pid)
    if aliases is not None:
        al = pd.read_csv(aliases, sep="\t", dtype=str, keep_default_na=False, usecols=[0, 1])
        al.columns = ["pid", "alias"]
        al["tok"] = vocab.index_of(al["alias"].to_numpy())
        al = al[(al["tok"] >= 0) & al["pid"].isin(idx.index[idx < 0])].drop_duplicates(["pid", "tok"])
        al = al[~al["tok"].isin(idx[idx >= 0].to_numpy())]  # symbol already claimed by a preferred name
        al = al[~al.duplicated("pid", keep=False) & ~al.duplicated("tok", keep=False)]
        idx.loc[al["pid"].to_numpy()] = al["tok"].to_numpy()
    return idx


def string_adjacency(
    vocab=None,
    *,
    path: str | Path | None = None,
    links: str | Path | None = None,
    info: str | Path | None = None,
    aliases: str | Path | None = None,
    min_score: int = 700,
    top_k: int = 64,
) -> sparse.csr_matrix:
    """STRING adjacency ``[V, V]`` (float32 combined scores, symmetric).

    Parameters
    ----------
    vocab
        A :class:`~biomjepa.data.vocab.Vocab`; default ``Vocab.default()``.
    path
        A symbol table (``gene_a, gene_b, combined_score`` TSV). Default (no ``path``/``links``):
        the bundled ``string_v12_human_ge700.tsv.gz`` — it lacks the text-mining channel (logged).
    links, info, aliases
        The official ``9606.protein.links.v12.0.txt.gz`` and ``9606.protein.info.v12.0.txt.gz``
        (+ optional ``9606.protein.aliases.v12.0.txt.gz``). Proteins map by preferred name, then
        by an alias that names one vocabulary gene, belongs to one protein and is no preferred name.
    min_score, top_k
        Keep links with score ≥ ``min_score``; no self-edges; the ``top_k`` highest-scoring
        neighbours per row (ties: lower index), then symmetrize by ``max``.
    """
    vocab = _vocab(vocab)
    if links is not None:
        if info is None:
            raise ValueError("Reading official STRING links needs `info=` (9606.protein.info.v12.0.txt.gz).")
        prot = _string_protein_index(vocab, info, aliases)
        df = pd.read_csv(links, sep=" ", dtype={"combined_score": np.int32})
        df = df[df["combined_score"] >= min_score]
        a = prot.reindex(df["protein1"].to_numpy()).fillna(-1).to_numpy(np.int64)
        b = prot.reindex(df["protein2"].to_numpy()).fillna(-1).to_numpy(np.int64)
    else:
        df = _read_bundled(path)
        df = df[df["combined_score"] >= min_score]
        a, b = vocab.index_of(df["gene_a"].to_numpy()), vocab.index_of(df["gene_b"].to_numpy())
    return _symmetric_topk(a, b, df["combined_score"].to_numpy(np.float32), vocab.size, top_k)


# --------------------------------------------------------------------------- union
def build_graph(
    string: sparse.spmatrix | None,
    coexp: sparse.spmatrix,
    *,
    top_k: int = 64,
    meta: dict | None = None,
) -> GeneGraph:
    """``RowTop_k(1[A_string > 0] ∨ 1[A_coexp > 0])`` → :class:`GeneGraph`.

    The paper's union is binary, so the truncation order is ours: within a row, edges present in
    both sources come first, then edges by strength = max(STRING score / 1000, coexpression |r|),
    then lower vocabulary index. The stored block weight is ``strength + 1[in both]``. The DMT
    table is the coexpression adjacency truncated to its ``top_k`` strongest entries per row (the
    pre-symmetrization 64-NN, up to ties).
    """
    coexp = sparse.csr_matrix(coexp, dtype=np.float32)
    V = coexp.shape[0]
    string = sparse.csr_matrix((V, V), dtype=np.float32) if string is None else sparse.csr_matrix(string)
    s = string.astype(np.float32)
    if s.nnz and s.data.max() > 1.0:
        s = s / 1000.0
    both = (s > 0).astype(np.float32).multiply(coexp > 0)
    strength = s.maximum(coexp) + both
    blocks = _row_topk(strength, top_k)
    sinfo, cinfo = NeighbourTable.from_csr(string), NeighbourTable.from_csr(coexp)
    info = {
        "sources": ["STRING v12" if string.nnz else "none", "coexpression"],
        "parameters": {"top_k": top_k, "ranking": "both sources, then max(STRING/1000, |r|), then index"},
        "string": {"nnz": sinfo.nnz, "genes": int((sinfo.degrees() > 0).sum())},
        "coexp": {"nnz": cinfo.nnz, "genes": int((cinfo.degrees() > 0).sum())},
        **(meta or {}),
    }
    table = NeighbourTable.from_csr(blocks, info)
    return GeneGraph(table, cinfo.topk(top_k), info)


_PAPER = {
    "string_genes": 17892,
    "string_nnz": 356772,
    "coexp_nnz": 2360480,
    "union_nnz": 1123337,
    "union_mean_out_degree_all": 58.31,
}


def paper_stats() -> dict:
    """The paper's graph figures (Supplementary "Biological graph and target blocks")."""
    return dict(_PAPER)


def format_stats(graph: GeneGraph) -> str:
    """Text table comparing ``graph`` with :func:`paper_stats` (mean out-degree over all V genes)."""
    st = graph.blocks.stats()
    ours = {
        "string_genes": graph.meta.get("string", {}).get("genes", float("nan")),
        "string_nnz": graph.meta.get("string", {}).get("nnz", float("nan")),
        "coexp_nnz": graph.meta.get("coexp", {}).get("nnz", float("nan")),
        "union_nnz": st["nnz"],
        "union_mean_out_degree_all": st["mean_out_degree_all"],
    }
    lines = [f"{'quantity':<28}{'ours':>14}{'paper':>14}"]
    for key, ref in _PAPER.items():
        lines.append(
            f"{key:<28}{ours[key]:>14,.2f}{ref:>14,.2f}"
            if "degree" in key
            else f"{key:<28}{ours[key]:>14,}{ref:>14,}"
        )
    lines.append(f"{'union genes covered':<28}{st['genes_covered']:>14,}{'':>14}")
    lines.append(f"{'union mean deg (covered)':<28}{st['mean_out_degree_covered']:>14,.2f}{'':>14}")
    lines.append(f"content hash {st['content_hash'][:16]}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- graph programmes
def bfs_programme(graph: GeneGraph | NeighbourTable, seed_gene: str | int, size: int, *, vocab=None) -> np.ndarray:
    """The BFS block of ``size`` genes around ``seed_gene``: a gene programme taken from the graph.

    The same breadth-first search as the target-block sampler
    (:func:`biomjepa.train.blocks.bfs_blocks`) over the block table's out-neighbours, made
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
    from .blocks import bfs_blocks

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


__all__ = [
    "BUNDLED_STRING",
    "SCALE",
    "GeneGraph",
    "NeighbourTable",
    "bfs_programme",
    "build_from_h5ad",
    "build_graph",
    "coexpression_adjacency",
    "format_stats",
    "paper_stats",
    "string_adjacency",
]
