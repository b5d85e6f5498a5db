"""Baselines read counts where there are counts and take log-normalized values as such (issue 30 item 1a).

They follow ``bj.tl.embed``'s ``layer=`` / ``use_raw=`` / ``input=`` conventions and refuse what they cannot
tell; the log-normalized ``bj.datasets.pbmc_chemistries()`` was normalized and logged a second time before.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa import bench
from biomjepa.bench.baselines import fit_pca
from biomjepa.bench.integration import cross_batch_share


@pytest.fixture(scope="module")
def pbmc():
    """150 cells of the bundled log-normalized PBMCs (three chemistries), no counts anywhere."""
    a = bj.datasets.pbmc_chemistries()
    rng = np.random.default_rng(0)
    return a[np.sort(rng.choice(a.n_obs, 150, replace=False))].copy()


def test_log_normalized_x_is_refused_as_counts_and_nothing_written(pbmc):
    a = pbmc.copy()
    with pytest.raises(ValueError, match=r"input='lognorm'") as err:
        bench.integration(a, batch_key="chemistry", use_reps=[], baselines=["pca", "hvg"])
    assert "does not look like raw counts" in str(err.value)
    assert list(a.obsm) == [] and (a.X != pbmc.X).nnz == 0


@pytest.mark.parametrize("key", ["total_counts", None])
def test_lognorm_baselines_take_the_values_as_such(pbmc, key):
    a = pbmc.copy()
    bench.add_baselines(a, ["hvg", "pca"], input="lognorm", library_size_key=key)  # warnings are errors here
    _, pca = fit_pca(a, input="lognorm", library_size_key=key)
    # the HVG baseline is the user's own log-normalized values of those genes, not log1p of them again
    np.testing.assert_allclose(a.obsm["X_hvg"], pbmc.X[:, pca.genes].toarray(), atol=1e-5)
    np.testing.assert_allclose(a.obsm["X_pca50"], fit_pca(a, input="lognorm")[0], atol=1e-4)
    assert (a.X != pbmc.X).nnz == 0


def test_integration_scores_lognorm_baselines_on_the_values(pbmc):
    a = pbmc.copy()
    df = bench.integration(a, batch_key="chemistry", use_reps=[], baselines=["pca", "hvg"], input="lognorm",
                           library_size_key="total_counts")
    share = df.set_index("rep")["value"]
    # the same numbers as scoring X's own HVG columns directly
    Z = a.obsm["X_hvg"]
    direct = cross_batch_share(Z, a.obs["chemistry"].to_numpy())
    assert share["X_hvg"] == pytest.approx(direct)
    assert 0.3 < share["X_pca50"] < 0.47 and 0.3 < share["X_hvg"] < 0.47  # double-logged: 0.50 / 0.54


def test_counts_in_raw_are_pointed_to_and_read(pbmc):
    a = pbmc.copy()
    counts = sparse.csr_matrix(np.rint(np.expm1(a.X.toarray()) * a.obs["total_counts"].to_numpy()[:, None] / 1e4))
    import anndata as ad

    a.raw = ad.AnnData(counts, var=a.var)
    with pytest.raises(ValueError, match=r"use_raw=True"):
        bench.add_baselines(a, ["hvg"])
    bench.add_baselines(a, ["hvg"], use_raw=True)
    b = pbmc.copy()
    bench.add_baselines(b, ["hvg"], input="lognorm", library_size_key="total_counts")
    np.testing.assert_allclose(a.obsm["X_hvg"], b.obsm["X_hvg"], atol=1e-4)


def test_scaled_values_are_refused_as_lognorm(pbmc):
    a = pbmc.copy()
    a.X = a.X * 1.7  # neither counts nor log1p(normalize_total)
    with pytest.raises(ValueError, match=r"log1p"):
        bench.add_baselines(a, ["pca"], input="lognorm", library_size_key="total_counts")
    assert list(a.obsm) == []


def test_bad_source_arguments_fail_before_work(blobs):
    with pytest.raises(ValueError, match=r"input='lognorme' is not an input kind"):
        bench.add_baselines(blobs, ["pca"], input="lognorme")
    with pytest.raises(ValueError, match=r"adata.raw is None"):
        bench.run(blobs, label_key="cell_type", tasks=["geometry"], use_reps="X_emb", use_raw=True)
    with pytest.raises(KeyError, match=r"library_size_key='nope'"):
        bench.add_baselines(blobs, ["pca"], input="lognorm", library_size_key="nope")
    assert "X_pca50" not in blobs.obsm


def test_run_passes_input_to_every_count_reader(pbmc):
    a = pbmc.copy()
    a.obsm["X_emb"] = np.random.default_rng(0).normal(size=(a.n_obs, 4)).astype(np.float32)
    df = bench.run(a, tasks=["geometry"], use_reps="X_emb", baselines=["pca"], input="lognorm",
                   library_size_key="total_counts", seeds=(42,))
    depth = df[(df.rep == "X_emb") & (df.metric == "depth_mean")]["value"]
    assert np.isfinite(depth).all()



def test_bench_command_speaks_in_flags(pbmc, tmp_path, capsys):
    """``biomjepa bench`` offers --input / --use-raw / --library-size-key and names them in its messages."""
    from biomjepa.cli import main

    path = tmp_path / "pbmc.h5ad"
    pbmc.write_h5ad(path)
    common = [str(path), "--baselines", "pca", "--tasks", "geometry", "--out", str(tmp_path / "o")]
    assert main(["bench", *common]) == 1
    err = capsys.readouterr().err
    assert "--input lognorm" in err and "input='lognorm'" not in err
    assert main(["bench", *common, "--use-raw"]) == 1
    err = capsys.readouterr().err
    assert "--use-raw, but adata.raw is None" in err and "Drop --use-raw" in err
    assert main(["bench", *common, "--input", "lognorm", "--library-size-key", "total_counts"]) == 0
    assert (tmp_path / "o" / "bench.csv").is_file()
