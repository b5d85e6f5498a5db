"""Resolve gene identifiers (symbols, Ensembl, Entrez, other species) onto vocabulary indices.

Pure array code: no AnnData here. :func:`biomjepa.pp.map_vocab` is the AnnData-level wrapper.

Rules, applied per identifier by its own kind:

* Ensembl (``ENSG\\d+`` in any case, version suffix ``.12`` stripped) → bundled Ensembl table.
* All-digit names are ambiguous: Entrez ids, or integer labels left over from an export (a subset
  of ``'1'…'n'`` looks just like Entrez ids). They stay unmapped (kind ``"numeric"``) unless the
  caller says ``id_type="entrez"``; then → bundled Entrez table.
* Symbols → exact vocabulary symbol; else, for an upper-case name, the symbol with that upper-case
  form (``C1ORF112`` → ``C1orf112``); else an unambiguous alias / current symbol, unless that
  token is already held by an exact official symbol of the same data; else, for a lower- or
  mixed-case name (``tp53``, ``Actb``), the one symbol with the same upper-case form (method
  ``"case"``). Names whose upper-case form is shared by several symbols stay unmapped.
* R's ``make.names`` spelling (``-`` → ``.``: ``MT.CO1``, ``HLA.A``) of a name that is no symbol as
  written stays unmapped (mapping it would change what existing embeddings were computed from);
  :func:`r_names` finds them, so ``bj.pp.map_vocab`` says how many counts they hold and how to map them.
* Suffixed names (``TP53-1`` from ``var_names_make_unique``, ``ACTB.1`` from R's ``make.unique``)
  are never stripped: they stay unmapped and :func:`suffixed_names` finds them for the report.
* Non-human species: symbols go through a 1:1 ortholog table to human symbols, then the symbol rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from os import PathLike

import numpy as np
import pandas as pd

from .vocab import Vocab, id_maps, mouse_orthologs

METHODS = ("official", "alias", "case", "ensembl", "entrez", "ortholog")
ID_TYPES = ("auto", "entrez")
_ENSEMBL = r"^(?i:ENSG)\d+"  # any case: ensg00000141510 (lower-cased ids) is the same gene
# mouse/rat-style symbols: Capitalised (Gcg, Ins1, Rpl13a), mt- genes, Riken clones, Gm models
_MOUSE_LIKE = r"^(?:[A-Z][a-z][A-Za-z0-9-]*|mt-[A-Z][a-z0-9]+|\d+[A-Z]\d+Rik|Gm\d+)$"


@dataclass
class Resolution:
    """Vocabulary index per identifier and how it was found.

    Attributes
    ----------
    token
        ``[n]`` int64 vocabulary index, −1 = unmapped.
    method
        ``[n]`` object: one of :data:`METHODS`, or ``""`` when unmapped (``"case"``: matched only
        case-insensitively).
    kind
        ``[n]`` object: ``"ensembl"``, ``"entrez"``, ``"symbol"``, ``"missing"``, or ``"numeric"``
        (all-digit names left unmapped because ``id_type="entrez"`` was not given).
    """

    token: np.ndarray
    method: np.ndarray
    kind: np.ndarray

    @property
    def id_type(self) -> str:
        """The identifier kind of (≥ 95 % of) the non-missing names, else ``"mixed"``."""
        kinds = self.kind[self.kind != "missing"]
        if len(kinds) == 0:
            return "missing"
        values, counts = np.unique(kinds, return_counts=True)
        best = counts.argmax()
        return str(values[best]) if counts[best] >= 0.95 * len(kinds) else "mixed"

    def method_counts(self) -> dict[str, int]:
        return {m: int((self.method == m).sum()) for m in METHODS}


def clean_names(names) -> pd.Series:
    """Identifiers as stripped strings; missing values (NaN, None, ``""``) become ``""``."""
    s = pd.Series(np.asarray(names, dtype=object).ravel())
    missing = s.isna().to_numpy()
    s = s.astype(str).str.strip()
    s[missing | s.str.lower().isin(["nan", "none"]).to_numpy()] = ""
    return s


def classify(names: pd.Series) -> np.ndarray:
    """``"ensembl"`` / ``"entrez"`` / ``"symbol"`` / ``"missing"`` per cleaned identifier."""
    kind = np.full(len(names), "symbol", dtype=object)
    kind[names.str.match(_ENSEMBL).to_numpy()] = "ensembl"
    kind[names.str.fullmatch(r"\d+").to_numpy()] = "entrez"
    kind[(names == "").to_numpy()] = "missing"
    return kind


def looks_like_positions(names: pd.Series) -> bool:
    """True when every identifier is an integer and they look like row positions (0.. or 1..n).

    Entrez has no gene 0, so any ``"0"`` marks positions; so does exactly ``1..n`` in order.
    """
    if len(names) == 0 or not names.str.fullmatch(r"\d+").all():
        return False
    ints = names.astype(np.int64).to_numpy()
    return bool((ints == 0).any() or np.array_equal(ints, np.arange(1, len(ints) + 1)))


def mouse_like_fraction(names: pd.Series) -> float:
    """Fraction of symbol-like identifiers written mouse-style (``Gcg``, ``Ins1``, ``mt-Nd1``)."""
    symbols = names[classify(names) == "symbol"]
    return float(symbols.str.match(_MOUSE_LIKE).mean()) if len(symbols) else 0.0


def load_orthologs(orthologs: pd.DataFrame | str | PathLike) -> pd.Series:
    """A user ortholog table (DataFrame or CSV/TSV path): column 0 = species symbol, 1 = human.

    Species symbols listed with more than one human symbol are dropped (not 1:1).
    """
    if not isinstance(orthologs, pd.DataFrame):
        path = str(orthologs)
        orthologs = pd.read_csv(path, sep="\t" if path.endswith((".tsv", ".tsv.gz")) else ",", dtype=str)
    if orthologs.shape[1] < 2:
        raise ValueError("`orthologs` needs two columns: the species' gene symbol, then the human symbol.")
    table = orthologs.iloc[:, :2].dropna().astype(str).drop_duplicates()
    table = table[~table.iloc[:, 0].duplicated(keep=False)]
    return pd.Series(
        table.iloc[:, 1].to_numpy(dtype=object), index=pd.Index(table.iloc[:, 0].to_numpy(dtype=object))
    )


def _lookup_series(table: pd.Series, names: pd.Series) -> pd.Series:
    """``table[name]`` per name ('' when absent), exact first, then case-insensitive."""
    pos = table.index.get_indexer(pd.Index(names.to_numpy(dtype=object)))
    upper = table.index.str.upper()
    unique = ~upper.duplicated(keep=False)
    upper_pos = pd.Index(upper[unique]).get_indexer(pd.Index(names.str.upper().to_numpy(dtype=object)))
    fallback = np.flatnonzero(unique)[np.maximum(upper_pos, 0)]
    pos = np.where(pos >= 0, pos, np.where(upper_pos >= 0, fallback, -1))
    out = np.where(pos >= 0, table.to_numpy(dtype=object)[np.maximum(pos, 0)], "")
    return pd.Series(out, dtype=object)


def resolve_symbols(names: pd.Series, vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    """Human symbols → (token, method) by official symbol, upper-case form, alias, then any case."""
    token = vocab.index_of(names)
    method = np.where(token >= 0, "official", "").astype(object)
    upper = vocab.index_of_upper(names)
    take = (token < 0) & (upper >= 0) & (names == names.str.upper()).to_numpy()
    token[take], method[take] = upper[take], "official"
    alias = id_maps()["alias"].lookup(names)
    # an alias never lands on a token that an official symbol of the same data already holds:
    # such a var is most likely another gene that shares the alias (DEC1 vs BHLHE40)
    taken = np.isin(alias, token[token >= 0])
    take = (token < 0) & (alias >= 0) & ~taken
    token[take], method[take] = alias[take], "alias"
    folded = vocab.index_of_upper(names.str.upper())  # lower/mixed case (tp53, Actb): one symbol only
    take = (token < 0) & (folded >= 0)
    token[take], method[take] = folded[take], "case"
    return token.astype(np.int64), method


def r_names(names: pd.Series, token: np.ndarray, vocab: Vocab | None = None) -> np.ndarray:
    """bool ``[n]``: unmapped names in R's ``make.names`` spelling of a vocabulary symbol (``MT.CO1`` for
    ``MT-CO1``, ``HLA.A`` for ``HLA-A``: R writes ``-`` as ``.``)."""
    names = clean_names(names)
    vocab = vocab or Vocab.default()
    dotted = (np.asarray(token) < 0) & names.str.contains(".", regex=False).to_numpy() & (classify(names) == "symbol")
    out = np.zeros(len(names), dtype=bool)
    if dotted.any():
        out[np.flatnonzero(dotted)[vocab.index_of(names[dotted].str.replace(".", "-", regex=False)) >= 0]] = True
    return out


_SUFFIX = r"^(.+?)(?:-|\.)(\d+)$"


def suffixed_names(names: pd.Series, token: np.ndarray, vocab: Vocab | None = None) -> np.ndarray:
    """bool ``[n]``: unmapped names that are a vocabulary symbol plus ``-N``/``.N`` (``TP53-1``, ``ACTB.1``).

    Such names come from ``var_names_make_unique`` (``-1``) or R's ``make.unique`` (``.1``); they are
    reported, never stripped, since the suffixed var may be a different feature than the base gene.
    """
    names = clean_names(names)
    vocab = vocab or Vocab.default()
    base = names.str.extract(_SUFFIX, expand=False)[0].fillna("")
    cand = (np.asarray(token) < 0) & (base != "").to_numpy() & (classify(names) == "symbol")
    # R's make.names turns real symbols such as ERV3-1 into ERV3.1: not a uniqueness suffix
    cand &= vocab.index_of(names.str.replace(".", "-", regex=False)) < 0
    if not cand.any():
        return cand
    base_tok, base_method = resolve_symbols(base[cand].reset_index(drop=True), vocab)
    out = np.zeros(len(names), dtype=bool)  # aliases excluded: IGHD2-15 is a gene, not IGHD2 + suffix
    out[np.flatnonzero(cand)[(base_tok >= 0) & (base_method != "alias")]] = True
    return out


def resolve_identifiers(
    names,
    *,
    species: str = "human",
    orthologs: pd.DataFrame | str | PathLike | None = None,
    vocab: Vocab | None = None,
    id_type: str = "auto",
) -> Resolution:
    """Map identifiers onto vocabulary indices, each by its own kind (see module docstring).

    Parameters
    ----------
    names
        ``[n]`` identifiers (strings; missing values allowed).
    species
        ``"human"``, ``"mouse"`` (bundled 1:1 orthologs) or any name when ``orthologs`` is given.
    orthologs
        Table of ``(species symbol, human symbol)`` pairs for a species other than human/mouse.
    vocab
        Vocabulary; default :meth:`Vocab.default`.
    id_type
        ``"auto"`` (default): each name by its own kind, all-digit names left unmapped as
        ambiguous; ``"entrez"``: all-digit names are Entrez gene ids.

    Returns
    -------
    :class:`Resolution` with ``token``, ``method`` and ``kind`` per identifier.
    """
    if id_type not in ID_TYPES:
        raise ValueError(f"id_type must be one of {ID_TYPES}, got {id_type!r}.")
    vocab = vocab or Vocab.default()
    names = clean_names(names)
    kind = classify(names)
    if id_type == "auto":
        kind[kind == "entrez"] = "numeric"
    token = np.full(len(names), -1, dtype=np.int64)
    method = np.full(len(names), "", dtype=object)
    maps = id_maps()

    ens = kind == "ensembl"
    token[ens] = maps["ensembl"].lookup(names[ens].str.replace(r"\..*$", "", regex=True).str.upper())
    ent = kind == "entrez"
    token[ent] = maps["entrez"].lookup(names[ent])
    method[(ens | ent) & (token >= 0)] = kind[(ens | ent) & (token >= 0)]

    sym = kind == "symbol"
    table = _ortholog_table(species, orthologs)
    symbols = names[sym].reset_index(drop=True)
    if table is not None:
        symbols = _lookup_series(table, symbols)
    sym_token, sym_method = resolve_symbols(symbols, vocab)
    if table is not None:
        sym_method = np.where(sym_token >= 0, "ortholog", "").astype(object)
    token[sym], method[sym] = sym_token, sym_method
    return Resolution(token, method, kind)


def _ortholog_table(species: str, orthologs) -> pd.Series | None:
    if orthologs is not None:
        if species == "human":
            raise ValueError(
                '`orthologs=` maps another species onto human: also pass `species=` (e.g. "rat").'
            )
        return load_orthologs(orthologs)
    if species == "human":
        return None
    if species == "mouse":
        return mouse_orthologs()
    raise ValueError(  # said for callers without `orthologs=` too (tl.adapt, the atlas, a corpus entry)
        f"species={species!r} has no bundled orthologs (only 'human' and 'mouse' have them). To map {species} "
        f"genes, rename them to their human symbols first, or give a table of {species} → human symbols to "
        f"`bj.pp.map_vocab(adata, species={species!r}, orthologs=TABLE)` (a DataFrame or CSV path with columns "
        f"{species} symbol, human symbol), whose mapping the bj.tl tools then read."
    )


# --------------------------------------------------------------------------- the mapping of one var table
def var_gene_names(var_names, var: pd.DataFrame, gene_key: str | None = None, *, where: str = ".var") -> pd.Series:
    """The identifiers of a var table: cleaned ``var_names``, or ``var[gene_key]``.

    Refuses ``var_names`` that look like integer positions and a ``gene_key`` that is no column of
    ``var`` (``where`` names the table in that error: ``".var"`` or ``".raw.var"``).
    """
    if gene_key is None:
        names = clean_names(pd.Index(var_names).to_numpy())
        if looks_like_positions(names):
            str_cols = [c for c in var.columns if not pd.api.types.is_numeric_dtype(var[c])]
            raise ValueError(
                "var_names look like integer positions (0, 1, 2, …), not gene identifiers. Pass "
                f"`gene_key=` naming a var column of gene symbols or Ensembl IDs (string columns: {str_cols})."
            )
        return names
    if gene_key not in var.columns:
        raise KeyError(f"gene_key={gene_key!r} is not a column of {where} (columns: {list(var.columns)}).")
    return clean_names(var[gene_key].to_numpy())


def check_overlap(names: pd.Series, res: Resolution, var: pd.DataFrame, *, gene_key, species: str) -> None:
    """Refuse a mapping that hits no gene, or mouse-like names mapped as human; the error names the likely fix."""
    n_matched = int((res.token >= 0).sum())
    n_exact = int(((res.token >= 0) & (res.method != "case")).sum())
    mouse_like = species == "human" and mouse_like_fraction(names) >= 0.3
    if n_matched > 0 and not (mouse_like and n_exact < 0.1 * len(names)):
        return
    hints = []
    numeric = res.kind == "numeric"
    if numeric.any():
        hints.append(
            f"{int(numeric.sum())} names are all digits (e.g. {names[numeric][:3].tolist()}), which may be Entrez "
            "ids or integer labels: pass id_type=\"entrez\" if they are Entrez gene ids, or gene_key= naming a "
            "var column of gene symbols"
        )
    if mouse_like:
        hints.append(
            'the names look like mouse genes (e.g. "Gcg", "Ins1"): pass species="mouse" (if they are human '
            "symbols in the wrong case, upper-case them first: adata.var_names = adata.var_names.str.upper())"
        )
    cols = [c for c in var.columns if not pd.api.types.is_numeric_dtype(var[c])]
    if gene_key is None:
        hints.append(f"if var_names are not gene identifiers, pass gene_key= (string var columns: {cols})")
    elif gene_key in var.columns:
        kind = "numbers" if pd.api.types.is_numeric_dtype(var[gene_key]) else "these values"
        hints.insert(0, f"gene_key={gene_key!r} names the var column read as identifiers, and it holds {kind}: pass "
                        f"gene_key= naming a column of gene symbols or Ensembl IDs (string var columns: {cols}), or "
                        "leave it out to use var_names")
    hints.append("check that the identifiers are human symbols, Ensembl gene IDs (ENSG…) or Entrez IDs")
    examples = names[:5].tolist()
    raise ValueError(
        f"Only {n_matched} of {len(names)} genes map to the vocabulary (id type {res.id_type!r}, "
        f"species={species!r}; first names {examples}). Likely fix: " + "; ".join(hints) + "."
    )


def map_var(
    var_names,
    var: pd.DataFrame,
    *,
    n_obs: int,
    gene_key: str | None = None,
    species: str = "human",
    orthologs: pd.DataFrame | str | PathLike | None = None,
    id_type: str = "auto",
    where: str = ".var",
) -> tuple[pd.Series, Resolution]:
    """The genes of a var table (``n_obs`` cells) → vocabulary: the core of :func:`biomjepa.pp.map_vocab`.

    Reads the identifiers (:func:`var_gene_names`), resolves them (:func:`resolve_identifiers`) and
    refuses an empty table or a mapping that hits no gene (:func:`check_overlap`), with the same
    errors as ``bj.pp.map_vocab``. Corpus preparation (:func:`biomjepa.data.shards.prepare_corpus`)
    maps its files with it; ``map_vocab`` adds the AnnData side (report, ``.var``/``.uns`` columns).

    Returns
    -------
    ``(names, resolution)``: the cleaned identifiers ``[n_vars]`` and their :class:`Resolution`
    (``resolution.token``: int64 vocabulary index per var, −1 = unmapped).
    """
    if len(var_names) == 0 or n_obs == 0:
        raise ValueError(f"AnnData is empty ({n_obs} cells × {len(var_names)} genes): nothing to map.")
    names = var_gene_names(var_names, var, gene_key, where=where)
    res = resolve_identifiers(names, species=species, orthologs=orthologs, id_type=id_type)
    check_overlap(names, res, var, gene_key=gene_key, species=species)
    return names, res
