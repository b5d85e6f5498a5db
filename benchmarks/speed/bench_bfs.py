"""The target-block search before and after issue 55 (item 1), side by side in one process: ms per batch and the ratio.

``bfs_blocks`` (:mod:`biomjepa.data.graph.bfs`: each level reads its frontier's rank-sorted neighbour lists only as far
as the blocks need) against the search it replaced (``_bfs_blocks_reference`` in ``tests/data/test_bfs_blocks.py``:
every frontier gene's whole list, deduplicated through a ``pairs × V`` mask). Batches are built as
``train.blocks.sample_blocks`` builds them: ``--batch`` cells of the bundled demo pancreas cells
(``bj.datasets.pancreas()``, their observed genes in the vocabulary), ``--targets`` pairs per cell, each seeded at a
uniformly drawn observed gene with a size drawn from ``U{--min-block..--max-block}`` (the v0.5 recipe's 1,000-4,000).
The graph is a saved gene graph's block table (``--graph``: a prepared corpus cache's ``graph/``, the one pretraining
searches); without it, the bundled STRING links alone (sparser than a corpus graph, so fewer visits). The two run in
turn on each batch (order alternating) with generators in the same state; each row says whether their blocks are
bit-identical. The CPU's name and flags are on every row.

    python benchmarks/speed/bench_bfs.py --graph /work/bj_v05/cache/graph      # -> results/bench_bfs.csv
    python benchmarks/speed/bench_bfs.py --batches 5 --out bench_bfs_string.csv  # the bundled STRING links alone
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: `benchmarks` imports as a package

import numpy as np

from benchmarks._common import REPO, machine, write_csv

sys.path.insert(0, str(REPO / "tests" / "data"))  # test_bfs_blocks: the reference search, kept in its test


def block_table(graph_dir: str | None):
    """The block table to search, and its label: a saved graph's, or the bundled STRING links'."""
    from biomjepa.data.graph import NeighbourTable, find_graph, string_adjacency

    if graph_dir:
        return find_graph(graph_dir).blocks, str(graph_dir)
    return NeighbourTable.from_csr(string_adjacency()), "bundled STRING links"


def observed_genes(V: int) -> list[np.ndarray]:
    """Each demo pancreas cell's observed genes as ascending vocabulary indices (genes outside it dropped)."""
    import biomjepa as bj
    from biomjepa.data.vocab import Vocab

    adata = bj.datasets.pancreas()
    idx = Vocab.default().index_of(adata.var_names)
    X = adata.X.tocsr()
    cells = [np.unique(idx[X.indices[X.indptr[i] : X.indptr[i + 1]]]) for i in range(X.shape[0])]
    return [c[(c >= 0) & (c < V)] for c in cells]


def batch_inputs(cells, rng, batch: int, targets: int, lo: int, hi: int, V: int):
    """Seeds and sizes of one batch: ``batch`` random cells, ``targets`` pairs each (as ``_candidate_blocks``)."""
    chosen = [cells[i] for i in rng.choice(len(cells), batch, replace=False)]
    sizes = np.minimum(rng.integers(lo, hi + 1, size=batch * targets), V)
    seeds = np.array([c[rng.integers(len(c))] if len(c) else -1 for c in chosen for _ in range(targets)], np.int64)
    sizes[seeds < 0] = 0
    return seeds, sizes


def timed(fn, table, seeds, sizes, state) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    """Seconds of one call with a generator in ``state``, and its blocks."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    t0 = time.perf_counter()
    out = fn(table.indptr, table.indices, seeds, sizes, table.n_genes, rng)
    return time.perf_counter() - t0, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", default=None, help="a saved gene graph directory (default: the bundled STRING links)")
    p.add_argument("--batches", type=int, default=20, help="timed batches (after one warm-up batch)")
    p.add_argument("--batch", type=int, default=64, help="cells per batch")
    p.add_argument("--targets", type=int, default=4, help="target blocks per cell")
    p.add_argument("--min-block", type=int, default=1000)
    p.add_argument("--max-block", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench_bfs.csv")
    args = p.parse_args(argv)
    if args.batches < 1:
        p.error("--batches must be at least 1")

    from test_bfs_blocks import _bfs_blocks_reference

    from biomjepa.data.graph import bfs_blocks

    table, label = block_table(args.graph)
    cells = observed_genes(table.n_genes)
    info = {**machine("cpu", "cpu_flags"), "numpy": np.__version__, "graph": label, "graph_nnz": table.nnz}
    rows = []
    for b in range(args.batches + 1):
        rng = np.random.default_rng([args.seed, b])
        seeds, sizes = batch_inputs(cells, rng, args.batch, args.targets, args.min_block, args.max_block,
                                    table.n_genes)
        state = rng.bit_generator.state
        runs = {"reference": _bfs_blocks_reference, "new": bfs_blocks}
        order = list(runs) if b % 2 == 0 else list(runs)[::-1]  # in turn: both see the same machine load
        got = {name: timed(runs[name], table, seeds, sizes, state) for name in order}
        same = all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got["reference"][1], got["new"][1]))
        if b:  # batch 0 warms up
            rows.append({"batch": b, "pairs": len(seeds), "requested": int(sizes.sum()),
                         "reached": len(got["new"][1][0]), "reference_ms": 1e3 * got["reference"][0],
                         "new_ms": 1e3 * got["new"][0], "ratio": got["reference"][0] / got["new"][0],
                         "identical": same, **info})
            r = rows[-1]
            print(f"batch {b:3d}: reference {r['reference_ms']:7.1f} ms  new {r['new_ms']:7.1f} ms  "
                  f"x{r['ratio']:.2f}  identical {same}")
    print(f"{info['cpu']} ({info['cpu_flags']}; numpy {info['numpy']}); graph: {label}, {table.nnz} entries")
    med = {k: statistics.median(r[k] for r in rows) for k in ("reference_ms", "new_ms", "ratio")}
    print(f"median: reference {med['reference_ms']:.1f} ms, new {med['new_ms']:.1f} ms, ratio x{med['ratio']:.2f}; "
          f"identical on {sum(r['identical'] for r in rows)}/{len(rows)} batches")
    print(f"wrote {write_csv(rows, args.out)}")


if __name__ == "__main__":
    main()
