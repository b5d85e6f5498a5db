"""One AnnData's counts → one vocabulary-space corpus shard (``.npz``), read chunk by chunk.

:func:`~biomjepa.data.shards.prepare_corpus` converts ``.h5ad`` *files*; a tool that trains on the cells
in front of it (``bj.tl.adapt``) holds an AnnData instead, whose counts may sit in a layer, in ``.raw``,
behind a backed file or in log-normalized form. :func:`write_shard` streams such a source through
:func:`~biomjepa.data.stream.iter_vocab_counts` (the one reader: counts checked and mapped exactly as
``bj.tl.embed`` maps them) into the shard format ``prepare_corpus`` takes as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from scipy import sparse

from .._files import atomic_path
from .stream import iter_vocab_counts


def write_shard(source, path: str | os.PathLike, *, layer: str | None = None,
                token: np.ndarray | None = None) -> np.ndarray:
    """Write ``source``'s cells as a corpus shard at ``path``; returns the source rows written (``[n]`` int64).

    ``source``: an AnnData (in memory or backed), :class:`~biomjepa.data.anndata_source.RawCounts` or
    :class:`~biomjepa.data.lognorm.LogNormalized`; ``token``: the genes' vocabulary indices (−1: unmapped;
    default ``var["biomjepa_token"]``). Cells without a mapped gene are left out (``rows`` records the
    source row of every cell written). The file appears complete or not at all.
    """
    parts, totals, rows = [], [], []
    for sl, counts, tot in iter_vocab_counts(source, layer=layer, token=token):
        keep = np.diff(counts.indptr) > 0
        parts.append(counts[keep].astype(np.float32))
        totals.append(tot[keep])
        rows.append(np.arange(sl.start, sl.stop)[keep])
    X = sparse.vstack(parts, format="csr")
    with atomic_path(Path(path), suffix=".npz") as tmp:
        np.savez(tmp, data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
                 totals=np.concatenate(totals), rows=np.concatenate(rows))
    return np.concatenate(rows).astype(np.int64)
