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
