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
