"""biomjepa as a dependency: a throw-away downstream package that requires it, installed with it into a
fresh virtual environment, runs a scanpy pipeline (``bj.pp.map_vocab`` → ``bj.tl.embed`` → neighbours
→ Leiden → UMAP) from outside the source tree.

Offline: the venv sees the test environment's packages (``--system-site-packages``: torch, scanpy, pip…);
both packages are built here with hatchling (``--no-build-isolation``) and pip may not use an index.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "bj-downstream"
version = "0.0.1"
requires-python = ">=3.10"
dependencies = ["biomjepa", "scanpy>=1.10"]

[tool.hatch.build.targets.wheel]
packages = ["src/downstream"]
"""

PIPELINE = '''\
"""A downstream analysis that uses biomjepa next to scanpy."""

import scanpy as sc

import biomjepa as bj


def analyse(adata, checkpoint):
    """Map genes, embed with BioM-JEPA, then cluster and lay out with scanpy."""
    bj.pp.map_vocab(adata)
    bj.tl.embed(adata, checkpoint=checkpoint)
    sc.pp.neighbors(adata, use_rep="X_biomjepa", n_neighbors=10)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False)
    sc.tl.umap(adata, random_state=0)
    return adata
'''

RUN = """\
import sys
from pathlib import Path

import anndata as ad
import numpy as np
from scipy import sparse

import biomjepa
import downstream

venv = Path(sys.prefix)
assert Path(biomjepa.__file__).is_relative_to(venv), f"biomjepa imported from {biomjepa.__file__}, not the venv"
assert Path(downstream.__file__).is_relative_to(venv), downstream.__file__
rng = np.random.default_rng(0)
genes = list(biomjepa.data.vocab.Vocab.default().symbols[1000:1200])
a = ad.AnnData(sparse.csr_matrix(rng.poisson(1.0, size=(40, len(genes))).astype(np.float32) + 1))
a.var_names = genes
downstream.analyse(a, sys.argv[1])
assert a.obsm["X_biomjepa"].shape[0] == 40 and "leiden" in a.obs and a.obsm["X_umap"].shape == (40, 2)
print("ok", biomjepa.__version__, biomjepa.__file__)
"""


def _run(*cmd, cwd: Path) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


@pytest.mark.slow
def test_downstream_package_in_a_fresh_venv(tmp_path, tiny_checkpoint):
    pytest.importorskip("hatchling", reason="builds offline with hatchling (in the `test` extra)")
    pkg = tmp_path / "downstream"
    (pkg / "src" / "downstream").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text(PYPROJECT)
    (pkg / "src" / "downstream" / "__init__.py").write_text(PIPELINE)
    venv = tmp_path / "venv"
    # --without-pip: the environment's pip and setuptools serve the venv (a bundled older setuptools
    # would shadow them and fail torch's `setuptools>=77` requirement with no index to upgrade from)
    _run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet"]
    # biomjepa's and downstream's requirements must be met by what is installed: no index to fall back on
    _run(*pip, REPO, cwd=tmp_path)
    _run(*pip, pkg, cwd=tmp_path)
    out = _run(py, "-c", textwrap.dedent(RUN), tiny_checkpoint, cwd=tmp_path)
    assert out.startswith("ok"), out
