"""SIGTERM/SIGINT end a training run after the current step, with its state saved (issue 24); the command
then exports nothing and exits 128 + signum, so the same command resumes (issue 30).

Every test sets the dispositions it starts from (:func:`known_dispositions`): the suite may be started
with SIGINT inherited as ignored (``nohup … &``, a batch system), and no test depends on that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from _kit import tiny_config

from biomjepa.cli.errors import Stopped
from biomjepa.cli.train import build_train_parser, run_train
from biomjepa.train.checkpoint import latest_state, load_state
from biomjepa.train.config import TrainConfig
from biomjepa.train.distributed import DistInfo
from biomjepa.train.loop import Trainer
from biomjepa.train.runlock import lock_run_dir, unlock_run_dir
from biomjepa.train.signals import GracefulStop, last_stop_signal, stop_exit_code


def _rows(path) -> int:
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_run_with_a_state_that_resumes(tmp_path, sig):
    cfg = tiny_config(tmp_path, run_name="sig", steps=100_000, checkpoint_every=100_000)
    cfg.to_yaml(tmp_path / "run.yaml")
    run_dir = tmp_path / "runs" / "sig"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    export_dir = tmp_path / "model"
    command = [sys.executable, "-m", "biomjepa.train", str(tmp_path / "run.yaml"), "--export", str(export_dir)]
    # the child starts with the signal's default handling, whatever this process inherited (nohup … &)
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGINT)])
    deadline = time.monotonic() + 240
    while _rows(run_dir / "log.csv") < 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert child.poll() is None, child.communicate()
    child.send_signal(sig)
    out, err = child.communicate(timeout=240)
    assert child.returncode == 128 + sig, err  # not done: a batch system must not see success
    steps = _rows(run_dir / "log.csv")
    assert f"stopped on {signal.Signals(sig).name} after step {steps}" in err
    assert "nothing was exported" in err and not export_dir.exists()
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


def test_graceful_stop_restores_the_previous_handlers(known_dispositions):
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


def test_a_second_signal_stops_at_once(known_dispositions):
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


def test_an_inherited_ignore_is_kept(known_dispositions):
    """Started with SIGINT ignored (a background job of a script), the run keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with GracefulStop() as stop:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.raise_signal(signal.SIGINT)  # ignored, as before the block
        assert stop.signum is None
        signal.raise_signal(signal.SIGTERM)  # still stops the run
        assert stop.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert last_stop_signal() == signal.SIGTERM
    with GracefulStop():
        pass
    assert last_stop_signal() is None


def test_stop_exit_codes_are_what_shells_report():
    assert stop_exit_code(signal.SIGTERM) == 143 and stop_exit_code(signal.SIGINT) == 130
    assert stop_exit_code(None) == 75


def _fake_pretrain(monkeypatch, tmp_path, step: int, signum):
    """``pretrain`` that 'stops' after ``step`` (a state pointer) with ``signum`` received."""
    import biomjepa.train as train
    from biomjepa.train import signals

    run_dir = tmp_path / "runs" / "fake"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "LATEST").write_text(f"step_{step:08d}.pt")
    (run_dir / "checkpoints" / f"step_{step:08d}.pt").write_bytes(b"")

    def pretrain(cfg, on_checkpoint=None, **kw):
        signals._last["signum"] = signum
        return run_dir

    exported = []
    monkeypatch.setattr(train, "pretrain", pretrain)
    monkeypatch.setattr(train, "export", lambda *a, **k: exported.append(a))
    return run_dir, exported


@pytest.mark.parametrize(("step", "signum", "code"), [(4, signal.SIGTERM, 143), (4, signal.SIGINT, 130), (4, None, 75),
                                                      (8, signal.SIGTERM, 143)])
def test_a_stopped_run_is_not_exported_and_exits_non_zero(monkeypatch, tmp_path, capsys, step, signum, code):
    from biomjepa.cli.train import train_main

    run_dir, exported = _fake_pretrain(monkeypatch, tmp_path, step, signum)
    export_dir = tmp_path / "model"
    rc = train_main(["tiny", "--set", "steps=8", "--export", str(export_dir)])
    out, err = capsys.readouterr()
    assert rc == code and exported == [] and not export_dir.exists()
    assert out.strip() == str(run_dir) and "run the same command again to resume" in err.lower()
    assert "nothing was exported to" in err


def test_a_finished_run_is_exported(monkeypatch, tmp_path):
    run_dir, exported = _fake_pretrain(monkeypatch, tmp_path, 8, None)
    run_train(build_train_parser(), "tiny", ["steps=8"], str(tmp_path / "model"), False)
    assert exported == [(run_dir, str(tmp_path / "model"))]
    with pytest.raises(Stopped):
        run_train(build_train_parser(), "tiny", ["steps=9"], None, False)


def test_a_stopped_training_command_reports_the_stop_once(tmp_path, monkeypatch, capsys, caplog, known_dispositions):
    """Issue 57: the stop was said twice (the loop's warning, then the command's line). The first signal is still
    acknowledged at once; the one report is the command's: the state file saved, and the same command resumes."""
    import logging

    from biomjepa.cli.train import train_main

    cfg = tiny_config(tmp_path, run_name="once", steps=50, checkpoint_every=100)
    cfg.to_yaml(tmp_path / "run.yaml")
    real = Trainer.train_step

    def step_then_sigterm(self, data):
        row = real(self, data)
        signal.raise_signal(signal.SIGTERM)  # arrives during the first step, as from `kill`
        return row

    monkeypatch.setattr(Trainer, "train_step", step_then_sigterm)
    with caplog.at_level(logging.DEBUG, logger="biomjepa"):
        rc = train_main([str(tmp_path / "run.yaml")])
    err = capsys.readouterr().err
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO and "stopped on" in r.getMessage()]
    lines = [line for line in err.splitlines() if "stopped on" in line]
    assert rc == 143 and said == [], said
    state = tmp_path / "runs" / "once" / "checkpoints" / "step_00000001.pt"
    assert lines == [f"python -m biomjepa.train: stopped on SIGTERM after step 1 of 50: the state of step 1 is saved "
                     f"in {state}. Run the same command again to resume."]
    assert any(r.getMessage().startswith("received SIGTERM: finishing the current step") for r in caplog.records)


@pytest.mark.slow
def test_a_signal_to_the_whole_process_group_stops_a_run_with_loader_workers(tmp_path):
    """``pkill -f``, Ctrl-C in a terminal, ``kill -- -PGID``, ``scancel`` signal the loader's workers too (issue 57):
    they leave the stop to the main process, which finishes its step, saves, exits 143 and resumes."""
    cfg = tiny_config(tmp_path, run_name="group", steps=100_000, checkpoint_every=100_000, num_workers=1)
    cfg.to_yaml(tmp_path / "run.yaml")
    run_dir = tmp_path / "runs" / "group"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "biomjepa.train", str(tmp_path / "run.yaml")]
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,  # its own process group, as a batch job's
                             preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGTERM, signal.SIGINT)])
    deadline = time.monotonic() + 240
    while _rows(run_dir / "log.csv") < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert child.poll() is None, child.communicate()
    os.killpg(child.pid, signal.SIGTERM)  # the main process and its loader worker
    out, err = child.communicate(timeout=240)
    assert child.returncode == 143, err
    assert out.strip() == str(run_dir)
    assert "DataLoader worker" not in err and "Traceback" not in err, err
    steps = _rows(run_dir / "log.csv")
    said = [line for line in err.splitlines() if line.startswith("python -m biomjepa.train: ")]
    assert len(said) == 1 and said[0].startswith(f"python -m biomjepa.train: stopped on SIGTERM after step {steps} "), err
    assert load_state(latest_state(run_dir))["step"] == steps >= 3
    resumed = subprocess.run([*command, "--set", f"stop_at={steps + 1}"], env=env,
                             capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert load_state(latest_state(run_dir))["step"] == steps + 1


def test_loader_workers_leave_sigterm_and_sigint_to_the_main_process(tmp_path, known_dispositions):
    """In a worker of the training loader SIGTERM and SIGINT are ignored; the main process keeps its handlers."""
    import biomjepa.train.loop as loop
    from biomjepa.train.config import load_config

    trainer = loop.Trainer(load_config(tiny_config(tmp_path, num_workers=1)), loop.init_distributed("cpu"))
    try:
        loader = trainer.batches()
        worker = loader._workers[0]
        next(loader)
        os.kill(worker.pid, signal.SIGTERM)
        os.kill(worker.pid, signal.SIGINT)
        for _ in range(3):
            next(loader)  # torch's check of its workers raises here had the worker died
        assert worker.is_alive()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the main process: as it was
        loader._shutdown_workers()  # the way the loader ends its workers still ends them
        assert not worker.is_alive()
    finally:
        loop.unlock_run_dir(trainer.run_dir)
