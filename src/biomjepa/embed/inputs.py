"""The inputs of an atlas run: resolve paths and globs, check them, open them backed and mapped."""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, dataclass
from pathlib import Path

_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class AtlasInput:
    """One ``.h5ad`` input: its group ``name`` in the store, absolute ``path``, size and mtime."""

    name: str
    path: str
    size: int
    mtime_ns: int
    n_obs: int = -1

    def fingerprint(self) -> dict:
        return asdict(self)


def expand_inputs(patterns: list[str]) -> list[str]:
    """Paths and quoted globs → the list of files (a glob expands sorted; an unmatched glob is an error)."""
    paths: list[str] = []
    for pattern in patterns:
        if _GLOB_CHARS & set(pattern) and not Path(pattern).exists():
            hits = sorted(glob.glob(os.path.expanduser(pattern)))
            if not hits:
                raise FileNotFoundError(f"no file matches {pattern!r}")
            paths.extend(hits)
        else:
            paths.append(pattern)
    if not paths:
        raise ValueError("no input files given")
    return paths


def check_h5ad(path: str) -> Path:
    """An existing, readable HDF5 ``.h5ad`` file; otherwise an error naming the path and what is expected."""
    from ..data.files import check_h5ad_file

    p = check_h5ad_file(path)
    if p.suffix != ".h5ad":
        raise ValueError(f"{path!r} is an HDF5 file but not named .h5ad; give .h5ad files written by anndata")
    return p.resolve()


def resolve_inputs(patterns: list[str], *, writable: bool = False) -> list[AtlasInput]:
    """Checked inputs with unique store names (file stems; a repeated stem gets ``_2``, ``_3``...).

    The same file given twice is an error. With ``writable=True`` (``--write-obsm``) each file and its
    directory must be writable, since the file is replaced by an updated copy.
    """
    out: list[AtlasInput] = []
    seen_paths: set[Path] = set()
    names: set[str] = set()
    for raw in expand_inputs(patterns):
        p = check_h5ad(raw)
        if p in seen_paths:
            raise ValueError(f"{raw!r} is given twice")
        seen_paths.add(p)
        if writable and not os.access(p.parent, os.W_OK | os.X_OK):
            raise PermissionError(f"write_obsm=True: cannot write into the directory of {raw!r} (permission denied)")
        if writable and not os.access(p, os.W_OK):  # found only after the embedding otherwise
            raise PermissionError(f"write_obsm=True: {raw!r} is read-only, and write_obsm=True replaces it; make it "
                                  f"writable (`chmod u+w {raw}`) or leave out write_obsm=True.")
        name, k = p.stem, 1
        while name in names:
            k += 1
            name = f"{p.stem}_{k}"
        names.add(name)
        st = p.stat()
        out.append(AtlasInput(name, str(p), st.st_size, st.st_mtime_ns))
    return out


def check_read_args(*, layer=None, use_raw=False, input="counts", library_size_key=None) -> dict:
    """What to read from every input (``layer`` / ``use_raw``, ``input``, ``library_size_key``), checked
    before any work as :func:`biomjepa.tl.embed` checks them; returned as one dict."""
    from ..data.anndata_source import check_source_args

    kw = {"layer": layer, "use_raw": use_raw, "input": input, "library_size_key": library_size_key}
    check_source_args(**kw)
    return kw


def input_source(adata, inp: AtlasInput, read_kw: dict):
    """What the reader reads of an opened input (:func:`~biomjepa.data.anndata_source.counts_view`): ``X`` or a
    layer, ``adata.raw`` (``use_raw``), or either as log-normalized values; errors name the file."""
    from ..data.anndata_source import counts_view

    try:
        return counts_view(adata, **read_kw)
    except (ValueError, KeyError, TypeError) as err:
        raise type(err)(f"{inp.path}: {err.args[0] if err.args else err}") from None


def open_input(inp: AtlasInput, *, gene_key=None, species="human", id_type="auto", layer=None, use_raw=False):
    """The input opened ``backed="r"`` with ``var["biomjepa_token"]`` (``raw.var`` with ``use_raw``) set in
    memory (file untouched).

    Genes are mapped by :func:`biomjepa.pp.map_vocab` on a copy of ``var`` alone, so mapping
    never reads the count matrix (the report's ``count_fraction`` is not computed).
    """
    import anndata as ad
    import pandas as pd

    from .._keys import TOKEN_KEY
    from ..pp import map_vocab

    adata = ad.read_h5ad(inp.path, backed="r")
    if layer is not None and layer not in adata.layers:
        raise KeyError(f"{inp.path}: layer {layer!r} not found; available layers: {list(adata.layers)}")
    if use_raw and adata.raw is None:
        raise ValueError(f"{inp.path}: use_raw=True, but the file has no .raw (adata.raw is None); drop use_raw=True "
                         "(and name the layer of raw counts with `layer=` if there is one).")
    var = adata.raw.var if use_raw else adata.var
    proxy = ad.AnnData(obs=pd.DataFrame(index=["cell"]), var=var.copy())
    try:
        map_vocab(proxy, gene_key=gene_key, species=species, id_type=id_type)
    except (ValueError, KeyError) as err:
        raise ValueError(f"{inp.path}: {err.args[0] if err.args else err}") from None
    var[TOKEN_KEY] = proxy.var[TOKEN_KEY].to_numpy()
    return adata
