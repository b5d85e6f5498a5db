"""Real-data smoke tests on ../shared/data (skipped in a fresh clone)."""

from __future__ import annotations

import numpy as np
import pytest

from biomjepa import bench

pytestmark = [pytest.mark.slow, pytest.mark.shared]


def test_baron_pca_annotation_clustering(shared_data):
    import anndata as ad

    a = ad.read_h5ad(shared_data / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad")
    a = a[:, np.asarray(a.X.sum(0)).ravel() > 50].copy()  # fewer genes, faster PCA
    df = bench.run(a, label_key="cell_type1", tasks=["annotation", "clustering", "geometry"], use_reps=[], baselines=["pca"],
                   seeds=(42,), task_kwargs={"annotation": {"shots": (5,)}})
    v = df.set_index(["task", "metric"])["value"]
    assert v["annotation", "macro_f1"] > 0.6
    assert v["clustering", "nmi"] > 0.6
    assert 2 < v["geometry", "effective_rank"] < 50


def test_norman_perturbation_pca(shared_data):
    import anndata as ad

    a = ad.read_h5ad(shared_data / "scrna" / "norman2019_mcfaline2023_subset_500genes.h5ad")
    a = a[a.obs["dataset"] == "norman19"].copy()
    df = bench.perturbation(a, use_reps=[], baselines=["pca"], layer="counts_reconstructed", shots=(5,), seeds=(42,),
                            max_epochs=5)
    split = df.attrs["split"]
    assert len(split["unseen_single"]) == 4 and len(split["unseen_combo"]) == 5
    v = df.set_index("metric")["value"]
    assert np.isfinite(v["pearson_lfc_all"]) and 0 <= v["top50_response_all"] <= 1
