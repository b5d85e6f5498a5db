"""``bj.tl.programme_dependencies`` / ``bj.pl.programme_dependencies``: exact excess, the training
model path, contract, determinism and bad input (on a 2-step synthetic training run)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from biomjepa.data.vocab import Vocab
from biomjepa.tl._dependencies import dependency_effect, programme_dependencies
from biomjepa.train import target_errors as te
from biomjepa.train.target_errors import load_training_modules, target_errors

MATCHED = {"p1": "a", "p2": "b", "p3": "c"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A 2-step ``tiny`` BioM-JEPA run on the synthetic corpus/graph of ``tests/train/_kit.py``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from _kit import tiny_config

    from biomjepa.train import pretrain

    torch.set_num_threads(1)
    return pretrain(tiny_config(tmp_path_factory.mktemp("dep"), steps=2, run_name="dep"))


def _programmes(adata):
    X = adata.X.toarray()
    names = adata.var_names[:300][np.argsort(-(X > 0).mean(0)[:300], kind="stable")]
    return {"p1": list(names[:5]), "p2": list(names[5:10]), "p3": list(names[10:15])}


def test_dependency_effect_exact():
    base, ablated = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    null = np.array([[1.0, 2.0], [2.0, 4.0]])  # [n_random, n]: effects 0 and 1.5
    raw, null_eff, i = dependency_effect(base, ablated, null)
    assert (raw, null_eff, i) == (2.5, 0.75, 1.75)


def test_excess_formula_with_known_errors(mapped, run_dir, monkeypatch):
    """ε(x) = 10 + i; ablating p1 adds 3 when predicting p2, other sources 1; null sets add 0.2/0.8."""
    progs = _programmes(mapped)
    vocab_ids = {k: set(Vocab.default().index_of(v).tolist()) for k, v in progs.items()}

    def fake_one(cells, target, block_id, removals):
        base = 10.0 + np.arange(len(cells))
        tgt = next(k for k, v in vocab_ids.items() if set(target.tolist()) <= v)
        out, k = [base], 0
        for genes in removals[1:]:
            src = next((n for n, v in vocab_ids.items() if set(genes.tolist()) == v), None)
            if src is not None:
                out.append(base + (3.0 if (src, tgt) == ("p1", "p2") else 1.0))
                k = 0
            else:
                out.append(base + [0.2, 0.8][k])
                k += 1
        return np.stack(out)

    def fake(checkpoint, jobs, **kw):
        return [fake_one(*job) for job in jobs], {"source": str(checkpoint), "step": 2, "objective": "block"}

    monkeypatch.setattr(te, "programme_errors", fake)
    out = programme_dependencies(mapped, progs, checkpoint=run_dir, groupby="group", matched=MATCHED,
                                 n_random=2, n_cells=4, copy=True)
    m = out.uns["programme_dependencies"]["matrix"]
    expected = pd.DataFrame([[np.nan, 2.5, 0.5], [0.5, np.nan, 0.5], [0.5, 0.5, np.nan]],
                            index=list(progs), columns=list(progs))
    np.testing.assert_allclose(m.to_numpy(), expected.to_numpy())
    pairs = out.uns["programme_dependencies"]["pairs"].set_index(["source", "target"])
    assert pairs.loc[("p1", "p2"), "raw_effect"] == pytest.approx(3.0)
    assert pairs.loc[("p1", "p2"), "null_effect"] == pytest.approx(0.5)
    assert pairs.loc[("p1", "p2"), "null_effect_sd"] == pytest.approx(np.std([0.2, 0.8], ddof=1))
    assert pairs.loc[("p1", "p2"), "baseline_error"] == pytest.approx(11.5)  # mean of 10..13


def test_contract_shapes_and_reproducible(mapped, run_dir):
    progs = _programmes(mapped)
    kw = dict(checkpoint=run_dir, groupby="group", matched=MATCHED, n_random=2, n_cells=4, n_bins=4,
              random_state=1, copy=True)
    out = programme_dependencies(mapped, progs, **kw)
    assert "programme_dependencies" not in mapped.uns
    r = out.uns["programme_dependencies"]
    m = r["matrix"]
    assert m.shape == (3, 3) and list(m.index) == list(m.columns) == ["p1", "p2", "p3"]
    assert np.isnan(np.diag(m.to_numpy())).all()
    off = m.to_numpy()[~np.eye(3, dtype=bool)]
    assert np.isfinite(off).all()
    assert len(r["pairs"]) == 6 and not (r["pairs"]["source"] == r["pairs"]["target"]).any()
    assert len(r["cells"]) == 12 and (r["cells"]["n_target"] >= 1).all() and (r["cells"]["baseline_error"] > 0).all()
    for prog, grp in MATCHED.items():
        assert set(r["cells"].loc[r["cells"]["target"] == prog, "group"]) == {grp}
    np.testing.assert_allclose(r["pairs"]["raw_effect"] - r["pairs"]["null_effect"], r["pairs"]["dependency"])
    assert r["params"]["step"] == 2 and r["params"]["objective"] == "block" and len(r["null_sets"]) == 3 * 2 * 5
    again = programme_dependencies(mapped, progs, **kw)
    pd.testing.assert_frame_equal(again.uns["programme_dependencies"]["pairs"], r["pairs"])
    state = sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1]  # a state file works too
    same = programme_dependencies(mapped, progs, **{**kw, "checkpoint": state})
    pd.testing.assert_frame_equal(same.uns["programme_dependencies"]["matrix"], m)


def test_target_errors_follow_the_training_path(mapped, run_dir):
    """Hand-computed ε for one cell (collate → teacher mean − centre; student on context → DMT → predictor)."""
    from biomjepa.data.collate import N_TECH, collate
    from biomjepa.data.stream import gather
    from biomjepa.train.jepa import dmt_pool

    mods = load_training_modules(run_dir)
    cells = gather(mapped, np.arange(mapped.n_obs)).subset(np.arange(6))
    target = np.unique(cells.genes[cells.indptr[0] : cells.indptr[1]])[3:9]  # genes of cell 0
    block = int(np.sort(target)[(len(target) - 1) // 2])
    absent = np.array([5])  # a gene no cell expresses: ablating it changes nothing
    err = target_errors(mods, cells, target, block, [np.zeros(0, np.int64), absent], batch_size=4, device="cpu")
    np.testing.assert_array_equal(err[0], err[1])
    one = target_errors(mods, cells, target, block, [absent], batch_size=1, device="cpu")[0]
    np.testing.assert_allclose(one, err[0], rtol=1e-5)

    V = mods.jepa.config.vocab_size
    cell = cells.subset([0])
    with torch.no_grad():
        tb = collate(cell, V)
        h = mods.teacher(tb.gene_ids, tb.values, tb.mask)[0]
        t = h[N_TECH + np.flatnonzero(np.isin(cell.genes, target))].mean(0) - mods.centre
        sb = collate(cell.drop_genes(target), V)
        hs = mods.jepa.student(sb.gene_ids, sb.values, sb.mask)
        near = torch.as_tensor(np.isin(sb.gene_ids.numpy(), mods.coexp.neighbours(block))) & sb.gene_mask
        pool = near if near.any() else sb.gene_mask
        q = mods.jepa.predictor.queries(torch.tensor([[block]]))
        pred = mods.jepa.predictor(dmt_pool(q, hs, pool[:, None, :], mods.jepa.tau), q, torch.ones(1, 1, dtype=bool))
    assert err[0, 0] == pytest.approx(float((pred[0, 0] - t).pow(2).sum()), rel=1e-5)


def test_bad_inputs_leave_adata_unchanged(mapped, run_dir, tiny_checkpoint, tmp_path):
    progs = _programmes(mapped)
    kw = dict(checkpoint=run_dir, groupby="group", matched=MATCHED, n_cells=4, n_random=1)
    before = (set(mapped.uns), list(mapped.obs.columns))
    with pytest.raises(ValueError, match="inference export"):
        programme_dependencies(mapped, progs, **{**kw, "checkpoint": tiny_checkpoint})
    with pytest.raises(FileNotFoundError, match="training run directory"):
        programme_dependencies(mapped, progs, **{**kw, "checkpoint": tmp_path / "nothing"})
    with pytest.raises(ValueError, match="no gene"), pytest.warns(UserWarning, match="left out"):
        programme_dependencies(mapped, {**progs, "p3": ["NOTAGENE1", "FOO"]}, **kw)
    with pytest.raises(KeyError, match=r"not in adata\.obs"):
        programme_dependencies(mapped, progs, **{**kw, "matched": {**MATCHED, "p3": "zzz"}})
    with pytest.raises(KeyError, match="missing"):
        programme_dependencies(mapped, progs, **{**kw, "matched": {"p1": "a", "p2": "b"}})
    with pytest.raises(TypeError, match="at least two"):
        programme_dependencies(mapped, {"p1": progs["p1"]}, **kw)
    with pytest.raises(KeyError, match="groupby"):
        programme_dependencies(mapped, progs, **{**kw, "groupby": "nope"})
    with pytest.raises(FileNotFoundError, match="graph="):
        programme_dependencies(mapped, progs, **{**kw, "graph": tmp_path / "nograph"})
    assert (set(mapped.uns), list(mapped.obs.columns)) == before


def test_plot_heatmap(mapped):
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    from biomjepa.pl._dependencies import programme_dependencies as plot

    with pytest.raises(KeyError, match=r"Run `bj\.tl\.programme_dependencies"):
        plot(mapped)
    m = pd.DataFrame([[np.nan, 2.0], [-0.5, np.nan]], index=["x", "y"], columns=["x", "y"])
    mapped.uns["programme_dependencies"] = {"matrix": m}
    ax = plot(mapped)
    im = ax.images[0]
    assert im.norm.vmin == -2.0 and im.norm.vmax == 2.0
    assert np.ma.getmaskarray(im.get_array()).tolist() == [[True, False], [False, True]]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "y"]
    plt.close("all")
