"""``biomjepa embed ... --store OUT.zarr`` stopped by SIGTERM/SIGINT (issue 57): one line naming the store and what it
holds, exit code 143/130, no traceback, the store's lock file gone, and the same command run again completes the store
with the embedding an uninterrupted run gives.

The stop comes at a controlled point: a child process runs the command with ``AtlasStore.write_block`` wrapped so that
it sends itself the signal right after writing its third block (inside the write, as a signal arriving then would).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from biomjepa.embed import embed_atlas, read_atlas

CHILD = r"""
import signal, sys
from biomjepa.cli.atlas import main
from biomjepa.embed.store import AtlasStore

sig, argv = sys.argv[1], sys.argv[2:]
real, written = AtlasStore.write_block, []


def write_block(self, *args, **kw):
    real(self, *args, **kw)
    written.append(args[:2])
    if len(written) == 3:
        signal.raise_signal(getattr(signal, sig))


AtlasStore.write_block = write_block
sys.exit(main(argv))
"""


def _defaults():
    for s in (signal.SIGTERM, signal.SIGINT):  # whatever this process inherited (nohup … &)
        signal.signal(s, signal.SIG_DFL)


def _arrays(store) -> dict[str, np.ndarray]:
    return {k: a.obsm["X_biomjepa"] for k, a in read_atlas(store).items()}


@pytest.fixture(scope="module")
def uninterrupted(atlas_inputs, tiny_checkpoint, tmp_path_factory) -> dict[str, np.ndarray]:
    store = tmp_path_factory.mktemp("ref") / "ref.zarr"
    embed_atlas(atlas_inputs, store, checkpoint=tiny_checkpoint, block_rows=64, device="cpu", rank=0, world=1)
    return _arrays(store)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stopped_atlas_command_says_what_the_store_holds_and_resumes(sig, atlas_inputs, tiny_checkpoint,
                                                                      uninterrupted, tmp_path, capsys, monkeypatch):
    from biomjepa._settings import settings
    from biomjepa.cli.atlas import main

    monkeypatch.setattr(settings, "progress", settings.progress)  # the in-process --no-progress below is put back

    store = tmp_path / "s.zarr"
    argv = [*atlas_inputs, "--store", str(store), "--checkpoint", tiny_checkpoint, "--block-rows", "64",
            "--device", "cpu", "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", CHILD, sig, *argv], capture_output=True, text=True, timeout=300,
                          preexec_fn=_defaults, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 128 + getattr(signal, sig), proc.stderr
    said = [line for line in proc.stderr.splitlines() if not line.startswith("biomjepa embed: warning: ")]
    assert said == [
        f"biomjepa embed: stopped by {sig}; {store} holds 3 of 8 blocks, each written whole; running the same "
        "command again resumes it from there."]
    assert "Traceback" not in proc.stderr and "complete" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # the lock file went with the command
    assert ".lock" not in os.listdir(store)

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "embedded 5 blocks" in out and f"{store}: complete, 470 cells" in out
    resumed = _arrays(store)
    assert list(resumed) == list(uninterrupted)
    for name, Z in resumed.items():
        assert np.array_equal(Z, uninterrupted[name]), name
