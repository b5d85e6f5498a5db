"""Checked before the work, exit code 2 (issue 68 item 4): ``adapt --out`` that is a file or a directory holding files,
``--embed`` inside (or equal to) ``--out``, ``--layer`` with ``--use-raw``, a read-only ``--write-obsm`` input and a
wrong pin in ``model.init_from`` were found after the input was read, or after the corpus was prepared; now each is a
usage error before any of it, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import biomjepa as bj
from biomjepa.cli import main


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.fixture
def nothing_read(monkeypatch):
    """Reading an input or adapting fails the test: every case is refused before."""
    import anndata as ad

    def read(*a, **k):
        pytest.fail("read the input before refusing")

    monkeypatch.setattr(ad, "read_h5ad", read)
    monkeypatch.setattr(bj.tl, "adapt", lambda *a, **k: pytest.fail("adapted before refusing"))
    monkeypatch.setattr(bj.tl, "embed", lambda *a, **k: pytest.fail("embedded before refusing"))


@pytest.fixture
def src(tmp_path, counts_adata) -> Path:
    counts_adata.write_h5ad(tmp_path / "in.h5ad")
    return tmp_path / "in.h5ad"


def test_adapt_out_that_is_a_file_or_holds_files_is_a_usage_error(tmp_path, src, capsys, nothing_read):
    (tmp_path / "results").write_text("my results")
    err = _usage_error(["adapt", src, "--out", tmp_path / "results"], capsys)
    assert "--out " in err and "results' is a file; adapt writes a new checkpoint directory there" in err
    full = tmp_path / "ck"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    err = _usage_error(["adapt", src, "--out", full], capsys)
    assert "ck' is not an empty directory; adapt never replaces a checkpoint or other files" in err
    assert (tmp_path / "results").read_text() == "my results" and [p.name for p in full.iterdir()] == ["notes.txt"]


def test_adapt_embed_inside_or_equal_to_out_is_a_usage_error(tmp_path, src, capsys, nothing_read):
    """`--out d --embed d/e.h5ad` with d empty was refused after the input was read as "not an empty directory": the
    lock file of --embed, written into d, made it look so."""
    d = tmp_path / "d"
    d.mkdir()
    err = _usage_error(["adapt", src, "--out", d, "--embed", d / "e.h5ad"], capsys)
    assert f"--embed '{d / 'e.h5ad'}' is inside --out '{d}', the checkpoint directory" in err
    assert "Give --embed a file outside it" in err
    err = _usage_error(["adapt", src, "--out", tmp_path / "x.h5ad", "--embed", tmp_path / "x.h5ad"], capsys)
    assert "is --out" in err
    assert list(d.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["d", "in.h5ad"]


@pytest.mark.parametrize("command", [["embed", "{src}", "{tmp}/out.h5ad"], ["adapt", "{src}", "--out", "{tmp}/ck"]])
def test_layer_with_use_raw_is_a_usage_error_in_flags(tmp_path, src, command, capsys, nothing_read):
    argv = [c.format(src=src, tmp=tmp_path) for c in command] + ["--layer", "counts", "--use-raw"]
    err = _usage_error(argv, capsys)
    assert "cannot be combined with --layer 'counts'" in err and "--use-raw or --layer, not both" in err
    assert "use_raw=" not in err and "layer=" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def test_a_read_only_write_obsm_input_is_a_usage_error(tmp_path, src, capsys, monkeypatch):
    """Simulated (the tests may run as root, whom a read-only mode does not stop): the copy replacing the input was
    refused only once every block was embedded."""
    real = os.access

    def access(path, mode, **kw):
        return False if Path(path).resolve() == src.resolve() and mode & os.W_OK else real(path, mode, **kw)

    monkeypatch.setattr(os, "access", access)
    err = _usage_error(["embed", src, "--store", tmp_path / "s.zarr", "--write-obsm"], capsys)
    assert f"--write-obsm: '{src}' is read-only, and --write-obsm replaces it; make it writable" in err
    assert not (tmp_path / "s.zarr").exists()


@pytest.mark.parametrize("pin", ["dir", "registered"])
def test_a_wrong_init_from_pin_is_a_usage_error_before_the_corpus(tmp_path, src, tiny_checkpoint, capsys, pin):
    from biomjepa._pretrained import REGISTRY

    if pin == "dir":
        ref, said = f"{tiny_checkpoint}#sha256={'0' * 64}", "has sha256 "
    else:  # a script that pinned the name before a release moved it on
        ref = f"biomjepa-mini#sha256={REGISTRY['biomjepa-mini-v0.4']['checkpoint_sha256']}"
        said = "That digest is now 'biomjepa-mini-v0.4'"
    runs = tmp_path / "runs"
    err = _usage_error(["train", "tiny", "--set", f"data.corpus=[{src}]", "--set", f"run.out_dir={runs}",
                        "--set", f"model.init_from={ref}", "--set", "model.gene_init=checkpoint",
                        "--set", "loop.device=cpu"], capsys)
    assert said in err and "refusing it" in err
    assert not runs.exists()  # no run directory, no corpus cache prepared


def test_pretrain_checks_the_init_from_pin_before_the_run_directory(tmp_path, src, tiny_checkpoint):
    with pytest.raises(ValueError, match=r"expected 0{64}; refusing it"):
        bj.train.pretrain("tiny", [f"data.corpus=[{src}]", f"run.out_dir={tmp_path / 'runs'}", "loop.device=cpu",
                                   f"model.init_from={tiny_checkpoint}#sha256={'0' * 64}", "model.gene_init=checkpoint"])
    assert not (tmp_path / "runs").exists()
