import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from _kit import tiny_config


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not installed")
@pytest.mark.slow
def test_two_rank_gloo(tmp_path):
    cfg = tiny_config(tmp_path, steps=3, log_cell_ids=True, run_name="ddp", checkpoint_every=100)
    path = tmp_path / "ddp.yaml"
    cfg.to_yaml(path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    cmd = ["torchrun", "--nproc_per_node=2", "--master_port=29517", "-m", "biomjepa.train", str(path),
           "--set", "progress=false"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "ddp"
    ids = [np.loadtxt(run / f"cell_ids_rank{r}.txt", dtype=np.int64).reshape(-1, 3) for r in range(2)]
    seen = [{(s, row) for _, s, row in x} for x in ids]
    assert all(len(x) == len(s) for x, s in zip(ids, seen))  # no repeats within the run
    assert not seen[0] & seen[1]  # disjoint ranks
    assert len(ids[0]) == len(ids[1]) == 3 * cfg.batch_size
    h = [(run / f"weights_rank{r}.sha256").read_text() for r in range(2)]
    assert h[0] == h[1]
    assert (run / "checkpoints" / "LATEST").is_file()
