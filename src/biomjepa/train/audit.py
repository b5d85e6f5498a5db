"""Target-visibility audit of the minimum-context safeguard (paper, Supp. Table
"Minimum-context target-visibility audit"), on any corpus.

"Target tokens" are the per-cell union ``|∪_k T_ik|`` (the paper's 25,821,660 targets over 10,000
cells match the union, not the sum over blocks); a target token is *visible* when its cell
entered the full-context fallback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from .blocks import BlockConfig, _ragged_gather, block_rng, sample_blocks

_Z95 = 1.959963984540054

PAPER_AUDIT = {
    "observed": (3463, 2825, 4394),
    "target_per_block": (1063, 762, 1430),
    "union_per_cell": (2407, 1960, 3031),
    "nominal_context": (1049, 809, 1396),
    "mean_coverage": 0.6932,
    "fallback_count": 289,
    "fallback_fraction": 0.0289,
    "wilson_95": (0.0258, 0.0324),
    "visible_fraction": 0.0155,
}


def wilson_interval(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``k / n`` (closed form)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _as_cells(cells) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, genes)``, an object with ``.indptr``/``.genes``, or an iterable of either."""
    if isinstance(cells, tuple) and len(cells) == 2:
        return np.asarray(cells[0], np.int64), np.asarray(cells[1], np.int64)
    if hasattr(cells, "indptr") and hasattr(cells, "genes"):
        return np.asarray(cells.indptr, np.int64), np.asarray(cells.genes, np.int64)
    if isinstance(cells, Iterable):
        parts = [_as_cells(c) for c in cells]
        lengths = np.concatenate([np.diff(p[0]) for p in parts])
        return np.r_[0, np.cumsum(lengths)], np.concatenate([p[1] for p in parts])
    raise TypeError("cells must be (indptr, genes), TokenizedCells-like, or an iterable of them.")


def _subset(indptr, genes, rows):
    rows = np.asarray(rows, np.int64)
    pos, _ = _ragged_gather(indptr, rows)
    return np.r_[0, np.cumsum(np.diff(indptr)[rows])], genes[pos]


def _q(x) -> tuple[float, float, float]:
    x = np.asarray(x, np.float64)
    if not x.size:
        return (float("nan"),) * 3
    med, lo, hi = np.percentile(x, [50, 25, 75])
    return (float(med), float(lo), float(hi))


def target_visibility_audit(
    cells,
    graph,
    cfg: BlockConfig | None = None,
    *,
    n_cells: int = 10000,
    seed: int = 42,
    batch: int = 256,
    vocab_size: int | None = None,
) -> dict:
    """Reconstruct targets, residual context and safeguard decisions for a uniform cell sample.

    Parameters
    ----------
    cells
        ``(indptr, genes)`` ragged vocabulary indices, a ``TokenizedCells``, or an iterable of them.
    graph, cfg
        As for :func:`~biomjepa.train.blocks.sample_blocks` (default ``BlockConfig()``).
    n_cells, seed
        Cells sampled uniformly without replacement (all when fewer); the generator for batch ``b``
        is ``block_rng(seed, b, 0, 0)``.

    Returns
    -------
    dict with ``n_cells``; ``observed``, ``target_per_block``, ``union_per_cell``,
    ``nominal_context`` as (median, q25, q75); ``mean_coverage``; ``fallback_count``,
    ``fallback_fraction``, ``wilson_95``; ``visible_targets``, ``total_targets``,
    ``visible_fraction``; ``mean_observed_fallback`` / ``_other``; ``mean_context_fallback``;
    ``config``.
    """
    cfg = cfg or BlockConfig()
    indptr, genes = _as_cells(cells)
    n_all = len(indptr) - 1
    rows = np.arange(n_all)
    if n_all > n_cells:
        rows = np.sort(np.random.default_rng(seed).choice(n_all, n_cells, replace=False))
    indptr, genes = _subset(indptr, genes, rows)
    n = len(rows)
    obs, tsz, uni, nom, fb = [], [], [], [], []
    for b, start in enumerate(range(0, n, batch)):
        sub = np.arange(start, min(start + batch, n))
        ip, g = _subset(indptr, genes, sub)
        s = sample_blocks(ip, g, graph, cfg, block_rng(seed, b, 0, 0), vocab_size=vocab_size)
        obs.append(np.diff(ip))
        tsz.append(s.target_sizes[s.valid])
        uni.append(s.union_sizes)
        nom.append(s.nominal_context)
        fb.append(s.fallback)
    obs, tsz, uni, nom, fb = (np.concatenate(x) for x in (obs, tsz, uni, nom, fb))
    k = int(fb.sum())
    cov = np.where(obs > 0, uni / np.maximum(obs, 1), 0.0)
    return {
        "n_cells": n,
        "observed": _q(obs),
        "target_per_block": _q(tsz),
        "union_per_cell": _q(uni),
        "nominal_context": _q(nom),
        "mean_coverage": float(cov.mean()) if n else float("nan"),
        "fallback_count": k,
        "fallback_fraction": k / n if n else float("nan"),
        "wilson_95": wilson_interval(k, n),
        "visible_targets": int(uni[fb].sum()),
        "total_targets": int(uni.sum()),
        "visible_fraction": float(uni[fb].sum() / max(uni.sum(), 1)),
        "mean_observed_fallback": float(obs[fb].mean()) if k else float("nan"),
        "mean_observed_other": float(obs[~fb].mean()) if k < n else float("nan"),
        "mean_context_fallback": float(nom[fb].mean()) if k else float("nan"),
        "config": cfg,
    }


def _fmt_q(q) -> str:
    return f"{q[0]:,.0f} [{q[1]:,.0f}–{q[2]:,.0f}]"


def format_audit(result: dict, *, paper: bool = True) -> str:
    """Text table of :func:`target_visibility_audit` (with the paper's column when ``paper``)."""
    r, p = result, PAPER_AUDIT
    rows = [
        ("Cells", f"{r['n_cells']:,}", "10,000"),
        ("Observed gene tokens", _fmt_q(r["observed"]), _fmt_q(p["observed"])),
        ("Realized target tokens per block", _fmt_q(r["target_per_block"]), _fmt_q(p["target_per_block"])),
        ("Union target tokens per cell", _fmt_q(r["union_per_cell"]), _fmt_q(p["union_per_cell"])),
        ("Nominal residual context tokens", _fmt_q(r["nominal_context"]), _fmt_q(p["nominal_context"])),
        ("Mean target coverage", f"{r['mean_coverage']:.4f}", f"{p['mean_coverage']:.4f}"),
        (
            "Cells entering full-context fallback",
            f"{r['fallback_count']:,} ({100 * r['fallback_fraction']:.2f}%)",
            "289 (2.89%)",
        ),
        (
            "Fallback fraction, 95% Wilson interval",
            "{:.2f}–{:.2f}%".format(*(100 * x for x in r["wilson_95"])),
            "2.58–3.24%",
        ),
        ("Target-token-weighted visible fraction", f"{100 * r['visible_fraction']:.2f}%", "1.55%"),
        (
            "Mean observed genes, fallback / other",
            f"{r['mean_observed_fallback']:,.1f} / {r['mean_observed_other']:,.1f}",
            "1,804.8 / 3,796.4",
        ),
        ("Mean residual context in fallback cells", f"{r['mean_context_fallback']:,.1f}", "418.6"),
    ]
    w = max(len(a) for a, _, _ in rows) + 2
    w2 = max(len(b) for _, b, _ in rows) + 2
    head = f"{'Audit quantity':<{w}}{'ours':>{w2}}" + (f"{'paper':>24}" if paper else "")
    lines = [head] + [f"{a:<{w}}{b:>{w2}}" + (f"{c:>24}" if paper else "") for a, b, c in rows]
    cfg = r["config"]
    lines.append(
        f"(blocks {cfg.min_block}–{cfg.max_block}, K={cfg.n_targets}, "
        f"min_context={cfg.min_context}, mode={cfg.mode})"
    )
    return "\n".join(lines)


def tune_min_context(
    cells, graph, cfg: BlockConfig, *, target_fallback: float = 0.0289, n_cells: int = 2000, seed: int = 42
) -> BlockConfig:
    """Largest ``min_context`` whose audited fallback fraction stays ≤ ``target_fallback``.

    The residual context does not depend on ``min_context``, so one audit pass suffices: the answer
    is the ``target_fallback`` quantile of the nominal residual context.
    """
    indptr, genes = _as_cells(cells)
    probe = replace(cfg, min_context=0)
    noms = []
    n_all = len(indptr) - 1
    rows = np.arange(n_all)
    if n_all > n_cells:
        rows = np.sort(np.random.default_rng(seed).choice(n_all, n_cells, replace=False))
    ip, g = _subset(indptr, genes, rows)
    for b, start in enumerate(range(0, len(rows), 256)):
        sub = np.arange(start, min(start + 256, len(rows)))
        sip, sg = _subset(ip, g, sub)
        noms.append(sample_blocks(sip, sg, graph, probe, block_rng(seed, b, 0, 0)).nominal_context)
    nom = np.sort(np.concatenate(noms))
    k = int(np.floor(target_fallback * len(nom)))
    return replace(cfg, min_context=int(nom[k]) if len(nom) else cfg.min_context)
