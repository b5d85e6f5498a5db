"""SIGTERM/SIGINT end a training run after the current step, with its state saved (issue 24)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from _kit import tiny_config

from biomjepa.train.checkpoint import latest_state, load_state
from biomjepa.train.config import TrainConfig
from biomjepa.train.distributed import DistInfo
from biomjepa.train.loop import Trainer
from biomjepa.train.runlock import lock_run_dir, unlock_run_dir
from biomjepa.train.signals import GracefulStop


def _rows(path) -> int:
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_run_with_a_state_that_resumes(tmp_path, sig):
    cfg = tiny_config(tmp_path, run_name="sig", steps=100_000, checkpoint_every=100_000)
    cfg.to_yaml(tmp_path / "run.yaml")
    run_dir = tmp_path / "runs" / "sig"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, "-m", "biomjepa.train", str(tmp_path / "run.yaml")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while _rows(run_dir / "log.csv") < 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert child.poll() is None, child.communicate()
    child.send_signal(sig)
    out, err = child.communicate(timeout=240)
    assert child.returncode == 0, err
    steps = _rows(run_dir / "log.csv")
    assert f"stopped on {signal.Signals(sig).name} after step {steps}" in err
    assert out.strip() == str(run_dir)
    state = load_state(latest_state(run_dir))
    assert state["step"] == steps >= 2  # the step in flight was finished and saved
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporaries
    lock_run_dir(run_dir)  # released
    unlock_run_dir(run_dir)
    trainer = Trainer(TrainConfig.from_dict({**cfg.to_dict(), "stop_at": steps + 1}), DistInfo())
    assert trainer.step == steps
    trainer.run()
    assert load_state(latest_state(run_dir))["step"] == steps + 1


def test_graceful_stop_restores_the_previous_handlers():
    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with GracefulStop() as stop:
            assert signal.getsignal(signal.SIGTERM) != mine
            signal.raise_signal(signal.SIGTERM)
            assert stop.signum == signal.SIGTERM and stop.name == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_second_signal_stops_at_once():
    with GracefulStop() as stop:
        signal.raise_signal(signal.SIGINT)
        assert stop.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # the previous handler (KeyboardInterrupt) runs
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_outside_the_main_thread_handlers_are_left_alone():
    seen = []

    def body():
        with GracefulStop():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == [before]
