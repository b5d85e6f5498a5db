"""``bj.tl.ablate_programme``: exact displacement/excess, matched nulls, determinism, bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from _inputs import _with_nan_groups

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.tl._ablate import ablate_programme, displacement, excess, matched_test
from biomjepa.tl._null import expression_bins, matched_random_set, quantile_bins


def test_displacement_and_excess_exact():
    z = np.array([[0.0, 0.0], [1.0, 1.0]])
    za = np.array([[3.0, 4.0], [1.0, 1.0]])
    d = displacement(z, za)
    np.testing.assert_allclose(d, [5.0, 0.0])
    d_null = np.array([[1.0, 2.0], [3.0, 0.0]])  # [n_random, n]
    np.testing.assert_allclose(excess(d, d_null), [3.0, -1.0])


def test_quantile_bins_and_matching_stays_in_bin():
    rng = np.random.default_rng(0)
    mean, det = rng.gamma(1.0, size=500), rng.uniform(size=500)
    bins = expression_bins(mean, det, n_bins=5)
    assert bins.min() == 0 and bins.max() == 4
    assert np.bincount(quantile_bins(np.arange(100), 4)).tolist() == [25, 25, 25, 25]
    genes = np.arange(1000, 1500)
    prog = genes[rng.choice(500, 12, replace=False)]
    m = matched_random_set(prog, genes, bins, np.random.default_rng(1))
    assert len(set(m.genes)) == 12 and not set(m.genes) & set(prog) and m.widened == []
    pos = {g: i for i, g in enumerate(genes)}
    for a, b in zip(prog, m.genes):
        assert (bins[pos[a]] == bins[pos[b]]).all()
    again = matched_random_set(prog, genes, bins, np.random.default_rng(1))
    assert (again.genes == m.genes).all()


def test_matching_widens_when_bin_exhausted():
    genes = np.arange(6)
    bins = np.array([[0, 0], [0, 0], [1, 1], [1, 1], [3, 3], [3, 3]])
    m = matched_random_set(np.array([0, 1]), genes, bins, np.random.default_rng(0))
    assert set(m.genes) == {2, 3} and sorted(r for *_, r in m.widened) == [1, 1]


def test_matched_test_table():
    rows = []
    for prog, grp in [("p1", "a"), ("p2", "b"), ("p3", "c")]:
        for g in "abc":
            rows += [(prog, g, 2.0 if g == grp else 0.5)] * 2
    table = pd.DataFrame(rows, columns=["programme", "group", "excess"])
    res, test = matched_test(table, {"p1": "a", "p2": "b", "p3": "c"})
    assert res["matched_excess"].tolist() == [2.0] * 3 and res["other_excess"].tolist() == [0.5] * 3
    assert test["n"] == 3 and test["statistic"] == 0.0 and test["pvalue"] == pytest.approx(0.25)


def _programmes(adata):
    X = adata.X.toarray()
    order = np.argsort(-(X > 0).mean(0)[:300])
    names = adata.var_names[:300][order]
    return {"p1": list(names[:5]), "p2": list(names[5:10]), "p3": list(names[10:15])}


def test_ablate_contract_and_reproducible(mapped, tiny_checkpoint):
    progs = _programmes(mapped)
    kw = dict(groupby="group", n_cells=6, checkpoint=tiny_checkpoint, random_state=3, n_bins=4)
    out = ablate_programme(mapped, progs, matched={"p1": "a", "p2": "b", "p3": "c"}, copy=True, **kw)
    assert "ablation" not in mapped.uns
    r = out.uns["ablation"]
    assert len(r["cells"]) == 3 * 3 * 6 and np.isfinite(r["cells"]["excess"]).all()
    assert (r["cells"]["displacement"] > 0).all()
    assert set(r["groups"].columns) >= {"programme", "group", "n_cells", "excess"}
    assert r["test"]["n"] == 3 and np.isfinite(r["test"]["pvalue"])
    nulls = r["null_sets"]
    assert len(nulls) == 15 and (nulls["widened"] > 0).sum() < 15
    same = nulls["widened"] == 0
    assert (nulls.loc[same, "programme_mean_bin"] == nulls.loc[same, "random_mean_bin"]).all()
    assert (nulls.loc[same, "programme_detection_bin"] == nulls.loc[same, "random_detection_bin"]).all()
    assert not set(nulls["random_gene"]) & {g for v in progs.values() for g in v}
    again = ablate_programme(mapped, progs, matched={"p1": "a", "p2": "b", "p3": "c"}, copy=True, **kw)
    pd.testing.assert_frame_equal(again.uns["ablation"]["cells"], r["cells"])


def test_single_programme_obs_column(mapped, tiny_checkpoint):
    prog = _programmes(mapped)["p1"]
    with pytest.warns(UserWarning, match="left out"):
        ablate_programme(mapped, [*prog, "NOTAGENE0", "NOT_IN_VOCAB"], groupby="group", n_cells=4,
                         checkpoint=tiny_checkpoint, n_random=2)
    col = mapped.obs["ablation_excess"]
    assert col.notna().sum() == 12 and col.isna().sum() == 48
    assert mapped.uns["ablation"]["params"]["left_out"]["programme"] == ["NOTAGENE0", "NOT_IN_VOCAB"]


def test_lower_case_programme_genes_are_named_with_the_fix(mapped, tiny_checkpoint):
    prog = [g.lower() for g in _programmes(mapped)["p1"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"5 of them are vocabulary symbols in another case .*g\.upper\(\)"):
            ablate_programme(mapped, prog, groupby="group", n_cells=4, checkpoint=tiny_checkpoint, n_random=2)


def test_params_record_the_input(mapped, tiny_checkpoint):
    """Issue 46: the record names what was read, as tl.embed's does (it used to omit ``input``)."""
    from scipy import sparse

    kw = dict(n_cells=4, checkpoint=tiny_checkpoint, copy=True)
    prog = _programmes(mapped)["p1"]
    assert ablate_programme(mapped, prog, **kw).uns["ablation"]["params"]["input"] == "counts"
    b = mapped.copy()
    X = b.X.toarray().astype(np.float64)
    b.obs["total_counts"] = X.sum(axis=1)
    b.X = sparse.csr_matrix(np.log1p(1e4 * X / X.sum(axis=1, keepdims=True)))
    params = ablate_programme(b, prog, input="lognorm", library_size_key="total_counts", **kw).uns["ablation"]["params"]
    assert params["input"] == "lognorm" and params["library_size_key"] == "total_counts"


@pytest.mark.parametrize(("kw", "exc", "pattern"), [
    (dict(n_bins=2.5), TypeError, r"`n_bins` must be an integer >= 1, got 2\.5\. Pass a whole number, e\.g\. `n_bins=10`"),
    (dict(n_bins=0), ValueError, r"`n_bins` must be an integer >= 1, got 0"),
    (dict(random_state=-1), ValueError, r"`random_state` must be an integer >= 0, got -1\. Pass .*`random_state=0`"),
    (dict(n_cells=1.5), TypeError, r"`n_cells` must be an integer >= 2"),
])
def test_counts_and_seed_are_checked_before_any_work(mapped, tiny_checkpoint, monkeypatch, kw, exc, pattern):
    """Issue 46: ``n_bins=2.5`` used to fail inside numpy after a pass over the data."""
    from biomjepa import _pretrained

    monkeypatch.setattr(_pretrained, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr("biomjepa.tl._ablate.scan_gene_stats", lambda *a, **k: pytest.fail("the data were read"))
    before = set(mapped.uns), set(mapped.obs.columns)
    with pytest.raises(exc, match=pattern):
        ablate_programme(mapped, _programmes(mapped)["p1"], checkpoint=tiny_checkpoint, **kw)
    assert (set(mapped.uns), set(mapped.obs.columns)) == before


def test_ablate_bad_input_leaves_adata_unchanged(mapped, tiny_checkpoint):
    kw = dict(groupby="group", checkpoint=tiny_checkpoint)
    with pytest.raises(ValueError, match="no gene"), pytest.warns(UserWarning, match="left out"):
        ablate_programme(mapped, ["NOTAGENE1", "FOO"], **kw)
    with pytest.raises(KeyError, match="unknown programmes"):
        ablate_programme(mapped, {"p": [mapped.var_names[0]]}, matched={"q": "a"}, **kw)
    with pytest.raises(KeyError, match=r"not in adata\.obs"):
        ablate_programme(mapped, {"p": [mapped.var_names[0]]}, matched={"p": "zzz"}, **kw)
    mapped.obs["group"] = ["lonely"] + ["a"] * 59
    with pytest.raises(ValueError, match="at least 2"):
        ablate_programme(mapped, {"p": [mapped.var_names[0]]}, matched={"p": "lonely"}, **kw)
    with pytest.raises(ValueError, match="graph="):
        ablate_programme(mapped, ("bfs", "INS", 50), **kw)
    with pytest.raises(FileNotFoundError, match=r"GeneGraph\.save"):
        ablate_programme(mapped, ("bfs", "INS", 50), graph="/nonexistent/graph", **kw)
    assert "ablation" not in mapped.uns and "ablation_excess" not in mapped.obs


def test_graph_programme_from_saved_graph(mapped, tiny_checkpoint, tmp_path):
    from scipy import sparse

    from biomjepa.data.graph import GeneGraph, NeighbourTable

    V = Vocab.default().size
    src = np.arange(1000, 1299)
    A = sparse.csr_matrix((np.ones(len(src)), (src, src + 1)), shape=(V, V))  # chain 1000 → 1001 → …
    GeneGraph(NeighbourTable.from_csr(A), NeighbourTable.from_csr(A)).save(tmp_path / "g")
    seed = str(Vocab.default().symbols[1000])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # chain genes not detected in adata are left out
        ablate_programme(mapped, ("bfs", seed, 8), graph=tmp_path / "g", groupby="group", n_cells=4,
                         checkpoint=tiny_checkpoint)
    r = mapped.uns["ablation"]
    name = f"bfs:{seed}:8"
    chain = [str(s) for s in Vocab.default().symbols[1000:1008]]
    used = r["params"]["programmes"][name]
    assert set(used) <= set(chain) and sorted(used + r["params"]["left_out"][name]) == sorted(chain)
    assert set(r["cells"]["programme"]) == {name} and mapped.obs["ablation_excess"].notna().sum() == 12


# --------------------------------------------------------------------------- NaN labels
@pytest.mark.filterwarnings("ignore:Programme genes not in the vocabulary")
def test_ablate_programme_never_samples_nan_labels(mapped, tiny_checkpoint):
    _with_nan_groups(mapped)
    with pytest.warns(UserWarning, match="Dropping 5 of 60 cells"):
        bj.tl.ablate_programme(mapped, {"p": list(mapped.var_names[:3])}, groupby="group", n_cells=4,
                               checkpoint=tiny_checkpoint)
    cells = mapped.uns["ablation"]["cells"]
    assert set(cells["group"]) == {"a", "b", "c"}
    assert not set(cells["cell"]) & set(mapped.obs_names[:5])
