"""``bj.tl.adapt``'s final phase under stop signals, and what killed adapts leave beside ``out_dir`` (issue 57).

A stop at the rename of the checkpoint into ``out_dir``, or while the scratch copy of the counts is removed, leaves
nothing (no checkpoint, no scratch, no lock): the call's result is whole or absent. A scratch directory left by an
adapt killed outright is removed by the next adapt into the same folder, unless its adapt still runs.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab

pytestmark = [pytest.mark.filterwarnings("ignore:The input measures only:UserWarning"),
              pytest.mark.usefixtures("own_cachedir")]  # tests/tl/conftest.py


def cells(n: int = 240, genes: int = 300) -> ad.AnnData:
    rng = np.random.default_rng(0)
    X = rng.poisson(rng.gamma(0.5, 2, size=genes), size=(n, genes)).astype(np.float32)
    X[:, 0] += 1
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:genes])))
    a.obs_names = [f"c{i}" for i in range(n)]
    return a


@pytest.mark.parametrize("where", ["rename", "scratch"])
def test_a_stop_as_the_checkpoint_is_renamed_into_place_leaves_nothing(tmp_path, base, monkeypatch, where,
                                                                        known_dispositions):
    out = tmp_path / "ck"
    sent = []
    if where == "rename":  # SIGTERM right after the checkpoint's rename into out_dir
        real = os.replace

        def replace(src, dst, *a, **k):
            real(src, dst, *a, **k)
            if Path(dst) == out and not sent:
                sent.append(1)
                signal.raise_signal(signal.SIGTERM)

        monkeypatch.setattr(os, "replace", replace)
    else:  # SIGTERM as the scratch directory (with its copy of the counts) is being removed
        real = shutil.rmtree

        def rmtree(path, *a, **k):
            if Path(path).name.startswith(".ck.adapt-") and not sent:
                sent.append(1)
                signal.raise_signal(signal.SIGTERM)
            return real(path, *a, **k)

        monkeypatch.setattr(shutil, "rmtree", rmtree)
    adata = cells()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        bj.tl.adapt(adata, base, steps=1, out_dir=out)
    assert sent == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no checkpoint, no scratch, no lock: nothing to refuse
    assert "X_biomjepa" not in adata.obsm and "biomjepa" not in adata.uns


HOLD = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); sys.stdin.read()")


def test_scratch_left_by_killed_adapts_is_removed_and_a_running_ones_kept(tmp_path, base, monkeypatch, caplog):
    import biomjepa.train.adapt as train_adapt

    stale = [tmp_path / ".ck.adapt-k1ll3d00", tmp_path / ".older.adapt-k1ll3d01"]  # this out_dir's, another's
    running = tmp_path / ".live.adapt-runn1ng0"
    other = tmp_path / ".notes.adapt-x"  # not a scratch directory's name
    for d in [*stale, running, other]:
        d.mkdir()
        (d / "cells.npz").write_bytes(b"counts")
    (tmp_path / ".older.adapt.lock").write_text("pid 1 on a host: a killed adapt\n")  # its lock file, free
    (tmp_path / ".ck.adapt.lock").write_text("pid 2 on a host: a killed adapt\n")  # a killed adapt leaves its lock file
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / ".live.adapt.lock")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"

        def trained(*a, **k):
            raise ValueError("stop before training")

        monkeypatch.setattr(train_adapt, "adapt_encoder", trained)
        with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match="stop before training"):
            bj.tl.adapt(cells(), base, steps=1, out_dir=tmp_path / "ck")
        assert (running / "cells.npz").exists() and (tmp_path / ".live.adapt.lock").exists()  # its adapt runs
    finally:
        holder.kill()
        holder.wait()
    assert not any(d.exists() for d in stale) and other.exists()
    assert not (tmp_path / ".older.adapt.lock").exists()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(any(str(d) in m for m in warned) for d in stale)
    assert not any(str(running) in m for m in warned)


def test_held_stop_signals_act_after_the_step(known_dispositions):
    from biomjepa._stops import sigterm_interrupts, stops_held

    done = []

    def step():
        with sigterm_interrupts("stopped"):
            with stops_held():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGINT)
                done.append("the step")  # not cut short
            done.append("after")  # the held signal acts before this

    with pytest.raises(KeyboardInterrupt, match="stopped"):
        step()
    assert done == ["the step"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited as ignored: stays so, and nothing is raised
    with stops_held():
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_the_scratch_of_an_adapt_in_another_thread_of_this_process_stays(tmp_path):
    from biomjepa._files import lock
    from biomjepa.tl import _adapt_dirs

    running = tmp_path / ".other.adapt-thread00"
    running.mkdir()
    held = lock(tmp_path / ".other.adapt.lock", what="out_dir='other'", fix="wait")  # the file lock is re-entrant
    _adapt_dirs._CLAIMED.add(str(tmp_path / "other"))
    try:
        _adapt_dirs._sweep(tmp_path / "ck")
        assert running.exists()
    finally:
        _adapt_dirs._CLAIMED.discard(str(tmp_path / "other"))
        held.release()
    _adapt_dirs._sweep(tmp_path / "ck")  # that adapt ended without removing it: stale now
    assert not running.exists()
