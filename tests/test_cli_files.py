"""The command line's files (issue 30): inputs that are not .h5ad files, ``--out`` paths, corpus entries and
symbolic links are named with what is expected, before any work; messages speak in the command's flags."""

from __future__ import annotations

import errno
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

from biomjepa.cli import main


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "empty.h5ad").write_bytes(b"")
    (tmp_path / "cells.csv").write_text("gene,cell1,cell2\nCD3E,1,0\n")
    (tmp_path / "folder").mkdir()
    return tmp_path


@pytest.mark.parametrize("command", [["embed", "{f}", "{tmp}/out.h5ad"], ["bench", "{f}"],
                                     ["graph", "{f}", "--out", "{tmp}/g"], ["embed", "{f}", "--store", "{tmp}/s.zarr"]])
def test_empty_csv_and_directory_inputs_are_named_with_what_is_expected(bad_files, command, capsys):
    def run(name):
        return _usage_error([c.format(f=bad_files / name, tmp=bad_files) for c in command], capsys)

    err = run("empty.h5ad")
    assert "empty.h5ad' is not an .h5ad file" in err and "empty file (0 bytes)" in err and "h5py" not in err and "signature not found" not in err
    err = run("cells.csv")
    assert "but a text file (first line: 'gene,cell1,cell2')" in err and "read_csv" in err
    assert "is a directory" in run("folder")
    assert not (bad_files / "out.h5ad").exists() and not (bad_files / "s.zarr").exists()


def test_an_unreadable_input_says_it_cannot_be_read(tmp_path, counts_adata, capsys, monkeypatch):
    """Not "not an .h5ad file", not a raw errno (simulated: the tests may run as root, who reads anything)."""
    import biomjepa.data.files as files

    counts_adata.write_h5ad(tmp_path / "locked.h5ad")
    real_open = open

    def denied(path, *a, **k):
        if Path(path).name == "locked.h5ad":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(files, "open", denied, raising=False)
    for argv in (["embed", str(tmp_path / "locked.h5ad"), str(tmp_path / "o.h5ad")],
                 ["embed", str(tmp_path / "locked.h5ad"), "--store", str(tmp_path / "s.zarr")]):
        err = _usage_error(argv, capsys)
        assert "locked.h5ad' cannot be read (Permission denied); check its permissions" in err
        assert "not an .h5ad" not in err and "[Errno" not in err


@pytest.mark.parametrize("command", [["demo", "--out", "{out}"], ["bench", "{h5ad}", "--out", "{out}"],
                                     ["graph", "{h5ad}", "--out", "{out}"]])
def test_an_out_that_is_an_existing_file_is_refused_before_the_work(tmp_path, counts_adata, command, capsys):
    counts_adata.write_h5ad(tmp_path / "in.h5ad")
    (tmp_path / "results").write_text("my results")
    err = _usage_error([c.format(out=tmp_path / "results", h5ad=tmp_path / "in.h5ad") for c in command], capsys)
    assert "argument --out:" in err and "results' exists and is a file, not a directory" in err
    err = _usage_error([c.format(out=tmp_path / "results" / "sub", h5ad=tmp_path / "in.h5ad") for c in command], capsys)
    assert "cannot be created" in err and "is a file, not a directory" in err
    assert (tmp_path / "results").read_text() == "my results"


def test_a_directory_in_a_corpus_is_named_as_a_directory(tmp_path, counts_adata):
    from biomjepa.data.shards import prepare_corpus

    counts_adata.write_h5ad(tmp_path / "a.h5ad")
    (tmp_path / "more").mkdir()
    with pytest.raises(IsADirectoryError, match=r"Corpus entry .*more is a directory, not a file; name its files, "
                                                r"e\.g\. '.*more/\*\.h5ad'"):
        prepare_corpus([str(tmp_path / "a.h5ad"), str(tmp_path / "more")], tmp_path / "cache")
    (tmp_path / "empty.h5ad").write_bytes(b"")
    with pytest.raises(ValueError, match=r"Corpus file .*empty\.h5ad is not an \.h5ad file .* empty file"):
        prepare_corpus([str(tmp_path / "empty.h5ad")], tmp_path / "cache")


@pytest.mark.filterwarnings("ignore:The input measures only")
def test_embed_onto_a_symlink_writes_through_and_keeps_the_link(tmp_path, counts_adata, tiny_checkpoint):
    """``biomjepa embed L L`` with L a symbolic link: the target gets the embeddings, L stays a link."""
    counts_adata.write_h5ad(tmp_path / "data.h5ad")
    link = tmp_path / "link.h5ad"
    link.symlink_to(tmp_path / "data.h5ad")
    assert main(["embed", str(link), str(link), "--checkpoint", tiny_checkpoint, "--device", "cpu"]) == 0
    assert link.is_symlink() and link.resolve() == (tmp_path / "data.h5ad").resolve()
    assert ad.read_h5ad(tmp_path / "data.h5ad").obsm["X_biomjepa"].shape == (60, 64)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.h5ad", "link.h5ad"]


def test_a_cell_ranger_h5_is_named_with_the_conversion(tmp_path, capsys):
    """A 10x .h5 given as INPUT said anndata's `AnnData.__init__() got an unexpected keyword argument 'matrix'`."""
    import h5py

    with h5py.File(tmp_path / "filtered_feature_bc_matrix.h5", "w") as f:
        g = f.create_group("matrix")
        g["barcodes"] = np.array([b"AAAC-1"])
        g.create_group("features")["name"] = np.array([b"CD3E"])
    err = _usage_error(["embed", str(tmp_path / "filtered_feature_bc_matrix.h5"), str(tmp_path / "o.h5ad")], capsys)
    assert "10x Genomics (Cell Ranger) .h5 file, not an .h5ad" in err and "sc.read_10x_h5(" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["filtered_feature_bc_matrix.h5"]


def test_embed_onto_another_existing_file_says_so_and_names_the_store(tmp_path, counts_adata, tiny_checkpoint,
                                                                      capsys):
    """`biomjepa embed a.h5ad b.h5ad` replaced b.h5ad without a word: it may have meant two inputs (atlas mode)."""
    counts_adata.write_h5ad(tmp_path / "a.h5ad")
    counts_adata[:10].copy().write_h5ad(tmp_path / "b.h5ad")
    assert main(["embed", str(tmp_path / "a.h5ad"), str(tmp_path / "b.h5ad"), "--checkpoint", tiny_checkpoint]) == 0
    err = capsys.readouterr().err
    assert "b.h5ad exists and will be replaced" in err and "--store atlas.zarr" in err
    assert ad.read_h5ad(tmp_path / "b.h5ad").n_obs == 60
    assert main(["embed", str(tmp_path / "a.h5ad"), str(tmp_path / "a.h5ad"), "--checkpoint", tiny_checkpoint]) == 0
    assert "will be replaced" not in capsys.readouterr().err  # in place, as documented


def test_corpus_files_with_counts_in_raw_point_to_writing_them_out(tmp_path, counts_adata, capsys):
    """The graph (and corpus preparation) read X or a layer: no `use_raw=True` they do not take."""
    a = counts_adata.copy()
    a.raw = a
    a.X = a.X.copy()
    a.X.data = np.log1p(a.X.data)
    a.write_h5ad(tmp_path / "processed.h5ad")
    assert main(["graph", str(tmp_path / "processed.h5ad"), "--out", str(tmp_path / "g")]) == 1
    err = capsys.readouterr().err
    assert "--layer" in err and "adata.raw.to_adata().write_h5ad" in err
    assert "use_raw" not in err and "layer=" not in err


# ------------------------------------------------------------- issue 46: `biomjepa adapt --out`, said in words
def _adapt_input(path: Path, unmapped: int = 0) -> Path:
    """205 cells of counts over 50 vocabulary genes and 10 unknown ones; the first ``unmapped`` cells hold counts
    in the unknown genes only."""
    from biomjepa.data.vocab import Vocab

    rng = np.random.default_rng(0)
    X = rng.poisson(1.0, size=(205, 60)).astype(np.float32)
    X[:, 0] += 1
    X[:unmapped, :50] = 0
    X[:unmapped, 50:] += 1
    a = ad.AnnData(X)
    a.var_names = [str(s) for s in Vocab.default().symbols[1000:1050]] + [f"NOTAGENE{i}" for i in range(10)]
    a.write_h5ad(path)
    return path


@pytest.fixture
def no_training(monkeypatch):
    """Training fails the test: every case here must be refused before it."""
    import biomjepa.train.adapt as train_adapt

    monkeypatch.setattr(train_adapt, "adapt_encoder", lambda *a, **k: pytest.fail("trained before refusing"))


@pytest.mark.filterwarnings("ignore:The input measures only")
def test_adapt_out_under_a_file_or_in_an_unwritable_folder_is_said_in_words(tmp_path, tiny_checkpoint, capsys,
                                                                            monkeypatch, no_training):
    """`--out FILE/ck` said `[Errno 17] File exists: 'FILE'`; an unwritable folder `[Errno 13]` naming the hidden
    scratch directory `.ck.adapt-XXXX` (simulated: the tests may run as root, who writes anywhere)."""
    import tempfile

    src = _adapt_input(tmp_path / "in.h5ad")
    (tmp_path / "results").write_text("my results")
    assert main(["adapt", str(src), "--out", str(tmp_path / "results" / "ck"), "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert "--out" in err and "results' (or a folder above it) is a file, not a directory" in err
    assert "[Errno" not in err and "out_dir" not in err
    deeper = tmp_path / "results" / "sub" / "ck"  # a folder further above is the file: mkdir says ENOTDIR
    assert main(["adapt", str(src), "--out", str(deeper), "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert "sub' (or a folder above it) is a file, not a directory" in err and "[Errno" not in err
    assert (tmp_path / "results").read_text() == "my results"
    real = tempfile.mkdtemp

    def denied(suffix=None, prefix=None, dir=None):
        if prefix and prefix.startswith("."):
            raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}x1y2z3")
        return real(suffix, prefix, dir)

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    (tmp_path / "shared").mkdir()
    assert main(["adapt", str(src), "--out", str(tmp_path / "shared" / "ck"), "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert "permission denied" in err and "shared'" in err and "--out" in err
    assert "[Errno" not in err and ".ck.adapt-" not in err and "out_dir" not in err
    assert list((tmp_path / "shared").iterdir()) == []


@pytest.mark.filterwarnings("ignore:The input measures only")
def test_adapt_counts_the_cells_it_refuses(tmp_path, tiny_checkpoint, capsys, no_training):
    """205 cells of which 10 have no mapped gene were reported as "adata has 195 cells"."""
    src = _adapt_input(tmp_path / "in.h5ad", unmapped=10)
    assert main(["adapt", str(src), "--out", str(tmp_path / "ck"), "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert "10 of the 205 cells have no counts in any mapped gene" in err and "195 cells" not in err
    assert not (tmp_path / "ck").exists()


@pytest.mark.filterwarnings("ignore:The input measures only")
def test_adapt_into_the_current_directory_is_refused_in_words(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    """`--out .` (empty) was called "not an empty directory"; the checkpoint appears by a rename, which would
    replace the shell's working directory: refused before any work, saying what to give instead."""
    import biomjepa.train.adapt as train_adapt

    src = _adapt_input(tmp_path / "in.h5ad")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setattr(train_adapt, "adapt_encoder", lambda *a, **k: pytest.fail("trained"))
    assert main(["adapt", str(src), "--out", ".", "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert "current working directory" in err and "not an empty directory" not in err
    assert list(here.iterdir()) == []
