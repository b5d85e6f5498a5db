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


def test_a_full_disk_while_logging_names_the_file_and_the_fix(tmp_path):
    """Issue 30: ENOSPC writing log.csv is one clear error naming the run directory, not a bare errno."""
    import csv
    import errno

    import pytest

    from biomjepa.train.logs import StepLogger

    cfg = bj.train.load_config("tiny", ["progress=false"])
    log = StepLogger(tmp_path, ["step", "loss"], cfg.loop, steps=3)
    real = log.file

    class Full:
        name = real.name

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    log.writer.writer = csv.writer(Full())  # what DictWriter writes through
    log.file = Full()
    with pytest.raises(OSError, match=rf"No space left to write the log of step 0 \(log\.csv\) in {tmp_path} "
                                      r"\(it is full.*run the same command again to resume") as err:
        log.write({"step": 0, "loss": 1.0})
    assert err.value.errno == errno.ENOSPC
    real.close()
