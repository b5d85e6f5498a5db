"""Issue 57: corpus files copied (the same bytes, new modification times) are the same files, for the corpus cache
and for a resumed run; a file is hashed only where its mtime changed, and records without a digest compare as before."""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest

from biomjepa.data import input_identity
from biomjepa.data.input_identity import (
    changed,
    file_sha256,
    refreshed,
    size_text,
    to_hash,
    undigested,
    with_sha256,
)
from biomjepa.data.shards import corpus_inputs, prepare_corpus


def _later(path, seconds: int = 5) -> None:
    """Give ``path`` a later modification time, as a copy does."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10**9))


def _copy_over(path, tmp_path) -> None:
    """Replace ``path`` by a copy of itself (the same bytes, a new inode and mtime)."""
    shutil.copyfile(path, tmp_path / "copy")
    os.replace(tmp_path / "copy", path)
    _later(path)


@pytest.fixture
def files(tmp_path):
    paths = []
    for k in range(2):
        p = tmp_path / f"f{k}.bin"
        p.write_bytes(bytes(range(256)) * (k + 3))
        paths.append(str(p))
    return paths


def _records(paths) -> list[dict]:
    return [{"path": p, "size": os.stat(p).st_size, "mtime_ns": os.stat(p).st_mtime_ns} for p in paths]


def test_a_copy_is_the_same_file_where_a_digest_is_recorded(files, tmp_path):
    recorded = with_sha256(_records(files))
    assert all(len(r["sha256"]) == 64 for r in recorded)
    _copy_over(files[0], tmp_path)
    assert changed(recorded, _records(files)) == []
    kept = refreshed(recorded, _records(files))
    assert kept == [{**r, "sha256": o["sha256"]} for r, o in zip(_records(files), recorded)]
    assert refreshed(kept, _records(files)) is None  # recorded again: the next start compares mtimes only


def test_other_bytes_of_the_same_size_are_a_change(files):
    recorded = with_sha256(_records(files))
    with open(files[1], "r+b") as f:
        f.write(b"\xff")
    _later(files[1])
    assert changed(recorded, _records(files)) == [files[1]]


def test_a_record_without_a_digest_compares_size_and_mtime_as_before(files, tmp_path):
    recorded = _records(files)
    _copy_over(files[0], tmp_path)
    assert changed(recorded, _records(files)) == [files[0]]
    assert changed(recorded, _records(files)[1:]) == [files[0]]  # a file gone from one record


def test_files_whose_mtime_matches_are_not_hashed(files, monkeypatch):
    recorded = with_sha256(_records(files))

    def no_hashing(entry):
        raise AssertionError(f"{entry['path']} hashed although its mtime is unchanged")

    monkeypatch.setattr(input_identity, "file_sha256", no_hashing)
    assert changed(recorded, _records(files)) == []


def test_a_file_written_since_its_record_has_no_digest(files):
    entry = _records(files)[0]
    _later(files[0])
    assert file_sha256(entry) is None and "sha256" not in with_sha256([entry])[0]


def test_to_hash_names_the_files_a_comparison_will_read_once(files, tmp_path):
    recorded = with_sha256(_records(files))
    _copy_over(files[0], tmp_path)
    with open(files[1], "ab") as f:  # another size: a change, never hashed
        f.write(b"x")
    _later(files[1])
    now = _records(files)
    assert [i["path"] for i in to_hash(recorded, now)] == [files[0]]
    assert changed(recorded, now) == [files[1]]
    assert to_hash(recorded, now) == []  # hashed once per process and file version


def test_only_files_of_the_recorded_size_are_said_to_be_a_possible_copy(files):
    """Review of issue 57: without a digest a copy cannot be told from a change, but a file of another size changed."""
    recorded = _records(files)
    digested = with_sha256(recorded)
    _later(files[0])  # the same size, a new mtime: a copy or a change
    with open(files[1], "ab") as f:
        f.write(b"x")
    now = _records(files)
    assert changed(recorded, now) == files
    assert undigested(recorded, now, files) == [files[0]]
    assert undigested(digested, now, files) == []  # a digest tells a copy from a change


def test_size_text():
    assert [size_text(n) for n in (12, 4_100, 12_000_000, 3_210_000_000)] == ["12 bytes", "4.1 kB", "12.0 MB", "3.2 GB"]


def _shard(path, cells: int = 5, seed: int = 0) -> str:
    """A prepared ``.npz`` shard (the cache format) of ``cells`` tiny cells."""
    rng = np.random.default_rng(seed)
    indptr = np.arange(0, 3 * cells + 1, 3, dtype=np.int64)
    indices = np.concatenate([np.sort(rng.choice(500, 3, replace=False)) for _ in range(cells)]).astype(np.int32)
    data = rng.integers(1, 9, size=indices.size).astype(np.float32)
    np.savez(path, data=data, indices=indices, indptr=indptr, totals=np.full(cells, 30.0), rows=np.arange(cells))
    return str(path)


def test_a_copied_corpus_keeps_its_cache_and_records_the_new_mtimes(tmp_path, caplog):
    shards = [_shard(tmp_path / f"s{k}.npz", seed=k) for k in range(2)]
    cache = prepare_corpus(shards, tmp_path / "cache")
    manifest = json.loads((cache / "manifest.json").read_text())
    assert all(i.get("sha256") for i in manifest["inputs"])
    _copy_over(shards[0], tmp_path)
    with caplog.at_level(logging.INFO, logger="biomjepa.data.shards"):
        prepare_corpus(shards, tmp_path / "cache")
    assert "preparing" not in caplog.text  # the same bytes: not prepared again
    now = json.loads((cache / "manifest.json").read_text())["inputs"]
    assert [i["mtime_ns"] for i in now] == [i["mtime_ns"] for i in corpus_inputs(shards)]
    assert [i["sha256"] for i in now] == [i["sha256"] for i in manifest["inputs"]]


def test_preparing_a_cache_says_it_reads_its_inputs_again_to_hash_them(tmp_path, caplog):
    """Review of issue 57: the digests are a second read of every input, said with their count and size."""
    shards = [_shard(tmp_path / f"s{k}.npz", seed=k) for k in range(2)]
    with caplog.at_level(logging.INFO, logger="biomjepa.data.shards"):
        prepare_corpus(shards, tmp_path / "cache")
    size = size_text(sum(os.stat(s).st_size for s in shards))
    assert f"hashing 2 input file(s) ({size}) to record their content (sha256), a second read of each" in caplog.text
