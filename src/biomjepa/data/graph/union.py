"""The gene graph's union: STRING ∪ coexpression → the directed block table, and its statistics.

:func:`build_graph` binarizes and unites the two sources, keeps the row-wise top-64 and returns a
:class:`~biomjepa.data.graph.GeneGraph`; :func:`format_stats` compares a graph with the paper's
figures (:func:`paper_stats`). numpy/scipy only.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from .table import GeneGraph, NeighbourTable, _row_topk


def build_graph(
    string: sparse.spmatrix | None,
    coexp: sparse.spmatrix,
    *,
    top_k: int = 64,
    meta: dict | None = None,
) -> GeneGraph:
    """``RowTop_k(1[A_string > 0] ∨ 1[A_coexp > 0])`` → :class:`GeneGraph`.

    The paper's union is binary, so the truncation order is ours: within a row, edges present in
    both sources come first, then edges by strength = max(STRING score / 1000, coexpression |r|),
    then lower vocabulary index. The stored block weight is ``strength + 1[in both]``. The DMT
    table is the coexpression adjacency truncated to its ``top_k`` strongest entries per row (the
    pre-symmetrization 64-NN, up to ties).
    """
    coexp = sparse.csr_matrix(coexp, dtype=np.float32)
    V = coexp.shape[0]
    string = sparse.csr_matrix((V, V), dtype=np.float32) if string is None else sparse.csr_matrix(string)
    s = string.astype(np.float32)
    if s.nnz and s.data.max() > 1.0:
        s = s / 1000.0
    both = (s > 0).astype(np.float32).multiply(coexp > 0)
    strength = s.maximum(coexp) + both
    blocks = _row_topk(strength, top_k)
    sinfo, cinfo = NeighbourTable.from_csr(string), NeighbourTable.from_csr(coexp)
    info = {
        "sources": ["STRING v12" if string.nnz else "none", "coexpression"],
        "parameters": {"top_k": top_k, "ranking": "both sources, then max(STRING/1000, |r|), then index"},
        "string": {"nnz": sinfo.nnz, "genes": int((sinfo.degrees() > 0).sum())},
        "coexp": {"nnz": cinfo.nnz, "genes": int((cinfo.degrees() > 0).sum())},
        **(meta or {}),
    }
    table = NeighbourTable.from_csr(blocks, info)
    return GeneGraph(table, cinfo.topk(top_k), info)


_PAPER = {
    "string_genes": 17892,
    "string_nnz": 356772,
    "coexp_nnz": 2360480,
    "union_nnz": 1123337,
    "union_mean_out_degree_all": 58.31,
}


def paper_stats() -> dict:
    """The paper's graph figures (Supplementary "Biological graph and target blocks")."""
    return dict(_PAPER)


def format_stats(graph: GeneGraph) -> str:
    """Text table comparing ``graph`` with :func:`paper_stats` (mean out-degree over all V genes)."""
    st = graph.blocks.stats()
    ours = {
        "string_genes": graph.meta.get("string", {}).get("genes", float("nan")),
        "string_nnz": graph.meta.get("string", {}).get("nnz", float("nan")),
        "coexp_nnz": graph.meta.get("coexp", {}).get("nnz", float("nan")),
        "union_nnz": st["nnz"],
        "union_mean_out_degree_all": st["mean_out_degree_all"],
    }
    lines = [f"{'quantity':<28}{'ours':>14}{'paper':>14}"]
    for key, ref in _PAPER.items():
        lines.append(
            f"{key:<28}{ours[key]:>14,.2f}{ref:>14,.2f}"
            if "degree" in key
            else f"{key:<28}{ours[key]:>14,}{ref:>14,}"
        )
    lines.append(f"{'union genes covered':<28}{st['genes_covered']:>14,}{'':>14}")
    lines.append(f"{'union mean deg (covered)':<28}{st['mean_out_degree_covered']:>14,.2f}{'':>14}")
    lines.append(f"content hash {st['content_hash'][:16]}")
    return "\n".join(lines)
