"""Graph-connected target blocks, student context and the minimum-context safeguard.

For cell ``i`` with observed genes ``O_i`` and each of ``K`` targets (paper, Supp. "Operational
target-block definition"): seed ``r ~ Uniform(O_i)``; requested size ``L ~ U{min_block..max_block}``;
candidate block ``B = BFS(A, r, L)`` over the out-neighbour table ``A``; target ``T = B ∩ O_i``;
block id ``c`` = median vocabulary index of ``B``; context ``C_i = O_i \\ ∪_k T_k``, replaced by
``O_i`` when ``|C_i| < min_context`` (safeguard); DMT candidates ``C_i ∩ N_64^coexp(c)``. With
``max_context`` (our addition, for cheap steps) the context is then a uniform subset of at most that
many of ``C_i``, drawn before the DMT candidates.

Everything is numpy and vectorised over all ``n_cells × K`` (cell, target) pairs of a batch: the
BFS expands all pairs' frontiers level by level at once (no per-node Python loop).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..data.graph import bfs_blocks
from .views import keep_mask

PAPER_VOCAB_SIZE = 19264
PAPER_MEDIAN_GENES = 3463


@dataclass(frozen=True)
class BlockConfig:
    """Target-block sampler settings; defaults are the paper's.

    ``mode="random"`` is the random-block control: candidate sets drawn uniformly from the
    vocabulary (no graph, no DMT restriction). Their size is ``round(ratio · V)`` with
    ``ratio ~ U[random_ratio]`` when given, else ``L ~ U{min_block..max_block}`` — with the
    defaults and ``V = 19,264`` that is the paper's ratio interval [0.104, 0.415].
    """

    n_targets: int = 4
    min_block: int = 2000
    max_block: int = 8000
    min_context: int = 512
    mode: Literal["graph", "random"] = "graph"
    dmt_k: int = 64
    random_ratio: tuple[float, float] | None = None
    max_context: int | None = None  # cap on the student's context genes per cell (uniform subset)

    def __post_init__(self) -> None:
        if self.mode not in ("graph", "random"):
            raise ValueError(f"BlockConfig.mode must be 'graph' or 'random', got {self.mode!r}.")
        if not 1 <= self.min_block <= self.max_block:
            raise ValueError(f"Need 1 ≤ min_block ≤ max_block, got {self.min_block}, {self.max_block}.")
        if self.n_targets < 1 or self.min_context < 0 or self.dmt_k < 1:
            raise ValueError("Need n_targets ≥ 1, min_context ≥ 0 and dmt_k ≥ 1.")
        if self.max_context is not None and self.max_context < 1:
            raise ValueError(f"max_context must be ≥ 1 or None, got {self.max_context}.")


def block_rng(seed: int, step: int, rank: int = 0, worker: int = 0) -> np.random.Generator:
    """The sampler's generator for one (seed, step, rank, worker): ``SeedSequence([seed, step, rank, worker])``."""
    return np.random.default_rng(np.random.SeedSequence([seed, step, rank, worker]))


def scale_block_sizes(cfg: BlockConfig, median_genes_per_cell: float, vocab_size: int) -> BlockConfig:
    """Scale the paper's sizes to another vocabulary and cell depth.

    Target coverage ``|∪T| / |O|`` is set by the fraction of the vocabulary that the blocks cover
    (≈ 1 − (1 − mean block fraction)^K ≈ 0.69 with the paper's numbers), so block sizes scale with
    ``vocab_size / 19,264``. The residual context is ≈ (1 − coverage)·|O|, so the 512-token safeguard
    scales with ``median_genes_per_cell / 3,463`` to keep the fallback rate near the paper's.
    Check the result with :func:`biomjepa.train.audit.target_visibility_audit`.
    """
    fv = vocab_size / PAPER_VOCAB_SIZE
    fc = median_genes_per_cell / PAPER_MEDIAN_GENES
    lo = max(1, round(cfg.min_block * fv))
    hi = max(lo, min(vocab_size, round(cfg.max_block * fv)))
    return replace(cfg, min_block=lo, max_block=hi, min_context=max(1, round(cfg.min_context * fc)))


@dataclass
class BlockSample:
    """Sampled targets and context for a batch of ``n`` cells with ``K`` targets (numpy, ragged).

    Pair ``p = i * K + k`` is target ``k`` of cell ``i``. Positions are *local* indices into the
    cell's slice ``genes[indptr[i]:indptr[i+1]]``, ascending.

    Attributes
    ----------
    indptr
        ``[n + 1]`` the cells' CSR row pointer (as given).
    context
        bool ``[nnz]`` aligned with ``genes``: the student sees the gene (all True in fallback cells).
    target_indptr, target_pos
        ``[n*K + 1]`` and ``[Σ|T|]``: ``T_ik`` = ``target_pos[target_indptr[p]:target_indptr[p+1]]``.
    block_id
        int64 ``[n, K]`` lower median vocabulary index of ``B`` (0 where ``B`` is empty).
    seed_gene, requested, candidate_size
        int64 ``[n, K]``: BFS seed (−1 in random mode / empty cells), ``L``, realized ``|B|``.
    valid
        bool ``[n, K]``: ``|T| ≥ 1``.
    fallback
        bool ``[n]``: the safeguard restored the full observed context.
    nominal_context
        int64 ``[n]``: ``|O \\ ∪T|`` before the safeguard.
    dmt_indptr, dmt_pos, dmt_fallback
        ``[n*K + 1]``, ``[·]``, bool ``[n, K]``: context positions in ``N^coexp_dmt_k(c)``; when empty
        ``dmt_fallback`` is True and pooling uses all context (always so in random mode).
    candidate_indptr, candidate_genes
        ``[n*K + 1]``, ``[Σ|B|]`` candidate blocks in BFS level order (only with ``keep_candidates``).
    """

    indptr: np.ndarray
    context: np.ndarray
    target_indptr: np.ndarray
    target_pos: np.ndarray
    block_id: np.ndarray
    seed_gene: np.ndarray
    requested: np.ndarray
    candidate_size: np.ndarray
    valid: np.ndarray
    fallback: np.ndarray
    nominal_context: np.ndarray
    dmt_indptr: np.ndarray
    dmt_pos: np.ndarray
    dmt_fallback: np.ndarray
    candidate_indptr: np.ndarray | None = None
    candidate_genes: np.ndarray | None = None

    @property
    def n_cells(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_targets(self) -> int:
        return self.block_id.shape[1]

    @property
    def target_sizes(self) -> np.ndarray:
        """``|T_ik|``, int64 ``[n, K]``."""
        return np.diff(self.target_indptr).reshape(self.n_cells, self.n_targets)

    @property
    def union_sizes(self) -> np.ndarray:
        """``|∪_k T_ik|``, int64 ``[n]``."""
        return np.diff(self.indptr) - self.nominal_context

    def targets(self, i: int, k: int) -> np.ndarray:
        p = i * self.n_targets + k
        return self.target_pos[self.target_indptr[p] : self.target_indptr[p + 1]]

    def dmt(self, i: int, k: int) -> np.ndarray:
        p = i * self.n_targets + k
        return self.dmt_pos[self.dmt_indptr[p] : self.dmt_indptr[p + 1]]


def _ragged_gather(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of CSR rows ``rows`` concatenated, and the owner (index into ``rows``)."""
    start = indptr[rows]
    deg = indptr[rows + 1] - start
    owner = np.repeat(np.arange(len(rows)), deg)
    offs = np.arange(owner.size) - np.repeat(np.cumsum(deg) - deg, deg)
    return start[owner] + offs, owner


def _random_blocks(sizes: np.ndarray, V: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    genes = [rng.choice(V, size=int(s), replace=False) for s in sizes]
    pair = np.repeat(np.arange(len(sizes)), sizes)
    return pair, (np.concatenate(genes) if genes else np.zeros(0, np.int64)).astype(np.int64)


def _lower_median(member: np.ndarray, P: int, V: int) -> np.ndarray:
    """Lower middle element of each pair's sorted candidate genes (an element of B; 0 when empty)."""
    key = np.flatnonzero(member)  # sorted by (pair, gene)
    cnt = np.bincount(key // V, minlength=P)
    start = np.cumsum(cnt) - cnt
    if not key.size:
        return np.zeros(P, np.int64)
    return np.where(cnt > 0, key[np.clip(start + (cnt - 1) // 2, 0, key.size - 1)] % V, 0)


def _requested(cfg: BlockConfig, P: int, V: int, rng: np.random.Generator) -> np.ndarray:
    if cfg.mode == "random" and cfg.random_ratio is not None:
        lo, hi = cfg.random_ratio
        return np.rint(rng.uniform(lo, hi, size=P) * V).astype(np.int64)
    return rng.integers(cfg.min_block, cfg.max_block + 1, size=P)


def sample_blocks(
    indptr: np.ndarray,
    genes: np.ndarray,
    graph,
    cfg: BlockConfig,
    rng: np.random.Generator,
    *,
    vocab_size: int | None = None,
    keep_candidates: bool = False,
    context_eligible: np.ndarray | None = None,
) -> BlockSample:
    """Sample ``cfg.n_targets`` blocks per cell, the student context and DMT candidates.

    Parameters
    ----------
    indptr, genes
        Ragged cells: ``genes[indptr[i]:indptr[i+1]]`` observed vocabulary indices, ascending.
    graph
        A :class:`~biomjepa.data.graph.GeneGraph` (``blocks`` for BFS, ``coexp`` for DMT); may be
        ``None`` in random mode when ``vocab_size`` is given.
    cfg
        :class:`BlockConfig`.
    rng
        ``numpy.random.Generator``, e.g. :func:`block_rng` ``(seed, step, rank, worker)``.
    context_eligible
        bool ``[nnz]``: positions the student may see (default all), e.g. the genes a depth-thinned student
        view still observes (:func:`~biomjepa.train.views.thin_cells`). The context, its safeguard (all
        eligible positions) and the DMT candidates stay inside it; targets do not depend on it.
    """
    indptr, genes = np.asarray(indptr, np.int64), np.asarray(genes, np.int64)
    V = graph.n_genes if graph is not None else int(vocab_size)
    if genes.size and genes.max() >= V:
        raise ValueError(f"Gene index {genes.max()} outside the graph's vocabulary of {V}.")
    n, K = len(indptr) - 1, cfg.n_targets
    P = n * K
    lengths = np.diff(indptr)
    pair_cell = np.repeat(np.arange(n), K)
    seed_gene, requested, cp, cg = _candidate_blocks(indptr, genes, graph, cfg, rng, pair_cell, V)
    member = np.zeros(P * V, dtype=bool)
    member[cp * V + cg] = True

    # every (pair, observed position) of the pair's cell
    flat, opair = _ragged_gather(indptr, pair_cell)  # flat position into genes, pair id
    local = flat - indptr[pair_cell[opair]]
    in_t = member[opair * V + genes[flat]]
    target_indptr = np.r_[0, np.cumsum(np.bincount(opair[in_t], minlength=P))]
    union = np.zeros(genes.size, dtype=bool)
    union[flat[in_t]] = True
    cell_of = np.repeat(np.arange(n), lengths)
    eligible = np.ones(genes.size, bool) if context_eligible is None else np.asarray(context_eligible, bool)
    nominal = lengths - np.bincount(cell_of[union], minlength=n)
    avail = nominal if context_eligible is None else np.bincount(cell_of[eligible & ~union], minlength=n)
    fallback = avail < cfg.min_context
    context = eligible & (~union | fallback[cell_of])
    if cfg.max_context is not None:
        context = keep_mask(indptr, context, cfg.max_context, rng)

    cand = np.bincount(cp, minlength=P)
    block_id = _lower_median(member, P, V)
    dmt_indptr, dmt_pos, dmt_fb = _dmt(graph, cfg, block_id, cand, opair, flat, local, genes, context, V)
    out = BlockSample(
        indptr=indptr,
        context=context,
        target_indptr=target_indptr,
        target_pos=local[in_t],
        block_id=block_id.reshape(n, K),
        seed_gene=seed_gene.reshape(n, K),
        requested=requested.reshape(n, K),
        candidate_size=cand.reshape(n, K),
        valid=(np.diff(target_indptr) > 0).reshape(n, K),
        fallback=fallback,
        nominal_context=nominal,
        dmt_indptr=dmt_indptr,
        dmt_pos=dmt_pos,
        dmt_fallback=dmt_fb.reshape(n, K),
    )
    if keep_candidates:
        out.candidate_indptr, out.candidate_genes = np.r_[0, np.cumsum(cand)], cg
    return out


def _candidate_blocks(indptr, genes, graph, cfg: BlockConfig, rng, pair_cell, V: int):
    """Per (cell, target) pair: the seed gene, the requested size and the candidate block (pair ids, genes).

    Graph mode grows a BFS block from a gene observed in the cell; random mode draws genes uniformly.
    """
    P = len(pair_cell)
    plen = np.diff(indptr)[pair_cell]
    requested = np.minimum(_requested(cfg, P, V, rng), V)
    requested[plen == 0] = 0
    if cfg.mode == "graph":
        u = rng.integers(0, np.maximum(plen, 1))
        at = np.minimum(indptr[pair_cell] + u, genes.size - 1)
        seed_gene = np.where(plen > 0, genes[at], -1) if genes.size else np.full(P, -1, np.int64)
        cp, cg = bfs_blocks(graph.blocks.indptr, graph.blocks.indices, seed_gene, requested, V, rng)
    else:
        seed_gene = np.full(P, -1, np.int64)
        cp, cg = _random_blocks(requested, V, rng)
    return seed_gene, requested, cp, cg


def _dmt(graph, cfg, block_id, cand, opair, flat, local, genes, context, V):
    P = len(block_id)
    if cfg.mode != "graph":
        return np.zeros(P + 1, np.int64), np.zeros(0, np.int64), np.ones(P, dtype=bool)
    table = graph.coexp_topk(cfg.dmt_k)
    rows = np.where(cand > 0, block_id, -1)
    has = np.flatnonzero(rows >= 0)
    pos, owner = _ragged_gather(table.indptr, rows[has])
    near = np.zeros(P * V, dtype=bool)
    near[has[owner] * V + table.indices[pos]] = True
    sel = context[flat] & near[opair * V + genes[flat]]
    counts = np.bincount(opair[sel], minlength=P)
    return np.r_[0, np.cumsum(counts)], local[sel], counts == 0
