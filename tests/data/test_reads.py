"""Plate-based read counts on the droplet value scale (input="reads", corpus spec counts: reads)."""

import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa.data.anndata_source import counts_view
from biomjepa.data.reads import molecule_equivalents
from biomjepa.data.stream import gather
from biomjepa.data.tokenize import SCALE, tokenize
from biomjepa.data.vocab import Vocab


def _reads(n=6, genes=300, depth=1_000_000, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(genes, 0.05), size=n)
    X = np.stack([rng.multinomial(depth, row) for row in p]).astype(np.float32)
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=Vocab.default().symbols[:genes]))
    bj.pp.map_vocab(a)
    return a


def test_kept_genes_keep_their_read_values_and_sub_molecule_genes_go():
    counts = sparse.csr_matrix(np.array([[1.0, 50.0, 500_000.0, 0.0], [3.0, 0.0, 0.0, 0.0]]))
    totals = np.array([1_000_000.0, 2_000_000.0])
    per, library = molecule_equivalents(counts, totals)
    np.testing.assert_array_equal(library, [SCALE, SCALE])
    raw, eq = tokenize(counts, totals), tokenize(per, library)
    assert eq.genes[: eq.indptr[1]].tolist() == [2]  # 1 and 50 reads of 1 M: under one unit per 10,000
    np.testing.assert_allclose(eq.values[0], raw.values[2], rtol=1e-6)  # the kept gene's value is unchanged
    assert eq.lengths[1] == 1  # a cell with every gene under one unit keeps its largest


def test_a_deeper_sequencing_of_the_same_cell_gives_the_same_tokens():
    """Reads scale with sequencing depth, molecules do not: 10× the reads must not change what the model reads."""
    a = _reads()
    deep = a.copy()
    deep.X = a.X * 10
    one, ten = (gather(counts_view(x, input="reads"), np.arange(x.n_obs)) for x in (a, deep))
    np.testing.assert_array_equal(one.genes, ten.genes)
    np.testing.assert_allclose(one.values, ten.values, rtol=1e-6)
    np.testing.assert_array_equal(one.library, ten.library)
    as_umi = gather(a, np.arange(a.n_obs))
    assert (as_umi.values < np.log(2)).mean() > 0.3  # read as UMIs, most tokens sit far under a droplet's smallest
    assert (one.values >= np.log(2) - 1e-6).all()


def test_read_depth_counts_read_as_umis_warn_and_name_the_fix():
    a = _reads(depth=500_000)
    with pytest.warns(UserWarning, match="input='reads'"):
        gather(a, np.arange(a.n_obs))
    with pytest.raises(ValueError, match="'reads'"):
        counts_view(a, input="read")


def test_umi_depth_counts_declared_as_reads_warn_and_name_the_fix():
    a = _reads(depth=5_000)  # droplet depth
    with pytest.warns(UserWarning, match="input='counts'"):
        gather(counts_view(a, input="reads"), np.arange(a.n_obs))
    deep = _reads(depth=500_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gather(counts_view(deep, input="reads"), np.arange(deep.n_obs))  # read depth declared as reads: silent


def test_embed_records_reads_and_leaves_x_unchanged():
    a = _reads(n=4, genes=2000)
    before = a.X.copy()
    bj.tl.embed(a, input="reads")
    assert a.uns["biomjepa"]["params"]["input"] == "reads"
    assert (before != a.X).nnz == 0
    assert np.isfinite(a.obsm["X_biomjepa"]).all()


@pytest.mark.slow
def test_plate_reads_reach_the_encoder_on_the_droplet_scale(shared_data):
    """Darmanis brain (C1 reads) read as molecule equivalents: per-cell token count and value quantiles within the
    range of droplet PBMCs, where as raw counts 64 % of its tokens fell under the droplet minimum."""
    def tokens(name, kind):
        x = ad.read_h5ad(shared_data / "scrna" / name)[:200].copy()
        bj.pp.map_vocab(x)
        return gather(counts_view(x, input=kind), np.arange(x.n_obs))

    brain = tokens("darmanis2015_brain_466cells_raw.h5ad", "reads")
    pbmc = tokens("pbmc4k_2170cells_raw.h5ad", "counts")
    assert 0.5 < np.median(brain.lengths) / np.median(pbmc.lengths) < 3
    assert abs(np.median(brain.values) - np.median(pbmc.values)) < 0.5
    assert np.quantile(brain.values, 0.01) >= np.log(2) - 1e-6
