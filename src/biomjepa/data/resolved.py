"""The one way in and the one way out of a ``bj.tl`` tool (issue 67): an AnnData resolved once into the cells a tool
reads, and its results written back.

:func:`resolve` turns what the user passed into one :class:`Resolved` value, checking the input once, in this order,
before any work:

1. ``adata`` is an AnnData or a MuData (a view of a backed AnnData refused), and ``copy=True`` is not asked of a
   backed one;
2. ``key_added`` (:func:`~biomjepa._keys.check_key_added`) and its owner: a key holding another tool's results is
   refused (:func:`~biomjepa.data.owners.claim`);
3. the copy (``copy=True``), and the AnnData written into: ``adata`` or its modality ``mod`` (a MuData's errors);
4. what the readers read (:func:`~biomjepa.data.anndata_source.counts_view`: the layer, ``.raw``, log-normalized
   values and their library sizes, read counts);
5. ``bj.pp.map_vocab``'s column: which one is read (:mod:`biomjepa.data.mapping`), a MuData modality without it
   named, its values checked (:func:`~biomjepa.data.anndata_source.token_column`), the warning when the genes
   changed after the mapping (:func:`~biomjepa.data.mapping.warn_if_stale`).

The tool then checks what is its own (a checkpoint, labels, programmes), makes a view an AnnData of its own where it
writes into one (:meth:`Resolved.own`), reads ``source``, and writes its results and its record with :func:`store`:
the entries its owner writes (:mod:`biomjepa.data.owners`), :attr:`Resolved.record` being what it records of its input.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .._checks import check_adata, user_stacklevel
from .._keys import TOKEN_KEY, UNS_KEY, check_key_added
from .anndata_source import counts_view, get_modality, token_column
from .mapping import check_mapping, mapped_key, warn_if_stale
from .owners import claim, entries, owned_by


@dataclass(frozen=True, eq=False)
class Resolved:
    """The input of one call of a ``bj.tl`` tool, resolved and checked by :func:`resolve`."""

    adata: object  #: what the call returns (the copy with ``copy=True``); a MuData's ``obsm`` takes an embedding too
    target: object  #: the AnnData written into: ``adata``, or its modality ``mod``
    source: object  #: what the readers read: ``target``, its ``.raw``, either seen as log-normalized or read counts
    tool: str  #: the tool (``"embed"``, ``"max_token"``, ...), the owner of what it writes
    key: str  #: ``key_added``, checked and claimed
    mod: str | None = None
    layer: str | None = None
    use_raw: bool = False
    input: str = "counts"
    library_size_key: str | None = None
    token_key: str = TOKEN_KEY  #: the ``var`` column of vocabulary indices read
    token: np.ndarray | None = None  #: its values, checked (``None``: no column, ``bj.tl.adapt`` maps the genes)

    @property
    def matrix(self) -> str:
        """The matrix read, as a record names it: ``"X"``, a layer's name or ``"raw.X"``."""
        return "raw.X" if self.use_raw else self.layer or "X"

    @property
    def record(self) -> dict:
        """What a tool records of the values it read: ``input`` (``"counts"``/``"reads"``/``"lognorm"``) and, for
        ``"lognorm"``, ``library_size_key`` (or ``"estimated"``) and the recovered ``target_sum`` (after the reading)."""
        if self.input != "lognorm":
            return {"input": self.input}
        return {"input": self.input, "library_size_key": self.library_size_key or "estimated",
                "target_sum": self.source.target_sum}

    def own(self) -> None:
        """Make an in-memory view an AnnData of its own now, before the work, with one warning saying so.

        anndata would do the same at the first write, after minutes of work, with its own
        ``ImplicitModificationWarning`` (scanpy's tools behave so). Called after the tool's own checks, so that a
        refused call leaves a view a view. The parent AnnData is unchanged; the values, and what ``target`` and
        ``source`` read, are the same.
        """
        from anndata import AnnData

        adata = self.adata
        if not (isinstance(adata, AnnData) and adata.is_view and not adata.isbacked):
            return
        warnings.warn(
            f"`adata` is a view (a subset of another AnnData): bj.tl.{self.tool} writes its results into it, so it is "
            "made an AnnData of its own now (the parent AnnData is unchanged), as scanpy's tools do. Pass "
            "`adata[mask].copy()` to keep this warning away.",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
        adata._init_as_actual(adata.copy())  # what anndata (and scanpy's view_to_actual) do on a write into a view


def resolve(adata, tool: str, key_added, default: str, *, mod: str | None = None, copy: bool = False,
            layer: str | None = None, use_raw: bool = False, input: str = "counts",
            library_size_key: str | None = None, counts: bool = True, mapped: bool = True) -> Resolved:
    """``adata`` and the arguments that say what of it ``tool`` reads, checked in the order of the module docstring.

    ``counts=False``: the tool reads no counts (``bj.tl.perturbation_arithmetic``), so no ``source``.
    ``mapped=False``: ``bj.pp.map_vocab``'s column may be absent (``bj.tl.adapt`` then maps the genes; ``token`` is
    ``None``).
    """
    check_adata(adata)  # 1
    if copy and getattr(adata, "isbacked", False):
        raise ValueError(
            "copy=True is not supported for a backed AnnData (it would copy the whole file into memory). "
            "Either load it first (`adata = adata.to_memory()`) or keep copy=False: results are written "
            "into the backed object's obs/obsm/uns in memory."
        )
    key = check_key_added(key_added, default)  # 2
    target = get_modality(adata, mod)
    claim(target, tool, key)
    if copy:  # 3
        adata = adata.copy()
        target = get_modality(adata, mod)
    if not counts:
        return Resolved(adata, target, None, tool, key, mod)
    source = counts_view(target, layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)  # 4
    holder = source if use_raw else target  # 5: whose var holds the column (.raw.var, or the var of X's genes)
    token_key = mapped_key(holder)
    if token_key not in holder.var and not mapped:  # bj.tl.adapt maps the genes itself
        check_mapping(source)
        return Resolved(adata, target, source, tool, key, mod, layer, use_raw, input, library_size_key, token_key)
    if token_key not in holder.var and hasattr(adata, "mod") and not use_raw:
        raise KeyError(_modality_without(adata, mod or "rna", token_key))
    token = token_column(holder, token_key)
    if mapped:  # bj.tl.adapt has never said it (issue 67 kept its warnings as they were)
        warn_if_stale(target, token, token_key)
    check_mapping(source)
    return Resolved(adata, target, source, tool, key, mod, layer, use_raw, input, library_size_key, token_key, token)


def _modality_without(mdata, name: str, key: str) -> str:
    """The error of a MuData modality without ``bj.pp.map_vocab``'s column, naming the modalities that have it."""
    have = [k for k, m in mdata.mod.items() if key in m.var]
    hint = f" Modalities that have it: {have}; pass `mod=` one of them." if have else ""
    return f"MuData modality {name!r} has no .var[{key!r}]. Run `bj.pp.map_vocab(mdata, mod={name!r})` first.{hint}"


def store(r: Resolved, record: dict, *, obs: Mapping | None = None, obsm: Mapping | None = None) -> None:
    """Write ``r.tool``'s results under ``r.key`` into ``r.target``: the ``obs`` columns and ``obsm`` entries its owner
    writes (:func:`~biomjepa.data.owners.entries`), given by suffix (``{"_gene": ...}``; an embedding's ``{"": Z}``),
    then ``record`` as the whole ``uns`` entry.

    An entry of the owner's that this call leaves out goes when an earlier call of the same owner wrote it (one
    programme's ``_excess`` column after several). An embedding also goes into a MuData's ``obsm``
    (:func:`_joint_obsm`), and ``uns["biomjepa"]`` keeps ``bj.pp.map_vocab``'s
    report, ``["vocab"]``.
    """
    target, obs, obsm = r.target, obs or {}, obsm or {}
    uns_key, obsm_keys, obs_keys = entries(r.tool, r.key)
    ours = owned_by(r.tool, uns_key, target.uns.get(uns_key))
    for field, names, given in (("obs", obs_keys, obs), ("obsm", obsm_keys, obsm)):
        for name in names:  # the field read anew each time: a write into a view makes it an AnnData of its own
            if name[len(r.key):] in given:
                getattr(target, field)[name] = given[name[len(r.key):]]
            elif ours and name in getattr(target, field):
                del getattr(target, field)[name]
    if "" in obsm:  # an embedding
        _joint_obsm(r.adata, r.mod, r.key, obsm[""])
    old = target.uns.get(uns_key)
    kept = {"vocab": old["vocab"]} if uns_key == UNS_KEY and isinstance(old, dict) and "vocab" in old else {}
    target.uns[uns_key] = {**kept, **record}


def _joint_obsm(data, mod: str | None, key: str, values: np.ndarray) -> None:
    """Copy a modality's ``[n_mod, d]`` per-cell ``values`` into ``data.obsm[key]`` when ``data`` is a MuData.

    muon keeps embeddings that describe the cells on the MuData itself (``mdata.obsm["X_mofa"]``,
    ``mdata.obsm["X_umap"]``); cells missing from the modality get NaN, as in ``muon.tl.mofa``.
    A no-op for AnnData input.
    """
    if not hasattr(data, "mod"):
        return
    where = np.asarray(data.obsmap[mod or "rna"], dtype=np.int64)  # 1-based row in the modality, 0 = absent
    out = np.full((data.n_obs, values.shape[1]), np.nan, dtype=values.dtype)
    out[where > 0] = values[where[where > 0] - 1]
    data.obsm[key] = out
