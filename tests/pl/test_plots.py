"""``bj.pl`` biology plots: return Axes (Agg backend), clear errors without results."""

from __future__ import annotations

import anndata as ad
import matplotlib as mpl
import numpy as np
import pandas as pd
import pytest
from _inputs import make_mapped, raises_unchanged

mpl.use("Agg")

import biomjepa as bj
from biomjepa.pl._ablate import ablate_programme
from biomjepa.pl._max_token import max_token
from biomjepa.pl._perturb import perturbation_arithmetic


@pytest.fixture(autouse=True)
def _close():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


@pytest.fixture
def results():
    a = ad.AnnData(np.zeros((3, 2), dtype=np.float32))
    A = pd.DataFrame([[0.8, 0.1, 0.1], [0.0, 0.9, 0.1]], index=["alpha", "beta"], columns=["GCG", "INS", "TTR"])
    a.uns["max_token"] = {"winner_fraction": A, "params": {"groupby": "cell_type"}}
    a.uns["ablation"] = {
        "matched": pd.DataFrame({"programme": ["alpha", "beta"], "group": ["alpha", "beta"],
                                 "matched_excess": [2.0, 1.5], "other_excess": [0.1, 0.0]}),
        "test": {"n": 2, "statistic": 0.0, "pvalue": 0.5},
    }
    a.uns["perturbation_arithmetic"] = {
        "table": pd.DataFrame({"double": ["A+B", "C+E"], "a": ["A", "C"], "b": ["B", "E"], "observed": [0.9, 0.7],
                               "random_mean": [0.2, 0.3], "random_sd": [0.1, 0.2]}),
        "summary": {"n_doubles": 2, "n_beating": 2, "wilcoxon_pvalue": 0.5},
    }
    return a


def test_plots_return_axes(results):
    from matplotlib.axes import Axes

    ax = max_token(results, "cell_type")
    assert isinstance(ax, Axes)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["GCG", "TTR", "INS"]
    assert isinstance(max_token(results, genes=["INS", "NOPE"]), Axes)
    assert isinstance(ablate_programme(results), Axes)
    ax = perturbation_arithmetic(results, highlight=[("B", "A"), "C+E"])
    assert isinstance(ax, Axes) and len(ax.texts) == 2


def test_plots_need_results():
    a = ad.AnnData(np.zeros((2, 2), dtype=np.float32))
    with pytest.raises(KeyError, match=r"tl\.max_token"):
        max_token(a, "x")
    with pytest.raises(KeyError, match=r"tl\.ablate_programme"):
        ablate_programme(a)
    with pytest.raises(KeyError, match=r"tl\.perturbation_arithmetic"):
        perturbation_arithmetic(a)


# --------------------------------------------------------------------------- plots before their tool
def test_plots_before_their_tool():
    a = make_mapped()
    for fn, tool in [(bj.pl.max_token, "max_token"), (bj.pl.ablate_programme, "ablate_programme"),
                     (bj.pl.programme_dependencies, "programme_dependencies"),
                     (bj.pl.perturbation_arithmetic, "perturbation_arithmetic")]:
        raises_unchanged(a, KeyError, rf"Run `bj\.tl\.{tool}", fn)
    with pytest.raises(ValueError, match=r"empty bj\.bench table"):
        bj.pl.bench(pd.DataFrame(columns=["task", "rep", "setting", "seed", "metric", "value"]))
