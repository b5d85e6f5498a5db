"""Shared plotting helpers."""

from __future__ import annotations


def stored_result(adata, key: str, field: str, run: str) -> dict:
    """``adata.uns[key]`` if it holds ``field``; else a KeyError saying which tool to ``run`` first."""
    res = adata.uns.get(key, {})
    if field not in res:
        raise KeyError(f"adata.uns[{key!r}][{field!r}] not found. Run `{run}` first.")
    return res
