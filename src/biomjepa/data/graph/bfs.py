"""Batched breadth-first blocks over a CSR out-neighbour table: the pretraining target sampler's search.

:func:`bfs_blocks` expands all pairs' frontiers together, one level at a time. A level keeps, per pair, the
unvisited out-neighbours of its frontier with the smallest rank under a random permutation of the vocabulary,
up to the pair's requested size. The neighbour lists are sorted by rank once per call and cut into
:data:`RANK_BUCKETS` rank ranges, and a level reads its frontier's lists one window of ranges at a time, lowest
ranks first, until every pair's block is full: a level that truncates reads about the share of its neighbours that it
keeps, and no step sweeps the ``pairs × V`` space. The blocks are the same as deduplicating every neighbour
of the level and keeping the lowest ranks (``tests/data/test_bfs_blocks.py`` holds that search as the reference).

numpy only.
"""

from __future__ import annotations

import numpy as np

#: Rank ranges of the sorted neighbour lists: a level's windows are whole ranges (``V / RANK_BUCKETS`` ranks each).
RANK_BUCKETS = 64


def bfs_blocks(
    indptr: np.ndarray,
    indices: np.ndarray,
    seeds: np.ndarray,
    sizes: np.ndarray,
    V: int,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Batched BFS: for each pair ``p``, up to ``sizes[p]`` genes reached from ``seeds[p]``.

    All pairs' frontiers expand together, one level at a time. The last level is truncated to hit
    ``sizes[p]`` exactly, keeping the level's genes with the smallest rank under a random permutation
    of the vocabulary drawn from ``rng`` (a uniformly random subset of the level; ascending vocabulary
    index when ``rng`` is None). If the seed's component is exhausted first, the block stops short (no
    restart). Pairs with ``seeds < 0`` get empty blocks. ``rng`` gives one ``permutation(V)`` draw.

    Returns ``(pair, gene)`` int64 arrays grouped by pair, level by level (seed first) within a pair,
    ascending rank within a level.
    """
    seeds, sizes = np.asarray(seeds, np.int64), np.asarray(sizes, np.int64)
    P = len(seeds)
    perm = (rng.permutation(V) if rng is not None else np.arange(V)).astype(np.int64)  # gene -> rank
    inv = np.argsort(perm)  # rank -> gene
    small = max(P, len(indptr)) * max(V, 1) < 2**31 and len(indices) < 2**31
    it = np.int32 if small else np.int64  # keys pair * V + rank and list positions
    ranks, bounds = _rank_lists(indptr, indices, perm.astype(it), V)
    visited = np.zeros(P * V, dtype=bool)  # indexed by pair * V + rank
    count = np.zeros(P, np.int64)
    fp = np.flatnonzero((seeds >= 0) & (sizes > 0))
    fn = seeds[fp]
    visited[fp * V + perm[fn]] = True
    count[fp] = 1
    levels = [(fp, fn)]
    while fp.size:
        go = count[fp] < sizes[fp]
        key = _level(ranks, bounds, fp[go].astype(it), fn[go], sizes - count, visited, V)
        visited[key] = True
        fp, fn = (key // V).astype(np.int64), inv[key % V]
        count += np.bincount(fp, minlength=P)
        levels.append((fp, fn))
    pair = np.concatenate([lv[0] for lv in levels])
    gene = np.concatenate([lv[1] for lv in levels])
    order = np.argsort(pair, kind="stable")
    return pair[order], gene[order]


def _rank_lists(indptr, indices, perm, V: int) -> tuple[np.ndarray, np.ndarray]:
    """The out-neighbours as ranks, ascending within each row, and where each row's rank ranges start.

    ``ranks[s:e]`` (``s, e = indptr[g] - indptr[0], indptr[g + 1] - indptr[0]``) are ``perm`` of gene ``g``'s
    out-neighbours, ascending; ``bounds[g * (B + 1) + b]`` is the first of them in range ``b`` or later (range of
    a rank ``r``: ``r * B // V``, ``B`` = :data:`RANK_BUCKETS`), so ``bounds[g * (B + 1) + B] = e``. Both in the
    dtype of ``perm``.
    """
    it, B = perm.dtype.type, RANK_BUCKETS
    ptr = np.asarray(indptr, np.int64)
    n, deg = len(ptr) - 1, np.diff(ptr)
    row = np.repeat(np.arange(n, dtype=it) * it(V), deg)
    ranks = np.sort(row + perm[indices[ptr[0] : ptr[-1]]])  # sorted by (row, rank)
    ranks -= row
    bucket = np.repeat(np.arange(n, dtype=np.int64) * B, deg) + ranks.astype(np.int64) * B // max(V, 1)
    bounds = np.empty((n, B + 1), it)
    bounds[:, 0] = ptr[:-1] - ptr[0]
    np.cumsum(np.bincount(bucket, minlength=n * B).reshape(n, B), axis=1, dtype=it, out=bounds[:, 1:])
    bounds[:, 1:] += bounds[:, :1]
    return ranks, bounds.ravel()


def _level(ranks, bounds, fp, fn, need, visited, V: int) -> np.ndarray:
    """One BFS level: per pair, the ``need[pair]`` lowest-rank unvisited out-neighbours of its frontier.

    ``(fp, fn)``: the frontier's pairs and genes. Reads the rank-sorted lists window by window, lowest ranks
    first; a pair stops once it has ``need`` genes or has read its whole lists. Returns the keys
    ``pair * V + rank``, ascending rank within each pair (windows in order, each sorted).
    """
    P, B = len(need), RANK_BUCKETS
    row = fn * (B + 1)
    reach = np.bincount(fp, weights=bounds[row + B] - bounds[row], minlength=P)  # the pair's neighbour visits
    lo, hi = np.zeros(P, np.int64), _first_window(need, reach)
    found = np.zeros(P, np.int64)
    out = [np.zeros(0, ranks.dtype)]
    while fp.size:
        key = _window_keys(ranks, bounds, fp, fn, lo, hi, V)
        key = _unvisited_unique(key, visited)
        pair = key // V
        n_new = np.bincount(pair, minlength=P)
        ordinal = np.arange(key.size) - (np.cumsum(n_new) - n_new)[pair]
        out.append(key[ordinal < (need - found)[pair]])
        found += np.minimum(n_new, need - found)
        go = ((found < need) & (hi < B))[fp]
        lo, hi = hi, _next_window(hi, found, need)
        fp, fn = fp[go], fn[go]
    return np.concatenate(out)


def _first_window(need: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """End of each pair's first window (in rank ranges): all when ``2 · need ≥`` its neighbour visits, else the
    share ``2 · need / visits`` of the ranges (at least one); windows then grow with :func:`_next_window`."""
    B = RANK_BUCKETS
    share = np.ceil(2 * B * need / np.maximum(reach, 1))
    return np.where(2 * need >= reach, B, np.clip(share, 1, B)).astype(np.int64)


def _next_window(hi: np.ndarray, found: np.ndarray, need: np.ndarray) -> np.ndarray:
    """End of the next window: the ranges that the genes found so far per range predict for the rest, plus a
    quarter, at least half the ranges read so far (a pair that found nothing doubles them)."""
    est = np.minimum(np.ceil(1.25 * (need - found) * hi / np.maximum(found, 1)), RANK_BUCKETS).astype(np.int64)
    step = np.where(found > 0, np.maximum(est, (hi + 1) // 2), hi)
    return np.minimum(hi + np.maximum(step, 1), RANK_BUCKETS)


def _window_keys(ranks, bounds, fp, fn, lo, hi, V: int) -> np.ndarray:
    """Keys ``pair * V + rank`` of each frontier gene's out-neighbours in its pair's rank ranges ``[lo, hi)``."""
    row = fn * (RANK_BUCKETS + 1)
    start = bounds[row + lo[fp]]
    length = bounds[row + hi[fp]] - start
    pos = np.repeat(start - (np.cumsum(length) - length), length)
    pos += np.arange(pos.size, dtype=pos.dtype)
    key = np.repeat(fp * fp.dtype.type(V), length)
    key += ranks[pos]
    return key


def _unvisited_unique(key: np.ndarray, visited: np.ndarray) -> np.ndarray:
    """The distinct unvisited keys, ascending, by one sort (numpy 2's ``np.unique`` hashes first: slower here)."""
    key = np.sort(key[~visited[key]])
    return key[np.r_[True, key[1:] != key[:-1]]] if key.size else key
