"""STRING v12, the first source of the gene graph: links with combined score ≥ 700 on the vocabulary.

:func:`string_adjacency` reads the bundled symbol table (``string_v12_human_ge700.tsv.gz``, which
lacks the text-mining channel: logged once) or the official links/info(/aliases) files. numpy,
pandas and scipy only.
"""

from __future__ import annotations

import gzip
import io
import logging
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from .table import _symmetric_topk, _vocab

logger = logging.getLogger(__name__)

BUNDLED_STRING = "string_v12_human_ge700.tsv.gz"
_WARNED: set[str] = set()


def _read_bundled(path: str | Path | None) -> pd.DataFrame:
    if path is None:
        if BUNDLED_STRING not in _WARNED:
            _WARNED.add(BUNDLED_STRING)
            logger.warning(
                "Using the bundled STRING v12 table (%s): its combined score was recomputed WITHOUT the "
                "text-mining channel, so it holds a subset of the official ≥700 edges. For the paper's graph, "
                "build one from the official 9606.protein.links/info files with `biomjepa graph` and train with it "
                "(`blocks.graph: DIR`).",
                BUNDLED_STRING,
            )
        raw = resources.files("biomjepa._data").joinpath(BUNDLED_STRING).read_bytes()
        return pd.read_csv(io.BytesIO(gzip.decompress(raw)), sep="\t", keep_default_na=False)
    return pd.read_csv(path, sep="\t", keep_default_na=False)


def _string_protein_index(vocab, info, aliases) -> pd.Series:
    """STRING protein id → vocabulary index, by preferred name, then by unambiguous alias."""
    inf = pd.read_csv(info, sep="\t", dtype=str, keep_default_na=False)
    pid, name = inf.iloc[:, 0].to_numpy(), inf.iloc[:, 1].to_numpy()
    idx = pd.Series(vocab.index_of(name), index=pid)
    if aliases is not None:
        al = pd.read_csv(aliases, sep="\t", dtype=str, keep_default_na=False, usecols=[0, 1])
        al.columns = ["pid", "alias"]
        al["tok"] = vocab.index_of(al["alias"].to_numpy())
        al = al[(al["tok"] >= 0) & al["pid"].isin(idx.index[idx < 0])].drop_duplicates(["pid", "tok"])
        al = al[~al["tok"].isin(idx[idx >= 0].to_numpy())]  # symbol already claimed by a preferred name
        al = al[~al.duplicated("pid", keep=False) & ~al.duplicated("tok", keep=False)]
        idx.loc[al["pid"].to_numpy()] = al["tok"].to_numpy()
    return idx


def string_adjacency(
    vocab=None,
    *,
    path: str | Path | None = None,
    links: str | Path | None = None,
    info: str | Path | None = None,
    aliases: str | Path | None = None,
    min_score: int = 700,
    top_k: int = 64,
) -> sparse.csr_matrix:
    """STRING adjacency ``[V, V]`` (float32 combined scores, symmetric).

    Parameters
    ----------
    vocab
        A :class:`~biomjepa.data.vocab.Vocab`; default ``Vocab.default()``.
    path
        A symbol table (``gene_a, gene_b, combined_score`` TSV). Default (no ``path``/``links``):
        the bundled ``string_v12_human_ge700.tsv.gz`` — it lacks the text-mining channel (logged).
    links, info, aliases
        The official ``9606.protein.links.v12.0.txt.gz`` and ``9606.protein.info.v12.0.txt.gz``
        (+ optional ``9606.protein.aliases.v12.0.txt.gz``). Proteins map by preferred name, then
        by an alias that names one vocabulary gene, belongs to one protein and is no preferred name.
    min_score, top_k
        Keep links with score ≥ ``min_score``; no self-edges; the ``top_k`` highest-scoring
        neighbours per row (ties: lower index), then symmetrize by ``max``.
    """
    vocab = _vocab(vocab)
    if links is not None:
        if info is None:
            raise ValueError("Reading official STRING links needs `info=` (9606.protein.info.v12.0.txt.gz).")
        prot = _string_protein_index(vocab, info, aliases)
        df = pd.read_csv(links, sep=" ", dtype={"combined_score": np.int32})
        df = df[df["combined_score"] >= min_score]
        a = prot.reindex(df["protein1"].to_numpy()).fillna(-1).to_numpy(np.int64)
        b = prot.reindex(df["protein2"].to_numpy()).fillna(-1).to_numpy(np.int64)
    else:
        df = _read_bundled(path)
        df = df[df["combined_score"] >= min_score]
        a, b = vocab.index_of(df["gene_a"].to_numpy()), vocab.index_of(df["gene_b"].to_numpy())
    return _symmetric_topk(a, b, df["combined_score"].to_numpy(np.float32), vocab.size, top_k)
