"""One owner per key (issue 57, item 1): a tool refuses, before any work, a ``key_added`` whose ``uns``/``obsm``
entries or ``obs`` columns hold another tool's results, naming a free key; it replaces its own results whole.
"""

from __future__ import annotations

import copy

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.data.owners import writer_of
from biomjepa.data.vocab import Vocab


def no_model(monkeypatch) -> None:
    """Loading a model from now on fails the test: a refusal comes before any work."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the key's owner was checked")

    monkeypatch.setattr(_pretrained, "load_model", forbidden)


def _snapshot(a: ad.AnnData) -> tuple:
    return copy.deepcopy(dict(a.uns)), a.obs.copy(), {k: np.array(v) for k, v in a.obsm.items()}


def _assert_unchanged(a: ad.AnnData, snap: tuple) -> None:
    uns, obs, obsm = snap
    assert list(a.uns) == list(uns) and list(a.obsm) == list(obsm)
    pd.testing.assert_frame_equal(a.obs, obs)
    for k, v in obsm.items():
        np.testing.assert_array_equal(a.obsm[k], v)
    for k in uns:
        assert a.uns[k].keys() == uns[k].keys()
        assert a.uns[k].get("params") == uns[k].get("params")


def test_embed_into_max_tokens_key_is_refused_and_its_results_stay(mapped, tiny_checkpoint, checkpoints, monkeypatch):
    """The bad case of the issue: embed(key_added="max_token") rewrote max_token's params with its own."""
    bj.tl.max_token(mapped, checkpoint=tiny_checkpoint, groupby="group", device="cpu")
    snap = _snapshot(mapped)
    no_model(monkeypatch)
    with pytest.raises(ValueError, match=r"key_added='max_token': bj\.tl\.embed would write uns\['max_token'\], which "
                                         r"holds the results of bj\.tl\.max_token.*key_added='max_token_2'"):
        bj.tl.embed(mapped, checkpoint=checkpoints["good"], key_added="max_token", device="cpu")
    _assert_unchanged(mapped, snap)
    assert mapped.uns["max_token"]["params"]["groupby"] == "group" and "max_token" not in mapped.obsm


def test_max_token_into_an_embeddings_key_is_refused_and_the_embedding_stays(mapped, tiny_checkpoint, monkeypatch):
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint, key_added="max_token", device="cpu")
    snap = _snapshot(mapped)
    no_model(monkeypatch)
    with pytest.raises(ValueError, match=r"bj\.tl\.max_token would write uns\['max_token'\].*bj\.tl\.embed.*"
                                         r"key_added='max_token_2'.*del adata\.uns\['max_token'\]"):
        bj.tl.max_token(mapped, checkpoint=tiny_checkpoint, device="cpu")  # the default key
    _assert_unchanged(mapped, snap)
    assert mapped.uns["max_token"]["params"]["tool"] == "bj.tl.embed" and "max_token_gene" not in mapped.obs


def _cells(n: int = 200, g: int = 300) -> ad.AnnData:
    rng = np.random.default_rng(0)
    X = rng.poisson(rng.gamma(0.5, 2, size=g), size=(n, g)).astype(np.float32)
    X[:, 0] += 1
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:g])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.obs["group"] = np.repeat(["a", "b"], n // 2)
    return a


@pytest.mark.filterwarnings("ignore:The input measures only:UserWarning")
def test_ablate_into_adapts_key_is_refused_and_adapts_record_stays(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    a = _cells()
    bj.tl.adapt(a, tiny_checkpoint, steps=1, out_dir=tmp_path / "ck", key_added="ablation")
    snap = _snapshot(a)
    no_model(monkeypatch)
    with pytest.raises(ValueError, match=r"bj\.tl\.ablate_programme would write uns\['ablation'\].*bj\.tl\.adapt.*"
                                         r"key_added='ablation_2'"):
        bj.tl.ablate_programme(a, [str(s) for s in a.var_names[:5]], checkpoint=tiny_checkpoint, device="cpu")
    _assert_unchanged(a, snap)
    assert a.uns["ablation"]["adapt"]["steps_done"] == 1 and a.uns["ablation"]["params"]["tool"] == "bj.tl.adapt"


def test_a_record_written_before_the_tool_field_is_known_by_its_shape(mapped, tiny_checkpoint, tmp_path, monkeypatch):
    """An .h5ad of v0.5 (records without ``params["tool"]``) keeps its owners."""
    bj.tl.max_token(mapped, checkpoint=tiny_checkpoint, groupby="group", device="cpu")
    bj.tl.embed(mapped, checkpoint=tiny_checkpoint, key_added="X_e", device="cpu")
    for key in ("max_token", "X_e"):
        del mapped.uns[key]["params"]["tool"]
    mapped.uns["max_token_2"] = {"note": "the user's"}  # taken: the suggested key is the next free one
    mapped.write_h5ad(tmp_path / "old.h5ad")
    old = ad.read_h5ad(tmp_path / "old.h5ad")
    assert (writer_of("max_token", old.uns["max_token"]), writer_of("X_e", old.uns["X_e"])) == ("max_token", "embed")
    assert writer_of("max_token_2", old.uns["max_token_2"]) is None
    no_model(monkeypatch)
    with pytest.raises(ValueError, match=r"bj\.tl\.max_token.*key_added='max_token_3'"):
        bj.tl.embed(old, checkpoint=tiny_checkpoint, key_added="max_token")
    with pytest.raises(ValueError, match=r"bj\.tl\.finetune would write uns\['X_e'\].*bj\.tl\.embed.*key_added='X_e_2'"):
        bj.tl.finetune(old, label_key="group", checkpoint=tiny_checkpoint, key_added="X_e")


def test_an_obsm_key_of_another_tool_is_refused(mapped, tiny_checkpoint, monkeypatch):
    """Not only the ``uns`` record: the obsm key of finetune's probabilities."""
    mapped.uns["ft"] = {"classes": ["a"], "params": {"tool": "bj.tl.finetune"}}
    mapped.obsm["ft_proba"] = np.zeros((mapped.n_obs, 1), np.float32)
    no_model(monkeypatch)
    with pytest.raises(ValueError, match=r"bj\.tl\.embed would write obsm\['ft_proba'\], which holds the results of "
                                         r"bj\.tl\.finetune \(recorded in uns\['ft'\]\).*key_added='ft_proba_2'"):
        bj.tl.embed(mapped, checkpoint=tiny_checkpoint, key_added="ft_proba")


def test_a_record_of_no_known_tool_is_replaced_as_before(mapped, tiny_checkpoint):
    mapped.uns["max_token"] = {"winner_fraction": "a user's table", "params": {"groupby": "cell_type"}}
    bj.tl.max_token(mapped, checkpoint=tiny_checkpoint, device="cpu")
    assert "winner_fraction" not in mapped.uns["max_token"]
    assert mapped.uns["max_token"]["params"]["tool"] == "bj.tl.max_token"


def test_a_second_call_replaces_its_own_results_whole(mapped, tiny_checkpoint, checkpoints):
    fresh = mapped.copy()
    bj.tl.max_token(mapped, checkpoint=tiny_checkpoint, groupby="group", device="cpu")
    bj.tl.max_token(mapped, checkpoint=checkpoints["good"], device="cpu")
    bj.tl.max_token(fresh, checkpoint=checkpoints["good"], device="cpu")
    assert mapped.uns["max_token"].keys() == {"params"}  # no winner fractions of the grouped call
    assert mapped.uns["max_token"]["params"] == fresh.uns["max_token"]["params"]

    bj.tl.embed(mapped, checkpoint=tiny_checkpoint, key_added="X_e", layer=None, device="cpu")
    mapped.uns["X_e"]["adapt"] = {"steps": 3}  # as an adaptation leaves it
    bj.tl.embed(mapped, checkpoint=checkpoints["good"], key_added="X_e", batch_size=7, device="cpu")
    bj.tl.embed(fresh, checkpoint=checkpoints["good"], key_added="X_e", batch_size=7, device="cpu")
    assert mapped.uns["X_e"] == fresh.uns["X_e"] and fresh.uns["X_e"].keys() == {"params"}


def test_the_default_embedding_keeps_map_vocabs_report_and_nothing_else(counts_adata, tiny_checkpoint):
    bj.pp.map_vocab(counts_adata)
    report = copy.deepcopy(counts_adata.uns["biomjepa"]["vocab"])
    counts_adata.uns["biomjepa"]["adapt"] = {"steps": 3}
    counts_adata.uns["biomjepa"]["params"] = {"checkpoint": "an older one", "extra": 1}
    bj.tl.embed(counts_adata, checkpoint=tiny_checkpoint, device="cpu")
    assert counts_adata.uns["biomjepa"].keys() == {"vocab", "params"}
    assert counts_adata.uns["biomjepa"]["vocab"].keys() == report.keys() and "extra" not in counts_adata.uns[
        "biomjepa"]["params"]


@pytest.mark.parametrize("n_programmes", [1, 2])
def test_ablation_leaves_no_column_of_its_earlier_call(mapped, tiny_checkpoint, n_programmes):
    detected = np.asarray((mapped.X > 0).sum(axis=0)).ravel() > 0
    genes = [str(g) for g in mapped.var_names[detected & (mapped.var["biomjepa_token"] >= 0).to_numpy()][:20]]
    kw = dict(groupby="group", n_cells=3, n_random=2, checkpoint=tiny_checkpoint, device="cpu")
    bj.tl.ablate_programme(mapped, genes[:10], **kw)
    assert "ablation_excess" in mapped.obs
    second = genes[10:] if n_programmes == 1 else {"p": genes[:10], "q": genes[10:]}
    bj.tl.ablate_programme(mapped, second, **kw)
    assert ("ablation_excess" in mapped.obs) == (n_programmes == 1)
