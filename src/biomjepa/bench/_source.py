"""The counts every ``bj.bench`` baseline and count-based metric starts from, read as ``bj.tl.embed`` reads them.

``layer=`` / ``use_raw=`` pick the matrix (``X``, a layer, ``adata.raw``), ``input=`` says what it
holds: ``"counts"`` (checked: finite, non-negative integers; anything else is refused with a pointer to
``input="lognorm"`` or ``use_raw=True``) or ``"lognorm"`` (``log1p(normalize_total)`` values, read as
the counts they came from through :class:`~biomjepa.data.lognorm.LogNormalized`, which refuses
scaled or otherwise transformed values). Normalizing those counts to 10⁴ per cell and ``log1p`` then
gives back ``log1p(1e4 / T · expm1(x))`` — the user's values, whatever the library sizes — so no
baseline ever normalizes and logs already log-normalized values a second time.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import sparse


def source_kwargs(layer=None, use_raw=False, input="counts", library_size_key=None) -> dict:
    """The four arguments that say where the counts are, as one dict (checked by :func:`check_source`)."""
    return {"layer": layer, "use_raw": use_raw, "input": input, "library_size_key": library_size_key}


def _view(adata, layer, use_raw, input, library_size_key):
    from ..data.anndata_source import counts_view
    from ..data.stream import count_matrix

    with warnings.catch_warnings():
        # the library-size estimate warning speaks of the model's library-size token; normalized values
        # do not depend on the library sizes, and scVI's counts are whole multiples of the checked unit
        warnings.simplefilter("ignore", UserWarning)
        view = counts_view(adata, layer=layer, use_raw=use_raw, input=input, library_size_key=library_size_key)
    count_matrix(view, layer)  # a missing layer: KeyError naming the layers
    return view


def check_source(adata, *, layer=None, use_raw=False, input="counts", library_size_key=None) -> None:
    """Check the arguments (not the values) naming the counts: a clear error before any work."""
    _view(adata, layer, use_raw, input, library_size_key)


def read_counts(adata, *, layer=None, use_raw=False, input="counts", library_size_key=None) -> sparse.csr_matrix:
    """``[n_obs, n_vars]`` CSR float32 counts of ``adata`` (``adata.raw``'s genes with ``use_raw``), checked.

    With ``input="lognorm"`` and no ``library_size_key`` the library sizes are estimated (see
    :mod:`biomjepa.data.lognorm`); normalized values do not depend on them, scVI's counts do.
    """
    from ..data.stream import iter_checked_counts

    view = _view(adata, layer, use_raw, input, library_size_key)
    blocks = [sparse.csr_matrix(b, dtype=np.float32) for _, b in iter_checked_counts(view, layer=layer, mapped=False)]
    if not blocks:
        return sparse.csr_matrix((0, view.n_vars), dtype=np.float32)
    return sparse.vstack(blocks, format="csr")
