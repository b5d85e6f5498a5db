"""The gene graph's former home: its names now live in :mod:`biomjepa.data.graph`.

The graph is data (built from STRING and corpus counts, read by ``train``, ``tl`` and the CLI), so
it moved to :mod:`biomjepa.data.graph`; this module re-exports the names it used to define so that
``from biomjepa.train.graph import GeneGraph`` in existing scripts keeps working. New code imports
from :mod:`biomjepa.data.graph`.
"""

from __future__ import annotations

from ..data.graph import (
    BUNDLED_STRING,
    SCALE,
    GeneGraph,
    NeighbourTable,
    bfs_programme,
    build_from_h5ad,
    build_graph,
    coexpression_adjacency,
    format_stats,
    paper_stats,
    string_adjacency,
)

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
