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


@pytest.fixture
def own_cachedir(tmp_path_factory, monkeypatch):
    """This test's cache (adapt keeps gene graphs there): never the user's, and no graph from another test. The
    adapt test modules use it for every test (``pytest.mark.usefixtures("own_cachedir")``)."""
    import biomjepa as bj

    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> str:
    """A randomly initialised ``tiny`` checkpoint (seed 0) to adapt, one per test module."""
    import torch

    from biomjepa.model import BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig

    torch.manual_seed(0)
    return str(save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path_factory.mktemp("adapt") / "base"))
