"""Canonical AnnData keys written and read by biomjepa, in one place."""

from __future__ import annotations

#: ``adata.var`` column holding the vocabulary index of each gene (-1 = unmapped).
TOKEN_KEY = "biomjepa_token"
#: ``adata.uns`` entry holding biomjepa metadata (``["vocab"]``, ``["params"]``, ...).
UNS_KEY = "biomjepa"
#: default ``adata.obsm`` key of the cell embedding.
OBSM_KEY = "X_biomjepa"


def check_key_added(key_added, default: str, *, uns: bool = True) -> str:
    """``key_added`` of a ``pp``/``tl`` tool, checked before any work: a non-empty string (``None``: ``default``).

    ``uns``: the key names an ``uns`` entry the tool writes whole, so :data:`UNS_KEY` is refused (it holds
    ``bj.pp.map_vocab``'s report and ``bj.tl.embed``'s parameters). A ``ValueError`` (``TypeError`` for a key that
    is not a string) naming ``key_added`` and the fix.
    """
    if key_added is None:
        return default
    if not isinstance(key_added, str) or not key_added.strip() or "/" in key_added:
        got = "an empty string" if isinstance(key_added, str) and not key_added.strip() else repr(key_added)
        error = ValueError if isinstance(key_added, str) else TypeError  # a wrong type is a TypeError, as in anndata
        raise error(
            f"key_added must be a non-empty string without '/' (anndata is deprecating '/' in keys it writes to "
            f".h5ad), got {got}. Pass e.g. key_added={default + '_2'!r}, or leave it out for the default {default!r}."
        )
    if uns and key_added == UNS_KEY:
        raise ValueError(
            f"key_added={UNS_KEY!r} would replace uns[{UNS_KEY!r}], which holds bj.pp.map_vocab's report and "
            f"bj.tl.embed's parameters. Pass another key, e.g. key_added={default + '_2'!r}."
        )
    return key_added


def embedding_keys(key_added) -> tuple[str, str]:
    """``(obsm key, uns key)`` of an embedding (``bj.tl.embed``, ``bj.tl.adapt``), the one rule both follow.

    The default (``None`` or :data:`OBSM_KEY`) writes ``obsm["X_biomjepa"]`` and ``uns["biomjepa"]``; any other
    key writes ``obsm[key_added]`` and ``uns[key_added]``, so an embedding under another key never replaces the
    default one nor its record. ``key_added`` is checked by :func:`check_key_added`.
    """
    key = check_key_added(key_added, OBSM_KEY)
    return key, uns_key_of(key)


def uns_key_of(obsm_key: str) -> str:
    """The ``uns`` entry that records the embedding in ``obsm[obsm_key]`` (the rule of :func:`embedding_keys`)."""
    return UNS_KEY if obsm_key == OBSM_KEY else obsm_key
