import logging
import os

import pytest
import torch
from _kit import tiny_config

from biomjepa.data.input_identity import size_text
from biomjepa.train.checkpoint import latest_state, load_state
from biomjepa.train.config import TrainConfig
from biomjepa.train.distributed import DistInfo
from biomjepa.train.loop import Trainer, pretrain


def _equal_states(a: dict, b: dict) -> None:
    for key in ("model", "teacher"):
        assert a[key].keys() == b[key].keys()
        for k in a[key]:
            assert torch.equal(a[key][k], b[key][k]), (key, k)
    assert torch.equal(a["centre"], b["centre"])
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    for i in sa:
        for k in sa[i]:
            assert torch.equal(sa[i][k], sb[i][k]), ("optimizer", i, k)
    assert a["step"] == b["step"] and a["consumed"] == b["consumed"]


def test_kill_resume_is_bit_exact(tmp_path):
    torch.set_num_threads(1)
    k, n = 3, 3
    # dropout on, token subsampling via rng, accumulation: every source of randomness is exercised
    over = {"steps": k + n, "accumulation": 2, "pred_dropout": 0.1, "checkpoint_every": 100}
    straight = pretrain(tiny_config(tmp_path, run_name="straight", **over))
    cfg = tiny_config(tmp_path, run_name="resumed", stop_at=k, **over)
    pretrain(cfg)  # "killed" after k steps, checkpointed
    assert load_state(latest_state(tmp_path / "runs" / "resumed"))["step"] == k
    resumed_cfg = TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None})
    trainer = Trainer(resumed_cfg, DistInfo())  # fresh objects, state restored from disk
    assert trainer.step == k
    trainer.run()
    _equal_states(load_state(latest_state(straight)), load_state(latest_state(trainer.run_dir)))


# -- issue 24: changed settings are recorded from the step where they changed, never silent ----------------
@pytest.fixture
def stopped_run(tmp_path):
    """A tiny run stopped (checkpointed) at step 2 of 4."""
    cfg = tiny_config(tmp_path, run_name="r", steps=4, stop_at=2)
    return cfg, pretrain(cfg)


def _resumed(cfg: TrainConfig, **change) -> Trainer:
    return Trainer(TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None, **change}), DistInfo())


def test_resume_with_another_lr_is_recorded_as_a_change_from_that_step(stopped_run):
    cfg, run_dir = stopped_run
    trainer = _resumed(cfg, lr=5e-4, lambda_var=0.1)
    assert trainer.step == 2
    assert trainer.config_changes == [{"step": 2, "key": "lambda_var", "old": cfg.lambda_var, "new": 0.1},
                                      {"step": 2, "key": "lr", "old": 0.001, "new": 0.0005}]
    log = (run_dir / "changes.log").read_text().splitlines()
    assert len(log) == 2 and log[1].endswith("resumed with changed settings from step 2: lr 0.001 → 0.0005")
    trainer.run()
    state = load_state(latest_state(run_dir))
    assert state["step"] == 4 and state["config_changes"] == trainer.config_changes
    again = _resumed(cfg, lr=5e-4, lambda_var=0.1, steps=6)  # the saved config is now the changed one
    assert again.config_changes == [*trainer.config_changes, {"step": 4, "key": "steps", "old": 4, "new": 6}]
    assert len((run_dir / "changes.log").read_text().splitlines()) == 3


def test_stop_at_and_other_run_keys_are_not_changes(stopped_run):
    cfg, run_dir = stopped_run
    trainer = _resumed(cfg, stop_at=3, checkpoint_every=1, keep_checkpoints=5, progress=True)
    assert trainer.config_changes == [] and not (run_dir / "changes.log").exists()


@pytest.mark.parametrize("change", [{"seed": 7}, {"batch_size": 2}, {"accumulation": 2}])
def test_resume_with_another_data_order_is_refused_unless_allowed(stopped_run, change):
    cfg, run_dir = stopped_run
    (key, new), = change.items()
    with pytest.raises(ValueError, match=rf"another data order \({key}: .* → {new}\).*allow_resume_mismatch"):
        _resumed(cfg, **change)
    assert not (run_dir / "changes.log").exists()
    trainer = _resumed(cfg, allow_resume_mismatch=True, **change)
    assert trainer.step == 2 and [c["key"] for c in trainer.config_changes] == [key]
    assert f"step 2: {key} " in (run_dir / "changes.log").read_text()


def test_a_state_without_the_new_records_resumes_as_before(stopped_run):
    """States saved before issue 24 hold no `config_changes` and no `corpus.inputs`: they resume unchanged."""
    cfg, run_dir = stopped_run
    path = latest_state(run_dir)
    state = load_state(path)
    assert state["config_changes"] == [] and state["corpus"]["inputs"]
    del state["config_changes"], state["corpus"]["inputs"]
    torch.save(state, path)
    trainer = _resumed(cfg)
    assert trainer.step == 2 and trainer.config_changes == []
    trainer.run()
    assert load_state(latest_state(run_dir))["config_changes"] == []


def _other_bytes(path) -> None:
    """Change one byte of ``path`` (the same size), and give it a later mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(10)  # the first member's time in its local zip header: the archive still reads the same
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_resume_on_changed_corpus_files_is_refused_unless_allowed(stopped_run, caplog):
    cfg, run_dir = stopped_run
    shard = cfg.corpus[1]
    _other_bytes(shard)  # the same name and size, another file
    manifest = (run_dir.parent.parent / "cache" / "manifest.json").read_text()
    with pytest.raises(ValueError, match=rf"corpus files that have changed since .*{shard}.*allow_resume_mismatch"):
        _resumed(cfg)
    assert (run_dir.parent.parent / "cache" / "manifest.json").read_text() == manifest  # refused before re-preparing
    with caplog.at_level(logging.WARNING):
        trainer = _resumed(cfg, allow_resume_mismatch=True)
    assert trainer.step == 2 and "corpus files changed" in caplog.text


def test_resume_on_copied_corpus_files_needs_no_allow_resume_mismatch(stopped_run, tmp_path, caplog):
    """Issue 57: the same bytes with new mtimes (copied to another disk or machine) resume; the cache is kept."""
    import shutil

    cfg, run_dir = stopped_run
    for shard in cfg.corpus:
        shutil.copyfile(shard, tmp_path / "copy")
        os.replace(tmp_path / "copy", shard)
        st = os.stat(shard)
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with caplog.at_level(logging.INFO):
        trainer = _resumed(cfg)
    assert trainer.step == 2 and "files changed" not in caplog.text and "preparing" not in caplog.text
    size = size_text(sum(os.stat(s).st_size for s in cfg.corpus))
    assert caplog.text.count(f"hashing {len(cfg.corpus)} file(s) ({size}) whose modification time changed since the "
                             "state was saved") == 1  # said before the pause; the cache's check hashes nothing more
    trainer.run()
    saved = {i["path"]: i for i in load_state(latest_state(run_dir))["corpus"]["inputs"]}
    assert [saved[s]["mtime_ns"] for s in cfg.corpus] == [os.stat(s).st_mtime_ns for s in cfg.corpus]  # recorded anew


def _digests_dropped(cfg, run_dir):
    """The stopped run's latest state as written before input digests existed; ``cfg``."""
    path = latest_state(run_dir)
    state = load_state(path)
    for entry in state["corpus"]["inputs"]:
        del entry["sha256"]
    torch.save(state, path)
    return cfg


def test_an_old_state_without_digests_refuses_copied_files_naming_allow_resume_mismatch(stopped_run):
    cfg = _digests_dropped(*stopped_run)
    shard = cfg.corpus[0]
    st = os.stat(shard)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the same bytes, a new mtime
    with pytest.raises(ValueError, match=r"cannot be told from a change: if they are the same files, set "
                                         r"`allow_resume_mismatch=true`"):
        _resumed(cfg)
    assert _resumed(cfg, allow_resume_mismatch=True).step == 2


def test_an_old_state_without_digests_says_nothing_of_copies_for_a_file_of_another_size(stopped_run):
    """Review of issue 57: a file of another size plainly changed; "a copy cannot be told from a change" is not said."""
    cfg = _digests_dropped(*stopped_run)
    with open(cfg.corpus[0], "ab") as f:
        f.write(b"more")
    with pytest.raises(ValueError, match=rf"corpus files that have changed since .*{cfg.corpus[0]}") as refused:
        _resumed(cfg)
    assert "cannot be told from a change" not in str(refused.value)


def test_only_rank_0_checks_the_corpus_files_and_every_rank_raises_its_refusal(stopped_run, monkeypatch):
    """Review of issue 57: after a corpus copy rank 0 alone hashes the changed files, not every local rank; the
    others raise its refusal, in its words (or go on where it found none)."""
    from biomjepa.data import shards
    from biomjepa.train import resume

    cfg, run_dir = stopped_run
    saved = load_state(latest_state(run_dir))
    _other_bytes(cfg.corpus[1])
    new = TrainConfig.from_dict({**cfg.to_dict(), "stop_at": None})
    told = []

    def broadcast(obj, info, src=0):  # rank 0's object, as torch.distributed.broadcast_object_list gives it
        told.append((info.rank, obj))
        return told[0][1]

    monkeypatch.setattr(resume, "broadcast_object", broadcast)
    with pytest.raises(ValueError, match="corpus files that have changed") as refused:
        resume.check_resume(saved, new, run_dir, DistInfo(rank=0, world=2))
    assert told == [(0, (True, str(refused.value)))]  # told to the other ranks before it is raised

    def not_on_this_rank(corpus):
        raise AssertionError("a rank other than 0 read the corpus files")

    monkeypatch.setattr(shards, "corpus_inputs", not_on_this_rank)
    with pytest.raises(ValueError) as other:
        resume.check_resume(saved, new, run_dir, DistInfo(rank=1, world=2))
    assert str(other.value) == str(refused.value) and told[1] == (1, None)
    told[:] = [(0, None)]  # rank 0 found no change
    assert resume.check_resume(saved, new, run_dir, DistInfo(rank=1, world=2)) == []


def test_a_refused_resume_writes_no_changes_log_and_keeps_config_yaml(stopped_run):
    """Issue 30: allowed mismatches refused later (another architecture) must leave the run directory as it was."""
    cfg, run_dir = stopped_run
    config_before = (run_dir / "config.yaml").read_text()
    d_model = cfg.model_config().d_model
    with pytest.raises(ValueError, match=r"another architecture.*even with allow_resume_mismatch"):
        _resumed(cfg, allow_resume_mismatch=True, lr=5e-4,
                 model_overrides={"d_model": 2 * d_model, "d_ff": 4 * d_model})
    assert not (run_dir / "changes.log").exists()
    assert (run_dir / "config.yaml").read_text() == config_before
    trainer = _resumed(cfg, lr=5e-4)  # the accepted resume records its change, once
    assert trainer.step == 2 and (run_dir / "changes.log").read_text().count("lr 0.001 → 0.0005") == 1
