"""Does the run tell whether it learns? Target diagnostics in the log and the warnings of LearningHealth."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from _kit import make_graph, make_planted_shards

from biomjepa.train import TrainConfig, pretrain
from biomjepa.train.health import DIAG_FIELDS, LearningHealth, TrainingHealthWarning, target_diagnostics


def test_diagnostics_of_a_perfect_and_a_constant_predictor():
    g = torch.Generator().manual_seed(0)
    t = torch.randn(64, 16, generator=g)
    cell = torch.arange(64) // 4
    perfect = target_diagnostics(t, t, t, 1.0, cell)
    assert perfect["r2"] == pytest.approx(1.0) and perfect["procrustes_cos"] == pytest.approx(1.0, abs=1e-5)
    const = target_diagnostics(t.mean(0).expand_as(t), t, t, 1.0, cell)
    assert const["r2"] == pytest.approx(0.0, abs=1e-6) and const["pred_sd"] == pytest.approx(0.0, abs=1e-6)
    # a rotated copy of the targets: Procrustes undoes the rotation, R² does not
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=g))
    rot = target_diagnostics(t @ q, t, t, 1.0, cell)
    assert rot["procrustes_cos"] > 0.99 and rot["r2"] < 0.5
    half = target_diagnostics(t, t, 0.5 * t, 2.0, cell)
    assert half["tgt_rms_rel"] == pytest.approx(0.25 * float(t.pow(2).mean().sqrt()), rel=1e-5)


def _rows(steps, **values):
    return [{"step": s, **{k: values.get(k, 1.0) for k in DIAG_FIELDS}} for s in range(steps)]


def _feed(h, windows):
    """Feed ``h`` one window of rows per dict of ``windows`` (values per diagnostic)."""
    step = 0
    for values in windows:
        for r in _rows(h.window, **values):
            h.observe({**r, "step": step})
            step += 1


def test_health_warns_once_per_kind_naming_the_numbers():
    h = LearningHealth(warmup=10, window=10)
    with pytest.warns(TrainingHealthWarning, match=r"R² on its targets is -0\.200"):
        _feed(h, [{"r2": -0.2}] * 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for r in _rows(40, r2=-0.2):  # already warned: silent
            h.observe({**r, "step": r["step"] + 40})
    assert h.warned == ["r2"]
    h = LearningHealth(warmup=0, window=5)
    with pytest.warns(TrainingHealthWarning, match="collapse"):
        _feed(h, [{"pred_sd": 0.001, "tgt_sd": 1.0}])
    h = LearningHealth(warmup=0, window=5, falls=3)
    with pytest.warns(TrainingHealthWarning, match="energy keeps falling"):
        _feed(h, [{"tgt_energy": e} for e in (1.0, 0.8, 0.6, 0.4, 0.2)])
    h = LearningHealth(warmup=0, window=5)  # a healthy run: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _feed(h, [{"r2": 0.3, "tgt_energy": 1.0 + i} for i in range(6)])


@pytest.mark.slow
def test_a_tiny_model_learns_planted_structure(tmp_path):
    """Cells of four types with their own programmes: the predictor's held-out R² on the targets becomes
    positive and the Procrustes cosine rises over training (the default targets keep the cell level)."""
    shards = make_planted_shards(tmp_path / "data")
    cfg = TrainConfig.from_dict({
        "preset": "tiny", "corpus": shards, "cache_dir": str(tmp_path / "cache"), "graph": make_graph(tmp_path),
        "out_dir": str(tmp_path / "runs"), "run": {"steps": 240, "seed": 0},
        "data": {"batch_size": 16}, "teacher": {"target_std": True}, "optim": {"warmup_steps": 20, "lr": 2e-3}, "loop": {"checkpoint_every": 240},
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingHealthWarning)
        run = pretrain(cfg)
    log = pd.read_csv(run / "log.csv")
    early, late = log[log.step < 40], log[log.step >= 200]
    assert late["r2"].mean() > 0, late["r2"].describe()
    assert late["procrustes_cos"].mean() > early["procrustes_cos"].mean() + 0.05
    assert np.isfinite(log[DIAG_FIELDS].to_numpy()).all()


@pytest.mark.slow
def test_the_contrasts_teach_a_tiny_model_to_tell_planted_cells_apart(tmp_path):
    """With only the two cell-level InfoNCE terms (``loss.lambda_nce`` on per-gene-centred block targets,
    ``loss.lambda_view_nce`` between the student's and the teacher's mean states, student views thinned),
    the student picks out its own cell among the batch's far more often than chance (1/16) and more so at
    the end of training than at the start; the log carries both terms and their accuracies."""
    shards = make_planted_shards(tmp_path / "data")
    cfg = TrainConfig.from_dict({
        "preset": "tiny", "corpus": shards, "cache_dir": str(tmp_path / "cache"), "graph": make_graph(tmp_path),
        "out_dir": str(tmp_path / "runs"), "run": {"steps": 160, "seed": 0}, "data": {"batch_size": 16, "thin_student": 0.5},
        "teacher": {"target_centre": "gene", "cell_centre": False},
        "loss": {"lambda_align": 0.0, "lambda_var": 0.0, "lambda_cov": 0.0, "lambda_nce": 1.0, "lambda_view_nce": 1.0},
        "optim": {"warmup_steps": 20, "lr": 2e-3}, "loop": {"checkpoint_every": 160},
    })
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainingHealthWarning)
        run = pretrain(cfg)
    log = pd.read_csv(run / "log.csv")
    early, late = log[log.step < 20], log[log.step >= 130]
    for term in ("nce", "view_nce"):
        acc = f"{term}_acc"
        assert late[acc].mean() > max(4 / 16, early[acc].mean() + 0.1), (term, log[acc].describe())
        assert late[term].mean() < early[term].mean(), term
    assert np.isfinite(log[["nce", "nce_acc", "view_nce", "view_nce_acc", "procrustes_cos"]].to_numpy()).all()


def test_target_diagnostics_run_in_float32_under_a_bf16_autocast():
    """The step's diagnostics are computed inside the training step's autocast; bf16 has no SVD or
    eigensolver on CUDA (the H100 run of 2026-11-26 (commit 2594b0e) stopped at step 0 with "svd_cuda_gesvdj not implemented
    for 'BFloat16'"), so they must leave the autocast and give the float32 figures."""
    import torch

    from biomjepa.train.health import target_diagnostics

    g = torch.Generator().manual_seed(0)
    pred, target = torch.randn(40, 8, generator=g), torch.randn(40, 8, generator=g)
    cell = torch.arange(40) // 4
    plain = target_diagnostics(pred, target, target, 1.0, cell)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = target_diagnostics(pred, target, target, 1.0, cell)
    assert inside == plain
