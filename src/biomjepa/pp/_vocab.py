"""``bj.pp.map_vocab``: map the genes of an AnnData onto the model vocabulary."""

from __future__ import annotations

import logging
import warnings
from os import PathLike
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy import sparse

from .._keys import TOKEN_KEY, UNS_KEY, check_key_added
from ..data.anndata_source import RawCounts, counts_view, get_modality
from ..data.idtable import Resolution, map_var, mouse_like_fraction, r_names, suffixed_names
from ..data.vocab import PANEL_COVERAGE, Vocab, warn_panel

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

LOW_COUNT_FRACTION = 0.5
DUPLICATE_SHARE = 0.2  # above this share of mapped genes sharing a token, map_vocab warns (a full Ensembl
# annotation with its alternate-haplotype genes puts 5.9 % of the mapped ids on shared tokens: not a mistake)
ROW_CHUNK = 8192


def map_vocab(
    adata: AnnData,
    *,
    gene_key: str | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    species: str = "human",
    orthologs: pd.DataFrame | str | PathLike | None = None,
    id_type: str = "auto",
    mod: str | None = None,
    key_added: str | None = None,
    copy: bool = False,
) -> AnnData | None:
    """Map each gene (var) onto the 19,264-gene model vocabulary.

    Identifiers are read from ``var_names`` or ``var[gene_key]`` and resolved each by its own kind:
    Ensembl gene IDs (``ENSG…``, version suffix ignored), symbols (official symbol, then its
    upper-case form, then unambiguous aliases, then, for lower- or mixed-case names such as ``tp53``,
    the one symbol with the same upper-case form; ambiguous aliases and case forms are never used), or, with
    ``id_type="entrez"``, Entrez IDs (digits). All-digit names are otherwise ambiguous (Entrez ids,
    or integer labels such as a subset of ``'1'…'n'``) and stay unmapped, with a warning.
    For ``species="mouse"`` symbols first go through bundled 1:1 human–mouse orthologs; other
    species need ``orthologs=``. Symbols with a ``-N`` / ``.N`` suffix (``TP53-1`` from
    ``var_names_make_unique``, ``ACTB.1`` from R) are not stripped: they stay unmapped and are
    reported with a warning (map the original, non-unique names via ``gene_key=`` instead).
    Several vars may map to one token: the tokenizer sums their counts.
    ``X`` is never modified; a sparse matrix is never densified; backed AnnData is read in row chunks.
    A UserWarning says so when the genes cover less than a quarter of the vocabulary
    (:data:`PANEL_COVERAGE`: a gene panel, or HVGs): each cell's library size, hence the library-size
    token and every value the model sees, then comes from the panel's counts only.
    Values are not validated here (only genes are mapped): :func:`biomjepa.tl.embed` and the other
    tools refuse log-normalized, negative or non-finite input (``count_fraction`` is then NaN or
    meaningless).

    Parameters
    ----------
    adata
        AnnData (in memory or ``backed="r"``) or MuData (modality ``mod``, default ``"rna"``),
        with raw counts in ``X`` or ``layers[layer]``.
    gene_key
        ``var`` column holding gene identifiers; default ``var_names``.
    layer
        Layer whose counts give ``count_fraction``; default ``X``.
    use_raw
        Map the genes of ``adata.raw`` (``raw.var_names`` or ``raw.var[gene_key]``) and write the
        column into ``adata.raw.var``, for tools called with ``use_raw=True`` (counts kept in
        ``.raw``, scanpy's convention); ``count_fraction`` then comes from ``raw.X``. Not together
        with ``layer``.
    species
        ``"human"`` (default), ``"mouse"``, or another name together with ``orthologs``.
    orthologs
        DataFrame or CSV/TSV path with two columns: the species' gene symbol, the human symbol.
    id_type
        ``"auto"`` (default): all-digit names are left unmapped; ``"entrez"``: they are Entrez
        gene ids. Other names are resolved by their own kind either way.
    mod
        MuData modality to use (default ``"rna"``); only for MuData input.
    key_added
        ``var`` column to write; default ``"biomjepa_token"``. The tools read ``"biomjepa_token"`` or, without it,
        the column of the latest ``map_vocab`` (named in its report), so ``key_added="tok"`` alone is read; with both
        columns the default one is read, with a warning naming both (:mod:`biomjepa.data.mapping`).
    copy
        Return a modified copy instead of writing into ``adata``.

    Returns
    -------
    ``None``, or a copy of ``adata`` when ``copy=True``. Writes

    ``.var["biomjepa_token"]`` (or ``key_added``; in ``.raw.var`` for ``use_raw=True``)
        int64 vocabulary index per var, −1 = unmapped.
    ``.uns["biomjepa"]["vocab"]``
        dict: ``n_vars``; ``n_matched`` (vars mapped); ``n_tokens`` (distinct tokens hit);
        ``vocab_coverage`` (``n_tokens / 19264``); ``count_fraction`` (share of the total counts of
        ``X``/``layer`` on mapped vars; NaN when there are no counts or non-finite values); ``id_type`` (``"symbol"``,
        ``"ensembl"``, ``"entrez"``, ``"numeric"`` (all-digit, unmapped) or ``"mixed"``);
        ``n_numeric_unmapped`` (all-digit names left unmapped); ``species``; ``n_duplicate_tokens`` (tokens hit
        by several vars), ``n_duplicate_vars`` (vars on such tokens; a warning when above 20 % of the mapped
        vars) and ``duplicate_examples``; ``unmapped_examples`` (≤ 10 names);
        ``vocab_hash``; ``methods`` (vars mapped per rule: official, alias, case (case-insensitive),
        ensembl, entrez, ortholog); ``n_case_ambiguous`` (names whose case-insensitive form fits several
        symbols, left unmapped); ``n_suffixed_unmapped`` and ``suffixed_examples`` (``TP53-1``-style names
        left unmapped); ``params`` (gene_key, layer (``"raw.X"`` for ``use_raw=True``), species, id_type, key_added).

    Raises
    ------
    ValueError
        Empty data, integer positions as identifiers, no gene mapped (the message names the likely
        fix), or mouse-like symbols mapped as human. ``adata`` is left unchanged on any error.
    """
    from .._checks import check_adata

    check_adata(adata)
    if copy and getattr(adata, "isbacked", False):
        raise ValueError(
            "copy=True is not supported for backed AnnData; use copy=False (only .var/.uns change)."
        )
    key = check_key_added(key_added, TOKEN_KEY, uns=False)  # a .var column
    adata = adata.copy() if copy else adata
    target = get_modality(adata, mod)
    source = counts_view(target, layer=layer, use_raw=use_raw)  # target, or its .raw
    names, res = map_var(
        source.var_names, source.var, n_obs=target.n_obs, gene_key=gene_key, species=species,
        orthologs=orthologs, id_type=id_type, where=".raw.var" if isinstance(source, RawCounts) else ".var",
    )

    report = _report(source, names, res, layer=layer, species=species)
    report["params"] = {
        "gene_key": gene_key or "var_names",
        "layer": RawCounts.where if use_raw else layer or "X",
        "species": species,
        "id_type": id_type,
        "key_added": key,
    }
    _log_report(report, mouse_like=species == "human" and mouse_like_fraction(names) >= 0.3)

    source.var[key] = res.token
    target.uns.setdefault(UNS_KEY, {})["vocab"] = report
    return adata if copy else None


def _report(adata, names: pd.Series, res: Resolution, *, layer: str | None, species: str) -> dict:
    vocab = Vocab.default()
    token = res.token
    mapped = token >= 0
    hits = np.bincount(token[mapped], minlength=vocab.size)
    dup_tokens = np.flatnonzero(hits > 1)
    dup_examples = [f"{vocab.symbols[t]}: {', '.join(names[token == t].tolist())}" for t in dup_tokens[:10]]
    unmapped = pd.unique(names[~mapped & (names != "").to_numpy()].to_numpy())[:10].tolist()
    n_tokens = int((hits > 0).sum())
    suffixed = suffixed_names(names, token, vocab) if species == "human" else np.zeros(len(names), bool)
    case = res.method == "case"
    dotted = r_names(names, token, vocab) if species == "human" else np.zeros(len(names), bool)
    symbol_unmapped = ~mapped & (res.kind == "symbol")
    return {
        "n_vars": len(token),
        "n_matched": int(mapped.sum()),
        "n_tokens": n_tokens,
        "vocab_coverage": n_tokens / vocab.size,
        "count_fraction": count_fraction(_matrix(adata, layer), mapped),
        "id_type": res.id_type,
        "n_numeric_unmapped": int((res.kind == "numeric").sum()),
        "species": species,
        "n_duplicate_tokens": len(dup_tokens),
        "n_duplicate_vars": int(hits[dup_tokens].sum()),
        "duplicate_examples": dup_examples,
        "unmapped_examples": [str(u) for u in unmapped],
        "vocab_hash": vocab.hash,
        "methods": res.method_counts(),
        "case_examples": [f"{n} → {vocab.symbols[t]}" for n, t in zip(names[case][:5], token[case][:5])],
        "n_r_names_unmapped": int(dotted.sum()),
        "r_names_examples": names[dotted][:10].tolist(),
        "r_names_count_fraction": count_fraction(_matrix(adata, layer), dotted) if dotted.any() else 0.0,
        "n_case_ambiguous": int((symbol_unmapped & vocab.upper_ambiguous(names)).sum()),
        "n_suffixed_unmapped": int(suffixed.sum()),
        "suffixed_examples": names[suffixed][:10].tolist(),
    }


def _log_report(report: dict, *, mouse_like: bool = False) -> None:
    logger.info(
        "map_vocab: %d/%d genes mapped onto %d tokens (vocab coverage %.1f%%, count fraction %.3f, "
        "id type %s, species %s; methods %s)",
        report["n_matched"],
        report["n_vars"],
        report["n_tokens"],
        100 * report["vocab_coverage"],
        report["count_fraction"],
        report["id_type"],
        report["species"],
        report["methods"],
    )
    if report["n_duplicate_tokens"]:
        _log_duplicates(report)
    _warn_case_and_suffixes(report, mouse_like)
    if report["n_numeric_unmapped"]:
        warnings.warn(
            f"{report['n_numeric_unmapped']} gene names are all digits and were left unmapped: they could be Entrez "
            "ids or integer labels. Pass id_type=\"entrez\" if they are Entrez gene ids.",
            UserWarning,
            stacklevel=3,
        )
    _warn_panel(report)
    frac = report["count_fraction"]
    if frac < LOW_COUNT_FRACTION:  # False for NaN
        warnings.warn(
            f"Only {frac:.1%} of the counts fall on vocabulary genes (count_fraction={frac:.3f}); "
            "embeddings may be poor. Check gene identifiers (gene_key=, species=).",
            UserWarning,
            stacklevel=3,
        )


def _log_duplicates(report: dict) -> None:
    """A few genes sharing a token is normal (aliases, probes); a large share means the names are not genes."""
    n_dup, n_matched = report.get("n_duplicate_vars", 0), report["n_matched"]
    examples = "; ".join(report["duplicate_examples"][:3])
    if n_dup > DUPLICATE_SHARE * n_matched:
        warnings.warn(
            f"{n_dup} of the {n_matched} mapped genes share a vocabulary token with another gene "
            f"({report['n_duplicate_tokens']} tokens, e.g. {examples}); the tokenizer sums their counts. "
            "This is unusual: check that the genes do not appear twice (e.g. after concatenating along var) and that "
            "gene_key= names a column of gene symbols or ids, not a category.",
            UserWarning,
            stacklevel=4,
        )
    else:
        logger.info(
            "map_vocab: %d tokens are hit by several genes; their counts are summed by the tokenizer (e.g. %s)",
            report["n_duplicate_tokens"],
            examples,
        )


def _warn_panel(report: dict, stacklevel: int = 4) -> None:
    """A gene panel: say what it does to the library size and the values the model sees."""
    if report["vocab_coverage"] < PANEL_COVERAGE:
        warn_panel(report["n_tokens"], report["vocab_coverage"], stacklevel=stacklevel)


def _warn_case_and_suffixes(report: dict, mouse_like: bool) -> None:
    if report["n_r_names_unmapped"]:
        share = report["r_names_count_fraction"]
        warnings.warn(
            f"{report['n_r_names_unmapped']} gene names are R's make.names spelling of vocabulary symbols ('-' written "
            f"'.', e.g. {report['r_names_examples'][:5]}) and were left unmapped, with "
            f"{share:.1%} of the counts. To map them, give their symbols in a var column: "
            "`adata.var['symbol'] = adata.var_names.str.replace('.', '-', regex=False)`, then "
            "`bj.pp.map_vocab(adata, gene_key='symbol')`.",
            UserWarning,
            stacklevel=4,
        )
    n_case = report["methods"]["case"]
    if n_case:
        msg = (
            f"map_vocab: {n_case} symbols in lower or mixed case were matched case-insensitively "
            f"(e.g. {', '.join(report['case_examples'][:3])})"
        )
        if mouse_like:
            warnings.warn(
                msg + '; the names look like mouse genes: if the data are from mouse, pass species="mouse".',
                UserWarning,
                stacklevel=4,
            )
        else:
            logger.info(msg)
    if report["n_case_ambiguous"]:
        logger.info(
            "map_vocab: %d names match several symbols case-insensitively and were left unmapped",
            report["n_case_ambiguous"],
        )
    if report["n_suffixed_unmapped"]:
        warnings.warn(
            f"{report['n_suffixed_unmapped']} gene names carry a '-N' or '.N' suffix and were left unmapped "
            f"(e.g. {report['suffixed_examples'][:5]}). Such suffixes come from `var_names_make_unique()` "
            "(scanpy/anndata) or R's make.unique(); the suffixed vars are usually duplicated features of the "
            "same gene. To map them, pass gene_key= naming a var column with the original symbols "
            "(duplicates are then summed by the tokenizer), or rename them yourself.",
            UserWarning,
            stacklevel=4,
        )


def _matrix(adata, layer: str | None):
    if layer is None:
        return adata.X
    if layer not in adata.layers:
        raise KeyError(f"Layer {layer!r} not found; available layers: {list(adata.layers)}.")
    return adata.layers[layer]


def count_fraction(X, mapped: np.ndarray) -> float:
    """Share of the total of ``X`` that falls in the ``mapped`` columns (NaN when ``X`` sums to 0 or holds NaN/Inf)."""
    if X is None:
        return float("nan")
    col = column_sums(X)
    total = float(col.sum())
    return float(col[mapped].sum() / total) if np.isfinite(total) and total > 0 else float("nan")


def column_sums(X, chunk: int | None = None) -> np.ndarray:
    """float64 ``[n_vars]`` column sums of a dense, sparse (CSR/CSC/…) or backed matrix.

    In-memory sparse and dense matrices sum directly (scipy's sparse ``sum`` is a single
    matrix–vector pass, > 500M nonzeros/s, never densifying); anything else (backed h5py / sparse
    datasets) is read ``chunk`` (default :data:`ROW_CHUNK`) rows at a time.
    """
    if sparse.issparse(X):
        return np.asarray(X.sum(axis=0, dtype=np.float64)).ravel()
    if isinstance(X, np.ndarray):
        return X.sum(axis=0, dtype=np.float64)
    chunk = chunk or ROW_CHUNK
    out = np.zeros(X.shape[1], dtype=np.float64)
    for start in range(0, X.shape[0], chunk):
        block = X[start : start + chunk]
        if not (sparse.issparse(block) or isinstance(block, np.ndarray)):
            block = np.asarray(block)
        out += column_sums(block)
    return out
