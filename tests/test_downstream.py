"""biomjepa as a dependency: a throw-away downstream package that requires it, installed with it into a
fresh virtual environment, runs a scanpy pipeline (``bj.pp.map_vocab`` → ``bj.tl.embed`` → neighbours
→ Leiden → UMAP) from outside the source tree.

Offline: the venv sees the test environment's packages (torch, scanpy, pip, hatchling…) through a ``.pth``
file naming that environment's site directories (:func:`see_packages_of_this_environment`); both packages
are built here with hatchling (``--no-build-isolation``) and pip may not use an index.

Not ``python -m venv --system-site-packages``: run from inside a virtual environment (the usual way to
follow README), that makes a venv over the *base* interpreter's site-packages, not this environment's
("No module named 'hatchling'").
"""

from __future__ import annotations

import site
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


def see_packages_of_this_environment(py: Path) -> None:
    """Let the venv of interpreter ``py`` import what this test environment has installed.

    A ``.pth`` file in the venv's site-packages adds this interpreter's site directories (a virtual
    environment's own, and the base ones it sees) with :func:`site.addsitedir`, after the venv's own, so
    their ``.pth`` files work too and what is installed into the venv comes first.
    """
    dirs = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        dirs.append(site.getusersitepackages())
    venv_site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})" for d in dirs if Path(d).is_dir()]
    (Path(venv_site) / "_test_environment.pth").write_text("\n".join(lines) + "\n")


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
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    py = venv / "bin" / "python"
    see_packages_of_this_environment(py)
    pip = [py, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet"]
    # biomjepa's and downstream's requirements must be met by what is installed: no index to fall back on
    _run(*pip, REPO, cwd=tmp_path)
    _run(*pip, pkg, cwd=tmp_path)
    out = _run(py, "-c", textwrap.dedent(RUN), tiny_checkpoint, cwd=tmp_path)
    assert out.startswith("ok"), out


@pytest.mark.slow
def test_scanpy_stack_at_real_size():
    """``sc.pp.neighbors(use_rep=…)`` → Leiden → UMAP on 9,000 cells of ``X_biomjepa``-shaped (256-d) features.

    Above 8,192 cells scanpy's euclidean neighbours go through pynndescent, a path that the demo and the
    other tests (fewer cells) never take: pynndescent 0.7.0 with scipy 1.17 failed there with
    ``'csr_array' object has no attribute 'getnnz'`` (hence the ``pynndescent<0.7`` pin of the
    ``analysis`` extra). 2-7 minutes on a busy 2-core machine, mostly numba compiling pynndescent.
    """
    sc = pytest.importorskip("scanpy")
    import anndata as ad
    import numpy as np
    from sklearn.metrics import homogeneity_score

    rng = np.random.default_rng(0)
    n, d, k = 9000, 256, 12
    truth = rng.integers(0, k, size=n)
    centres = rng.normal(size=(k, d))
    a = ad.AnnData(np.zeros((n, 1), dtype=np.float32))
    a.obsm["X_biomjepa"] = (centres[truth] + 0.5 * rng.normal(size=(n, d))).astype(np.float32)
    sc.pp.neighbors(a, use_rep="X_biomjepa", n_neighbors=15, random_state=0)
    sc.tl.leiden(a, flavor="igraph", n_iterations=2, directed=False, random_state=0)
    sc.tl.umap(a, random_state=0)
    assert a.obsp["connectivities"].shape == (n, n)
    assert (np.diff(a.obsp["distances"].tocsr().indptr) >= 14).all()  # every cell has its neighbours
    assert homogeneity_score(truth, a.obs["leiden"]) > 0.95
    assert a.obsm["X_umap"].shape == (n, 2) and np.isfinite(a.obsm["X_umap"]).all()
