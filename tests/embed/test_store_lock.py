"""The atlas store's lock file (``.OUT.zarr.lock`` beside it) goes when the command that holds it ends, done or
failed (issue 57): a finished store is not left with a file holding the last command line."""

from __future__ import annotations

import pytest

from biomjepa.embed import embed_atlas
from biomjepa.embed.run import FAIL_ENV


def test_a_finished_or_failed_command_leaves_no_lock_file_beside_its_store(atlas_inputs, tiny_checkpoint, tmp_path,
                                                                          monkeypatch):
    store = tmp_path / "s.zarr"

    def run():
        return embed_atlas(atlas_inputs, store, checkpoint=tiny_checkpoint, block_rows=128, device="cpu", rank=0,
                           world=1)

    monkeypatch.setenv(FAIL_ENV, "1")
    with pytest.raises(RuntimeError, match="testing hook"):
        run()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]
    monkeypatch.delenv(FAIL_ENV)
    assert run()["complete"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]
