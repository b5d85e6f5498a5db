"""Checked before the work, with the right words (issue 57 item 4): checkpoint pins (a registered name, the key in
any case), settings refused at assignment, the cache directory named when it is a file, a refused call on a view
leaves a view, perturbation labels left out are named, an HDF5 file that is no AnnData, adapt's STRING notice.
(The command-line cases, a malformed pin and ``--device gpu`` as usage errors, are in ``test_contract.py``.)"""

from __future__ import annotations

import logging
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa import _pretrained
from biomjepa.data.vocab import Vocab
from biomjepa.model import checkpoint_sha256


def test_a_registered_name_can_be_pinned():
    pin = _pretrained.REGISTRY["biomjepa-mini"]["checkpoint_sha256"]
    assert _pretrained.resolve_checkpoint(f"biomjepa-mini#sha256={pin}") == _pretrained.resolve_checkpoint("biomjepa-mini")
    with pytest.raises(ValueError, match=f"Checkpoint 'biomjepa-mini' has sha256 {pin}, expected {'0' * 64}"):
        _pretrained.resolve_checkpoint("biomjepa-mini#sha256=" + "0" * 64)


def test_the_pin_key_is_read_in_any_case_and_a_bad_fragment_is_named(tiny_checkpoint):
    pin = checkpoint_sha256(tiny_checkpoint)
    for ref in (f"{tiny_checkpoint}#SHA256={pin}", f"{tiny_checkpoint}#Sha256={pin.upper()}"):
        assert str(_pretrained.resolve_checkpoint(ref)[0]) == tiny_checkpoint
    with pytest.raises(ValueError, match=r"what follows '#' must pin the whole checkpoint as `sha256=<64 hex"):
        _pretrained.resolve_checkpoint(f"{tiny_checkpoint}#sha={pin}")
    with pytest.raises(ValueError, match=r"pins sha256 .* but sha256= asks for"):
        _pretrained.resolve_checkpoint(f"{tiny_checkpoint}#sha256={pin}", sha256="1" * 64)


@pytest.mark.parametrize("bad", [None, 5, "", "  ", "ckpt#sha256=xyz", "ckpt#md5=" + "0" * 32])
def test_settings_checkpoint_is_checked_when_set(bad):
    with pytest.raises(ValueError, match=r"bj\.settings\.checkpoint="):
        bj.settings.checkpoint = bad
    assert bj.settings.checkpoint == "biomjepa-mini"


@pytest.mark.parametrize("bad", [True, False, 2.0, "2", 4, -1])
def test_settings_verbosity_is_checked_when_set(bad):
    with pytest.raises(ValueError, match=r"bj\.settings\.verbosity must be one of the integers 0"):
        bj.settings.verbosity = bad
    assert bj.settings.verbosity == 1 and type(bj.settings.verbosity) is int


def _cells(n: int) -> ad.AnnData:
    rng = np.random.default_rng(0)
    a = ad.AnnData(sparse.csr_matrix(rng.poisson(1.0, (n, 50)).astype(np.float32) + np.eye(n, 50, dtype=np.float32)),
                   var=pd.DataFrame(index=list(Vocab.default().symbols[:50])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.var["biomjepa_token"] = np.arange(50)
    return a


def test_adapt_names_the_cache_directory_when_it_is_a_file(tmp_path, tiny_checkpoint, monkeypatch):
    blocker = tmp_path / "cache"
    blocker.write_text("a file")
    monkeypatch.setattr(bj.settings, "_cachedir", blocker)
    with pytest.raises(NotADirectoryError, match=r"^bj\.settings\.cachedir: .* is a file.*set `bj\.settings\.cachedir` "
                                                 r"to a directory.*or pass out_dir=") as err:
        bj.tl.adapt(_cells(200), tiny_checkpoint, steps=1)
    assert not str(err.value).startswith("out_dir")


def test_a_refused_embed_leaves_a_view_a_view(tiny_checkpoint):
    parent = _cells(20)
    view = parent[:10]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even the "made an AnnData of its own" warning
        with pytest.raises(KeyError, match="Layer 'nope' not found"):
            bj.tl.embed(view, checkpoint=tiny_checkpoint, layer="nope")
    assert view.is_view


def _perturbed() -> ad.AnnData:
    """Cells at control + δ: singles A..G on basis vectors, doubles A+B and C+E, and labels that are left out."""
    genes = ["A", "B", "C", "E", "F", "G"]
    basis = {g: np.eye(8)[i] for i, g in enumerate(genes)}
    shifts = {"control": np.zeros(8), **basis, "A+B": basis["A"] + basis["B"], "C+E": basis["C"] + basis["E"],
              "A+B+C": basis["A"], "A+": basis["A"], "A+A": basis["A"]}
    labels = np.repeat(list(shifts), 4)
    a = ad.AnnData(np.ones((len(labels), 3), dtype=np.float32))
    a.var_names = genes[:3]
    a.obs["perturbation"] = pd.Categorical(labels)
    a.obsm["X_rep"] = np.stack([shifts[lab] for lab in labels]) + 1.0
    return a


def test_perturbation_labels_left_out_are_named():
    with pytest.warns(UserWarning, match=r"3 condition\(s\) are left out \('A\+' is the single 'A' of 'A' again; "
                                         r"'A\+A' names one gene twice; 'A\+B\+C' names 3 genes\)"):
        bj.tl.perturbation_arithmetic(_perturbed(), use_rep="X_rep", n_random=5,
                                      target_expression={g: 1.0 for g in "ABCEFG"})


def test_an_hdf5_file_that_is_no_anndata_is_named(tmp_path, capsys):
    from biomjepa.cli import main
    from biomjepa.data.files import check_h5ad_file

    path = tmp_path / "matrix.h5ad"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(5)
        f.create_group("meta")
    with pytest.raises(ValueError, match=r"matrix\.h5ad' is an HDF5 file but not an AnnData \.h5ad: it holds data, "
                                         r"meta, not the obs and var"):
        check_h5ad_file(path)
    with pytest.raises(SystemExit) as exit_:
        main(["embed", str(path), str(tmp_path / "out.h5ad")])
    assert exit_.value.code == 2 and "not an AnnData .h5ad" in capsys.readouterr().err


def test_adapt_says_what_its_string_graph_is_not_which_files_to_pass(caplog):
    from biomjepa.data.graph import stringdb
    from biomjepa.train.adapt import _string_notice_in_adapt_words

    stringdb._WARNED.discard(stringdb.BUNDLED_STRING)
    with caplog.at_level(logging.INFO), _string_notice_in_adapt_words():
        stringdb._read_bundled(None)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("adapt: the gene graph joins the bundled STRING v12 table" in r.getMessage() for r in caplog.records)
    assert not any("9606.protein" in r.getMessage() for r in caplog.records)  # files adapt has no option for
