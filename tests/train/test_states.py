"""Training states (``train/checkpoint.py``): no pickled code is ever run, states hold only tensors and
plain values, states of older versions still load, and a truncated latest state falls back."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from biomjepa.train.checkpoint import export, load_state, rng_state, save_state, set_rng_state

REPO = Path(__file__).resolve().parents[2]


class _Payload:
    """Unpickling this creates ``marker``: stands in for arbitrary code in a crafted ``step_*.pt``."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_no_unsafe_torch_load_anywhere():
    needle = "weights_only=" + "False"
    files = [p for d in ("src", "scripts", "benchmarks", "tests", "tutorials") for p in (REPO / d).rglob("*")
             if p.suffix in (".py", ".ipynb", ".md")]
    assert files
    offenders = [str(p.relative_to(REPO)) for p in files if needle in p.read_text(errors="replace")]
    assert offenders == []


def test_crafted_training_state_runs_no_code(tmp_path):
    from biomjepa.train.target_errors import load_training_modules  # what bj.tl.programme_dependencies calls

    marker = tmp_path / "pwned"
    crafted = tmp_path / "run" / "checkpoints" / "step_00000001.pt"
    crafted.parent.mkdir(parents=True)
    torch.save({"step": 1, "teacher": {}, "config": {}, "x": _Payload(marker)}, crafted)
    (crafted.parent / "LATEST").write_text(crafted.name)
    with pytest.raises(ValueError, match="refusing to unpickle"):
        export(crafted, tmp_path / "out")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        export(tmp_path / "run", tmp_path / "out")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        load_training_modules(tmp_path / "run")
    assert not marker.exists()


def test_states_hold_only_tensors_and_plain_values(tmp_path):
    np.random.seed(3)
    random.seed(3)
    path = save_state(tmp_path, {"step": 1, "rng": rng_state()})
    state = torch.load(path, weights_only=True)  # no allow-list needed
    expected = (np.random.random(), random.random(), torch.rand(1))
    set_rng_state(state["rng"])
    assert (np.random.random(), random.random(), torch.rand(1)) == expected


def test_states_written_before_0_2_still_load(tmp_path):
    """Their numpy RNG state is a uint32 array: read with numpy's array globals only, still weights_only."""
    np.random.seed(5)
    old = {"step": 7, "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                              "python": random.getstate()}}
    torch.save(old, tmp_path / "old.pt")
    expected = np.random.random(3)
    state = load_state(tmp_path / "old.pt")
    assert state["step"] == 7 and isinstance(state["rng"]["numpy"], dict)
    set_rng_state(state["rng"])
    np.testing.assert_array_equal(np.random.random(3), expected)
    # the numpy allow-list admits arrays, not code
    marker = tmp_path / "pwned"
    torch.save({**old, "x": _Payload(marker)}, tmp_path / "crafted.pt")
    with pytest.raises(ValueError, match="refusing to unpickle"):
        load_state(tmp_path / "crafted.pt")
    assert not marker.exists()


def test_truncated_latest_state_falls_back_with_a_warning(tmp_path):
    from biomjepa.train.checkpoint import load_latest_state, save_state

    for step in (1, 2, 3):
        save_state(tmp_path, {"step": step, "x": torch.arange(1000)}, keep=3)
    latest = tmp_path / "checkpoints" / "step_00000003.pt"
    latest.write_bytes(latest.read_bytes()[:300])
    with pytest.warns(UserWarning, match=r"step_00000003\.pt .*damaged or truncated.*step_00000002\.pt \(step 2\)"):
        path, state = load_latest_state(tmp_path)
    assert path.name == "step_00000002.pt" and state["step"] == 2
    for p in (tmp_path / "checkpoints").glob("step_*.pt"):
        p.write_bytes(b"")
    with pytest.raises(ValueError, match=r"No training state .* can be read.*step_00000001\.pt"):
        load_latest_state(tmp_path)
    assert load_latest_state(tmp_path / "elsewhere") is None


# -- issue 30: a full disk while saving a state is a clear error naming the directory and the fix ----------
def _full_disk(state, tmp):
    import errno

    Path(tmp).write_bytes(b"PK partly written")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_while_saving_a_state_names_the_directory_and_the_fix(tmp_path, monkeypatch):
    import errno

    import biomjepa.train.checkpoint as ck

    save_state(tmp_path, {"step": 1, "w": torch.zeros(3)})
    monkeypatch.setattr(ck, "_write_state", _full_disk)
    with pytest.raises(OSError, match=rf"No space left to write the training state of step 2 in "
                                      rf"{tmp_path / 'checkpoints'} \(it is full: [\d,]+ MB free\)\. "
                                      r"step_00000001\.pt is intact.*keep_checkpoints.*out_dir.*resume") as err:
        save_state(tmp_path, {"step": 2, "w": torch.ones(3)})
    assert err.value.errno == errno.ENOSPC
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["LATEST", "step_00000001.pt"]
    assert load_state(ck.latest_state(tmp_path))["step"] == 1


def test_the_state_writer_reports_a_full_disk_as_oserror(tmp_path):
    """torch.save given a path turns ENOSPC into `[enforce fail at inline_container.cc] unexpected pos`;
    the writer hands torch an open file, so the OSError itself comes through (/dev/full: always ENOSPC)."""
    import errno

    from biomjepa.train.checkpoint import _write_state

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(OSError) as err:
        _write_state({"w": torch.zeros(100_000)}, Path("/dev/full"))
    assert err.value.errno == errno.ENOSPC


def test_training_on_a_full_disk_stops_with_the_clear_error_and_resumes(tmp_path, monkeypatch):
    from _kit import tiny_config

    import biomjepa.train.checkpoint as ck
    from biomjepa.train import pretrain

    cfg = tiny_config(tmp_path, run_name="full", steps=3, checkpoint_every=1)
    write = ck._write_state
    monkeypatch.setattr(ck, "_write_state", lambda state, tmp: (_full_disk if state["step"] == 2 else write)(state, tmp))
    with pytest.raises(OSError, match=r"No space left to write the training state of step 2 .*step_00000001\.pt is intact"):
        pretrain(cfg)
    monkeypatch.setattr(ck, "_write_state", write)  # space freed: the same command resumes from step 1
    run_dir = pretrain(cfg)
    assert load_state(ck.latest_state(run_dir))["step"] == 3
