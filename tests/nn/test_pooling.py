from __future__ import annotations

import torch

from biomjepa.nn import max_top5_pool, max_winners


def test_max_and_top5_mean_exact():
    h = torch.arange(2 * 9 * 2, dtype=torch.float32).view(2, 9, 2)
    gm = torch.ones(2, 9, dtype=torch.bool)
    gm[:, :2] = False  # technical tokens never pooled
    gm[1, 5:] = False  # cell 1 has 3 genes (< 5)
    z = max_top5_pool(h, gm)
    assert z.shape == (2, 4)
    # cell 0: genes at positions 2..8 → feature 0 values 4,6,...,16; top5 = 16,14,12,10,8
    assert z[0].tolist() == [16.0, 17.0, 12.0, 13.0]
    # cell 1: positions 2..4 → feature 0 values 22,24,26: max 26, mean of all 3 = 24
    assert z[1].tolist() == [26.0, 27.0, 24.0, 25.0]


def test_technical_tokens_excluded_even_when_largest():
    h = torch.zeros(1, 4, 3)
    h[0, 0] = 100.0
    gm = torch.tensor([[False, False, True, True]])
    assert max_top5_pool(h, gm).abs().max() == 0
    assert max_winners(h, gm).min() >= 2


def test_cell_without_genes_gives_zeros():
    h = torch.randn(1, 3, 4)
    gm = torch.zeros(1, 3, dtype=torch.bool)
    assert torch.equal(max_top5_pool(h, gm), torch.zeros(1, 8))


def test_centred_pooling_ignores_a_cell_wide_shift():
    """A level added to every gene token of a cell (the depth-set component) leaves centred readouts unchanged."""
    from biomjepa.nn.pooling import POOLINGS, pool

    torch.manual_seed(0)
    h = torch.randn(3, 12, 8)
    gm = torch.ones(3, 12, dtype=torch.bool)
    gm[:, :2] = False
    gm[2, 9:] = False  # padding
    v = torch.rand(3, 12) + 0.1
    shift = torch.randn(3, 1, 8) * 5
    for kind in [k for k in POOLINGS if k.startswith("centred")]:
        torch.testing.assert_close(pool(h + shift, gm, v, kind), pool(h, gm, v, kind))
    # mean_wmean keeps the level in its first half (exactly the shift) and is centred in its second
    moved = pool(h + shift, gm, v, "mean_wmean") - pool(h, gm, v, "mean_wmean")
    torch.testing.assert_close(moved[:, :8], shift[:, 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(moved[:, 8:], torch.zeros(3, 8), rtol=1e-5, atol=1e-5)
    # the paper's readout moves with the shift
    assert not torch.allclose(pool(h + shift, gm, v, "max_top5"), pool(h, gm, v, "max_top5"))
    # padding and technical tokens never contribute, even when huge
    h2 = h.clone()
    h2[2, 9:] = 1e6
    h2[:, :2] = 1e6
    for kind in POOLINGS:
        torch.testing.assert_close(pool(h2, gm, v, kind), pool(h, gm, v, kind))


def test_centred_max_top5_by_hand_and_unknown_pooling():
    from biomjepa.nn.pooling import pool

    h = torch.tensor([[[9.0], [9.0], [1.0], [3.0], [5.0]]])  # two technical tokens then 3 genes
    gm = torch.tensor([[False, False, True, True, True]])
    v = torch.tensor([[0.0, 0.0, 1.0, 1.0, 2.0]])
    # centred gene states: -2, 0, 2 → max 2, mean of all 3 (fewer than 5) = 0
    assert pool(h, gm, v, "centred_max_top5").tolist() == [[2.0, 0.0]]
    # weighted mean of centred states: (-2·1 + 0·1 + 2·2) / 4 = 0.5, then max 2
    assert pool(h, gm, v, "centred_wmean_max").tolist() == [[0.5, 2.0]]
    # mean state 3 (technical tokens excluded) ‖ weighted mean of the centred states 0.5
    assert pool(h, gm, v, "mean_wmean").tolist() == [[3.0, 0.5]]
    # both: max 5, top-5 mean 3 (all 3 genes) ‖ mean state 3, weighted centred mean 0.5
    assert pool(h, gm, v, "max_top5_mean_wmean").tolist() == [[5.0, 3.0, 3.0, 0.5]]
    import pytest

    with pytest.raises(ValueError, match="Unknown pooling"):
        pool(h, gm, v, "mean")


def test_quantile_readout_is_the_order_statistic_and_does_not_grow_with_gene_count():
    from biomjepa.nn.pooling import masked_quantile, pool

    torch.manual_seed(0)
    for n in (1, 2, 7, 11, 40):
        h = torch.randn(1, 45, 3)
        m = torch.zeros(1, 45, dtype=torch.bool)
        m[0, :n] = True
        desc = h[0, :n].sort(0, descending=True).values
        assert torch.equal(masked_quantile(h, m, 0.9)[0], desc[int((n - 1) // 10)])  # rank floor(0.1 (n − 1))
    # states drawn from one distribution: the max rises with the number of genes, the 90th percentile does not
    small, large = torch.randn(200, 100, 8), torch.randn(200, 2000, 8)
    ms, ml = torch.ones(200, 100, dtype=torch.bool), torch.ones(200, 2000, dtype=torch.bool)
    q_gap = (masked_quantile(large, ml, 0.9).mean() - masked_quantile(small, ms, 0.9).mean()).abs()
    max_gap = large.amax(1).mean() - small.amax(1).mean()
    assert q_gap < 0.05 and max_gap > 0.8
    z = pool(large[:2], ml[:2], torch.rand(2, 2000), "centred_wmean_q90")
    assert z.shape == (2, 16) and torch.isfinite(z).all()
    empty = torch.zeros(1, 4, dtype=torch.bool)
    assert torch.equal(masked_quantile(torch.randn(1, 4, 3), empty, 0.9), torch.zeros(1, 3))


def test_every_readout_is_as_wide_as_the_config_says():
    """A checkpoint's readout statistics and every embedding buffer are sized by ``ModelConfig.embedding_dim``."""
    from biomjepa.nn import ModelConfig
    from biomjepa.nn.pooling import POOLINGS, pool

    h, gm, v = torch.randn(2, 7, 16), torch.ones(2, 7, dtype=torch.bool), torch.rand(2, 7)
    for kind in POOLINGS:
        cfg = ModelConfig.preset("tiny", d_model=16, n_heads=2, pooling=kind)
        assert pool(h, gm, v, kind).shape == (2, cfg.embedding_dim)
    assert ModelConfig.preset("tiny", d_model=16, n_heads=2, pooling="max_top5_mean_wmean").embedding_dim == 64
