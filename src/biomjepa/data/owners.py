"""One owner per key (issue 57): the ``uns``/``obsm`` entries and ``obs`` columns each ``tl`` tool writes under its
``key_added``, which tool wrote the records already there, and the refusal, before any work, of a call that would
write into another tool's (:func:`claim`, by :func:`~biomjepa.data.resolved.resolve`; the entries are written by
:func:`~biomjepa.data.resolved.store`).

Every record a tool writes names it in ``params["tool"]`` (:data:`TOOL`). Records written before that field (v0.5 and
earlier) are known by their shape (:data:`_SHAPES`); a record of no known shape (the user's own, scanpy's) has no
owner and is replaced as before.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._keys import OBSM_KEY, UNS_KEY, uns_key_of

#: field of a record's ``params`` naming the tool that wrote it
TOOL = "tool"

#: owner → (``obs`` column suffixes, ``obsm`` key suffixes) it writes beside ``uns[key_added]``; ``"embed"`` writes
#: ``obsm[key_added]`` and ``uns[uns_key_of(key_added)]`` instead (:func:`biomjepa._keys.embedding_keys`)
_WRITES = {
    "embed": ((), ()),
    "max_token": (("_gene", "_share", "_top_expressed", "_is_top_expressed"), ()),
    "ablate_programme": (("_excess",), ()),
    "programme_dependencies": ((), ()),
    "finetune": (("_prediction", "_split"), ("_proba",)),
    "perturbation_arithmetic": ((), ()),
}
#: writers that share an owner: adapt's embedding is an embedding (embed replaces it, as adapt replaces embed's)
_SAME = {"adapt": "embed", "biomjepa embed": "embed"}

#: (writer, ``params`` fields, record fields) of the records written before :data:`TOOL` existed
_SHAPES = (
    ("adapt", (), ("adapt",)),
    ("embed", ("embedding_dim", "pooling"), ()),
    ("max_token", ("contribution", "ties"), ()),
    ("programme_dependencies", ("block_ids", "objective"), ("matrix", "pairs")),
    ("ablate_programme", ("programmes", "null"), ("cells", "groups")),
    ("finetune", ("label_key", "trainable"), ("classes",)),
    ("perturbation_arithmetic", ("perturbation_key", "use_rep"), ("table", "summary")),
)


def marker(tool: str) -> dict:
    """The ``params`` field of ``tool``'s records (``"max_token"``, ``"adapt"``, …): ``{"tool": "bj.tl.…"}``."""
    return {TOOL: f"bj.tl.{tool}"}


def writer_of(uns_key: str, record) -> str | None:
    """The tool that wrote ``uns[uns_key]`` (``"max_token"``, ``"adapt"``, ``"biomjepa embed"``, …), or ``None``."""
    if not isinstance(record, Mapping):
        return None
    params = record.get("params")
    params = params if isinstance(params, Mapping) else {}
    tool = params.get(TOOL)
    if isinstance(tool, str):
        name = tool.removeprefix("bj.tl.")
        if _owner(name) in _WRITES:
            return name
    if uns_key == UNS_KEY:  # bj.pp.map_vocab's report and the default embedding's record
        return ("adapt" if "adapt" in record else "embed") if "params" in record else None
    for name, fields, parts in _SHAPES:
        if params.keys() >= set(fields) and record.keys() >= set(parts) and (fields or parts):
            return name
    return None


def owned_by(tool: str, uns_key: str, record) -> bool:
    """Whether ``uns[uns_key]`` (``record``) was written by ``tool``'s owner (so the entries beside it are ours)."""
    writer = writer_of(uns_key, record)
    return writer is not None and _owner(writer) == _owner(tool)


def claim(adata, tool: str, key: str) -> None:
    """Refuse (``ValueError`` naming ``key_added`` and a free key) when ``tool`` would write ``key`` 's entries where
    another tool's results are, in ``adata`` (an AnnData, a MuData's modality). Reads only."""
    mine = entries(tool, key)
    for name, record in list(getattr(adata, "uns", {}).items()):
        writer = writer_of(name, record)
        if writer is None or _owner(writer) == _owner(tool):
            continue
        theirs = entries(writer, OBSM_KEY if _owner(writer) == "embed" and name == UNS_KEY else name)
        clash = [e for e in _present(adata, theirs) if e in _names(mine)]
        if clash:
            raise ValueError(
                f"key_added={key!r}: bj.tl.{tool} would write {', '.join(clash)}, which "
                f"{'holds' if len(clash) == 1 else 'hold'} the results of {_label(writer)} (recorded in "
                f"uns[{name!r}]); a tool replaces only its own results. Pass another key, e.g. key_added="
                f"{free_key(adata, tool, key)!r}, or remove the other results first (`del adata.uns[{name!r}]`)."
            )


def free_key(adata, tool: str, key: str) -> str:
    """``f"{key}_2"`` (or ``_3``, …): the first key whose entries of ``tool`` are all absent from ``adata``."""
    i = 2
    while _present(adata, entries(tool, f"{key}_{i}")):
        i += 1
    return f"{key}_{i}"


def _owner(tool: str) -> str:
    return _SAME.get(tool, tool)


def _label(tool: str) -> str:
    return tool if tool.startswith("biomjepa ") else f"bj.tl.{tool}"


def entries(tool: str, key: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``(uns key, obsm keys, obs columns)`` that ``tool`` writes for ``key_added=key``."""
    owner = _owner(tool)
    if owner == "embed":
        return uns_key_of(key), (key,), ()
    obs, obsm = _WRITES[owner]
    return key, tuple(key + s for s in obsm), tuple(key + s for s in obs)


def _names(written) -> list[str]:
    uns, obsm, obs = written
    return [f"uns[{uns!r}]", *(f"obsm[{k!r}]" for k in obsm), *(f"obs[{k!r}]" for k in obs)]


def _present(adata, written) -> list[str]:
    """The entries (as :func:`_names` writes them) that ``adata`` holds."""
    uns, obsm, obs = written
    have = [uns in getattr(adata, "uns", {}), *(k in getattr(adata, "obsm", {}) for k in obsm),
            *(k in getattr(adata, "obs", {}) for k in obs)]
    return [n for n, h in zip(_names(written), have) if h]
