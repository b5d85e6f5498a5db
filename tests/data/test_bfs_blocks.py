"""``bfs_blocks`` (issue 55, item 1) gives the blocks of the search it replaced, bit for bit, for any graph and seed.

``_bfs_blocks_reference`` is that search as it was at commit f508a65 (``data/graph/table.py``): every level reads
every frontier gene's whole neighbour list and deduplicates through a ``pairs × V`` mask. The rank-windowed search
(:mod:`biomjepa.data.graph.bfs`) must return the same arrays (values, dtype, order) and leave ``rng`` in the same
state, on random graphs (unsorted lists, duplicate entries, self-loops, isolated genes), random seeds and sizes, and
the edge cases; and read no more neighbour entries than the reference, far fewer when a level is truncated.
``bb9770e:benchmarks/speed/bench_bfs.py`` timed the two side by side (``benchmarks/results/bench_bfs.csv``).
"""

from __future__ import annotations

import numpy as np
import pytest

from biomjepa.data.graph import bfs as bfs_module
from biomjepa.data.graph import bfs_blocks


def _bfs_blocks_reference(indptr, indices, seeds, sizes, V, rng=None):
    """The batched BFS of commit f508a65, verbatim (its docstring shortened): the bit-identity reference."""
    seeds, sizes = np.asarray(seeds, np.int64), np.asarray(sizes, np.int64)
    P = len(seeds)
    it = np.int32 if P * V < 2**31 else np.int64
    perm = (rng.permutation(V) if rng is not None else np.arange(V)).astype(it)  # gene -> rank
    inv = np.argsort(perm)  # rank -> gene
    nbr_rank = perm[indices]
    visited = np.zeros(P * V, dtype=bool)  # indexed by pair * V + rank
    fresh = np.zeros(P * V, dtype=bool)
    count = np.zeros(P, np.int64)
    fp = np.flatnonzero((seeds >= 0) & (sizes > 0))
    fn = seeds[fp]
    visited[fp * V + perm[fn]] = True
    count[fp] = 1
    levels = [(fp, fn)]
    while fp.size:
        go = count[fp] < sizes[fp]
        fp, fn = fp[go], fn[go]
        start, deg = indptr[fn], indptr[fn + 1] - indptr[fn]
        pos = np.arange(deg.sum(), dtype=it) + np.repeat((start - (np.cumsum(deg) - deg)).astype(it), deg)
        fresh[np.repeat((fp * V).astype(it), deg) + nbr_rank[pos]] = True
        fresh &= ~visited
        key = np.flatnonzero(fresh)  # sorted by (pair, rank): distinct new genes of this level
        fresh[key] = False
        pair = key // V
        n_new = np.bincount(pair, minlength=P)
        rank = np.arange(key.size) - (np.cumsum(n_new) - n_new)[pair]
        keep = rank < (sizes[pair] - count[pair])
        key, pair = key[keep], pair[keep]
        visited[key] = True
        count += np.bincount(pair, minlength=P)
        fp, fn = pair, inv[key % V]
        levels.append((fp, fn))
    pair = np.concatenate([lv[0] for lv in levels])
    gene = np.concatenate([lv[1] for lv in levels])
    order = np.argsort(pair, kind="stable")
    return pair[order], gene[order]


def _random_table(rng, V: int, mean_degree: float, offset: int = 0):
    """Raw CSR lists over ``V`` genes: random degrees (some 0), unsorted, with repeats and self-loops; the first
    ``offset`` entries of ``indices`` belong to no row (``indptr[0] = offset``)."""
    deg = rng.poisson(mean_degree, V) * (rng.random(V) < 0.9)
    indptr = offset + np.r_[0, np.cumsum(deg)].astype(np.int64)
    indices = rng.integers(0, V, offset + int(deg.sum())).astype(np.int32)
    return indptr, indices


def _assert_same(indptr, indices, seeds, sizes, V, rng_seed):
    """New and reference agree on (pair, gene), their dtypes, and the generator's state afterwards."""
    r_new = None if rng_seed is None else np.random.default_rng(rng_seed)
    r_ref = None if rng_seed is None else np.random.default_rng(rng_seed)
    got = bfs_blocks(indptr, indices, seeds, sizes, V, r_new)
    want = _bfs_blocks_reference(indptr, indices, seeds, sizes, V, r_ref)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == np.int64
        np.testing.assert_array_equal(g, w)
    if rng_seed is not None:
        assert r_new.bit_generator.state == r_ref.bit_generator.state
    return got


def test_same_blocks_as_reference_on_random_graphs():
    rng = np.random.default_rng(55)
    for case in range(400):
        V = int(rng.choice([1, 2, 3, 7, 30, 150, 600]))
        indptr, indices = _random_table(rng, V, rng.choice([0.5, 2, 6, 20]), offset=int(rng.integers(0, 3)))
        P = int(rng.integers(0, 24))
        seeds = rng.integers(-1, V, P)
        seeds[: P // 4] = seeds[P // 2 : P // 2 + P // 4]  # duplicate seeds
        sizes = rng.choice([0, 1, 2, 5, max(V // 3, 1), V, V + 7], P)
        _assert_same(indptr, indices, seeds, sizes, V, None if case % 7 == 0 else case)


def test_same_blocks_when_levels_are_cut_into_rank_windows():
    """A dense graph where the last level keeps a few percent of its neighbours: several windows per level."""
    rng = np.random.default_rng(7)
    V = 4000
    indptr, indices = _random_table(rng, V, 40)
    for case in range(6):
        seeds = rng.integers(-1, V, 48)
        sizes = rng.integers(1, 1500, 48)
        _assert_same(indptr, indices, seeds, sizes, V, case)


@pytest.mark.parametrize("rng_seed", [None, 3])
def test_edge_cases(rng_seed):
    rng = np.random.default_rng(1)
    indptr, indices = _random_table(rng, 50, 3)
    isolated = int(np.flatnonzero(np.diff(indptr) == 0)[0])
    cases = [
        (np.zeros(0, np.int64), np.zeros(0, np.int64)),  # no pairs
        (np.full(4, -1), np.full(4, 10)),  # no seeds
        (np.array([0, 1, 2]), np.zeros(3, np.int64)),  # size 0
        (np.array([5, 5, 5]), np.array([1, 1, 1])),  # size 1, duplicate seeds
        (np.array([isolated, isolated, 7]), np.array([9, 1, 9])),  # an isolated seed stops at itself
        (np.array([3, 4]), np.array([50, 10**6])),  # more than the component, more than V
    ]
    for seeds, sizes in cases:
        _assert_same(indptr, indices, seeds, sizes, 50, rng_seed)
    loop = (np.array([0, 1]), np.array([0], np.int32))  # V = 1: a self-loop
    for sizes in ([0], [1], [5]):
        _, gene = _assert_same(*loop, np.array([0]), np.array(sizes), 1, rng_seed)
        assert gene.tolist() == ([0] if sizes[0] else [])
    none = np.zeros(0, np.int64)
    _assert_same(np.zeros(1, np.int64), none.astype(np.int32), none, none, 0, rng_seed)  # V = 0, no pairs


def test_reads_no_more_than_the_reference_and_far_less_when_levels_truncate(monkeypatch):
    """Entries read (``_window_keys``) against the reference's reads: every frontier gene's whole list per level."""
    read, whole = [], []
    window_keys, level = bfs_module._window_keys, bfs_module._level

    def counting_window_keys(*args):
        key = window_keys(*args)
        read.append(key.size)
        return key

    def counting_level(ranks, bounds, fp, fn, *rest):
        whole.append(int(np.diff(indptr)[fn].sum()))
        return level(ranks, bounds, fp, fn, *rest)

    monkeypatch.setattr(bfs_module, "_window_keys", counting_window_keys)
    monkeypatch.setattr(bfs_module, "_level", counting_level)
    rng = np.random.default_rng(2)
    V = 3000
    indptr, indices = _random_table(rng, V, 40)
    _assert_same(indptr, indices, rng.integers(0, V, 32), np.full(32, V + 1), V, 0)  # never full: every list read
    assert sum(read) == sum(whole)
    read.clear(), whole.clear()
    _assert_same(indptr, indices, rng.integers(0, V, 32), np.full(32, 200), V, 0)  # ~1,600 reached, 200 kept
    assert sum(read) < sum(whole) / 3
