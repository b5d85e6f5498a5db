"""Canonical AnnData keys written and read by biomjepa, in one place."""

from __future__ import annotations

#: ``adata.var`` column holding the vocabulary index of each gene (-1 = unmapped).
TOKEN_KEY = "biomjepa_token"
#: ``adata.uns`` entry holding biomjepa metadata (``["vocab"]``, ``["params"]``, ...).
UNS_KEY = "biomjepa"
#: default ``adata.obsm`` key of the cell embedding.
OBSM_KEY = "X_biomjepa"
