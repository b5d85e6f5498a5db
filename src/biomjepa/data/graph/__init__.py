"""The gene graph of BioM-JEPA: STRING ∪ corpus coexpression → a directed 64-neighbour table.

The graph is data: built from STRING and corpus counts, saved next to a prepared corpus, and read
by pretraining (target blocks, DMT pooling), by ``bj.tl`` (graph programmes, programme
dependencies) and by ``biomjepa graph``. Follows the paper's Supplementary "Biological graph and
target blocks":

* :func:`string_adjacency` (:mod:`.stringdb`) — STRING v12 links with combined score ≥ 700, no
  self-edges, the 64 highest-scoring neighbours per row, symmetrized by ``max``.
* :func:`coexpression_adjacency` (:mod:`.coexp`) — streamed centred random projections (256 dims)
  of the log-normalized corpus approximating |Pearson|; top-64 per gene, symmetrized by ``max``;
  :func:`build_from_h5ad` runs it over h5ad files.
* :func:`build_graph` (:mod:`.union`) — binarized union, then row-wise top-64 → :class:`GeneGraph`
  holding the directed block table (for BFS) and the coexpression 64-NN table (for DMT pooling).
* :class:`GeneGraph`, :class:`NeighbourTable`, :func:`bfs_blocks`, :func:`bfs_programme`
  (:mod:`.table`) — the saved tables and the breadth-first search over them.
* :func:`find_graph` (:mod:`.locate`) — the one function that finds and opens a saved graph;
  :func:`build_corpus_graph` / :func:`update_corpus_graph` — the graph of a prepared corpus, cached
  in its ``graph/`` directory and keyed by corpus and :func:`graph_params`.

numpy/scipy/pandas only; AnnData is imported inside :func:`build_from_h5ad` only.
"""

from __future__ import annotations

from .coexp import SCALE, build_from_h5ad, coexpression_adjacency
from .locate import (
    GRAPH_DIR,
    SEED,
    TOP_K,
    build_corpus_graph,
    cached_graph_is_current,
    find_graph,
    graph_label,
    graph_params,
    graph_programme,
    is_saved_graph,
    update_corpus_graph,
)
from .stringdb import BUNDLED_STRING, string_adjacency
from .table import GeneGraph, NeighbourTable, bfs_blocks, bfs_programme
from .union import build_graph, format_stats, paper_stats

__all__ = [
    "BUNDLED_STRING",
    "GRAPH_DIR",
    "SCALE",
    "SEED",
    "TOP_K",
    "GeneGraph",
    "NeighbourTable",
    "bfs_blocks",
    "bfs_programme",
    "build_corpus_graph",
    "build_from_h5ad",
    "build_graph",
    "cached_graph_is_current",
    "coexpression_adjacency",
    "find_graph",
    "format_stats",
    "graph_label",
    "graph_params",
    "graph_programme",
    "is_saved_graph",
    "paper_stats",
    "string_adjacency",
    "update_corpus_graph",
]
