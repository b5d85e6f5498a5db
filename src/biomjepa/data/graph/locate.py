"""Where a gene graph is kept and how it is opened: the corpus graph cache and :func:`find_graph`.

A saved graph is a directory holding ``graph.npz/json`` (the block table) and ``coexp.npz/json``
(the coexpression table), as written by :meth:`~biomjepa.data.graph.GeneGraph.save`. A prepared
corpus keeps its graph in ``CORPUS_CACHE/graph`` (:data:`GRAPH_DIR`):
:func:`build_corpus_graph` (STRING ∪ the corpus' coexpression) is what both ``biomjepa graph`` and a
pretraining run call, so the same corpus and parameters give the same graph. The graph's ``meta``
records the corpus key and :func:`graph_params`; :func:`cached_graph_is_current` compares them, so
a training run never reuses a cached graph built for another corpus or with other parameters.

:func:`find_graph` is the one function that opens a graph for its users (training, teacher-target
errors, graph programmes of ``bj.tl``): a graph object as is, a directory, or the first saved graph
among candidate directories.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from .table import GeneGraph, NeighbourTable, bfs_programme

logger = logging.getLogger(__name__)

#: Neighbours kept per gene (STRING, coexpression, union) and the coexpression projections' seed:
#: the defaults of ``biomjepa graph`` (training uses ``max(TOP_K, dmt_k)`` and the run's ``seed``).
TOP_K = 64
SEED = 0
#: The directory of a prepared corpus (shard cache) that holds its graph.
GRAPH_DIR = "graph"

GraphLike = GeneGraph | NeighbourTable | str | os.PathLike


def graph_params(*, top_k: int = TOP_K, seed: int = SEED, min_score: int = 700, string_links=None) -> dict:
    """The parameters that define a corpus graph (recorded in its ``meta["params"]``)."""
    source = str(string_links) if string_links else "bundled"
    return {"top_k": int(top_k), "seed": int(seed), "min_score": int(min_score), "string": source}


def build_corpus_graph(corpus, params: dict, *, string_info=None, string_aliases=None, meta: dict | None = None):
    """STRING ∪ coexpression graph of a prepared :class:`~biomjepa.data.shards.Corpus`.

    ``params`` from :func:`graph_params`; ``string_info``/``string_aliases`` go with official
    STRING links. Returns a :class:`~biomjepa.data.graph.GeneGraph` whose meta holds
    ``corpus`` (the corpus key) and ``params``.
    """
    from .coexp import coexpression_adjacency
    from .stringdb import string_adjacency
    from .union import build_graph

    V = int(corpus.meta["vocab_size"])
    coexp = coexpression_adjacency(corpus.iter_counts(), V, top_k=params["top_k"], seed=params["seed"])
    links = None if params["string"] == "bundled" else params["string"]
    string = string_adjacency(links=links, info=string_info, aliases=string_aliases,
                              min_score=params["min_score"], top_k=params["top_k"])
    info = {**(meta or {}), "corpus": corpus.meta["key"], "params": params}
    return build_graph(string, coexp, top_k=params["top_k"], meta=info)


def cached_graph_is_current(path: str | Path, corpus_key: str, params: dict) -> bool:
    """Whether ``path/graph.json`` records this corpus key and these parameters."""
    info_file = Path(path) / "graph.json"
    if not (Path(path) / "graph.npz").is_file() or not info_file.is_file():
        return False
    try:
        meta = json.loads(info_file.read_text()).get("meta", {})
    except (OSError, ValueError):
        return False
    return meta.get("corpus") == corpus_key and meta.get("params") == params


def update_corpus_graph(corpus, params: dict) -> Path:
    """Build and save the graph of ``corpus`` in its ``graph/`` directory unless the cached one is current.

    Returns the directory (``corpus.root / GRAPH_DIR``). In a distributed run only one process
    calls this; the others wait, then open the directory with :func:`find_graph`.
    """
    path = Path(corpus.root) / GRAPH_DIR
    if not cached_graph_is_current(path, corpus.meta["key"], params):
        if (path / "graph.npz").is_file():
            logger.info("rebuilding the cached gene graph %s: it was built for another corpus or parameters", path)
        build_corpus_graph(corpus, params).save(path)
    return path


def is_saved_graph(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a directory written by :meth:`GeneGraph.save` (``graph.npz`` and ``coexp.npz``)."""
    path = Path(path)
    return (path / "graph.npz").is_file() and (path / "coexp.npz").is_file()


def find_graph(
    graph: GraphLike | None = None,
    *,
    search: Iterable[str | os.PathLike] = (),
    need: str = "The gene graph is needed",
) -> GeneGraph | NeighbourTable:
    """Find and open a gene graph: the one locator of the package.

    Parameters
    ----------
    graph
        A :class:`GeneGraph` or :class:`NeighbourTable` (returned as is), or a directory written by
        :meth:`GeneGraph.save` (loaded). ``None``: the first saved graph among ``search``.
    search
        Candidate directories, tried in order when ``graph`` is ``None`` (e.g. a run's ``graph``
        setting, then its corpus cache's ``graph/``).
    need
        What needs the graph, for the error messages (``"The graph programme ... needs the gene graph"``).

    Returns
    -------
    The graph object, or the :class:`GeneGraph` loaded from the directory found.

    Raises
    ------
    ValueError
        No ``graph`` and no ``search`` directory.
    FileNotFoundError
        ``graph`` is not a saved graph's directory, or no ``search`` directory holds one.
    """
    if isinstance(graph, GeneGraph | NeighbourTable):
        return graph
    if graph is not None:
        if not is_saved_graph(graph):
            raise FileNotFoundError(
                f"graph={str(graph)!r} is not a directory written by `GeneGraph.save` (no graph.npz and coexp.npz)."
            )
        return GeneGraph.load(graph)
    candidates = [Path(c) for c in search]
    if not candidates:
        raise ValueError(
            f"{need}: pass `graph=` a GeneGraph or the directory it was saved to (e.g. a training run's "
            "`corpus/graph`)."
        )
    for c in candidates:
        if is_saved_graph(c):
            return GeneGraph.load(c)
    raise FileNotFoundError(
        f"{need}, but it was not found in {[str(c) for c in candidates]}; pass `graph=` a GeneGraph or the "
        "directory it was saved to."
    )


def graph_programme(seed: str | int, size: int, *, graph: GraphLike | None) -> dict[str, list[str]]:
    """``("bfs", seed, size)`` → ``{"bfs:seed:size": symbols}`` from ``graph`` (object or saved directory)."""
    from ..vocab import Vocab

    need = f"The graph programme ('bfs', {seed!r}, {size}) needs the gene graph"
    ids = bfs_programme(find_graph(graph, need=need), seed, int(size))
    return {f"bfs:{seed}:{size}": [str(g) for g in Vocab.default().symbols[ids]]}


def graph_label(graph: GraphLike | None) -> str | None:
    """How ``params`` records a graph argument: its path, or the object's type and size."""
    if graph is None:
        return None
    return str(graph) if not hasattr(graph, "n_genes") else f"{type(graph).__name__} ({graph.n_genes} genes)"
