"""Which cells make up a training batch: one shard at a time, one source per batch, or mixed.

A batch is a list of ``(shard, rows)`` pieces. Every plan is a pure function of ``(seed, unit, n_units)``
(``unit`` = a (rank, worker) pair): the same seed gives the same batches, and a resumed stream skips the
batches it already gave. Inside every mode, rows are shuffled, cut into pools of ``sort_pool × batch_size``
rows, sorted by length inside a pool ("sortish") and batched, so the cells of a batch have similar depth.

``batching``:

* ``"shard"`` (the default, and what runs before v0.4 used): per epoch the shards are dealt to the units in a
  shuffled order and each unit goes through its shards one after another, every batch from one shard;
* ``"source"``: every batch from one source (corpus file), the source of each batch drawn at random, with
  probability proportional to ``n_s ** balance`` (``n_s`` its cells): ``balance = 1`` presents every cell
  equally often, ``balance = 0`` every source equally often, ``0.5`` in between. Every unit sees every source
  (rows dealt round-robin). A view contrast inside such a batch has to tell apart cells of one tissue;
* ``"mixed"``: cells of all sources in one batch; per epoch cells drawn with weight ``n_s ** (balance - 1)``
  (``balance = 1``: each cell once, a plain shuffle).
"""

from __future__ import annotations

from itertools import count

import numpy as np

BATCHINGS = ("shard", "source", "mixed")


def _sortish(rows: np.ndarray, lengths: np.ndarray, batch_size: int, sort_pool: int, rng) -> list[np.ndarray]:
    """``rows`` cut into pools, sorted by length inside each pool, batched; batches shuffled within a pool."""
    pool = max(1, sort_pool) * batch_size
    out = []
    for a in range(0, len(rows), pool):
        chunk = rows[a : a + pool]
        chunk = chunk[np.argsort(-lengths[chunk], kind="stable")]
        batches = [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
        out += [batches[j] for j in rng.permutation(len(batches))]
    return out


def _source_batches(lengths: np.ndarray, shard: int, seed: int, unit: int, n_units: int, batch_size: int,
                    sort_pool: int):
    """Endless sortish batches of one shard's rows dealt to ``unit`` (a new shuffle every pass)."""
    for epoch in count():
        rows = np.random.default_rng([seed, epoch, 2, shard]).permutation(len(lengths))[unit::n_units]
        if not len(rows):
            return
        yield from _sortish(rows, lengths, batch_size, sort_pool, np.random.default_rng([seed, epoch, 3, shard, unit]))


def source_plan(lengths: list[np.ndarray], seed: int, unit: int, n_units: int, batch_size: int, sort_pool: int,
                balance: float = 1.0):
    """Endless ``[(shard, rows)]`` batches, each from one source drawn with probability ∝ ``n_s ** balance``."""
    streams = {s: _source_batches(lengths[s], s, seed, unit, n_units, batch_size, sort_pool)
               for s in range(len(lengths)) if len(lengths[s][unit::n_units])}
    if not streams:
        return
    shards = np.array(sorted(streams))
    weight = np.array([len(lengths[s]) ** balance for s in shards], dtype=np.float64)
    pick = np.random.default_rng([seed, 5, unit])
    while True:
        s = int(shards[pick.choice(len(shards), p=weight / weight.sum())])
        yield [(s, next(streams[s]))]


def mixed_plan(lengths: list[np.ndarray], seed: int, unit: int, n_units: int, batch_size: int, sort_pool: int,
               balance: float = 1.0):
    """Endless batches of cells from every source (weights per cell ∝ ``n_s ** (balance - 1)``)."""
    shard = np.concatenate([np.full(len(x), s) for s, x in enumerate(lengths)])
    row = np.concatenate([np.arange(len(x)) for x in lengths])
    length = np.concatenate(lengths) if lengths else np.zeros(0)
    if not len(shard):
        return
    sizes = np.array([len(x) for x in lengths], dtype=np.float64)
    p = sizes[shard] ** (balance - 1.0)
    p /= p.sum()
    for epoch in count():
        rng = np.random.default_rng([seed, epoch, 6])
        cells = rng.permutation(len(shard)) if balance == 1.0 else rng.choice(len(shard), len(shard), p=p)
        mine = cells[unit::n_units]
        if not len(mine):
            return
        order = np.arange(len(mine))
        for b in _sortish(order, length[mine], batch_size, sort_pool, np.random.default_rng([seed, epoch, 7, unit])):
            picked = mine[np.sort(b)]
            pieces = []
            for s in np.unique(shard[picked]):
                pieces.append((int(s), row[picked[shard[picked] == s]]))
            yield pieces


def plan_batches(corpus, batching: str, balance: float, seed: int, unit: int, n_units: int, batch_size: int,
                 sort_pool: int, skip: int):
    """``(cells, ids)`` of the ``source`` / ``mixed`` plan of ``corpus`` for one unit, from the ``skip``-th batch on
    (what :class:`~biomjepa.data.shards.ShardStream` wraps into its batches for these batchings)."""
    from .tokenize import concat_cells

    plan = source_plan if batching == "source" else mixed_plan
    empty = True
    for pieces in plan(corpus.lengths, seed, unit, n_units, batch_size, sort_pool, balance):
        empty = False
        if skip > 0:
            skip -= 1
            continue
        cells = concat_cells([corpus.cells(sh, rows) for sh, rows in pieces])
        ids = np.concatenate([np.stack([np.full(len(rows), sh), corpus.load(sh)["rows"][rows]], axis=1)
                              for sh, rows in pieces])
        yield cells, ids
    if empty:
        raise ValueError(f"Data unit {unit}/{n_units} received no cells; the corpus is too small.")
