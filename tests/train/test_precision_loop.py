"""``loop.precision``: the training step runs under the precision it names and says so in log.csv; what must stay
float32 (teacher targets, running statistics, EMA teacher, AdamW state) does; a resumed run keeps its log's columns."""

import csv

import numpy as np
import pandas as pd
import pytest
import torch
from _kit import tiny_config

from biomjepa.train import pretrain


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def test_bf16_step_logs_its_precision_and_keeps_float32_state(tmp_path):
    from biomjepa.train.checkpoint import load_latest_state

    run = pretrain(tiny_config(tmp_path, run_name="bf16", steps=3, precision="bf16", accumulation=2))
    log = pd.read_csv(run / "log.csv")
    assert list(log["bf16"]) == [1.0, 1.0, 1.0] and np.isfinite(log["loss"]).all()
    _, state = load_latest_state(run)  # weights, EMA teacher, AdamW moments, running target statistics
    tensors = [t for t in _tensors(state) if t.is_floating_point()]
    assert len(tensors) > 20 and all(t.dtype == torch.float32 for t in tensors)
    fp32 = pretrain(tiny_config(tmp_path, run_name="fp32", steps=1, precision="fp32"))
    assert list(pd.read_csv(fp32 / "log.csv")["bf16"]) == [0.0]


def _tensors(obj):
    if torch.is_tensor(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def test_resumed_run_keeps_the_columns_of_its_log(tmp_path):
    """A run started before a log column existed appends rows that fit its header, not one column more."""
    cfg = tiny_config(tmp_path, run_name="r", steps=4, stop_at=2, checkpoint_every=2)
    run = pretrain(cfg)
    path = run / "log.csv"
    rows = list(csv.reader(path.open()))
    old_header = [c for c in rows[0] if c != "bf16"]  # as a log written before the bf16 column
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(old_header)
        w.writerows([[v for c, v in zip(rows[0], r) if c != "bf16"] for r in rows[1:]])
    pretrain(tiny_config(tmp_path, run_name="r", steps=4, checkpoint_every=2))
    again = list(csv.reader(path.open()))
    assert again[0] == old_header and all(len(r) == len(old_header) for r in again)
    assert [int(r[0]) for r in again[1:]] == [0, 1, 2, 3]
