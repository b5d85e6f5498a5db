"""One process per run directory, and no silent resume on another corpus or model (issue 14)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _kit import tiny_config

from biomjepa.train.checkpoint import latest_state, load_state, save_state
from biomjepa.train.config import TrainConfig
from biomjepa.train.distributed import DistInfo
from biomjepa.train.loop import Trainer, pretrain
from biomjepa.train.runlock import RunDirectoryBusy, lock_run_dir, unlock_run_dir

HOLD = """
import sys
from biomjepa.train.runlock import lock_run_dir
lock_run_dir(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def held_by_another_process(tmp_path):
    """Lock ``tmp_path/runs/held`` from a child process until the test ends."""
    run_dir = tmp_path / "runs" / "held"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    yield run_dir, child.pid
    child.stdin.close()
    child.wait(timeout=30)


@pytest.mark.slow
def test_a_second_process_cannot_train_into_a_locked_run_directory(tmp_path, held_by_another_process):
    run_dir, pid = held_by_another_process
    with pytest.raises(RunDirectoryBusy, match=f"in use by another training process \\(pid {pid} "):
        Trainer(tiny_config(tmp_path, run_name="held"), DistInfo())
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]  # nothing read or written there


@pytest.mark.slow
def test_the_lock_dies_with_its_process(tmp_path):
    """A killed run leaves no stale lock: the kernel releases it."""
    run_dir = tmp_path / "runs" / "killed"
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "locked"
    with pytest.raises(RunDirectoryBusy):
        lock_run_dir(run_dir)
    child.kill()
    child.wait(timeout=30)
    lock_run_dir(run_dir)
    unlock_run_dir(run_dir)


@pytest.mark.slow
def test_lock_is_free_after_a_run_and_temporary_names_are_per_process(tmp_path):
    run_dir = pretrain(tiny_config(tmp_path, run_name="free", steps=2))
    code = f"from biomjepa.train.runlock import lock_run_dir; lock_run_dir({str(run_dir)!r})"
    subprocess.run([sys.executable, "-c", code], check=True)  # another process can take it now
    names = [p.name for p in (run_dir / "checkpoints").iterdir()]
    assert not any(n.endswith(".tmp") for n in names)
    lock_run_dir(run_dir)
    unlock_run_dir(run_dir)


def test_save_state_never_follows_a_planted_symlink(tmp_path, monkeypatch):
    """Issue 24: states were written to `step_*.pt.<pid>.tmp` and `LATEST.<pid>.tmp`; a symlink planted
    under those names made save_state overwrite a file outside the run directory."""
    import os

    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    ckdir = tmp_path / "run" / "checkpoints"
    ckdir.mkdir(parents=True)
    planted = [ckdir / f"step_00000001.pt.{os.getpid()}.tmp", ckdir / f"LATEST.{os.getpid()}.tmp"]
    for p in planted:
        p.symlink_to(outside)
    seen = []
    real = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f: (seen.append(Path(getattr(f, "name", f))), real(obj, f)))
    save_state(tmp_path / "run", {"step": 1})
    assert outside.read_text() == "precious"
    assert seen and all(p.parent == ckdir and p not in planted for p in seen)  # a random name beside the state
    assert latest_state(tmp_path / "run") == ckdir / "step_00000001.pt"
    assert load_state(ckdir / "step_00000001.pt")["step"] == 1
    assert sorted(p.name for p in ckdir.iterdir() if not p.is_symlink()) == ["LATEST", "step_00000001.pt"]


@pytest.fixture
def saved_run(tmp_path):
    cfg = tiny_config(tmp_path, run_name="r", steps=4, stop_at=2)
    run_dir = pretrain(cfg)
    return cfg, run_dir


@pytest.mark.parametrize(("change", "named"), [
    ({"model_overrides": {"attn_eps": 1e-3}}, "model.attn_eps: 1e-06 → 0.001"),
    ({"pred_layers": 2}, "pred_layers: 1 → 2"),
    ("drop_a_shard", "corpus: "),
])
def test_resume_with_another_corpus_or_model_is_refused(saved_run, change, named):
    cfg, run_dir = saved_run
    if change == "drop_a_shard":
        change = {"corpus": cfg.corpus[:-1]}
    yaml_before = (run_dir / "config.yaml").read_text()
    manifest_before = (run_dir.parent.parent / "cache" / "manifest.json").read_text()
    other = TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None, **change})
    with pytest.raises(ValueError, match=f"another corpus or model config.*{named}.*allow_resume_mismatch"):
        Trainer(other, DistInfo())
    assert (run_dir / "config.yaml").read_text() == yaml_before  # provenance not rewritten
    assert (run_dir.parent.parent / "cache" / "manifest.json").read_text() == manifest_before


def test_resume_mismatch_can_be_allowed_explicitly(saved_run, caplog):
    cfg, run_dir = saved_run
    other = TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None, "model_overrides": {"pooling": "centred_max_top5"},
                                   "allow_resume_mismatch": True})
    with caplog.at_level(logging.WARNING, logger="biomjepa.train.loop"):
        trainer = Trainer(other, DistInfo())
    assert trainer.step == 2
    assert "model.pooling: 'max_top5' → 'centred_max_top5'" in caplog.text
    same = Trainer(TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None}), DistInfo())  # unchanged: no check fires
    assert same.step == load_state(latest_state(run_dir))["step"] == 2


def test_resume_with_another_architecture_is_refused_before_load_state_dict(saved_run):
    """T10b: even with allow_resume_mismatch, tensors of other shapes give one clear error, no torch dump."""
    cfg, _ = saved_run
    d_model = cfg.model_config().d_model
    other = TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None, "allow_resume_mismatch": True,
                                   "model_overrides": {"d_model": 2 * d_model, "d_ff": 4 * d_model}})
    with pytest.raises(ValueError, match=rf"another architecture.*even with allow_resume_mismatch: .*"
                                         rf"saved \(\d+, {d_model}\) → now \(\d+, {2 * d_model}\)") as err:
        Trainer(other, DistInfo())
    assert "size mismatch" not in str(err.value)  # raised by us, before torch's load_state_dict


def test_resume_falls_back_past_a_truncated_latest_state(tmp_path):
    """T2: a truncated newest step_*.pt (disk full, killed copy) resumes from the previous one, with a warning."""
    cfg = tiny_config(tmp_path, run_name="t2", steps=4, stop_at=3, checkpoint_every=1, keep_checkpoints=3)
    run_dir = pretrain(cfg)
    latest = latest_state(run_dir)
    assert latest.name == "step_00000003.pt"
    latest.write_bytes(latest.read_bytes()[:1000])
    with pytest.warns(UserWarning, match=r"step_00000003\.pt .*truncated.*step_00000002\.pt \(step 2\)"):
        trainer = Trainer(TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None}), DistInfo())
    assert trainer.step == 2
