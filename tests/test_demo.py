"""``biomjepa demo`` (``run_demo``): Leiden on the BioM-JEPA graph, a two-panel PNG, the ARI in its message."""

from __future__ import annotations

import re

import anndata as ad
import pytest


@pytest.mark.slow
def test_run_demo_clusters_with_leiden(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    from matplotlib.image import imread

    from biomjepa.cli.demo import run_demo

    monkeypatch.setattr("biomjepa._progress.interactive", lambda: True)  # as on a terminal

    out = run_demo(tmp_path, checkpoint=tiny_checkpoint, device="cpu")
    assert re.search(r"\d+ Leiden clusters, ARI vs cell type -?\d\.\d\d$", out["message"]), out["message"]
    assert "demo: 100%" in capsys.readouterr().err  # progress by default (the demo runs for more than 2 s)
    adata = ad.read_h5ad(out["h5ad"])
    assert adata.obs["leiden"].nunique() > 1 and "connectivities" in adata.obsp
    assert adata.uns["leiden"]["params"]["n_iterations"] == 2
    height, width = imread(out["png"]).shape[:2]
    assert width > 1.8 * height  # two panels side by side: cell type and Leiden cluster
