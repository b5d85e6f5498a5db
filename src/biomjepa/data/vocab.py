"""The gene vocabulary (fixed reference state of the model) and its identifier tables.

The vocabulary is the 19,264-symbol scFoundation gene list bundled in ``biomjepa/_data``; index
``i`` of a symbol is its token id. Identifier tables map human Ensembl gene IDs, Entrez IDs and
unambiguous aliases onto vocabulary indices; the 1:1 orthologs map mouse symbols onto human ones.
All tables are read lazily, once, with :mod:`importlib.resources`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources

import numpy as np
import pandas as pd

_PKG = "biomjepa._data"
VOCAB_FILE = "vocab.txt"
IDS_FILE = "gene_ids.tsv.gz"
ORTHOLOGS_FILE = "orthologs_mouse_human_1to1.tsv.gz"


def _read_resource(name: str) -> bytes:
    data = resources.files(_PKG).joinpath(name).read_bytes()
    return gzip.decompress(data) if name.endswith(".gz") else data


class Vocab:
    """An ordered gene vocabulary: symbol ``symbols[i]`` is token ``i``.

    Parameters
    ----------
    symbols
        Gene symbols in token order; must be unique.
    """

    def __init__(self, symbols) -> None:
        symbols = np.asarray(list(symbols), dtype=object)
        index = pd.Index(symbols)
        if not index.is_unique:
            dup = index[index.duplicated()].unique()[:5].tolist()
            raise ValueError(f"Vocabulary symbols must be unique; duplicated: {dup}.")
        self._symbols = symbols
        self._index = index

    @classmethod
    @lru_cache(maxsize=1)
    def default(cls) -> Vocab:
        """The bundled 19,264-symbol scFoundation vocabulary (loaded once)."""
        text = _read_resource(VOCAB_FILE).decode()
        return cls(text.splitlines())

    @property
    def symbols(self) -> np.ndarray:
        """Object ndarray ``[V]`` of symbols in token order."""
        return self._symbols

    @property
    def size(self) -> int:
        """Number of tokens ``V``."""
        return len(self._symbols)

    @cached_property
    def hash(self) -> str:
        """First 16 hex digits of the sha256 of the newline-joined symbols."""
        return hashlib.sha256("\n".join(self._symbols).encode()).hexdigest()[:16]

    @cached_property
    def _upper(self) -> IdMap:
        upper = pd.Series(self._symbols).str.upper()
        keep = ~upper.duplicated(keep=False).to_numpy()  # upper-case clashes are not resolvable
        return IdMap(pd.Index(upper[keep].to_numpy(dtype=object)), np.flatnonzero(keep).astype(np.int64))

    def index_of(self, names) -> np.ndarray:
        """Vocabulary index of each name, int64 ``[n]``; −1 when absent (exact match)."""
        names = pd.Index(np.asarray(names, dtype=object).ravel())
        return self._index.get_indexer(names).astype(np.int64)

    def index_of_upper(self, names) -> np.ndarray:
        """Index of the symbol whose upper-case form equals ``names`` (e.g. ``C1ORF112``); −1 else."""
        return self._upper.lookup(names)

    @cached_property
    def _upper_clashes(self) -> pd.Index:
        upper = pd.Series(self._symbols).str.upper()
        return pd.Index(upper[upper.duplicated(keep=False)].unique())

    def upper_ambiguous(self, names) -> np.ndarray:
        """bool ``[n]``: the upper-case form of the name is shared by several symbols (not resolvable)."""
        upper = pd.Series(np.asarray(names, dtype=object).ravel(), dtype=object).str.upper()
        return upper.isin(self._upper_clashes).to_numpy()

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        head = ", ".join(self._symbols[:3])
        return f"Vocab(size={self.size}, hash={self.hash!r}, symbols=[{head}, ...])"


@dataclass(frozen=True)
class IdMap:
    """Lookup of identifiers onto vocabulary indices (each identifier maps to one index)."""

    keys: pd.Index
    values: np.ndarray

    def lookup(self, names) -> np.ndarray:
        """Vocabulary index per name, int64 ``[n]``; −1 when absent."""
        pos = self.keys.get_indexer(pd.Index(np.asarray(names, dtype=object).ravel()))
        return np.where(pos >= 0, self.values[pos], -1).astype(np.int64)

    def __len__(self) -> int:
        return len(self.keys)


@lru_cache(maxsize=1)
def id_maps() -> dict[str, IdMap]:
    """Bundled human identifier maps ``{"ensembl", "entrez", "alias"}`` → vocabulary index.

    Ensembl IDs are unversioned (``ENSG00000141510``); Entrez IDs are digit strings; aliases
    exclude every alias that points to more than one vocabulary gene or equals a vocabulary symbol.
    """
    table = pd.read_csv(
        io.BytesIO(_read_resource(IDS_FILE)),
        sep="\t",
        dtype={"identifier": str, "kind": str, "index": np.int64},
        keep_default_na=False,
    )
    maps = {}
    for kind in ("ensembl", "entrez", "alias"):
        sub = table[table["kind"] == kind]
        maps[kind] = IdMap(pd.Index(sub["identifier"].to_numpy(dtype=object)), sub["index"].to_numpy())
    return maps


@lru_cache(maxsize=1)
def mouse_orthologs() -> pd.Series:
    """Bundled 1:1 orthologs: Series indexed by mouse symbol, values human symbol."""
    table = pd.read_csv(
        io.BytesIO(_read_resource(ORTHOLOGS_FILE)), sep="\t", dtype=str, keep_default_na=False
    )
    return pd.Series(
        table["human"].to_numpy(dtype=object), index=pd.Index(table["mouse"].to_numpy(dtype=object))
    )


# Below this share of the vocabulary the input is a gene panel (or a gene subset such as HVGs). The files of
# ../shared/data: whole transcriptomes 0.435 (a filtered 8,863-gene PBMC file) to 0.98; panels 0.013
# (Papalexi, 299 genes), 0.023 (Norman, 500) and 0.128 (Kang 2018, 2,511).
PANEL_COVERAGE = 0.25


def warn_panel(n_tokens: int, coverage: float, *, stacklevel: int = 2) -> None:
    """The UserWarning for data that measure ``n_tokens`` vocabulary genes (``coverage`` of the vocabulary, below
    :data:`PANEL_COVERAGE`): what a gene panel does to the library size and the values the model sees."""
    import warnings

    warnings.warn(
        f"The input measures only {n_tokens:,} of the {Vocab.default().size:,} vocabulary genes "
        f"(vocab_coverage={coverage:.3f} < {PANEL_COVERAGE}): a gene panel or a subset of genes "
        "(e.g. highly variable genes), while the model was pretrained on whole transcriptomes. Each cell's "
        "library size is then the total of the panel's counts only, so the library-size token and every "
        "value log1p(1e4 · count / library) differ from what whole-transcriptome counts of the same cell "
        "give: embeddings of panel data are not comparable with whole-transcriptome ones and may be poor. "
        "If these genes were selected from a larger matrix, map and embed the full counts instead (all "
        "genes, e.g. from `adata.raw` or the unfiltered file).",
        UserWarning,
        stacklevel=stacklevel + 1,
    )
