"""Every stop at a safe point, one message, nothing left (issue 68 item 3).

``biomjepa embed``, ``adapt`` and ``demo`` record SIGTERM/SIGINT and act on it between blocks of work or before a
rename, never inside a library's finaliser (where it was swallowed: a traceback and exit 0); ``biomjepa train`` stopped
while it prepares its corpus, and ``biomjepa demo`` while it writes, end with one line and exit 143/130, leaving
nothing; the copies of a writer killed outright, and adapt's scratch, are removed only when a lock proves it dead.

Stops come at controlled points: a child process runs the command with a stand-in that sends itself the signal there.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from biomjepa.data.vocab import Vocab


def _defaults():
    for s in (signal.SIGTERM, signal.SIGINT):  # whatever this process inherited (nohup … &)
        signal.signal(s, signal.SIG_DFL if s == signal.SIGTERM else signal.default_int_handler)


def _child(script: str, *argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *map(str, argv)], capture_output=True, text=True,
                          timeout=300, preexec_fn=_defaults)


def _cells(path: Path, n: int = 30) -> Path:
    X = np.random.default_rng(0).poisson(1.0, size=(n, 50)).astype(np.float32)
    X[:, 0] += 1
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:50])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.write_h5ad(path)
    return path


def _hidden(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


# ------------------------------------------------------------------ embed: a stop inside a finaliser is not swallowed
EMBED = r"""
import signal, sys
import numpy as np
import biomjepa as bj
from biomjepa.cli.app import main


class Finalised:  # h5py's and anndata's WeakValueDictionary callbacks are such finalisers
    def __del__(self):
        signal.raise_signal(getattr(signal, sys.argv[1]))


def embed(adata, **kw):
    Finalised()  # collected at once: the signal arrives inside its __del__
    adata.obsm["X_biomjepa"] = np.zeros((adata.n_obs, 4), np.float32)


bj.tl.embed = embed
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_embed_acts_on_a_stop_that_came_inside_a_finaliser(tmp_path, sig):
    src = _cells(tmp_path / "in.h5ad")
    out = tmp_path / "out.h5ad"
    done = _child(EMBED, sig, "embed", src, out)
    assert done.returncode == 128 + getattr(signal, sig), done.stderr  # not 0: the stop was not swallowed
    assert done.stderr.strip().splitlines()[-1] == f"biomjepa embed: stopped by {sig}; nothing was written to {out}."
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def test_a_recorded_stop_acts_between_the_readers_blocks(known_dispositions):
    from biomjepa._stops import stops_at_safe_points
    from biomjepa.data.stream import iter_counts

    a = ad.AnnData(np.ones((30, 5), np.float32))
    read = []

    def read_all():
        with stops_at_safe_points():
            for rows, _ in iter_counts(a, chunk=10):
                read.append(rows.start)
                signal.raise_signal(signal.SIGTERM)  # recorded: this block is finished first
                read.append("whole")

    with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"):
        read_all()
    assert read == [0, "whole"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler put back


def test_a_stop_as_a_temporary_file_is_created_leaves_none(tmp_path, monkeypatch, known_dispositions):
    """The file of ``tempfile.mkstemp`` is created inside the guarded block: a stop that comes as it is made (1 run in
    9 of a sweep left it empty and hidden) removes it."""
    import tempfile

    from biomjepa._files import atomic_path
    from biomjepa._stops import sigterm_interrupts

    real = tempfile.mkstemp

    def mkstemp(*a, **k):
        made = real(*a, **k)
        signal.raise_signal(signal.SIGTERM)  # the file exists, its name not yet handed back
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(KeyboardInterrupt, match="stopped"), sigterm_interrupts("stopped"), \
            atomic_path(tmp_path / "out.h5ad") as tmp:
        Path(tmp).write_text("not reached")
    assert list(tmp_path.iterdir()) == []


def test_the_training_loop_takes_over_a_recorded_stop_and_a_second_one_stops_at_once(known_dispositions):
    from biomjepa._stops import stops_at_safe_points
    from biomjepa.train.signals import GracefulStop

    with stops_at_safe_points():
        signal.raise_signal(signal.SIGTERM)  # while the run is set up
        with GracefulStop() as stop:
            assert stop.signum == signal.SIGTERM  # the loop stops at its first step boundary
            with pytest.raises(KeyboardInterrupt, match="stopped by SIGTERM"):
                signal.raise_signal(signal.SIGTERM)  # the second: at once, not recorded again
    # the block ended without raising: the loop acted on the stop, the command says it (its Stopped)


# ------------------------------------------------------------------------------ train: a stop while preparing
TRAIN = r"""
import signal, sys
import biomjepa.data.stream as stream
from biomjepa.cli.app import main

real = stream.materialize


def materialize(X):  # the stop comes while the first corpus file is read
    stream.materialize = real
    signal.raise_signal(getattr(signal, sys.argv[1]))
    return real(X)


stream.materialize = materialize
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(("sig", "own_cache"), [("SIGTERM", False), ("SIGINT", True)])
def test_train_stopped_while_preparing_its_corpus_says_so_and_leaves_nothing(tmp_path, sig, own_cache):
    files = [_cells(tmp_path / "a.h5ad"), _cells(tmp_path / "b.h5ad")]
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    argv = ["train", "tiny", "--set", f"data.corpus=[{files[0]}, {files[1]}]", "--set", f"run.out_dir={runs}",
            "--set", "run.steps=2", *(["--set", f"data.cache_dir={cache}"] if own_cache else [])]
    done = _child(TRAIN, sig, *argv)
    assert done.returncode == 128 + getattr(signal, sig), done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"biomjepa train: stopped by {sig}; nothing was trained (")
    assert line.endswith(", made by this command, removed). Run the same command again to start."), line
    assert "Traceback" not in done.stderr
    assert not cache.exists() and (not runs.exists() or list(runs.iterdir()) == [])  # no .lock, no shard, no run
    assert _hidden(tmp_path) == [] and sorted(p.name for p in tmp_path.glob("*.h5ad")) == ["a.h5ad", "b.h5ad"]


# ------------------------------------------------------------------------------ demo: a stop while writing
DEMO = r"""
import signal, sys
from pathlib import Path
import anndata as ad
import numpy as np
import pandas as pd
import scanpy as sc
import biomjepa as bj
from biomjepa.cli import demo
from biomjepa.cli.app import main

cells = ad.read_h5ad(sys.argv[2])


def embed(adata, **kw):
    adata.obsm["X_biomjepa"] = np.zeros((adata.n_obs, 4), np.float32)
    adata.uns["biomjepa"] = {"params": {"checkpoint": "c", "device": "cpu"}}


def leiden(adata):
    adata.obs["leiden"] = pd.Categorical(["0"] * adata.n_obs)
    return 1.0


bj.datasets.pancreas = lambda: cells
bj.tl.embed = embed
sc.pp.neighbors = sc.tl.umap = lambda *a, **k: None
demo._leiden = leiden
demo._figure = lambda adata, ari, path: Path(path).write_bytes(b"a new figure")
real = ad.AnnData.write_h5ad


def write_h5ad(self, filename=None, **kw):  # the stop comes while the .h5ad is written
    real(self, filename, **kw)
    signal.raise_signal(getattr(signal, sys.argv[1]))


ad.AnnData.write_h5ad = write_h5ad
sys.exit(main(["demo", "--out", sys.argv[3]]))
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_demo_stopped_while_writing_leaves_the_earlier_demo_as_it_was(tmp_path, sig):
    from biomjepa.cli.demo import H5AD, PNG

    src = _cells(tmp_path / "cells.h5ad")
    out = tmp_path / "demo"
    out.mkdir()
    (out / H5AD).write_bytes(b"an earlier demo")
    (out / PNG).write_bytes(b"an earlier figure")
    done = _child(DEMO, sig, src, out)
    assert done.returncode == 128 + getattr(signal, sig), done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"biomjepa demo: stopped by {sig}; nothing was written to {out} (an earlier demo's files are as they were).")
    assert "Traceback" not in done.stderr
    assert (out / H5AD).read_bytes() == b"an earlier demo" and (out / PNG).read_bytes() == b"an earlier figure"
    assert sorted(p.name for p in out.iterdir()) == sorted([H5AD, PNG])  # no hidden .pancreas_embedded.h5ad.*.h5ad


# ----------------------------------------------------- leftovers of a writer killed outright, removed only when dead
HOLD = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); sys.stdin.read()")


def _holding(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_write_obsm_copies_a_killed_run_left_are_removed_when_its_lock_proves_it_dead(tmp_path, caplog):
    from biomjepa._files import LockBusy
    from biomjepa.embed.obsm import inputs_locked

    src = _cells(tmp_path / "in.h5ad")
    copy = tmp_path / ".in.h5ad.k1ll3d00.h5ad"  # the name atomic_path gives, left by a SIGKILL
    copy.write_bytes(b"half a copy")
    lock_file = tmp_path / ".in.h5ad.lock"
    with inputs_locked([str(src)]):  # no lock file was there: nothing proves that writer dead
        pass
    assert copy.exists()
    lock_file.write_text("pid 1 on a host: biomjepa embed in.h5ad --store s.zarr --write-obsm\n")  # left by the kill
    holder = _holding(lock_file)  # ... but held: its writer runs
    try:
        with pytest.raises(LockBusy), inputs_locked([str(src)]):
            pass
    finally:
        holder.kill()
        holder.wait()
    assert copy.exists()
    lock_file.write_text("pid 1 on a host: killed\n")
    with caplog.at_level(logging.WARNING), inputs_locked([str(src)]):
        assert not copy.exists()
    assert any(str(copy) in r.getMessage() and "killed" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5ad"]


def test_the_scratch_of_a_running_adapt_whose_lock_file_was_deleted_stays(tmp_path):
    from biomjepa.tl._adapt_dirs import _claimed

    other = tmp_path / ".live.adapt-runn1ng0"  # another out_dir's adapt, running
    same = tmp_path / ".ck.adapt-runn1ng1"  # an adapt of this out_dir, running
    for d in (other, same):
        d.mkdir()
        (d / "cells.npz").write_bytes(b"counts")
    holder = _holding(tmp_path / ".live.adapt.lock")
    try:
        (tmp_path / ".live.adapt.lock").unlink()  # deleted by hand: its adapt still holds the lock on the file
        with _claimed(tmp_path / "ck"):
            assert (other / "cells.npz").exists() and (same / "cells.npz").exists()
    finally:
        holder.kill()
        holder.wait()
    assert other.exists() and same.exists()
