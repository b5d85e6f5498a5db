"""``train/logs.py``: the step logger."""

from __future__ import annotations

import logging
import sys

import biomjepa as bj


def test_tensorboard_fallback_warns(tmp_path, monkeypatch, caplog):
    from biomjepa.train.logs import StepLogger

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    cfg = bj.train.load_config("tiny", ["tensorboard=true", "progress=false"])
    with caplog.at_level(logging.WARNING, logger="biomjepa.train.logs"):
        log = StepLogger(tmp_path, ["step"], cfg.loop, steps=cfg.run.steps)
    log.close()
    assert "TensorBoard is unavailable" in caplog.text and "tensorboard: false" in caplog.text
