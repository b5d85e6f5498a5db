"""The atlas command line, one process and two torchrun ranks (CPU, gloo-free: ranks share only the store)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from biomjepa.embed import read_atlas

pytestmark = pytest.mark.slow


def _args(inputs, store, ckpt, *extra):
    return [*inputs, "--store", str(store), "--checkpoint", ckpt, "--block-rows", "64", "--device", "cpu", *extra]


def _arrays(store):
    return {k: a.obsm["X_biomjepa"] for k, a in read_atlas(store).items()}


@pytest.fixture(scope="module")
def one_process(atlas_cli, atlas_inputs, tiny_checkpoint, tmp_path_factory):
    store = tmp_path_factory.mktemp("one") / "one.zarr"
    r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint))
    assert r.returncode == 0, r.stderr
    assert "complete, 470 cells" in r.stdout
    return _arrays(store)


def test_two_ranks_bit_identical(atlas_cli, one_process, atlas_inputs, tiny_checkpoint, tmp_path):
    store = tmp_path / "two.zarr"
    r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint), nproc=2)
    assert r.returncode == 0, r.stderr
    assert "rank 0/2: embedded 4 blocks" in r.stdout and "rank 1/2: embedded 4 blocks" in r.stdout
    two = _arrays(store)
    assert list(two) == list(one_process)
    for k in two:
        assert np.array_equal(two[k], one_process[k]), k


def test_killed_rank_then_rerun_matches(atlas_cli, one_process, atlas_inputs, tiny_checkpoint, tmp_path):
    store = tmp_path / "killed.zarr"
    r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint), nproc=2, env={"BIOMJEPA_ATLAS_FAIL_AFTER": "1:1"})
    assert r.returncode != 0
    assert "rank 1/2" in r.stderr and "testing hook" in r.stderr
    with pytest.raises(ValueError, match="not complete"):
        read_atlas(store)
    r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint), nproc=2)
    assert r.returncode == 0, r.stderr
    resumed = _arrays(store)
    for k in resumed:
        assert np.array_equal(resumed[k], one_process[k]), k


HOLD = """
import sys
from biomjepa.embed.store import lock_store
held = lock_store(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


def test_held_store_refuses_a_second_command_and_its_overwrite(atlas_cli, one_process, atlas_inputs,
                                                                tiny_checkpoint, tmp_path):
    """Issue 24: a second command on a store another process holds stops, naming it; --overwrite deletes nothing."""
    store = tmp_path / "held.zarr"
    assert atlas_cli(_args(atlas_inputs, store, tiny_checkpoint)).returncode == 0
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for extra in ([], ["--overwrite"]):
            r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint, *extra))
            assert r.returncode == 1, r.stderr
            assert "in use by another process" in r.stderr and f"pid {holder.pid}" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
            assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
            for k, Z in _arrays(store).items():
                assert np.array_equal(Z, one_process[k]), k
    finally:
        holder.kill()
        holder.wait(timeout=30)
    r = atlas_cli(_args(atlas_inputs, store, tiny_checkpoint, "--overwrite"))  # the holder is gone: no stale lock
    assert r.returncode == 0 and "complete, 470 cells" in r.stdout, r.stderr


def test_two_commands_started_together_one_store(one_process, atlas_inputs, tiny_checkpoint, tmp_path):
    """Issue 24: two commands with different checkpoints on one new store: never both "complete"; the
    store holds the winner's embeddings only."""
    import os

    import torch

    from biomjepa.model import BiomJEPA, save_checkpoint
    from biomjepa.nn import ModelConfig

    torch.manual_seed(1)
    other = str(save_checkpoint(BiomJEPA(ModelConfig.preset("tiny")), tmp_path / "ck2"))
    store = tmp_path / "race.zarr"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "biomjepa.embed", *_args(atlas_inputs, store, ck)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for ck in (tiny_checkpoint, other)]
    outs = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in outs) == [0, 1], outs
    loser = next(err for code, _, err in outs if code)
    assert "in use by another process" in loser or "made by a different command" in loser, loser
    first_won = outs[0][0] == 0
    for k, Z in _arrays(store).items():
        assert np.array_equal(Z, one_process[k]) == first_won, k


def test_biomjepa_embed_store_dispatch(atlas_inputs, tiny_checkpoint, tmp_path, capsys):
    from biomjepa.cli import main

    assert main(["embed", *_args(atlas_inputs[1:], tmp_path / "s.zarr", tiny_checkpoint)]) == 0
    assert "complete, 170 cells" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["embed", "--help"])
    assert exc.value.code == 0 and "--store" in capsys.readouterr().out


def test_usage_errors_before_any_work(atlas_cli, tmp_path, atlas_inputs):
    (tmp_path / "x.csv").write_text("a\n")
    for args, msg in [([str(tmp_path / "missing.h5ad")], "no such file"),
                      ([str(tmp_path / "x.csv")], "not an .h5ad"),
                      ([atlas_inputs[0], "--store", str(tmp_path / "nodir" / "s.zarr")], "does not exist")]:
        if "--store" not in args:
            args = [*args, "--store", str(tmp_path / "s.zarr")]
        r = atlas_cli(args)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "s.zarr").exists()


def test_atlas_argv():
    from biomjepa.cli.atlas import atlas_argv

    assert atlas_argv(["embed", "a.h5ad", "b.h5ad", "--store", "s.zarr"]) == ["a.h5ad", "b.h5ad", "--store", "s.zarr"]
    assert atlas_argv(["-v", "embed", "a.h5ad", "--store=s.zarr"]) == ["-v", "a.h5ad", "--store=s.zarr"]
    assert atlas_argv(["embed", "a.h5ad", "out.h5ad"]) is None
    assert atlas_argv(["graph", "a.h5ad", "--store", "x"]) is None
