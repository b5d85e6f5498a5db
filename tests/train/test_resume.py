import torch
from _kit import tiny_config

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
