"""``bj.tl.max_token``: exact winners from known token states, contract, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _inputs import _with_nan_groups

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.tl._max_token import max_token, max_token_shares, winner_fraction


def test_shares_and_winner_exact():
    # cell 0: tokens [tech, tech, g10, g20, g30]; D = 4
    hidden = torch.tensor([[
        [9.0, 9.0, 9.0, 9.0],  # technical: excluded even though largest
        [9.0, 9.0, 9.0, 9.0],
        [1.0, 5.0, 0.0, 0.0],  # g10 wins feature 1
        [2.0, 0.0, 3.0, 0.0],  # g20 wins features 0 and 2
        [0.0, 0.0, 0.0, 7.0],  # g30 wins feature 3
    ]])
    mask = torch.tensor([[False, False, True, True, True]])
    ids = torch.tensor([[100, 101, 10, 20, 30]])
    u, winner, share = max_token_shares(hidden, mask, ids)
    assert u.tolist() == [[0.0, 0.0, 0.25, 0.5, 0.25]]
    assert winner.tolist() == [20] and share.tolist() == [0.5]


def test_tie_goes_to_lowest_vocab_index_and_padding_ignored():
    hidden = torch.tensor([
        [[0.0, 0.0], [0.0, 0.0], [0.0, 3.0], [3.0, 0.0], [0.0, 0.0]],
        [[0.0, 0.0], [0.0, 0.0], [5.0, 1.0], [0.0, 0.0], [99.0, 99.0]],
    ])
    mask = torch.tensor([[False, False, True, True, False], [False, False, True, False, False]])
    # positions not ascending in vocab: tie between ids 50 and 7 → 7
    ids = torch.tensor([[100, 101, 50, 7, 0], [100, 101, 3, 0, 0]])
    _, winner, share = max_token_shares(hidden, mask, ids)
    assert winner.tolist() == [7, 3] and share.tolist() == [0.5, 1.0]


def test_winner_fraction_rows_sum_to_one():
    A = winner_fraction(np.array(["INS", "INS", "GCG", "INS"]), np.array(["b", "b", "a", "a"]))
    assert A.loc["b", "INS"] == 1.0 and A.loc["a", "GCG"] == 0.5
    np.testing.assert_allclose(A.sum(axis=1), 1.0)


def test_max_token_contract(mapped, tiny_checkpoint):
    before = mapped.obs.copy()
    out = max_token(mapped, groupby="group", checkpoint=tiny_checkpoint, copy=True)
    assert mapped.obs.equals(before) and "max_token" not in mapped.uns
    genes = out.obs["max_token_gene"]
    assert set(genes) <= set(mapped.var_names)
    assert ((out.obs["max_token_share"] > 0) & (out.obs["max_token_share"] <= 1)).all()
    A = out.uns["max_token"]["winner_fraction"]
    assert list(A.index) == ["a", "b", "c"]
    np.testing.assert_allclose(A.sum(axis=1), 1.0)
    assert out.uns["max_token"]["params"]["groupby"] == "group"
    again = max_token(mapped, groupby="group", checkpoint=tiny_checkpoint, batch_size=7, copy=True)
    assert (again.obs["max_token_gene"] == genes).all()


def test_max_token_bad_input(mapped, tiny_checkpoint):
    with pytest.raises(KeyError, match="groupby"):
        max_token(mapped, groupby="nope", checkpoint=tiny_checkpoint)
    del mapped.var["biomjepa_token"]
    with pytest.raises(KeyError, match="map_vocab"):
        max_token(mapped, checkpoint=tiny_checkpoint)
    assert "max_token_gene" not in mapped.obs


def test_top_expressed_baseline_recorded(mapped, tiny_checkpoint):
    """Each winner is compared with the trivial baseline: the cell's most-expressed gene."""
    from biomjepa.data.stream import gather
    from biomjepa.tl._max_token import top_expressed

    out = max_token(mapped, groupby="group", checkpoint=tiny_checkpoint, copy=True)
    X = mapped.X.toarray() if hasattr(mapped.X, "toarray") else np.asarray(mapped.X)
    token = mapped.var["biomjepa_token"].to_numpy()
    X = np.where(token[None, :] >= 0, X, -1)  # unmapped genes are never tokens
    # by hand: largest count, ties to the lowest vocabulary index
    symbols = np.asarray(Vocab.default().symbols, dtype=object)
    expect = []
    for row in X:
        best = np.flatnonzero(row == row.max())
        expect.append(symbols[min(token[best])])
    assert list(out.obs["max_token_top_expressed"]) == expect
    assert (out.obs["max_token_is_top_expressed"] == (out.obs["max_token_gene"] == out.obs["max_token_top_expressed"])).all()
    B = out.uns["max_token"]["top_expressed_fraction"]
    np.testing.assert_allclose(B.sum(axis=1), 1.0)
    cells = gather(mapped, np.arange(mapped.n_obs))
    assert len(top_expressed(cells)) == mapped.n_obs


def test_lognorm_and_raw_inputs_give_the_winners_of_the_counts(mapped, tiny_checkpoint):
    """``input="lognorm"`` and ``use_raw=True`` reach max_token through the same reader as tl.embed."""
    import anndata as ad
    from scipy import sparse

    want = max_token(mapped, checkpoint=tiny_checkpoint, copy=True).obs["max_token_gene"]
    b = mapped.copy()
    X = b.X.toarray().astype(np.float64)
    b.obs["total_counts"] = X.sum(axis=1)
    b.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)))
    got = max_token(b, checkpoint=tiny_checkpoint, input="lognorm", library_size_key="total_counts", copy=True)
    assert got.obs["max_token_gene"].tolist() == want.tolist()
    b.raw = ad.AnnData(sparse.csr_matrix(X), var=mapped.var.copy())
    got = max_token(b, checkpoint=tiny_checkpoint, use_raw=True, copy=True)
    assert got.obs["max_token_gene"].tolist() == want.tolist()
    assert got.uns["max_token"]["params"]["layer"] == "raw.X"



def test_params_record_the_input(mapped, tiny_checkpoint):
    """Issue 46: the record names what was read, as tl.embed's does (it used to omit ``input``)."""
    from scipy import sparse

    assert max_token(mapped, checkpoint=tiny_checkpoint, copy=True).uns["max_token"]["params"]["input"] == "counts"
    b = mapped.copy()
    X = b.X.toarray().astype(np.float64)
    b.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)))
    with pytest.warns(UserWarning, match="without library_size_key"):
        params = max_token(b, checkpoint=tiny_checkpoint, input="lognorm", copy=True).uns["max_token"]["params"]
    assert params["input"] == "lognorm" and params["library_size_key"] == "estimated"
    assert params["target_sum"] == pytest.approx(1e4, rel=1e-3)


# --------------------------------------------------------------------------- NaN labels
def test_max_token_drops_nan_labels_with_a_warning(mapped, tiny_checkpoint):
    _with_nan_groups(mapped)
    with pytest.warns(UserWarning, match=r"Dropping 5 of 60 cells without a label in obs\['group'\]"):
        bj.tl.max_token(mapped, groupby="group", checkpoint=tiny_checkpoint)
    A = mapped.uns["max_token"]["winner_fraction"]
    assert "nan" not in A.index and set(A.index) == {"a", "b", "c"}
    assert mapped.obs["max_token_gene"].notna().all()  # every cell still gets its winner
