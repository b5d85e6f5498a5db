"""``write_obsm`` (issue 57): each input is replaced whole through a temporary file, under the lock every writer of a
file takes, and a stop signal leaves each input wholly old or wholly new, recorded as such in the store, with one line
naming those written; a run ended between a rename and its record leaves a pending record the next run settles. The
store is made here block by block (no model, but for one test of the whole command), so these tests are quick."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pytest

from biomjepa._files import LockBusy
from biomjepa._stops import sigterm_interrupts
from biomjepa.cli.atlas import stop_left
from biomjepa.embed.obsm import settle_pending, write_obsm_all
from biomjepa.embed.store import FORMAT, KEY, OBSM, AtlasStore

HOLD = """
import sys
from pathlib import Path
from biomjepa._files import output_lock
held = output_lock(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
held.release()
"""


@pytest.fixture
def complete_store(tmp_path, make_input):
    """Two 20-cell inputs and a complete store of 4-dim embeddings of them (blocks of 8 rows)."""
    paths = [str(make_input(tmp_path / f"donor_{k}.h5ad", 20, 100 * k, k)) for k in range(2)]
    inputs, names = [], {}
    for k, p in enumerate(paths):
        st = os.stat(p)
        inputs.append({"name": f"donor_{k}", "path": p, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "n_obs": 20})
        names[f"donor_{k}"] = ad.read_h5ad(p).obs_names.to_numpy()
    manifest = {"format": FORMAT, "checkpoint": "test", "checkpoint_sha256": "", "weights_sha256": "",
                "embedding_dim": 4, "block_rows": 8, "settings": {"dtype": "float32"}, "biomjepa_version": "test",
                "inputs": inputs}
    store = AtlasStore.create(tmp_path / "s.zarr", manifest, names)
    rng = np.random.default_rng(0)
    for inp in inputs:
        for block, (a, b) in enumerate(store.bounds(inp["name"])):
            Z = rng.standard_normal((b - a, 4)).astype(np.float32)
            store.write_block(inp["name"], block, Z, np.ones(b - a, np.int32), names[inp["name"]][a:b])
    store.mark_complete()
    return store, paths


def _embedding(store: AtlasStore, name: str) -> np.ndarray:
    return np.concatenate([store.read_block(name, b)[0] for b in range(len(store.bounds(name)))])


def test_a_stop_right_after_a_rename_leaves_that_input_new_and_recorded(complete_store, tmp_path, monkeypatch,
                                                                       known_dispositions):
    store, paths = complete_store
    before = Path(paths[1]).read_bytes()
    real = os.replace

    def replace_then_sigterm(src, dst):  # the signal arrives just after the first input is replaced
        real(src, dst)
        if str(dst) == paths[0]:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(os, "replace", replace_then_sigterm)
    with pytest.raises(KeyboardInterrupt), sigterm_interrupts("stopped by SIGTERM"):
        write_obsm_all(store)
    monkeypatch.setattr(os, "replace", real)
    assert np.array_equal(ad.read_h5ad(paths[0]).obsm[OBSM], _embedding(store, "donor_0"))  # wholly new
    assert Path(paths[1]).read_bytes() == before  # wholly old
    again = AtlasStore(store.path)
    first, second = again.manifest["inputs"]
    st = os.stat(paths[0])
    assert (first["size"], first["mtime_ns"], first["obsm"]) == (st.st_size, st.st_mtime_ns, True)  # recorded with it
    assert "obsm" not in second and not again.root.attrs.get("obsm_written", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["donor_0.h5ad", "donor_1.h5ad", "s.zarr"]  # no temp, no lock
    assert stop_left(str(store.path), write_obsm=True) == (
        f"{store.path} is complete; obsm['X_biomjepa'] was written into 1 of 2 inputs ({paths[0]}); the other input "
        "is as it was; running the same command again writes it into that one.")

    write_obsm_all(again)  # the same command again: only the input the stop left
    assert os.stat(paths[0]).st_mtime_ns == st.st_mtime_ns
    assert np.array_equal(ad.read_h5ad(paths[1]).obsm[OBSM], _embedding(store, "donor_1"))
    assert AtlasStore(store.path).root.attrs["obsm_written"] is True
    assert stop_left(str(store.path), write_obsm=True) == f"{store.path} is complete."


def test_a_run_ended_between_a_rename_and_its_record_is_recognised_by_the_next_run(tmp_path, make_input,
                                                                                 tiny_checkpoint, monkeypatch):
    """Review of issue 57: an input renamed but not recorded (the record failed, a full disk; or the process was killed
    between the two) is known by the next run from the pending identity recorded before the rename: the same command
    neither embeds again nor asks for overwrite=True, does not write that input again, and records it."""
    from biomjepa.embed import embed_atlas, obsm

    paths = [str(make_input(tmp_path / f"donor_{k}.h5ad", 20, 100 * k, k)) for k in range(2)]
    store = tmp_path / "s.zarr"
    kw = {"checkpoint": tiny_checkpoint, "block_rows": 8, "device": "cpu", "rank": 0, "world": 1, "write_obsm": True}
    real = obsm._record

    def disk_full(st, k, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(obsm, "_record", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        embed_atlas(paths, store, **kw)
    monkeypatch.setattr(obsm, "_record", real)
    st = os.stat(paths[0])
    first, second = AtlasStore(store).manifest["inputs"]
    assert OBSM in ad.read_h5ad(paths[0]).obsm  # renamed: the new file is there
    assert "obsm" not in first and (first["size"], first["mtime_ns"]) != (st.st_size, st.st_mtime_ns)  # not recorded
    assert first["pending"] == {"size": st.st_size, "mtime_ns": st.st_mtime_ns} and "pending" not in second

    out = embed_atlas(paths, store, **kw)  # the same command again
    assert out["complete"] and out["blocks"] == 0 and not out["repaired"]  # nothing embedded again
    assert os.stat(paths[0]).st_mtime_ns == st.st_mtime_ns  # not written again
    again = AtlasStore(store)
    inputs = again.manifest["inputs"]
    assert (inputs[0]["size"], inputs[0]["mtime_ns"], inputs[0]["obsm"]) == (st.st_size, st.st_mtime_ns, True)
    assert inputs[1]["obsm"] is True and not any("pending" in i for i in inputs)
    for k, p in enumerate(paths):
        assert np.array_equal(ad.read_h5ad(p).obsm[OBSM], _embedding(again, f"donor_{k}"))


def test_a_write_ended_before_its_rename_leaves_the_input_and_its_record_as_they_were(complete_store, monkeypatch):
    """The pending identity of a copy never renamed over its input is dropped; the input is written on the next run."""
    store, paths = complete_store
    before, recorded = Path(paths[0]).read_bytes(), dict(store.manifest["inputs"][0])
    real = os.replace

    def failing(src, dst):
        if str(dst) == paths[0]:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="Input/output error"):
        write_obsm_all(store)
    monkeypatch.setattr(os, "replace", real)
    again = AtlasStore(store.path)
    assert Path(paths[0]).read_bytes() == before and "pending" in again.manifest["inputs"][0]
    assert settle_pending(again) == [] and again.manifest["inputs"][0] == recorded  # the old file: as recorded
    assert AtlasStore(store.path).manifest["inputs"][0] == recorded  # and so in the store
    write_obsm_all(again)
    assert [i.get("obsm") for i in AtlasStore(store.path).manifest["inputs"]] == [True, True]
    assert np.array_equal(ad.read_h5ad(paths[0]).obsm[OBSM], _embedding(store, "donor_0"))


@pytest.mark.parametrize("written", [0, 2])
def test_a_stop_line_reads_naturally_when_obsm_was_written_into_no_input_or_every_input(complete_store, written):
    """Review of issue 57: neither "written into no input, the others ..." nor "2 of 2 inputs ..., the others ..."."""
    store, _ = complete_store
    inputs = [{**i, "obsm": True} if k < written else i for k, i in enumerate(store.manifest["inputs"])]
    store.root.attrs[KEY] = {**store.manifest, "inputs": inputs}
    said = {0: "was not written into any of the 2 inputs yet; running the same command again writes it into them.",
            2: "was written into all 2 inputs."}[written]
    assert stop_left(str(store.path), write_obsm=True) == f"{store.path} is complete; obsm['X_biomjepa'] {said}"


def _holding(path) -> subprocess.Popen:
    """Another process holding ``path``'s output lock (as `biomjepa embed IN PATH` does while it writes it)."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout.readline().strip() == "holding"
    return child


def test_an_input_another_command_writes_is_refused_before_any_is_written(complete_store):
    from biomjepa.embed import embed_atlas

    store, paths = complete_store
    before = [Path(p).read_bytes() for p in paths]
    child = _holding(paths[1])
    try:
        with pytest.raises(LockBusy, match=rf"The input {paths[1]}, which write_obsm=True replaces, is in use by another "
                                           rf"process \(pid {child.pid} .*leave out write_obsm=True"):
            write_obsm_all(store)
        assert [Path(p).read_bytes() for p in paths] == before  # the first input was not written either
        with pytest.raises(LockBusy, match="write_obsm=True replaces"):  # refused before the model is even loaded
            embed_atlas(paths, store.path.parent / "other.zarr", checkpoint="never-loaded", write_obsm=True,
                        rank=0, world=1)
    finally:
        child.communicate("")
    assert not [p for p in os.listdir(store.path.parent) if p.endswith(".lock")]
