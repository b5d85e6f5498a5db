"""``bj.pp.map_vocab``: identifier rules, report, errors, matrix formats, backed and real data."""

from __future__ import annotations

import logging
import warnings

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from _inputs import (
    BAD_VALUES,
    HUMAN,
    N_GENES,
    _bad,
    _embed,
    idx,
    make,
    make_raw,
    raises_unchanged,
    symbols,
)
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab
from biomjepa.pp import _vocab


def report(a):
    return a.uns["biomjepa"]["vocab"]


def test_symbols_official():
    a = make([*HUMAN, "NOTAGENE"])
    X0 = a.X.copy()
    assert bj.pp.map_vocab(a) is None
    tok = a.var["biomjepa_token"]
    assert tok.dtype == np.int64
    assert tok.tolist() == [*idx(*HUMAN), -1]
    r = report(a)
    assert (r["n_vars"], r["n_matched"], r["n_tokens"]) == (9, 8, 8)
    assert r["vocab_coverage"] == pytest.approx(8 / 19264)
    assert r["id_type"] == "symbol" and r["species"] == "human"
    assert r["unmapped_examples"] == ["NOTAGENE"]
    assert r["methods"]["official"] == 8 and r["vocab_hash"] == Vocab.default().hash
    assert (a.X != X0).nnz == 0  # X untouched


def test_aliases_and_ambiguous_alias():
    a = make([*HUMAN, "BMAL1", "2F1", "C1ORF112"])
    bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist()[-3:] == [idx("ARNTL")[0], -1, idx("C1orf112")[0]]
    assert report(a)["methods"]["alias"] == 1


def test_ensembl_with_version():
    a = make(["ENSG00000141510.17", "ENSG00000111640.15", "ENSG00000075624", "ENSG99999999999"])
    bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist() == [*idx("TP53", "GAPDH", "ACTB"), -1]
    assert report(a)["id_type"] == "ensembl" and report(a)["methods"]["ensembl"] == 3


def test_entrez():
    a = make(["7157", "2597", "60", "999999999"])
    bj.pp.map_vocab(a, id_type="entrez")
    assert a.var["biomjepa_token"].tolist() == [*idx("TP53", "GAPDH", "ACTB"), -1]
    assert report(a)["id_type"] == "entrez"


def test_mixed_and_duplicates_count_fraction():
    X = np.array([[1, 2, 3, 4, 10], [1, 0, 3, 0, 0]], dtype=np.float32)
    a = make(["TP53", "ENSG00000141510", "GAPDH", "ACTB", "NOTAGENE"], X=X)
    with pytest.warns(UserWarning, match="2 of the 4 mapped genes share a vocabulary token"):
        bj.pp.map_vocab(a)  # half the genes on one token is not the usual alias pair in a transcriptome
    r = report(a)
    assert a.var["biomjepa_token"].tolist() == [*idx("TP53", "TP53", "GAPDH", "ACTB"), -1]
    assert r["id_type"] == "mixed"
    assert (r["n_matched"], r["n_tokens"], r["n_duplicate_tokens"]) == (4, 3, 1)
    assert r["duplicate_examples"] == ["TP53: TP53, ENSG00000141510"]
    assert r["count_fraction"] == pytest.approx(14 / 24)  # both TP53 vars count


def test_duplicated_genes_warn_by_share(caplog):
    """The same genes twice (concatenated along var) warn; one alias pair among 60 genes is only logged."""
    twice = make(symbols(30) * 2)
    with pytest.warns(UserWarning, match=r"60 of the 60 mapped genes share .*concatenating along var"):
        bj.pp.map_vocab(twice)
    assert report(twice)["n_duplicate_vars"] == 60 and report(twice)["n_duplicate_tokens"] == 30
    one_pair = make([*symbols(59), symbols(1)[0]])
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO, logger="biomjepa"):
        warnings.simplefilter("always")
        bj.pp.map_vocab(one_pair)
    assert not [w for w in caught if "share a vocabulary token" in str(w.message)]
    assert report(one_pair)["n_duplicate_vars"] == 2
    assert "1 tokens are hit by several genes" in caplog.text


def test_gene_key_and_key_added():
    a = make([f"g{i}" for i in range(len(HUMAN))])
    a.var["symbol"] = HUMAN
    bj.pp.map_vocab(a, gene_key="symbol", key_added="tok")
    assert a.var["tok"].tolist() == idx(*HUMAN)
    assert report(a)["params"]["gene_key"] == "symbol"
    with pytest.raises(KeyError, match="gene_key"):
        bj.pp.map_vocab(a, gene_key="missing")
    a.var["n_cells"] = np.arange(12, 12 + len(HUMAN))  # a numeric column named by mistake
    with pytest.raises(ValueError, match=r"gene_key='n_cells' names the var column .* holds numbers.*\['symbol'\]"):
        bj.pp.map_vocab(a, gene_key="n_cells")


def test_integer_positions_error():
    a = make([str(i) for i in range(6)])
    a.var["symbol"] = HUMAN[:6]
    with pytest.raises(ValueError, match=r"integer positions.*gene_key="):
        bj.pp.map_vocab(a)
    bj.pp.map_vocab(a, gene_key="symbol")
    assert report(a)["n_matched"] == 6


def test_zero_overlap_error_leaves_input_unchanged():
    a = make(["foo", "bar", "baz"])
    with pytest.raises(ValueError, match="gene_key="):
        bj.pp.map_vocab(a)
    assert "biomjepa_token" not in a.var and "biomjepa" not in a.uns


def test_mouse_like_names_error_suggests_species():
    a = make(["Gcg", "Ins1", "Sst", "Ppy", "Pdx1", "Actb"])
    with pytest.raises(ValueError, match='species="mouse"'):
        bj.pp.map_vocab(a)
    bj.pp.map_vocab(a, species="mouse")
    assert a.var["biomjepa_token"].tolist()[0] == idx("GCG")[0]
    assert report(a)["species"] == "mouse" and report(a)["methods"]["ortholog"] >= 3


def test_custom_orthologs(tmp_path):
    table = pd.DataFrame({"fish": ["gcga", "tp53"], "human": ["GCG", "TP53"]})
    a = make(["gcga", "tp53", "other"])
    bj.pp.map_vocab(a, species="zebrafish", orthologs=table)
    assert a.var["biomjepa_token"].tolist() == [*idx("GCG", "TP53"), -1]
    path = tmp_path / "orth.csv"
    table.to_csv(path, index=False)
    b = bj.pp.map_vocab(make(["gcga", "tp53"]), species="zebrafish", orthologs=path, copy=True)
    assert report(b)["species"] == "zebrafish"
    with pytest.raises(ValueError, match="orthologs="):
        bj.pp.map_vocab(make(["gcga"]), species="zebrafish")


def test_low_count_fraction_warns_and_error_leaves_input_unchanged():
    X = np.array([[1, 9], [1, 9]], dtype=np.float32)
    a = make(["TP53", "NOTAGENE"], X=X)
    with pytest.warns(UserWarning, match=r"count_fraction=0\.100"):
        bj.pp.map_vocab(a, copy=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            bj.pp.map_vocab(a)
    assert "biomjepa_token" not in a.var and "biomjepa" not in a.uns


def test_gene_panel_warns_what_it_does_to_the_library_size():
    vocab = Vocab.default()
    panel = make(vocab.symbols[1000:1300])
    with pytest.warns(UserWarning, match=r"300 of the 19,264 vocabulary genes.*panel.*library size.*panel's counts only"):
        bj.pp.map_vocab(panel)
    assert report(panel)["vocab_coverage"] < _vocab.PANEL_COVERAGE
    n = int(_vocab.PANEL_COVERAGE * vocab.size) + 10  # just above the threshold: no warning
    X = sparse.random(12, n, density=0.05, format="csr", random_state=0, data_rvs=lambda k: np.ones(k)) * 3
    whole = make(vocab.symbols[:n], X=X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bj.pp.map_vocab(whole)


def test_use_raw_maps_the_genes_of_raw():
    a = make([*HUMAN, "NOTAGENE"])
    a.raw = a
    a = a[:, :3].copy()
    a.X = np.log1p(a.X)  # scanpy's habit: log-normalized X on a subset of genes, counts in .raw
    b = bj.pp.map_vocab(a, use_raw=True, copy=True)
    assert "biomjepa_token" not in a.raw.var and "biomjepa_token" not in a.var and "biomjepa" not in a.uns
    assert b.raw.var["biomjepa_token"].tolist() == [*idx(*HUMAN), -1] and "biomjepa_token" not in b.var
    r = report(b)
    assert r["n_vars"] == 9 and r["params"]["layer"] == "raw.X" and 0.8 < r["count_fraction"] < 1
    with pytest.raises(KeyError, match=r"not a column of \.raw\.var"):
        bj.pp.map_vocab(a, use_raw=True, gene_key="symbol")
    with pytest.raises(ValueError, match="cannot be combined with layer="):
        bj.pp.map_vocab(a, use_raw=True, layer="counts")
    a.raw = None
    with pytest.raises(ValueError, match=r"adata\.raw is None"):
        bj.pp.map_vocab(a, use_raw=True)
    assert "biomjepa" not in a.uns


def test_copy_returns_new_object():
    a = make(HUMAN)
    b = bj.pp.map_vocab(a, copy=True)
    assert b is not a and "biomjepa_token" in b.var
    assert "biomjepa_token" not in a.var and "biomjepa" not in a.uns


def test_empty_errors():
    with pytest.raises(ValueError, match="empty"):
        bj.pp.map_vocab(make(HUMAN, X=np.zeros((0, len(HUMAN)), dtype=np.float32)))
    with pytest.raises(ValueError, match="empty"):
        bj.pp.map_vocab(ad.AnnData(np.zeros((3, 0), dtype=np.float32)))


@pytest.mark.parametrize("fmt", ["csr", "csc", "dense"])
def test_formats_and_layer(fmt):
    X = np.random.default_rng(1).poisson(2.0, size=(20, 9)).astype(np.float32)
    a = make([*HUMAN, "NOTAGENE"], X=X, fmt=fmt)
    a.layers["counts"] = a.X.copy()
    bj.pp.map_vocab(a, layer="counts")
    assert report(a)["count_fraction"] == pytest.approx(X[:, :8].sum() / X.sum())
    with pytest.raises(KeyError, match="Layer"):
        bj.pp.map_vocab(a, layer="nope")


def test_uns_writes_to_h5ad(tmp_path):
    a = make(["TP53", "ENSG00000141510", *HUMAN[1:], "NOTAGENE"])
    bj.pp.map_vocab(a)
    a.write_h5ad(tmp_path / "a.h5ad")
    back = ad.read_h5ad(tmp_path / "a.h5ad")
    assert back.uns["biomjepa"]["vocab"]["n_duplicate_tokens"] == 1
    assert back.var["biomjepa_token"].tolist() == a.var["biomjepa_token"].tolist()


@pytest.mark.parametrize("fmt", ["csr", "dense"])
def test_backed(tmp_path, monkeypatch, fmt):
    X = np.random.default_rng(2).poisson(2.0, size=(50, 9)).astype(np.float32)
    make([*HUMAN, "NOTAGENE"], X=X, fmt=fmt).write_h5ad(tmp_path / "a.h5ad")
    a = ad.read_h5ad(tmp_path / "a.h5ad", backed="r")
    monkeypatch.setattr(_vocab, "ROW_CHUNK", 7)  # several chunks
    bj.pp.map_vocab(a)
    assert a.isbacked
    assert a.var["biomjepa_token"].tolist() == [*idx(*HUMAN), -1]
    assert report(a)["count_fraction"] == pytest.approx(X[:, :8].sum() / X.sum())
    with pytest.raises(ValueError, match="backed"):
        bj.pp.map_vocab(a, copy=True)


def test_mudata():
    md = pytest.importorskip("mudata")
    m = md.MuData({"rna": make(HUMAN), "prot": make(["CD3", "CD4"])})
    bj.pp.map_vocab(m)
    assert m.mod["rna"].var["biomjepa_token"].tolist() == idx(*HUMAN)
    with pytest.raises(KeyError, match="modality"):
        bj.pp.map_vocab(m, mod="atac")


def test_column_sums_match_scipy_for_csr_and_csc():
    rng = np.random.default_rng(0)
    X = sparse.random(200, 500, density=0.05, random_state=0, format="csr", dtype=np.float32)
    for M in (X, X.tocsc()):
        np.testing.assert_allclose(_vocab.column_sums(M), np.asarray(X.sum(axis=0)).ravel(), rtol=1e-5)
    del rng


# --- real data (../shared/data) ---------------------------------------------------------------


@pytest.mark.shared
def test_baron_human(shared_data):
    a = ad.read_h5ad(shared_data / "scrna" / "baron2016_pancreas_2142cells_raw.h5ad")
    bj.pp.map_vocab(a)
    r = report(a)
    assert r["methods"]["official"] == 17631
    assert r["n_matched"] >= 17631 and r["vocab_coverage"] > 0.9 and r["count_fraction"] > 0.95


@pytest.mark.shared
def test_alternate_haplotype_ids_share_tokens_without_a_warning(shared_data):
    """A full Ensembl annotation maps its MHC alternate-haplotype ids onto the primary genes' tokens: real, logged."""
    a = ad.read_h5ad(shared_data / "scrna" / "mls_liposarcoma_cellline_G1_94cells_raw.h5ad")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bj.pp.map_vocab(a)
    r = report(a)
    assert r["n_duplicate_vars"] > 1000 and 0.05 < r["n_duplicate_vars"] / r["n_matched"] < 0.1
    assert not [w for w in caught if "share a vocabulary token" in str(w.message)]


def test_kang_ensembl(shared_data):
    a = ad.read_h5ad(shared_data / "scrna" / "kang2018_pbmc_8684cells_raw.h5ad")
    bj.pp.map_vocab(a)
    r = report(a)
    assert r["id_type"] == "ensembl" and r["n_matched"] > 0.95 * 2511 and r["count_fraction"] > 0.9


@pytest.mark.shared
def test_baron_mouse(shared_data):
    a = ad.read_h5ad(shared_data / "scrna" / "baron2016_mouse_pancreas_1886cells_raw.h5ad")
    with pytest.raises(ValueError, match='species="mouse"'):
        bj.pp.map_vocab(a)
    assert "biomjepa_token" not in a.var
    bj.pp.map_vocab(a, species="mouse")
    r = report(a)
    assert r["n_matched"] > 0.75 * a.n_vars and r["methods"]["ortholog"] == r["n_matched"]


PANELS = {
    "kang2018_pbmc_8684cells_raw.h5ad",  # 2,511 genes
    "norman2019_mcfaline2023_subset_500genes.h5ad",
    "papalexi2021_thp1_crispr_20729cells_299genes.h5ad",
}


#: how each file of ../shared/data/scrna names its genes (its README), by file-name prefix: mouse symbols, or
#: Ensembl ids with the symbols in a column. The longest matching prefix wins (the two Macosko 2015 files share
#: ``macosko2015_``: one human, one mouse); a file no prefix names is human symbols.
MOUSE = {"species": "mouse"}
MAPPING_KEYS = {"baron2016_mouse": MOUSE, "zilionis2019": MOUSE, "grun2016": MOUSE, "islam2011": MOUSE,
                "goolam2016": {**MOUSE, "gene_key": "gene_symbol"}, "mls": {"gene_key": "gene_symbol"},
                # the v0.5 files (2026-11-28): seven mouse, Friedman 2018 with Ensembl ids and a symbol column
                "hochgerner2018": MOUSE, "jaitin2014": MOUSE, "vanhove2019": MOUSE, "tabulamuris2018": MOUSE,
                "macosko2015_mouse": MOUSE, "nowotschin2019": MOUSE, "ting2014": MOUSE,
                "friedman2018": {"gene_key": "gene_symbol"},
                # the files added on 2026-12-07 (issue 69): Tabula Muris kidney (above), two mouse plate sets;
                # the MALT lymphoma carries human symbols
                "serviss2019": MOUSE, "deng2014": MOUSE}


def mapping_keys(name: str) -> dict:
    """``map_vocab``'s keywords for the shared file ``name`` (:data:`MAPPING_KEYS`, longest prefix first)."""
    hits = [p for p in MAPPING_KEYS if name.startswith(p)]
    return MAPPING_KEYS[max(hits, key=len)] if hits else {}


def test_mapping_keys_tell_the_macosko_files_apart():
    assert mapping_keys("macosko2015_mouse_nih3t3_cellline_dropseq_714cells_raw.h5ad") == MOUSE
    assert mapping_keys("macosko2015_human_hek293t_cellline_dropseq_933cells_raw.h5ad") == {}
    assert mapping_keys("baron2016_mouse_pancreas_1886cells_raw.h5ad") == MOUSE
    assert mapping_keys("baron2016_pancreas_2142cells_raw.h5ad") == {}


@pytest.mark.shared
@pytest.mark.slow
def test_panel_warning_on_real_files(shared_data):
    """Every whole-transcriptome file of ../shared/data maps without the panel warning; the three panels warn."""
    files = sorted((shared_data / "scrna").glob("*.h5ad"))
    assert {f.name for f in files} >= PANELS
    for f in files:
        a = ad.read_h5ad(f, backed="r")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bj.pp.map_vocab(a, **mapping_keys(f.name))
        warned = any("gene panel" in str(w.message) for w in caught)
        assert warned == (f.name in PANELS), (f.name, report(a)["vocab_coverage"])
        a.file.close()


# ---------------------- gene names users really send (empty data, positions, mouse, case, suffixes, digits)
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_map_vocab_empty_anndata(shape):
    a = ad.AnnData(np.zeros(shape, dtype=np.float32))
    if shape[1]:
        a.var_names = symbols(shape[1])
    raises_unchanged(a, ValueError, r"AnnData is empty \(\d+ cells × \d+ genes\)", bj.pp.map_vocab)


def test_integer_positions_as_gene_names(ckpt):
    a = make_raw()
    a.var["symbol"] = a.var_names.to_numpy()
    a.var_names = [str(i) for i in range(a.n_vars)]
    raises_unchanged(a, ValueError, r"integer positions.*gene_key=.*'symbol'", bj.pp.map_vocab)
    raises_unchanged(a, KeyError, r"Run `bj\.pp\.map_vocab\(adata\)` first", _embed, ckpt)
    bj.pp.map_vocab(a, gene_key="symbol")
    assert a.uns["biomjepa"]["vocab"]["n_matched"] == N_GENES


def test_mouse_symbols_with_default_species():
    a = ad.AnnData(np.ones((4, 8), dtype=np.float32))
    a.var_names = ["Gcg", "Ins1", "Ins2", "Sst", "Ppy", "Pdx1", "Iapp", "Nkx6-1"]
    raises_unchanged(a, ValueError, r'look like mouse genes.*species="mouse"', bj.pp.map_vocab)
    bj.pp.map_vocab(a, species="mouse")
    assert a.uns["biomjepa"]["vocab"]["methods"]["ortholog"] >= 5


def test_mixed_symbols_and_ensembl():
    a = ad.AnnData(np.ones((3, 4), dtype=np.float32))
    a.var_names = ["TP53", "ENSG00000111640.15", "ACTB", "ENSG00000105329"]  # TP53, GAPDH, ACTB, TGFB1
    bj.pp.map_vocab(a)
    report = a.uns["biomjepa"]["vocab"]
    assert report["id_type"] == "mixed" and report["n_matched"] == 4
    assert a.var["biomjepa_token"].tolist() == Vocab.default().index_of(["TP53", "GAPDH", "ACTB", "TGFB1"]).tolist()


@pytest.mark.parametrize("kind", list(BAD_VALUES))
def test_map_vocab_maps_genes_whatever_the_values(kind):
    """Documented handling: ``map_vocab`` maps genes only; the tools validate the values."""
    a = _bad(kind)
    del a.var["biomjepa_token"], a.uns["biomjepa"]
    X = a.X.copy()
    bj.pp.map_vocab(a)
    assert a.uns["biomjepa"]["vocab"]["n_matched"] == N_GENES
    np.testing.assert_array_equal(a.X, X)


def test_mixed_case_symbols_map_case_insensitively_and_are_counted(caplog):
    a = make(["Tp53", "gapdh", "Actb", "cd3e", *HUMAN[4:]])
    with caplog.at_level(logging.INFO, logger="biomjepa.pp._vocab"):
        bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist() == idx(*HUMAN)
    r = a.uns["biomjepa"]["vocab"]
    assert r["methods"]["case"] == 4 and r["methods"]["official"] == 4 and r["n_case_ambiguous"] == 0
    assert "Tp53 → TP53" in r["case_examples"]
    assert "4 symbols in lower or mixed case were matched case-insensitively" in caplog.text


def test_all_lower_case_symbols_map():
    a = make([s.lower() for s in HUMAN])
    bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist() == idx(*HUMAN)
    assert a.uns["biomjepa"]["vocab"]["methods"]["case"] == len(HUMAN)


def test_mouse_like_mixed_case_with_human_warns_to_pass_species():
    a = make(["Gcg", "Ins1", "Sst", "Ppy", *HUMAN])  # 4 of 12 mouse-style names
    with pytest.warns(UserWarning, match='species="mouse"'):
        bj.pp.map_vocab(a)
    assert a.uns["biomjepa"]["vocab"]["methods"]["case"] >= 3  # Gcg, Sst, Ppy (INS1 is no human gene)


def test_mouse_names_as_human_still_refused_with_both_fixes():
    a = make(["Gcg", "Ins1", "Sst", "Ppy", "Pdx1", "Actb"])
    with pytest.raises(ValueError, match=r'species="mouse".*str\.upper\(\)'):
        bj.pp.map_vocab(a)
    assert "biomjepa_token" not in a.var and "biomjepa" not in a.uns
    bj.pp.map_vocab(a, species="mouse")
    assert a.uns["biomjepa"]["vocab"]["methods"]["ortholog"] >= 3


def test_suffixed_names_are_reported_not_stripped():
    a = make(["TP53", "TP53-1", "ACTB", "ACTB.1", "GAPDH", "LYZ", "ERV3.1", "NOTAGENE-2"])
    with pytest.warns(UserWarning, match=r"2 gene names carry a '-N' or '\.N' suffix.*TP53-1.*ACTB\.1.*gene_key="):
        bj.pp.map_vocab(a)
    tok = a.var["biomjepa_token"].tolist()
    assert tok[1] == tok[3] == -1  # never silently merged into TP53 / ACTB
    r = a.uns["biomjepa"]["vocab"]
    assert r["n_suffixed_unmapped"] == 2 and r["suffixed_examples"] == ["TP53-1", "ACTB.1"]


def test_official_symbols_with_dashes_are_not_suffixes():
    names = ["NKX2-1", "HLA-A", "MT-ND1", *HUMAN]
    a = make(names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="The input measures only")  # 11 genes: a gene panel
        bj.pp.map_vocab(a)
    assert (a.var["biomjepa_token"] >= 0).all()
    assert a.uns["biomjepa"]["vocab"]["n_suffixed_unmapped"] == 0


def _counts(names: list[str]) -> ad.AnnData:
    a = ad.AnnData(np.ones((3, len(names)), dtype=np.float32))
    a.var_names = names
    return a


def test_subsetted_integer_labels_are_not_read_as_entrez():
    labels = [str(i) for i in range(1, 400, 3)]  # '1'…'n' after filtering: not positions any more
    a = _counts(labels)
    with pytest.raises(ValueError, match=r'all digits.*id_type="entrez".*gene_key='):
        bj.pp.map_vocab(a)
    bj.pp.map_vocab(a, id_type="entrez")  # the caller says they are Entrez ids
    assert a.uns["biomjepa"]["vocab"]["n_matched"] > 0


def test_digits_among_symbols_are_left_unmapped_with_a_warning():
    a = _counts([*symbols(20), "7157", "60"])
    with pytest.warns(UserWarning, match=r"2 gene names are all digits"):
        bj.pp.map_vocab(a)
    assert a.var["biomjepa_token"].tolist()[-2:] == [-1, -1]
    assert a.uns["biomjepa"]["vocab"]["n_numeric_unmapped"] == 2
