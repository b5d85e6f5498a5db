import numpy as np
import pandas as pd
import pytest
import torch
from _kit import tiny_config

from biomjepa.train import export, pretrain


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


@pytest.mark.parametrize("objective", ["block", "token", "random_block", "decoder"])
def test_each_objective_runs_and_logs(tmp_path_factory, objective):
    tmp = tmp_path_factory.getbasetemp() / "loop"
    tmp.mkdir(exist_ok=True)
    cfg = tiny_config(tmp, objective=objective, run_name=objective, steps=3, accumulation=2)
    run = pretrain(cfg)
    log = pd.read_csv(run / "log.csv")
    assert list(log["step"]) == [0, 1, 2]
    assert np.isfinite(log["loss"]).all()
    for col in ("lr", "momentum", "coverage", "fallback", "effective_rank", "cells_per_s", "tokens_per_s"):
        assert col in log
    assert (log["coverage"] > 0).all() and (log["coverage"] <= 1).all()
    assert (run / "checkpoints" / "LATEST").is_file()


def test_export_embeds(tmp_path):
    import anndata as ad
    from scipy import sparse

    import biomjepa as bj
    from biomjepa.data.vocab import Vocab
    from biomjepa.model import load_checkpoint

    run = pretrain(tiny_config(tmp_path, steps=2))
    out = export(run, tmp_path / "export")
    model = load_checkpoint(out)
    prov = model.info.get("provenance") or __import__("json").loads((out / "config.json").read_text())["provenance"]
    assert prov["encoder"] == "teacher" and prov["step"] == 2 and prov["config"]["objective"] == "block"
    syms = Vocab.default().symbols[:300]
    X = sparse.random(20, 300, density=0.3, format="csr", random_state=0) * 10
    X.data = np.ceil(X.data)
    adata = ad.AnnData(X=X.astype(np.float32), var=pd.DataFrame(index=list(syms)))
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, checkpoint=str(out))
    assert adata.obsm["X_biomjepa"].shape == (20, 64)
    assert np.isfinite(adata.obsm["X_biomjepa"]).all()


def test_nan_loss_skips_then_stops(tmp_path, monkeypatch):
    import biomjepa.train.loop as loop

    real = loop.compute_objective

    def poisoned(*a, **k):
        terms, aux = real(*a, **k)
        terms.total = terms.total * float("nan")
        return terms, aux

    monkeypatch.setattr(loop, "compute_objective", poisoned)
    cfg = tiny_config(tmp_path, steps=5, max_bad_steps=3, checkpoint_every=100)
    with pytest.raises(FloatingPointError, match="consecutive"):
        pretrain(cfg)
    log = pd.read_csv(tmp_path / "runs" / "block-tiny" / "log.csv")
    assert list(log["bad_steps"]) == [1, 2]
