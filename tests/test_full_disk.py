"""A full disk ends in one line (issue 68 item 2): ``biomjepa embed`` and ``biomjepa adapt`` on a full file system say
where, how much is free and what to do, exit 1, and leave nothing behind: no half copy, no hidden temporary file, no
lock file. The HDF5 write runs in a child process (``_h5files.in_child``): closing or collecting the objects of a write
HDF5 could not finish crashes the process that holds them (a segmentation fault after dozens of tracebacks).

The full disk is simulated (a write that raises ENOSPC as h5py does: no ``errno``, the text says ``errno = 28``), and
made real on a small tmpfs where this process may mount one (skipped elsewhere); the real ones run as a child process,
since an HDF5 crash would end the test run.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

import biomjepa as bj
from biomjepa.cli import main

#: what h5py raises for a write HDF5 could not make (an OSError without errno; anndata adds the key it was writing)
H5PY_NO_SPACE = ("Unable to synchronously create dataset (file write failed: time = Mon Dec  7 23:00:00 2026, "
                 "filename = '{path}', file descriptor = 7, errno = 28, error message = 'No space left on device', "
                 "buf = 0x55d0, total write size = 4096, bytes this sub-write = 4096, bytes actually written = "
                 "18446744073709551615, offset = 0)\n\nAbove error raised while writing key 'X' of <class "
                 "'h5py._hl.files.File'> to /")


def _open_here() -> list[str]:
    """The hidden (temporary) files this process holds open with h5py."""
    import h5py

    names = [f.name.decode() if isinstance(f.name, bytes) else str(f.name)
             for f in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)]
    return [n for n in names if Path(n).name.startswith(".")]


def _run(argv, capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "[Errno" not in err and "errno = 28" not in err
    return code, err


@pytest.fixture
def full_writes(monkeypatch):
    """``AnnData.write_h5ad`` of a command's temporary file (a hidden name) starts the file with h5py, leaves it open
    (as a write that HDF5 could not finish does) and raises h5py's full-disk error; the handles it left are returned.
    Other files (the test's inputs) are written."""
    import h5py

    left = []
    real = ad.AnnData.write_h5ad

    def write_h5ad(self, filename=None, **kw):
        if not Path(filename).name.startswith("."):
            return real(self, filename, **kw)
        f = h5py.File(filename, "w")
        f.create_dataset("X", data=np.zeros((len(self.obs_names), 4), np.float32))
        left.append(f)
        raise OSError(H5PY_NO_SPACE.format(path=filename))

    monkeypatch.setattr(ad.AnnData, "write_h5ad", write_h5ad)
    return left


@pytest.mark.parametrize("in_place", [False, True])
def test_embed_on_a_full_disk_says_where_and_what_to_do_and_leaves_nothing(tmp_path, counts_adata, tiny_checkpoint,
                                                                           full_writes, capsys, in_place):
    src = tmp_path / "in.h5ad"
    counts_adata.write_h5ad(src)  # before the write is made to fail
    before = src.read_bytes()
    out = src if in_place else tmp_path / "out.h5ad"
    code, err = _run(["embed", src, out, "--checkpoint", tiny_checkpoint, "--device", "cpu"], capsys)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"biomjepa embed: error: No space left to write {out.name} (60 cells and their embedding) "
                           f"in {tmp_path} (it is full: ")
    assert " MB free). Free space there, or give an OUTPUT on a disk with room; nothing was written" in line
    assert full_writes == [] and not _open_here()  # the write and its handles were the child's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"] and src.read_bytes() == before


def test_adapt_on_a_full_disk_says_where_and_what_to_do(tmp_path, counts_adata, capsys, monkeypatch):
    """Training says a full disk in its own words (its state's fix: resume); adapt, whose scratch goes with it, said
    only "[Errno 28] No space left on device"."""
    src = tmp_path / "in.h5ad"
    counts_adata.write_h5ad(src)

    def adapt(adata, checkpoint=None, *, out_dir, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(bj.tl, "adapt", adapt)
    code, err = _run(["adapt", src, "--out", tmp_path / "ck"], capsys)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert line.startswith("biomjepa adapt: error: No space left to write the adapted checkpoint (or the scratch copy "
                           f"of the cells' counts) in {tmp_path} (it is full: ")
    assert line.endswith("MB free). Free space there, or give an --out on a disk with room; nothing was kept.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def test_adapt_embed_on_a_full_disk_names_the_checkpoint_it_wrote(tmp_path, counts_adata, full_writes, capsys,
                                                                  monkeypatch):
    src = tmp_path / "in.h5ad"
    counts_adata.write_h5ad(src)

    def adapt(adata, checkpoint=None, *, out_dir, **kw):
        os.makedirs(out_dir)
        adata.obsm["X_biomjepa"] = np.zeros((adata.n_obs, 4), np.float32)
        adata.uns["biomjepa"]["adapt"] = {"checkpoint": str(out_dir), "base": {"name": "tiny"}, "n_cells": adata.n_obs,
                                          "steps_done": 1, "seconds": 0.0, "checkpoint_sha256": "0" * 64}

    monkeypatch.setattr(bj.tl, "adapt", adapt)
    out = tmp_path / "out.h5ad"
    code, err = _run(["adapt", src, "--out", tmp_path / "ck", "--embed", out], capsys)
    assert code == 1
    line = err.strip().splitlines()[-1]
    assert f"No space left to write out.h5ad (60 cells and their embedding) in {tmp_path} (it is full: " in line
    assert f"the checkpoint in {tmp_path / 'ck'} is complete (`biomjepa embed {src} OUT.h5ad --checkpoint" in line
    assert full_writes == [] and not _open_here()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "in.h5ad"]


def test_the_full_disk_is_found_in_h5py_words_and_through_anndata_chains():
    from biomjepa._h5files import disk_full

    assert disk_full(OSError(H5PY_NO_SPACE.format(path="x"))) == errno.ENOSPC
    outer = RuntimeError("Above error raised while writing key 'obs'")
    outer.__cause__ = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert disk_full(outer) == errno.EDQUOT
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None and disk_full(ValueError("x")) is None


# ------------------------------------------------------------------------------------ a real full disk (tmpfs)
@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs at ``tmp_path / "t"`` (``size`` in MB); skipped where mounting is not allowed."""
    mounted = []

    def mount(size_mb: int) -> Path:
        where = tmp_path / f"t{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _big_input(path: Path) -> Path:
    """The first 300 bundled pancreas cells (5.4 MB; the case that crashed: HDF5 failed in obs, then in its close)."""
    bj.datasets.pancreas()[:300].copy().write_h5ad(path)
    return path


def _embed(src, out, tiny_checkpoint) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "biomjepa", "--no-progress", "embed", str(src), str(out),
                           "--checkpoint", tiny_checkpoint, "--device", "cpu"],
                          capture_output=True, text=True, timeout=300)


def test_embed_onto_a_small_tmpfs_ends_in_one_line_and_leaves_nothing(tmp_path, tmpfs, tiny_checkpoint):
    small = tmpfs(3)
    src = _big_input(tmp_path / "p.h5ad")
    done = _embed(src, small / "out.h5ad", tiny_checkpoint)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"biomjepa embed: error: No space left to write out.h5ad (300 cells and their "
                                f"embedding) in {small} (it is full: ")
    assert not any(word in done.stderr for word in ("Traceback", "Segmentation", "Exception ignored", "HDF5", "h5py")), \
        done.stderr[-2000:]
    assert list(small.iterdir()) == []


def test_embed_in_place_on_a_full_tmpfs_leaves_the_input_as_it_was(tmp_path, tmpfs, tiny_checkpoint):
    small = tmpfs(9)
    src = _big_input(small / "p.h5ad")
    before = src.read_bytes()
    done = _embed(src, src, tiny_checkpoint)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "No space left to write p.h5ad" in done.stderr
    assert not any(word in done.stderr for word in ("Traceback", "Segmentation", "Exception ignored", "HDF5", "h5py"))
    assert sorted(p.name for p in small.iterdir()) == ["p.h5ad"] and src.read_bytes() == before
