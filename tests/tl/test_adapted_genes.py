"""Query cells outside an adaptation (issue 57 item 3): ``bj.tl.adapt`` records the genes its cells detected in the
checkpoint, and ``bj.tl.embed`` warns, with the share, when a query's counts lean on other genes."""

from __future__ import annotations

import json
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa.data.adapted_genes import KEY, adapted_mask, genes_record
from biomjepa.data.vocab import Vocab
from biomjepa.model import load_checkpoint, save_checkpoint

G = 400


def cells(n: int, on: slice, seed: int = 0) -> ad.AnnData:
    """``n`` cells over the first ``G`` vocabulary genes, with counts only on genes ``on``."""
    rng = np.random.default_rng(seed)
    X = np.zeros((n, G), dtype=np.float32)
    width = len(range(G)[on])
    X[:, on] = rng.poisson((0.5 + rng.gamma(2, 1, size=width)) * rng.uniform(0.5, 2, size=(n, 1)))
    X[:, on.start] += 1  # every cell has a count
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:G])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.var["biomjepa_token"] = np.arange(G)
    return a


@pytest.fixture(scope="module")
def adapted(tiny_checkpoint, tmp_path_factory) -> str:
    """The tiny checkpoint, recorded as adapted on the first 300 vocabulary genes."""
    mask = np.zeros(Vocab.default().size, dtype=bool)
    mask[:300] = True
    out = tmp_path_factory.mktemp("adapted") / "ck"
    return str(save_checkpoint(load_checkpoint(tiny_checkpoint), out, provenance={KEY: genes_record(mask)}))


def test_the_record_round_trips_through_the_checkpoint(adapted):
    mask = adapted_mask(bj.load_model(adapted).info)
    assert mask.shape == (Vocab.default().size,) and mask[:300].all() and not mask[300:].any()


def test_a_query_leaning_on_genes_the_adaptation_never_saw_is_warned_with_the_share(adapted):
    query = cells(20, slice(200, 400))  # half its genes outside the 300
    with pytest.warns(UserWarning, match=r"bj.tl.embed: \d+\.\d% of these cells' counts .* fall on 100 genes") as rec:
        bj.tl.embed(query, checkpoint=adapted)
    share = float(str(rec[0].message).split(": ", 1)[1].split("%")[0]) / 100
    X = query.X.toarray()
    assert share == pytest.approx(X[:, 300:].sum() / X.sum(), abs=1e-3)
    assert "X_biomjepa" in query.obsm


def test_no_warning_inside_the_adapted_genes_or_without_the_record(adapted, tiny_checkpoint):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bj.tl.embed(cells(20, slice(0, 300)), checkpoint=adapted)
        bj.tl.embed(cells(20, slice(200, 400)), checkpoint=tiny_checkpoint)  # an old checkpoint: no record


def test_the_cli_embed_prints_the_warning(adapted, tmp_path, capsys):
    from biomjepa.cli import main

    cells(20, slice(200, 400)).write_h5ad(tmp_path / "q.h5ad")
    assert main(["embed", str(tmp_path / "q.h5ad"), str(tmp_path / "o.h5ad"), "--checkpoint", adapted]) == 0
    assert "biomjepa embed: warning: bj.tl.embed: " in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:The input measures only:UserWarning")
def test_adapt_records_the_genes_its_cells_detected(tmp_path, tiny_checkpoint, monkeypatch):
    monkeypatch.setattr(bj.settings, "_cachedir", tmp_path / "cache")
    adata = cells(200, slice(0, 250))
    X = adata.X.toarray()
    X[:, 100] = 0  # one gene inside the range without counts
    adata.X = sparse.csr_matrix(X)
    bj.tl.adapt(adata, tiny_checkpoint, steps=1, out_dir=tmp_path / "ck")
    rec = json.loads((tmp_path / "ck" / "config.json").read_text())["provenance"][KEY]
    assert rec["n_genes"] == 249 and rec["vocab_size"] == Vocab.default().size
    mask = adapted_mask(bj.load_model(str(tmp_path / "ck")).info)
    assert np.array_equal(np.flatnonzero(mask), np.delete(np.arange(250), 100))
    assert KEY not in adata.uns["biomjepa"]["adapt"]  # in the checkpoint, not copied into uns


def test_the_atlas_command_warns_once_with_the_share_over_every_cell_it_embedded(adapted, tmp_path, capsys):
    from biomjepa.cli.atlas import main
    from biomjepa.embed import embed_atlas

    inside, outside = cells(30, slice(0, 300), seed=1), cells(10, slice(200, 400), seed=2)
    inside.write_h5ad(tmp_path / "a.h5ad")
    outside.write_h5ad(tmp_path / "b.h5ad")
    inputs = [str(tmp_path / "a.h5ad"), str(tmp_path / "b.h5ad")]
    X = np.vstack([inside.X.toarray(), outside.X.toarray()])
    with pytest.warns(UserWarning, match=r"embed_atlas: \d+\.\d% of these cells' counts .* fall on 100 genes") as rec:
        embed_atlas(inputs, tmp_path / "s.zarr", checkpoint=adapted, block_rows=8, device="cpu", rank=0, world=1)
    said = [str(w.message) for w in rec if "never detected" in str(w.message)]
    assert len(said) == 1  # once, for the whole command, not per block or per input
    share = float(said[0].split(": ", 1)[1].split("%")[0]) / 100
    assert share == pytest.approx(X[:, 300:].sum() / X.sum(), abs=1e-3)
    assert main([*inputs, "--store", str(tmp_path / "t.zarr"), "--checkpoint", adapted, "--device", "cpu"]) == 0
    assert capsys.readouterr().err.count("biomjepa embed: warning: embed_atlas: ") == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "The input measures only", UserWarning)
        embed_atlas(inputs[:1], tmp_path / "u.zarr", checkpoint=adapted, block_rows=8, device="cpu", rank=0, world=1)
