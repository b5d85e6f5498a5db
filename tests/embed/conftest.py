"""Two small h5ad inputs with different gene sets, and a helper that runs the atlas command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def write_input(path: Path, n: int, first_gene: int, seed: int) -> Path:
    """``n`` cells × 400 vocabulary genes starting at ``first_gene`` (+ 10 unmapped), Poisson-ish counts."""
    import anndata as ad
    import numpy as np
    import pandas as pd
    from scipy import sparse

    from biomjepa.data.vocab import Vocab

    rng = np.random.default_rng(seed)
    sym = list(Vocab.default().symbols[first_gene : first_gene + 400]) + [f"NOTAGENE{j}" for j in range(10)]
    X = sparse.random(n, len(sym), density=0.1, format="csr", random_state=rng, dtype=np.float32)
    X.data = np.ceil(X.data * 10)
    obs = pd.DataFrame(index=[f"{path.stem}_cell{j}" for j in range(n)])
    ad.AnnData(X, obs=obs, var=pd.DataFrame(index=sym)).write_h5ad(path)
    return path


@pytest.fixture
def make_input():
    """:func:`write_input` as a fixture."""
    return write_input


@pytest.fixture(scope="session")
def atlas_inputs(tmp_path_factory) -> list[str]:
    """Two inputs (300 and 170 cells) whose gene sets overlap only partly."""
    d = tmp_path_factory.mktemp("atlas_in")
    return [str(write_input(d / "donor_a.h5ad", 300, 0, 1)), str(write_input(d / "donor_b.h5ad", 170, 100, 2))]


@pytest.fixture(scope="session")
def atlas_cli():
    """:func:`run_cli` as a fixture."""
    return run_cli


def run_cli(args: list[str], *, nproc: int = 1, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m biomjepa.embed ARGS`` (``nproc`` = 1) or ``torchrun --nproc_per_node=NPROC -m biomjepa.embed ARGS``."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if nproc == 1:
        cmd = [sys.executable, "-m", "biomjepa.embed", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "biomjepa.embed", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=600)
