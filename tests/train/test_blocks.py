"""Target-block sampler properties on a small synthetic graph, and the visibility audit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import sparse

from biomjepa.data.graph import GeneGraph, NeighbourTable, build_graph
from biomjepa.train.audit import format_audit, target_visibility_audit, tune_min_context, wilson_interval
from biomjepa.train.blocks import (
    BlockConfig,
    bfs_blocks,
    block_rng,
    sample_blocks,
    scale_block_sizes,
)

V = 300
ISLAND = np.arange(290, 300)  # a separate 10-gene component


@pytest.fixture(scope="module")
def graph() -> GeneGraph:
    rng = np.random.default_rng(0)
    main = np.arange(290)
    r = np.r_[main, rng.integers(0, 290, 400)]
    c = np.r_[(main + 1) % 290, rng.integers(0, 290, 400)]
    r, c = np.r_[r, ISLAND], np.r_[c, np.roll(ISLAND, 1)]
    s = sparse.coo_matrix((np.full(len(r), 800.0), (r, c)), shape=(V, V)).tocsr()
    s.setdiag(0)
    s.eliminate_zeros()
    keep = np.ones(V)
    keep[ISLAND] = 0
    coexp = sparse.random(V, V, density=0.08, random_state=2, format="csr")
    coexp = sparse.diags(keep) @ coexp @ sparse.diags(keep)
    coexp = (coexp - sparse.diags(coexp.diagonal())).tocsr()
    coexp.eliminate_zeros()
    return build_graph(s.maximum(s.T), coexp.maximum(coexp.T), top_k=16)


@pytest.fixture(scope="module")
def cells():
    rng = np.random.default_rng(1)
    sets = [np.sort(rng.choice(290, rng.integers(20, 200), replace=False)) for _ in range(60)]
    sets.append(np.array([], np.int64))  # an empty cell
    sets.append(np.sort(np.r_[ISLAND, [3, 50]]))  # island cell
    indptr = np.r_[0, np.cumsum([len(x) for x in sets])]
    return indptr, np.concatenate(sets).astype(np.int64)


CFG = BlockConfig(min_block=20, max_block=120, min_context=30, dmt_k=8)


def _cell(indptr, genes, i):
    return genes[indptr[i] : indptr[i + 1]]


def _candidates(s, i, k):
    p = i * s.n_targets + k
    return s.candidate_genes[s.candidate_indptr[p] : s.candidate_indptr[p + 1]]


def test_targets_context_and_block_ids(graph, cells):
    indptr, genes = cells
    s = sample_blocks(indptr, genes, graph, CFG, block_rng(0, 0), keep_candidates=True)
    n = len(indptr) - 1
    assert s.block_id.shape == (n, 4) and s.context.shape == genes.shape
    for i in range(n):
        obs = _cell(indptr, genes, i)
        ctx = s.context[indptr[i] : indptr[i + 1]]
        union = np.zeros(len(obs), bool)
        for k in range(4):
            pos = s.targets(i, k)
            B = _candidates(s, i, k)
            assert np.all(np.diff(pos) > 0)
            assert set(obs[pos]) == set(B) & set(obs)  # T = B ∩ O
            union[pos] = True
            assert s.valid[i, k] == (len(pos) > 0)
            assert len(B) == s.candidate_size[i, k] <= s.requested[i, k]
            if len(B):
                assert s.block_id[i, k] in B
                assert s.block_id[i, k] == np.sort(B)[(len(B) - 1) // 2]
                assert s.seed_gene[i, k] in obs and B[0] == s.seed_gene[i, k]
        nominal = len(obs) - union.sum()
        assert s.nominal_context[i] == nominal
        assert s.fallback[i] == (nominal < CFG.min_context)
        if s.fallback[i]:
            assert ctx.all()  # full observed context restored
        else:
            assert not (ctx & union).any() and (ctx | union).all()
    assert s.fallback.any() and (~s.fallback).any()


def test_bfs_sizes_and_component(graph):
    g = graph.blocks
    seeds = np.array([0, 100, 295, 295, -1])
    sizes = np.array([150, 290, 50, 5, 10])
    pair, gene = bfs_blocks(g.indptr, g.indices, seeds, sizes, V)
    got = np.bincount(pair, minlength=5)
    assert list(got) == [150, 290, 10, 5, 0]  # island exhausted at 10; truncated exactly otherwise
    assert set(gene[pair == 1]) == set(range(290))
    assert set(gene[pair == 2]) == set(ISLAND)
    for p in range(4):  # no duplicates; seed first; BFS order = non-decreasing hop distance
        b = gene[pair == p]
        assert len(set(b)) == len(b) and b[0] == seeds[p]
    dist = _hops(g, 0)
    b0 = gene[pair == 0]
    assert np.all(np.diff(dist[b0]) >= 0)
    assert dist[b0].max() <= np.sort(dist)[149]


def _hops(table: NeighbourTable, seed: int) -> np.ndarray:
    dist = np.full(table.n_genes, 10**9)
    dist[seed], frontier, d = 0, [seed], 0
    while frontier:
        d += 1
        nxt = [int(v) for u in frontier for v in table.neighbours(u) if dist[v] > d]
        for v in nxt:
            dist[v] = d
        frontier = sorted(set(nxt))
    return dist


def test_determinism_and_seeds(graph, cells):
    indptr, genes = cells
    a = sample_blocks(indptr, genes, graph, CFG, block_rng(7, 3, 1, 2))
    b = sample_blocks(indptr, genes, graph, CFG, block_rng(7, 3, 1, 2))
    for f in ("context", "target_pos", "block_id", "dmt_pos", "requested", "fallback"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    for other in (block_rng(8, 3, 1, 2), block_rng(7, 4, 1, 2), block_rng(7, 3, 0, 2), block_rng(7, 3, 1, 3)):
        c = sample_blocks(indptr, genes, graph, CFG, other)
        assert not np.array_equal(a.block_id, c.block_id)


def test_requested_sizes_in_range(graph, cells):
    indptr, genes = cells
    s = sample_blocks(indptr, genes, graph, CFG, block_rng(1, 1))
    live = np.diff(indptr) > 0
    req = s.requested[live]
    assert req.min() >= CFG.min_block and req.max() <= CFG.max_block
    main = s.seed_gene < 290
    assert np.array_equal(s.candidate_size[live & main.all(1)], s.requested[live & main.all(1)])
    on_island = s.seed_gene >= 290
    assert np.array_equal(s.candidate_size[on_island], np.minimum(s.requested[on_island], 10))
    assert not s.valid[-2].any() and s.fallback[-2]  # empty cell


def test_dmt_candidates(graph, cells):
    indptr, genes = cells
    s = sample_blocks(indptr, genes, graph, CFG, block_rng(2, 0))
    nb = graph.coexp_topk(CFG.dmt_k)
    assert nb.degrees().max() <= CFG.dmt_k
    for i in range(len(indptr) - 1):
        obs = _cell(indptr, genes, i)
        ctx = s.context[indptr[i] : indptr[i + 1]]
        for k in range(4):
            pos = s.dmt(i, k)
            expect = np.flatnonzero(ctx & np.isin(obs, nb.neighbours(s.block_id[i, k])))
            if s.candidate_size[i, k] == 0:
                expect = expect[:0]
            np.testing.assert_array_equal(pos, expect)
            assert s.dmt_fallback[i, k] == (len(pos) == 0)


def test_random_mode_ignores_graph(graph, cells):
    indptr, genes = cells
    cfg = replace(CFG, mode="random")
    a = sample_blocks(indptr, genes, graph, cfg, block_rng(5, 0), keep_candidates=True)
    b = sample_blocks(indptr, genes, None, cfg, block_rng(5, 0), vocab_size=V, keep_candidates=True)
    np.testing.assert_array_equal(a.target_pos, b.target_pos)
    np.testing.assert_array_equal(a.candidate_genes, b.candidate_genes)
    assert a.dmt_fallback.all() and a.dmt_pos.size == 0 and (a.seed_gene == -1).all()
    live = np.diff(indptr) > 0
    assert np.array_equal(a.candidate_size[live], a.requested[live])
    ratio = replace(cfg, random_ratio=(0.104, 0.415))
    r = sample_blocks(indptr, genes, None, ratio, block_rng(5, 0), vocab_size=V)
    assert r.requested[live].min() >= round(0.104 * V) and r.requested.max() <= round(0.415 * V)


def test_config_validation_and_scaling():
    with pytest.raises(ValueError, match="mode"):
        BlockConfig(mode="grid")
    with pytest.raises(ValueError, match="min_block"):
        BlockConfig(min_block=10, max_block=5)
    paper = BlockConfig()
    assert scale_block_sizes(paper, 3463, 19264) == paper
    mini = scale_block_sizes(paper, 1500, 19264)
    assert (mini.min_block, mini.max_block, mini.min_context) == (2000, 8000, round(512 * 1500 / 3463))
    small = scale_block_sizes(paper, 3463, 1926)
    assert (small.min_block, small.max_block) == (200, 800)


def test_wilson_interval_known_case():
    lo, hi = wilson_interval(289, 10000)
    assert round(100 * lo, 2) == 2.58 and round(100 * hi, 2) == 3.24
    assert wilson_interval(0, 10)[0] == 0.0


def test_audit(graph, cells):
    indptr, genes = cells
    res = target_visibility_audit((indptr, genes), graph, CFG, n_cells=40, seed=42)
    assert res["n_cells"] == 40
    again = target_visibility_audit((indptr, genes), graph, CFG, n_cells=40, seed=42)
    assert (
        res["fallback_count"] == again["fallback_count"] and res["union_per_cell"] == again["union_per_cell"]
    )
    assert 0 < res["mean_coverage"] <= 1
    assert 0 <= res["visible_fraction"] <= 1 and res["visible_targets"] <= res["total_targets"]
    text = format_audit(res)
    assert "Wilson" in text and "2.58–3.24%" in text
    tuned = tune_min_context((indptr, genes), graph, CFG, target_fallback=0.05)
    check = target_visibility_audit((indptr, genes), graph, tuned, n_cells=len(indptr) - 1)
    assert check["fallback_fraction"] <= 0.05 + 1e-9


def test_paper_sizes_realised_exactly():
    """Paper-scale sampling (V = 19,264, blocks 2,000–8,000, 64 cells) realises the requested sizes."""
    rng = np.random.default_rng(0)
    Vb = 19264
    rows = np.repeat(np.arange(Vb), 58)
    cols = rng.integers(0, Vb, rows.size)
    t = NeighbourTable.from_csr(sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(Vb, Vb)))
    g = GeneGraph(t, t.topk(64))
    sets = [np.sort(rng.choice(Vb, 3463, replace=False)) for _ in range(64)]
    indptr = np.r_[0, np.cumsum([len(x) for x in sets])]
    genes = np.concatenate(sets)
    s = sample_blocks(indptr, genes, g, BlockConfig(), block_rng(0, 1))
    assert np.all(s.candidate_size == s.requested)
