"""Gene programmes taken from a saved gene graph: the bridge between ``tl`` and the training graph.

``bj.tl.ablate_programme(adata, ("bfs", seed, size), graph=...)`` asks for the block the
pretraining sampler would take around ``seed``. The graph and its BFS belong to ``train``
(:mod:`biomjepa.train.graph`); ``tl`` may import only one public function from ``train``
(:func:`biomjepa.train.target_errors.programme_errors`, checked by
``tests/test_package_structure.py``), so this small top-level module, like
:mod:`biomjepa._pretrained` for checkpoints, opens the graph and returns plain gene symbols.
"""

from __future__ import annotations

from pathlib import Path


def graph_programme(seed: str | int, size: int, *, graph) -> dict[str, list[str]]:
    """``("bfs", seed, size)`` → ``{"bfs:seed:size": symbols}`` from ``graph`` (object or saved directory)."""
    from .data.vocab import Vocab
    from .train.graph import GeneGraph, NeighbourTable, bfs_programme

    if graph is None:
        raise ValueError(
            f"The graph programme ('bfs', {seed!r}, {size}) needs the gene graph: pass `graph=` a GeneGraph "
            "or the directory it was saved to (e.g. a training run's `corpus/graph`)."
        )
    if not isinstance(graph, GeneGraph | NeighbourTable):
        if not (Path(graph) / "graph.npz").is_file():
            raise FileNotFoundError(f"graph={str(graph)!r} is not a directory written by `GeneGraph.save` (no graph.npz).")
        graph = GeneGraph.load(graph)
    ids = bfs_programme(graph, seed, int(size))
    return {f"bfs:{seed}:{size}": [str(g) for g in Vocab.default().symbols[ids]]}


def graph_label(graph) -> str | None:
    """How ``params`` records the graph: its path, or the object's type and size."""
    if graph is None:
        return None
    return str(graph) if not hasattr(graph, "n_genes") else f"{type(graph).__name__} ({graph.n_genes} genes)"
