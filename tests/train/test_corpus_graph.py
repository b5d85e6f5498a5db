"""The training graph cache is keyed by corpus and parameters, and equals what `biomjepa graph` builds (issue 14)."""

from __future__ import annotations

import json

from _kit import tiny_config

from biomjepa.cli import main
from biomjepa.data.graph import GeneGraph
from biomjepa.train.distributed import DistInfo
from biomjepa.train.loop import open_corpus, open_graph, run_dir_of


def _hashes(graph: GeneGraph) -> tuple[str, str]:
    return graph.blocks.content_hash, graph.coexp.content_hash


def test_training_graph_equals_cli_graph_and_is_rebuilt_for_another_corpus(tmp_path, capsys):
    cfg = tiny_config(tmp_path, graph=None, run_name="g", seed=7)
    info = DistInfo()
    corpus = open_corpus(cfg, run_dir_of(cfg), info)
    trained = open_graph(cfg, corpus, info)
    meta = json.loads((corpus.root / "graph" / "graph.json").read_text())["meta"]
    assert meta["corpus"] == corpus.meta["key"] and meta["params"]["top_k"] == max(64, cfg.dmt_k)

    assert meta["params"]["seed"] == cfg.seed  # the run's seed, as before the cache was keyed
    cli = ["graph", *cfg.corpus, "--out", str(tmp_path / "cli"), "--cache", str(tmp_path / "cli_cache"), "--seed", str(cfg.seed)]
    assert main(cli) == 0
    capsys.readouterr()
    assert _hashes(GeneGraph.load(tmp_path / "cli")) == _hashes(trained)

    # the same cache directory, another corpus: the cached graph is not reused
    fewer = cfg.__class__.from_dict({**cfg.to_dict(), "corpus": cfg.corpus[:2]})
    corpus2 = open_corpus(fewer, run_dir_of(fewer), info)
    assert corpus2.root == corpus.root and corpus2.meta["key"] != corpus.meta["key"]
    rebuilt = open_graph(fewer, corpus2, info)
    assert json.loads((corpus.root / "graph" / "graph.json").read_text())["meta"]["corpus"] == corpus2.meta["key"]
    assert _hashes(rebuilt) != _hashes(trained)
    again = open_graph(fewer, corpus2, info)  # unchanged: reused
    assert _hashes(again) == _hashes(rebuilt)
