"""The gene graph of a prepared corpus, built one way for ``biomjepa graph`` and for training.

:func:`build_corpus_graph` (STRING ∪ the corpus' coexpression, :func:`~biomjepa.train.graph.build_graph`)
is what both :mod:`biomjepa.cli_graph` and :func:`biomjepa.train.loop.open_graph` call, so the same
corpus and parameters give the same graph. The graph's ``meta`` records the corpus key and
:func:`graph_params`; :func:`cached_graph_is_current` compares them, so a training run never reuses
a cached graph built for another corpus or with other parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

#: Neighbours kept per gene (STRING, coexpression, union) and the coexpression projections' seed:
#: the defaults of ``biomjepa graph`` (training uses ``max(TOP_K, dmt_k)`` and the run's ``seed``).
TOP_K = 64
SEED = 0


def graph_params(*, top_k: int = TOP_K, seed: int = SEED, min_score: int = 700, string_links=None) -> dict:
    """The parameters that define a corpus graph (recorded in its ``meta["params"]``)."""
    source = str(string_links) if string_links else "bundled"
    return {"top_k": int(top_k), "seed": int(seed), "min_score": int(min_score), "string": source}


def build_corpus_graph(corpus, params: dict, *, string_info=None, string_aliases=None, meta: dict | None = None):
    """STRING ∪ coexpression graph of a prepared :class:`~biomjepa.data.shards.Corpus`.

    ``params`` from :func:`graph_params`; ``string_info``/``string_aliases`` go with official
    STRING links. Returns a :class:`~biomjepa.train.graph.GeneGraph` whose meta holds
    ``corpus`` (the corpus key) and ``params``.
    """
    from .graph import build_graph, coexpression_adjacency, string_adjacency

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
