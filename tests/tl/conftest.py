"""Fixtures shared by the ``tl`` tests."""

from __future__ import annotations

import pytest

from biomjepa.data.vocab import Vocab


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread per test module (2-core CI; the tools' results do not depend on it)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def mapped(counts_adata):
    """``counts_adata`` with ``var["biomjepa_token"]`` set directly from the vocabulary (no map_vocab report)."""
    counts_adata.var["biomjepa_token"] = Vocab.default().index_of(counts_adata.var_names)
    return counts_adata
