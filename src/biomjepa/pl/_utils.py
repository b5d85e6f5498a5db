"""Shared plotting helpers."""

from __future__ import annotations

from collections.abc import Mapping


def stored_result(adata, key: str, field: str, run: str) -> dict:
    """``adata.uns[key]`` if it holds ``field``; else a KeyError saying which tool to ``run`` first, or which other
    ``uns`` key holds such a result (the tool was run with ``key_added=``)."""
    res = adata.uns.get(key, {})
    if field not in res:
        others = [k for k, v in adata.uns.items() if k != key and isinstance(v, Mapping) and field in v]
        if others:
            raise KeyError(f"adata.uns[{key!r}][{field!r}] not found, but uns[{others[0]!r}] holds such a result "
                           f"(the tool was run with key_added={others[0]!r}): pass key={others[0]!r}.")
        raise KeyError(f"adata.uns[{key!r}][{field!r}] not found. Run `{run}` first (or pass key= naming the "
                       "key_added it was run with).")
    return res
