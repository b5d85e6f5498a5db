"""Issue 68, item 1: a link planted under a lock file's name never makes biomjepa write into the file behind it.

Each kind of lock file is taken through the function its tool takes it with (``biomjepa embed``'s output lock, adapt's
``.OUT.adapt.lock``, the atlas store's ``.S.zarr.lock``, the corpus cache's ``.lock``, the run directory's ``.lock``);
a symlink or a hard link there is refused, naming the lock file, and the victim keeps every byte.
"""

from __future__ import annotations

import os
import re

import pytest

from biomjepa import _files
from biomjepa._lockfile import UnsafeLockFile

pytestmark = pytest.mark.skipif(_files.fcntl is None or not hasattr(os, "O_NOFOLLOW"), reason="flock, O_NOFOLLOW")
PRECIOUS = b"a file of the user's, which must not change\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "elsewhere" / "victim.txt"
    path.parent.mkdir()
    path.write_bytes(PRECIOUS)
    return path


def _unchanged(victim) -> bool:
    return victim.read_bytes() == PRECIOUS


def _embed_output(out):
    from biomjepa.cli.outputs import writing

    with writing(out, lambda written: "nothing"):  # what `biomjepa embed IN OUT` (and adapt --embed OUT) holds
        pass


def _adapt(out):
    from biomjepa.tl._adapt_dirs import _claimed

    with _claimed(out):
        pass


def _atlas(out):
    from biomjepa.embed.store import lock_store

    lock_store(out).release()


def _cache(out, shared):
    from biomjepa.data.shards import _cache_lock

    _cache_lock(out, shared=shared).release()


def _run_dir(out):
    from biomjepa.train.runlock import lock_run_dir, unlock_run_dir

    lock_run_dir(out)
    unlock_run_dir(out)


KINDS = {  # kind → (what is locked, its lock file, the call that takes it)
    "embed output": ("out.h5ad", ".out.h5ad.lock", _embed_output),
    "adapt out_dir": ("ck", ".ck.adapt.lock", _adapt),
    "atlas store": ("S.zarr", ".S.zarr.lock", _atlas),
    "corpus cache (read)": ("cache", "cache/.lock", lambda out: _cache(out, shared=True)),
    "corpus cache (prepare)": ("cache", "cache/.lock", lambda out: _cache(out, shared=False)),
    "run directory": ("runs/r", "runs/r/.lock", _run_dir),
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_symlink_planted_as_a_lock_file_is_refused_and_its_target_unchanged(tmp_path, victim, kind):
    target, lock_name, take = KINDS[kind]
    shared = tmp_path.resolve() / "shared"  # as adapt names it (its out_dir's real path)
    out, lock_file = shared / target, shared / lock_name
    lock_file.parent.mkdir(parents=True)
    os.symlink(victim, lock_file)  # `ln -s victim.txt .out.h5ad.lock` by whoever can write into the folder
    said = f"The lock file '{lock_file}' is a symbolic link (to '{victim.resolve()}'), not a regular file."
    with pytest.raises(UnsafeLockFile, match=re.escape(said) + ".* Remove it"):
        take(out)
    assert _unchanged(victim)
    assert victim.stat().st_nlink == 1 and lock_file.is_symlink()  # nothing removed nor made in its place
    lock_file.unlink()
    take(out)  # removed as the message says: the command runs
    assert _unchanged(victim)


def test_a_hard_link_planted_as_a_lock_file_is_refused_and_a_dangling_link_creates_nothing(tmp_path, victim):
    lock_file = tmp_path / ".out.h5ad.lock"
    os.link(victim, lock_file)  # the same file under the lock file's name: fstat, not the name, tells
    said = f"The lock file '{lock_file}' has 2 names (hard links)"
    with pytest.raises(UnsafeLockFile, match=re.escape(said) + ".* Remove it"):
        _files.output_lock(tmp_path / "out.h5ad")
    assert _unchanged(victim) and lock_file.stat().st_nlink == 2
    lock_file.unlink()
    missing = tmp_path / "elsewhere" / "new.txt"
    os.symlink(missing, lock_file)  # a link to a file that is not there yet: O_EXCL does not create it
    with pytest.raises(UnsafeLockFile, match="symbolic link"):
        _files.output_lock(tmp_path / "out.h5ad")
    assert not missing.exists()


@pytest.mark.skipif(getattr(os, "geteuid", lambda: -1)() != 0, reason="giving a file to another user takes root")
def test_another_users_lock_file_is_not_written(tmp_path):
    lock_file = tmp_path / ".S.zarr.lock"
    lock_file.write_bytes(PRECIOUS)
    os.chown(lock_file, 12345, -1)  # writable by this user (root), but not its own
    with pytest.raises(UnsafeLockFile, match=r"belongs to another user \(uid 12345\)"):
        _files.lock(lock_file, what="The atlas store S.zarr", fix="wait")
    assert lock_file.read_bytes() == PRECIOUS


def test_a_fifo_as_a_lock_file_is_refused_without_hanging(tmp_path):
    lock_file = tmp_path / ".S.zarr.lock"
    os.mkfifo(lock_file)
    with pytest.raises(UnsafeLockFile, match=r"is a FIFO \(named pipe\), not a regular file"):
        _files.lock(lock_file, what="The atlas store S.zarr", fix="wait")


def test_a_lock_file_a_killed_process_left_is_taken_and_its_record_replaced(tmp_path):
    """The file of ours that a killed holder left (one name, a regular file) is still this user's lock file."""
    lock_file = tmp_path / ".out.h5ad.lock"
    lock_file.write_text("pid 1 on elsewhere: biomjepa embed a.h5ad out.h5ad, killed\n")
    held = _files.lock(lock_file, what="The output out.h5ad", fix="wait")
    try:
        assert held.locked and lock_file.read_text().startswith(f"pid {os.getpid()} on ")
    finally:
        held.release()
