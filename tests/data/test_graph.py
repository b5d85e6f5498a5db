"""Gene graph (``biomjepa.data.graph``): STRING reading, streamed coexpression sketch, union table, save/load, locator."""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pytest
from scipy import sparse

from biomjepa.data import graph as gmod
from biomjepa.data.graph import (
    GeneGraph,
    NeighbourTable,
    build_graph,
    coexpression_adjacency,
    find_graph,
    format_stats,
    paper_stats,
    string_adjacency,
    stringdb,
    table,
)


class _Vocab:
    """Minimal stand-in for biomjepa.data.vocab.Vocab."""

    def __init__(self, symbols):
        self.symbols = np.asarray(symbols, dtype=object)
        self._pos = {s: i for i, s in enumerate(symbols)}

    @property
    def size(self):
        return len(self.symbols)

    def index_of(self, names):
        return np.array([self._pos.get(n, -1) for n in np.asarray(names, dtype=object).ravel()], np.int64)


def _write_gz(path, text):
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    return path


@pytest.fixture
def string_files(tmp_path):
    """Official-format STRING files: 6 proteins, one mapped only by alias, one ambiguous alias."""
    info = "#string_protein_id\tpreferred_name\tprotein_size\tannotation\n" + "".join(
        f"9606.P{i}\t{name}\t100\tx\n" for i, name in enumerate(["GA", "GB", "GC", "OLD", "GE", "AMB"])
    )
    aliases = (
        "#string_protein_id\talias\tsource\n9606.P3\tGD\tEnsembl\n9606.P3\tOLD\tEnsembl\n"
        "9606.P5\tGF\tx\n9606.P5\tGG\tx\n"  # P5 aliases name two vocabulary genes → unmapped
    )
    pairs = [
        ("P0", "P1", 900),
        ("P0", "P2", 800),
        ("P1", "P2", 650),
        ("P3", "P0", 950),
        ("P4", "P4", 999),
        ("P5", "P0", 990),
        ("P4", "P1", 701),
    ]
    rows = [f"9606.{a} 9606.{b} {s}" for a, b, s in pairs] + [f"9606.{b} 9606.{a} {s}" for a, b, s in pairs]
    links = "protein1 protein2 combined_score\n" + "\n".join(rows) + "\n"
    return (
        _write_gz(tmp_path / "links.txt.gz", links),
        _write_gz(tmp_path / "info.txt.gz", info),
        _write_gz(tmp_path / "aliases.txt.gz", aliases),
    )


def test_string_official_files(string_files):
    links, info, aliases = string_files
    vocab = _Vocab(["GA", "GB", "GC", "GD", "GE", "GF", "GG", "ZZ"])
    A = string_adjacency(vocab, links=links, info=info, aliases=aliases)
    assert A.shape == (8, 8)
    assert (abs(A - A.T)).nnz == 0 and A.diagonal().sum() == 0
    edges = {(int(i), int(j)): float(v) for i, j, v in zip(*sparse.find(A))}
    assert edges[(0, 1)] == 900 and edges[(0, 2)] == 800 and edges[(3, 0)] == 950  # GD via alias
    assert (1, 2) not in edges  # score 650 < 700
    assert all(5 not in e and 6 not in e for e in edges)  # ambiguous alias protein dropped
    assert edges[(4, 1)] == 701
    no_alias = string_adjacency(vocab, links=links, info=info)
    assert no_alias[3].nnz == 0


def test_string_topk_and_symmetry(string_files):
    links, info, aliases = string_files
    vocab = _Vocab(["GA", "GB", "GC", "GD", "GE"])
    A = string_adjacency(vocab, links=links, info=info, aliases=aliases, top_k=1)
    # row tops: GA→GD (950), GB→GA (900), GC→GA (800), GD→GA, GE→GB (701); symmetrized by max
    expect = {(0, 3), (3, 0), (1, 0), (0, 1), (2, 0), (0, 2), (4, 1), (1, 4)}
    assert set(zip(*A.nonzero())) == expect


def test_string_bundled_symbol_table(tmp_path, caplog):
    table = "gene_a\tgene_b\tcombined_score\nGA\tGB\t800\nGB\tGC\t699\nGC\tGC\t900\nGA\tQQ\t990\n"
    path = tmp_path / "t.tsv"
    path.write_text(table)
    A = string_adjacency(_Vocab(["GA", "GB", "GC"]), path=path)
    assert set(zip(*A.nonzero())) == {(0, 1), (1, 0)}
    stringdb._WARNED.discard(gmod.BUNDLED_STRING)
    with caplog.at_level(logging.WARNING, logger="biomjepa.data.graph"):
        stringdb._read_bundled(None)
        stringdb._read_bundled(None)
    assert sum("text-mining" in r.message for r in caplog.records) == 1


def _planted_counts(n=1500, V=40, seed=0):
    rng = np.random.default_rng(seed)
    lam = rng.gamma(2.0, 1.0, size=(n, V))
    factor = rng.gamma(1.0, 4.0, size=n)
    lam[:, 5] = 0.2 + factor
    lam[:, 17] = 0.2 + 1.5 * factor
    X = rng.poisson(lam).astype(np.float64)
    X[:, 30:33] = 0  # never observed
    return sparse.csr_matrix(X)


def _chunks(X, size):
    return (X[i : i + size] for i in range(0, X.shape[0], size))


def test_coexpression_planted_pair_and_unobserved():
    X = _planted_counts()
    A = coexpression_adjacency(_chunks(X, 500), X.shape[1], top_k=3, n_proj=256)
    assert (abs(A - A.T)).nnz == 0 and A.diagonal().sum() == 0
    row5, row17 = A[5].toarray().ravel(), A[17].toarray().ravel()
    assert row5.argmax() == 17 and row17.argmax() == 5  # mutual strongest neighbours
    assert row5[17] > 0.3 and row5[17] > 2 * np.sort(row5)[-2]
    for g in (30, 31, 32):
        assert A[g].nnz == 0 and A[:, g].nnz == 0
    assert np.diff(table._row_topk(A, 3).indptr).max() <= 3


def test_coexpression_sketch_tracks_pearson():
    X = _planted_counts(n=800, V=25, seed=1)
    A = coexpression_adjacency(_chunks(X, 256), X.shape[1], top_k=24, n_proj=2048)
    L = X.multiply(1e4 / X.sum(axis=1)).tocsr()
    L.data = np.log1p(L.data)
    r = np.abs(np.corrcoef(L.toarray().T))
    i, j = A.nonzero()
    assert np.abs(A[i, j].A1 - r[i, j]).max() < 0.12


def test_coexpression_chunking_invariant():
    X = _planted_counts(n=2300)
    ref = coexpression_adjacency([X], X.shape[1], top_k=5, seed=3)
    for size in (1, 333, 1024, 1025):
        A = coexpression_adjacency(_chunks(X, size), X.shape[1], top_k=5, seed=3)
        assert np.array_equal(A.indptr, ref.indptr) and np.array_equal(A.indices, ref.indices)
        np.testing.assert_allclose(A.data, ref.data, rtol=1e-5)
    other = coexpression_adjacency([X], X.shape[1], top_k=5, seed=4)
    assert not np.array_equal(other.data, ref.data)


def test_coexpression_totals_pairs():
    X = _planted_counts(n=300)
    totals = np.asarray(X.sum(axis=1)).ravel()
    a = coexpression_adjacency([(X, totals)], X.shape[1], top_k=4)
    b = coexpression_adjacency([X], X.shape[1], top_k=4)
    assert (abs(a - b)).max() < 1e-6
    with pytest.raises(ValueError, match="vocabulary space"):
        coexpression_adjacency([X[:, :10]], X.shape[1])


def _toy_sources(V=60, seed=0):
    rng = np.random.default_rng(seed)
    s = sparse.random(V, V, density=0.15, random_state=seed, format="csr")
    s.data = s.data * 300 + 700
    s.setdiag(0)
    s.eliminate_zeros()
    c = sparse.random(V, V, density=0.3, random_state=seed + 1, format="csr")
    c.setdiag(0)
    c.eliminate_zeros()
    return s.maximum(s.T).tocsr(), c.maximum(c.T).tocsr(), rng


def test_build_graph_union_topk(tmp_path):
    s, c, _ = _toy_sources()
    g = build_graph(s, c, top_k=8)
    deg = g.blocks.degrees()
    assert deg.max() <= 8 and g.blocks.to_csr().diagonal().sum() == 0
    union = ((s > 0) + (c > 0)).tocsr()
    assert np.array_equal(deg, np.minimum(np.diff(union.indptr), 8))
    B = g.blocks.to_csr()
    assert (B.multiply(union > 0)).nnz == B.nnz  # subset of the union
    both = s.multiply(c) > 0
    for r in range(g.n_genes):  # rows keep every both-source edge when there are ≤ k of them
        nb = set(both[r].indices)
        if len(nb) <= 8:
            assert nb <= set(g.blocks.neighbours(r))
    assert g.coexp.degrees().max() <= 8
    for gene in range(5):
        top = c[gene].toarray().ravel()
        kth = np.sort(top)[-8] if (top > 0).sum() >= 8 else 0
        assert set(g.coexp.neighbours(gene)) == set(np.flatnonzero(top >= max(kth, 1e-12)))


def test_graph_save_load_stats(tmp_path):
    s, c, _ = _toy_sources()
    g = build_graph(s, c, top_k=8, meta={"corpus": "toy"})
    g.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"graph.npz", "graph.json", "coexp.npz", "coexp.json"}
    h = GeneGraph.load(tmp_path)
    assert h.blocks.content_hash == g.blocks.content_hash and h.meta["corpus"] == "toy"
    np.testing.assert_array_equal(h.coexp.indices, g.coexp.indices)
    st = g.blocks.stats()
    assert st["nnz"] == g.blocks.nnz and st["mean_out_degree_all"] == pytest.approx(st["nnz"] / 60)
    text = format_stats(g)
    assert "1,123,337" in text and "58.31" in text
    assert paper_stats()["union_nnz"] == 1123337
    t = NeighbourTable.from_csr(sparse.csr_matrix(np.eye(3)))
    assert list(t.neighbours(1)) == [1]


@pytest.mark.slow
@pytest.mark.shared
def test_bundled_string_stats(shared_data, capsys):
    from biomjepa.data.vocab import Vocab

    vocab = Vocab.default()
    A = string_adjacency(vocab)
    t = NeighbourTable.from_csr(A)
    st = t.stats()
    with capsys.disabled():
        print(
            f"\nbundled STRING (no text-mining): genes {st['genes_covered']:,}, nnz {st['nnz']:,}, "
            f"max degree {st['max_out_degree']} (paper: 17,892 genes, 356,772 entries)"
        )
    assert st["nnz"] == 232984 and st["genes_covered"] == 12261
    assert (abs(A - A.T)).nnz == 0


def test_modules_do_not_import_anndata():
    import subprocess
    import sys

    code = (
        "import sys, biomjepa.data.graph, biomjepa.train.graph, biomjepa.train.blocks, biomjepa.train.audit; "
        "assert 'anndata' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_build_from_h5ad_matches_vocab_space(tmp_path):
    import anndata as ad

    from biomjepa.data.vocab import Vocab

    vocab = Vocab.default()
    X = _planted_counts(n=400, V=40)
    names = [*vocab.symbols[100:139], "NOTAGENE"]
    a = ad.AnnData(X.astype(np.float32))
    a.var_names = names
    a.write_h5ad(tmp_path / "a.h5ad")
    got = gmod.build_from_h5ad([tmp_path / "a.h5ad"], chunk=128, top_k=4)
    tok = vocab.index_of(names)
    M = sparse.csr_matrix((np.ones(39), (np.arange(39), tok[:39])), shape=(40, vocab.size))
    totals = np.asarray(X.sum(axis=1)).ravel()  # library size over all input columns
    ref = coexpression_adjacency([(X @ M, totals)], vocab.size, top_k=4)
    assert np.array_equal(got.indices, ref.indices)
    np.testing.assert_allclose(got.data, ref.data, rtol=1e-5)
    assert got.shape == (vocab.size, vocab.size) and got[:100].nnz == 0


def test_bfs_programme_deterministic_order():
    from biomjepa.data.graph import bfs_programme

    # 0 → {3, 1, 2}; 1 → 4; 3 → 5; 2 → 6; 7 isolated
    src, dst = [0, 0, 0, 1, 3, 2], [3, 1, 2, 4, 5, 6]
    A = sparse.csr_matrix((np.ones(6), (src, dst)), shape=(8, 8))
    table = NeighbourTable.from_csr(A)
    graph = GeneGraph(table, table)
    assert bfs_programme(graph, 0, 8).tolist() == [0, 1, 2, 3, 4, 5, 6]  # component exhausted: stops short
    assert bfs_programme(table, 0, 5).tolist() == [0, 1, 2, 3, 4]  # last level: lowest index first
    assert bfs_programme(table, 0, 1).tolist() == [0]
    assert bfs_programme(table, 7, 3).tolist() == [7]
    vocab = _Vocab(["A", "B", "C", "D", "E", "F", "G", "H"])
    assert bfs_programme(graph, "A", 3, vocab=vocab).tolist() == [0, 1, 2]
    with pytest.raises(KeyError, match="not in the vocabulary"):
        bfs_programme(graph, "ZZ", 3, vocab=vocab)
    with pytest.raises(ValueError, match="outside"):
        bfs_programme(graph, 8, 3)
    with pytest.raises(ValueError, match="size"):
        bfs_programme(graph, 0, 0)


def _tiny_graph() -> GeneGraph:
    A = sparse.csr_matrix((np.ones(3), ([0, 1, 2], [1, 2, 0])), shape=(4, 4))
    return GeneGraph(NeighbourTable.from_csr(A), NeighbourTable.from_csr(A))


def test_find_graph_object_directory_and_search(tmp_path):
    graph = _tiny_graph()
    assert find_graph(graph) is graph and find_graph(graph.blocks) is graph.blocks  # objects as they are
    graph.save(tmp_path / "saved")
    assert find_graph(tmp_path / "saved").blocks.content_hash == graph.blocks.content_hash
    (tmp_path / "half").mkdir()
    graph.blocks.save(tmp_path / "half", "graph")  # a block table without its coexpression table
    found = find_graph(search=[tmp_path / "none", tmp_path / "half", tmp_path / "saved"])
    assert found.coexp.content_hash == graph.coexp.content_hash  # the first complete directory wins
    with pytest.raises(FileNotFoundError, match=r"GeneGraph\.save"):
        find_graph(tmp_path / "half")
    with pytest.raises(FileNotFoundError, match=r"DMT.*not found in .*none"):
        find_graph(search=[tmp_path / "none"], need="The DMT pooling needs the gene graph")
    with pytest.raises(ValueError, match="graph="):
        find_graph(need="X needs the gene graph")


def test_the_old_module_name_still_imports():
    from biomjepa.train import graph as old

    assert old.GeneGraph is GeneGraph and old.build_graph is build_graph and set(old.__all__) <= set(gmod.__all__)
