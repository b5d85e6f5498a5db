import math
from types import SimpleNamespace

import pytest
import torch

from biomjepa.train.health import effective_rank
from biomjepa.train.objectives import (
    alignment,
    cell_contrast,
    cosine_term,
    covariance_penalty,
    info_nce,
    jepa_loss,
    variance_hinge,
    view_contrast,
)


def test_components_hand_computed():
    pred = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    tgt = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 3.0]])
    assert math.isclose(float(alignment(pred, tgt)), (1 + 1 + 4) / 3)
    # per-dim sd of pred: dim0 [1,0,1] var 1/3, dim1 [0,2,1] var 1
    sd0, sd1 = math.sqrt(1 / 3 + 1e-4), math.sqrt(1 + 1e-4)
    assert math.isclose(float(variance_hinge(pred, 1.0)), (max(0, 1 - sd0) + max(0, 1 - sd1)) / 2, rel_tol=1e-5)
    # cov(dim0, dim1) = sum((x-2/3)(y-1))/2 = ((1/3)(-1) + (-2/3)(1) + (1/3)(0))/2 = -0.5
    assert math.isclose(float(covariance_penalty(pred)), 2 * 0.25 / 2, rel_tol=1e-5)
    c = float(cosine_term(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]])))
    assert math.isclose(c, 2.0, rel_tol=1e-6)
    cfg = SimpleNamespace(lambda_align=1.0, lambda_cos=0.0, lambda_var=0.05, lambda_cov=0.01, var_gamma=1.0)
    terms = jepa_loss(pred, tgt, cfg)
    expect = float(alignment(pred, tgt) + 0.05 * variance_hinge(pred) + 0.01 * covariance_penalty(pred))
    assert math.isclose(float(terms.total), expect, rel_tol=1e-6)
    assert set(terms.scalars()) >= {"loss", "align", "cosine", "var", "cov"}


def test_single_row_and_effective_rank():
    z = torch.randn(1, 4)
    assert float(variance_hinge(z)) == 0.0 and float(covariance_penalty(z)) == 0.0
    iso = torch.eye(4).repeat(10, 1) - 0.25
    assert effective_rank(iso) == pytest.approx(3.0, rel=1e-4)  # centred one-hot: 3 equal eigenvalues
    assert effective_rank(torch.randn(2000, 4)) == pytest.approx(4.0, rel=0.05)
    assert math.isnan(effective_rank(z))


def test_unit_rms_targets_have_rms_one_and_keep_direction():
    from biomjepa.train.config import TrainConfig
    from biomjepa.train.levers import unit_rms

    t = 0.02 * torch.randn(50, 8)
    scaled = unit_rms(t)
    assert float(scaled.pow(2).mean().sqrt()) == pytest.approx(1.0, rel=1e-5)
    assert torch.allclose(torch.nn.functional.normalize(scaled, dim=1), torch.nn.functional.normalize(t, dim=1), atol=1e-6)
    assert torch.equal(unit_rms(torch.zeros(3, 2)), torch.zeros(3, 2))  # no division by zero
    assert TrainConfig().target_scale is False  # off by default: the v0.2 recipe is unchanged


def test_depth_fit_removes_only_what_depth_predicts():
    """cell_centre_depth: a level that is linear in log(detected genes) is removed exactly; what
    differs between cells of equal depth survives; too few cells fit only the batch mean."""
    from biomjepa.train.config import TrainConfig
    from biomjepa.train.levers import depth_fit

    detected = torch.tensor([200.0, 200.0, 800.0, 800.0, 3200.0, 3200.0])
    x = detected.log()
    depth_part = (x - x.mean())[:, None] * torch.tensor([[2.0, -1.0, 0.5]]) + 3.0
    identity = torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]] * 3)  # same at every depth: uncorrelated
    fitted = depth_fit(depth_part + identity, detected)
    torch.testing.assert_close(fitted, depth_part, atol=1e-5, rtol=0)
    torch.testing.assert_close(depth_part + identity - fitted, identity, atol=1e-5, rtol=0)
    two = torch.randn(2, 3)
    torch.testing.assert_close(depth_fit(two, torch.tensor([10.0, 99.0])), two.mean(0, keepdim=True).expand(2, 3))
    with pytest.raises(ValueError, match="exclude each other"):
        TrainConfig().replace(target_centre="gene", cell_centre=True, cell_centre_depth=True)
    with pytest.raises(ValueError, match=r"needs teacher\.target_centre='gene'"):
        TrainConfig().replace(cell_centre_depth=True)


def test_cell_contrast_picks_each_cells_own_targets():
    """Summed per cell, a prediction that points at its own cell's targets wins the batch; one that points at
    another cell's loses, and the loss tells the two apart by hand-computable margins."""
    g = torch.Generator().manual_seed(0)
    cell = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3])
    target = torch.randn(8, 16, generator=g)
    own, acc = cell_contrast(target.clone(), target, cell, 0.1)
    assert float(acc) == 1.0 and float(own) < 0.05
    # every cell's units replaced by the next cell's: all four picks are wrong
    sums = torch.zeros(4, 16).index_add(0, cell, target)
    wrong = sums[(cell + 1) % 4]
    bad, acc = cell_contrast(wrong, target, cell, 0.1)
    assert float(acc) == 0.0 and float(bad) > 5.0
    # by hand for two cells with orthogonal sums: logits ±1/τ on the diagonal, 0 off it
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss, acc = cell_contrast(p, p, torch.tensor([0, 1]), 0.5)
    assert math.isclose(float(loss), math.log(1 + math.exp(-2.0)), rel_tol=1e-6) and float(acc) == 1.0


def test_cell_contrast_leaves_the_targets_without_gradient_and_skips_empty_cells():
    pred = torch.randn(5, 8, requires_grad=True)
    target = torch.randn(5, 8, requires_grad=True)
    cell = torch.tensor([0, 0, 2, 2, 3])  # cell 1 has no valid unit: it is not a negative
    loss, acc = cell_contrast(pred, target, cell, 0.2)
    loss.backward()
    assert pred.grad is not None and target.grad is None
    assert 0.0 <= float(acc) <= 1.0
    one, _ = cell_contrast(pred[:2], target[:2], cell[:2], 0.2)
    assert one.detach().item() == 0.0  # a single cell has no negative: nothing to contrast


def test_view_contrast_matches_two_views_of_each_cell_after_removing_the_shared_state():
    """Two noisy views of the same cells (a large state every cell shares plus the cell's own) pick each other
    out; without the batch centring the shared state would make every cosine ≈ 1 and the contrast blind."""
    g = torch.Generator().manual_seed(1)
    own = torch.randn(32, 16, generator=g)
    shared = 50.0 * torch.ones(16)
    student = shared + own + 0.1 * torch.randn(32, 16, generator=g)
    teacher = 2.0 * shared + own + 0.1 * torch.randn(32, 16, generator=g)
    loss, acc = view_contrast(student, teacher, 0.1)
    assert float(acc) == 1.0 and float(loss) < 0.1
    blind, _ = info_nce(student, teacher, 0.1)  # uncentred: the shared state dominates every cosine
    assert float(blind) > 2.0
    shuffled, acc = view_contrast(student, teacher[torch.randperm(32, generator=g)], 0.1)
    assert float(acc) < 0.2 and float(shuffled) > float(loss) + 3.0
