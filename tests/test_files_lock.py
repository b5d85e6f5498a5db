"""``biomjepa._files.lock``: a waiter that opened a lock file its holder then removed locks the file that is there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from biomjepa import _files


@pytest.mark.skipif(_files.fcntl is None, reason="flock locks (POSIX)")
def test_a_lock_taken_on_a_removed_lock_file_is_taken_again_on_the_file_there(tmp_path, monkeypatch):
    path = tmp_path / ".ck.adapt.lock"
    path.touch()
    stale = os.open(path, os.O_RDWR)  # opened before the previous holder removed the file and released the lock
    path.unlink()
    real_open, opened = _files._open, []

    def first_stale(p):
        opened.append(p)
        return stale if len(opened) == 1 else real_open(p)

    monkeypatch.setattr(_files, "_open", first_stale)
    held = _files.lock(path, what="out_dir='ck'", fix="wait")
    try:
        assert len(opened) == 2 and path.exists()  # it noticed the stale inode and locked a new file at the path
        probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
                 "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
                 "except BlockingIOError: print('busy')")
        out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == "busy"  # another process sees the lock on the file that is there
    finally:
        held.release()


HOLD = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); sys.stdin.read()")


@pytest.mark.skipif(_files.fcntl is None, reason="flock locks (POSIX)")
def test_a_lock_to_be_removed_goes_with_its_last_release_and_never_from_under_another_holder(tmp_path):
    path = tmp_path / ".out.h5ad.lock"
    outer = _files.lock(path, what="The output out.h5ad", fix="wait", remove=True)
    inner = _files.lock(path, what="The output out.h5ad", fix="wait", remove=True)  # this process, again
    inner.release()
    assert path.exists() and outer.locked  # still held by this process: the file stays
    outer.release()
    assert not path.exists() and not outer.locked  # a finished command leaves no lock file behind
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(_files.LockBusy, match=f"pid {holder.pid}"):
            _files.lock(path, what="The output out.h5ad", fix="wait", remove=True)
        assert path.exists()  # a refused process removes nothing
    finally:
        holder.kill()
        holder.wait()
