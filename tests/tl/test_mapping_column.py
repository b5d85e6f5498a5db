"""The tools read the mapping the user made (issue 57): ``bj.pp.map_vocab(adata, key_added="tok")`` alone is read,
a default column beside a newer mapping is read with a warning naming both, and a missing column's error names the
columns that look like mappings and how to point the tools at one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.data.mapping import mapped_key

pytestmark = pytest.mark.filterwarnings("ignore:The input measures only:UserWarning")


def _no_model(monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the mapping was checked")

    monkeypatch.setattr(_pretrained, "load_model", forbidden)


def _quiet_embed(a, ck, **kw) -> None:
    """``bj.tl.embed``, asserting that it says nothing about the mapping it reads."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        bj.tl.embed(a, checkpoint=ck, device="cpu", **kw)
    assert not [w for w in said if "map_vocab" in str(w.message)], [str(w.message) for w in said]


def test_a_mapping_under_another_key_is_read(counts_adata, tiny_checkpoint):
    default, tok = counts_adata.copy(), counts_adata
    bj.pp.map_vocab(default)
    bj.pp.map_vocab(tok, key_added="tok")
    _quiet_embed(default, tiny_checkpoint)
    _quiet_embed(tok, tiny_checkpoint)
    assert "biomjepa_token" not in tok.var
    np.testing.assert_array_equal(tok.obsm["X_biomjepa"], default.obsm["X_biomjepa"])
    bj.tl.max_token(tok, checkpoint=tiny_checkpoint, device="cpu")  # every pass over the rows reads it too
    bj.tl.max_token(default, checkpoint=tiny_checkpoint, device="cpu")
    assert (tok.obs["max_token_gene"] == default.obs["max_token_gene"]).all()


def test_the_default_column_beside_a_newer_mapping_is_read_with_a_warning(counts_adata, tiny_checkpoint):
    a = counts_adata
    bj.pp.map_vocab(a)
    a.var["biomjepa_token"] = np.where(np.arange(a.n_vars) < 100, -1, a.var["biomjepa_token"])  # an older mapping
    bj.pp.map_vocab(a, key_added="tok")
    older = a.copy()
    with pytest.warns(UserWarning, match=r"Reading \.var\['biomjepa_token'\].*latest bj\.pp\.map_vocab wrote "
                                         r"\.var\['tok'\].*del adata\.var\['biomjepa_token'\]"):
        bj.tl.embed(older, checkpoint=tiny_checkpoint, device="cpu")
    del a.var["biomjepa_token"]  # as the warning says: the newer mapping is then read
    _quiet_embed(a, tiny_checkpoint)
    assert not np.array_equal(a.obsm["X_biomjepa"], older.obsm["X_biomjepa"])


def test_several_mappings_none_the_default(counts_adata, tiny_checkpoint):
    a = counts_adata
    bj.pp.map_vocab(a, key_added="first")
    bj.pp.map_vocab(a, key_added="second")
    with pytest.warns(UserWarning, match=r"Reading \.var\['second'\], the column the latest bj\.pp\.map_vocab wrote.*"
                                         r"\['first'\].*adata\.var\['biomjepa_token'\] = adata\.var\['first'\]"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint, device="cpu")


def test_without_a_readable_mapping_the_error_names_the_columns(counts_adata, tiny_checkpoint, monkeypatch):
    _no_model(monkeypatch)
    a = counts_adata
    bj.pp.map_vocab(a, key_added="tok")
    a.var["old"] = a.var.pop("tok")  # renamed: the report names a column that is gone
    with pytest.raises(KeyError, match=r"Did not find \.var\['biomjepa_token'\]\. Run `bj\.pp\.map_vocab\(adata\)` "
                                       r"first\. The latest bj\.pp\.map_vocab wrote \.var\['tok'\].*gone too.*"
                                       r"\['old'\].*adata\.var\['biomjepa_token'\] = adata\.var\['old'\]"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)
    del a.uns["biomjepa"]  # no report at all (e.g. after anndata.concat)
    with pytest.raises(KeyError, match=r"Did not find.*\['old'\], which look like mappings"):
        bj.tl.max_token(a, checkpoint=tiny_checkpoint)


def test_a_mapping_of_raw_under_another_key(counts_adata, tiny_checkpoint, monkeypatch):
    a = counts_adata
    a.raw = a.copy()
    bj.pp.map_vocab(a, use_raw=True, key_added="tok")
    _quiet_embed(a, tiny_checkpoint, use_raw=True)
    _no_model(monkeypatch)
    with pytest.raises(KeyError, match=r"but \.raw\.var has it.*Pass use_raw=True"):
        bj.tl.embed(a, checkpoint=tiny_checkpoint)


def test_a_default_column_set_by_a_reader_wins_over_an_older_report(counts_adata):
    """The atlas sets var['biomjepa_token'] in memory on a file whose report may name another column."""
    bj.pp.map_vocab(counts_adata, key_added="tok")
    counts_adata.var["biomjepa_token"] = counts_adata.var["tok"]
    assert mapped_key(counts_adata) == "biomjepa_token"
