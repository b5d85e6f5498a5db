"""``bj.tl.perturbation_arithmetic``: exact cosines on hand-built embeddings, null, determinism, errors."""

from __future__ import annotations

import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import biomjepa as bj
from biomjepa.tl._perturb import parse_perturbations, perturbation_arithmetic, random_pairs

D = 8


def _toy(sep="+", n=4, double_shift=None, genes_in_var=True):
    """Cells sit exactly at control + δ_p, δ_single = e_k; δ_(a,b) = δ_a + δ_b unless overridden."""
    singles = ["A", "B", "C", "E", "F", "G"]
    basis = {g: np.eye(D)[i] for i, g in enumerate(singles)}
    shifts = {"control": np.zeros(D), **basis}
    shifts[f"A{sep}B"] = basis["A"] + basis["B"]
    shifts[f"C{sep}E"] = basis["C"] + basis["E"] if double_shift is None else double_shift
    shifts[f"F{sep}Z"] = basis["F"]  # Z has no single: not evaluable
    labels = np.repeat(list(shifts), n)
    X = np.stack([shifts[lab] for lab in labels]) + 1.0
    a = ad.AnnData(np.abs(np.random.default_rng(0).normal(size=(len(labels), 3))).astype(np.float32))
    a.var_names = singles[:3] if genes_in_var else ["x", "y", "z"]
    a.obs["perturbation"] = pd.Categorical(labels)
    a.obsm["X_rep"] = X
    return a


def test_additive_doubles_have_cosine_one():
    a = _toy()
    with pytest.warns(UserWarning, match="no measured target"):
        perturbation_arithmetic(a, use_rep="X_rep", n_random=50)
    r = a.uns["perturbation_arithmetic"]
    t = r["table"].set_index("double")
    assert list(t.index) == ["A+B", "C+E"]
    np.testing.assert_allclose(t["observed"], 1.0)
    # random pairs of orthogonal basis vectors sharing ≤ 1 with the double: cos ∈ {0, 0.5}
    assert (t["random_mean"] < 1.0).all() and t["beats_random"].all()
    s = r["summary"]
    assert s["n_doubles"] == 2 and s["n_beating"] == 2 and s["skipped_doubles"] == ["F+Z"]
    assert r["params"]["sep"] == "+"


def test_known_cosine_and_separators():
    shift = np.eye(D)[2] + np.eye(D)[6]  # δ_C + e_6: cos(e2 + e6, e2 + e3) = 1/2
    for sep in ("_", "|"):
        a = _toy(sep=sep, double_shift=shift)
        with pytest.warns(UserWarning, match="no measured target"):
            perturbation_arithmetic(a, use_rep="X_rep", n_random=10, key_added="pa")
        t = a.uns["pa"]["table"].set_index("double")
        assert t.loc[f"C{sep}E", "observed"] == pytest.approx(0.5)
        assert a.uns["pa"]["params"]["sep"] == sep


def test_spaced_labels_mixed_separators_and_the_plot_after_key_added():
    """'A + B' is the double of A and B; a label with another separator is said to be read as a single gene; the
    plot finds a result stored under key_added and highlights one label given as a string."""
    import matplotlib as mpl

    mpl.use("Agg")
    a = _toy(sep=" + ")
    with pytest.warns(UserWarning, match="no measured target"):
        perturbation_arithmetic(a, use_rep="X_rep", n_random=10, key_added="pa")
    assert sorted(a.uns["pa"]["table"]["double"]) == ["A + B", "C + E"]
    with pytest.raises(KeyError, match=r"uns\['pa'\] holds such a result .*pass key='pa'"):
        bj.pl.perturbation_arithmetic(a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = bj.pl.perturbation_arithmetic(a, key="pa", highlight="A + B")
    assert [t.get_text() for t in ax.texts] == ["A–B"]
    mixed = _toy()
    mixed.obs["perturbation"] = mixed.obs["perturbation"].cat.rename_categories({"F+Z": "F_G"})
    with pytest.warns(UserWarning, match=r"1 condition\(s\) hold a separator other than '\+' .*\['F_G'\]"):
        perturbation_arithmetic(mixed, use_rep="X_rep", n_random=10)


def test_parse_and_random_pairs():
    singles, doubles, sep = parse_perturbations(["ctrl", "A+ctrl", "B", "A+B", "A+B+C"], control="ctrl")
    assert singles == {"A": "A+ctrl", "B": "B"} and doubles == {"A+B": ("A", "B")} and sep == "+"
    names = ["A", "B", "C", "E"]
    bins = {"A": 0, "C": 0, "B": 1, "E": 1}
    ia, ib, r = random_pairs("A", "B", names, bins, 100, np.random.default_rng(0))
    pairs = {(names[i], names[j]) for i, j in zip(ia, ib)}
    assert r == 0 and pairs == {("A", "E"), ("C", "B"), ("C", "E")}
    ia, ib, r = random_pairs("A", "B", ["A", "B", "C"], {"A": 0, "B": 3, "C": 1}, 20, np.random.default_rng(0))
    assert r == 1 and {("ABC"[i], "ABC"[j]) for i, j in zip(ia, ib)} == {("C", "B")}


def test_expression_matching_and_reproducibility():
    a = _toy(genes_in_var=True)
    kw = dict(use_rep="X_rep", n_random=30, n_cells=2, n_controls=3, target_expression={"E": 0.1, "F": 2.0, "G": 3.0})
    r1 = perturbation_arithmetic(a, random_state=7, copy=True, **kw).uns["perturbation_arithmetic"]
    r2 = perturbation_arithmetic(a, random_state=7, copy=True, **kw).uns["perturbation_arithmetic"]
    pd.testing.assert_frame_equal(r1["table"], r2["table"])
    assert set(r1["table"]["null_matched"]) == {"both"}
    assert r1["params"]["covariate"]["G"] == 3.0
    assert "perturbation_arithmetic" not in a.uns


def test_bad_inputs_leave_adata_unchanged():
    a = _toy()
    with pytest.raises(KeyError, match="obsm"):
        perturbation_arithmetic(a, use_rep="X_missing")
    with pytest.raises(ValueError, match="control"):
        perturbation_arithmetic(a, use_rep="X_rep", control="NT")
    b = a[~a.obs["perturbation"].isin(["A+B", "C+E"])].copy()
    with pytest.raises(ValueError, match="No double"):
        perturbation_arithmetic(b, use_rep="X_rep")
    lab = a.obs["perturbation"].to_numpy()
    few = a[~(np.isin(lab, ["A+B", "C+E"]) & (np.arange(a.n_obs) % 4 > 1))].copy()  # 2 cells per double
    with pytest.raises(ValueError, match="No double"), pytest.warns(UserWarning, match="min_cells"):
        perturbation_arithmetic(few, use_rep="X_rep", min_cells=3)
    with pytest.raises(ValueError, match="control"):
        perturbation_arithmetic(a[a.obs["perturbation"] != "control"].copy(), use_rep="X_rep")
    assert "perturbation_arithmetic" not in a.uns



@pytest.mark.parametrize(("kw", "exc", "pattern"), [
    (dict(random_state=-1), ValueError, r"`random_state` must be an integer >= 0, got -1\. Pass .*`random_state=0`"),
    (dict(random_state=0.5), TypeError, r"`random_state` must be an integer >= 0, got 0\.5"),
])
def test_random_state_is_checked_before_any_work(kw, exc, pattern, monkeypatch):
    """Issue 46: ``random_state=-1`` used to surface as numpy's own message, from inside the tool."""
    monkeypatch.setattr("biomjepa.tl._perturb._check_keys", lambda *a, **k: pytest.fail("the data were read"))
    a = _toy()
    with pytest.raises(exc, match=pattern):
        perturbation_arithmetic(a, use_rep="X_rep", **kw)
    assert "perturbation_arithmetic" not in a.uns


# ---------------------------------------------------------------- NaN labels and non-finite representations
@pytest.mark.filterwarnings("ignore:.*no measured target gene")
@pytest.mark.filterwarnings("ignore:.*Wilcoxon test needs")
def test_perturbation_arithmetic_drops_nan_labels():
    singles = ["A", "B", "C", "E"]
    basis = {g: np.eye(6)[i] for i, g in enumerate(singles)}
    shifts = {"control": np.zeros(6), **basis, "A+B": basis["A"] + basis["B"]}
    labels = np.repeat(list(shifts), 4).astype(object)
    X = np.stack([shifts[lab] for lab in labels]) + 1.0
    labels = np.concatenate([labels, [np.nan] * 3])
    X = np.concatenate([X, np.full((3, 6), 50.0)])  # far-away unlabelled cells must not be a condition
    a = ad.AnnData(np.ones((len(labels), 2), np.float32))
    a.var_names = ["x", "y"]
    a.obs["perturbation"] = labels
    a.obsm["X_rep"] = X
    with pytest.warns(UserWarning, match=r"Dropping 3 of 27 cells without a label in obs\['perturbation'\]"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5)
    t = a.uns["perturbation_arithmetic"]["table"]
    assert list(t["double"]) == ["A+B"] and "nan" not in a.uns["perturbation_arithmetic"]["params"]["covariate"]
    np.testing.assert_allclose(t["observed"], 1.0)


def test_perturbation_arithmetic_refuses_non_finite_representations():
    labels = ["control"] * 8 + [g for g in ("A", "B", "C", "D", "A+B", "C+D") for _ in range(4)]
    a = ad.AnnData(np.zeros((len(labels), 4), dtype=np.float32))
    a.obs["perturbation"] = pd.Categorical(labels)
    a.obsm["X_rep"] = np.random.default_rng(1).normal(size=(len(labels), 6))
    with pytest.warns(UserWarning, match="no measured target gene"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5, copy=True)  # finite: fine
    a.obsm["X_rep"][10, 2] = np.nan
    with pytest.raises(ValueError, match=r"finite.*1 row\(s\).*\[10\]"):
        bj.tl.perturbation_arithmetic(a, use_rep="X_rep", n_random=5)
    assert "perturbation_arithmetic" not in a.uns
