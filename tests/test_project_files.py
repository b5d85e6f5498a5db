"""The scverse project files agree with pyproject.toml and with .ci/run (the one definition of CI)."""

from __future__ import annotations

import re
from importlib.metadata import metadata, version
from pathlib import Path

import pytest
import yaml

import biomjepa

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT_VERSION = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def test_version_comes_from_the_installed_metadata():
    assert biomjepa.__version__ == version("biomjepa") == PYPROJECT_VERSION


def test_citation_names_this_version_and_the_paper():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == PYPROJECT_VERSION
    assert cff["preferred-citation"]["title"].startswith("BioM-JEPA: joint-embedding prediction")


def test_package_is_typed():
    assert (ROOT / "src" / "biomjepa" / "py.typed").is_file()


def test_workflow_runs_ci_run_on_supported_pythons():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "test.yaml").read_text())
    job = workflow["jobs"]["test"]
    assert job["strategy"]["matrix"]["python"] == ["3.11", "3.12", "3.13"]
    assert metadata("biomjepa")["Requires-Python"] == ">=3.11"
    assert any(step.get("run") == "bash .ci/run" for step in job["steps"])


def test_read_the_docs_builds_the_ci_docs():
    rtd = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    assert rtd["sphinx"] == {"configuration": "docs/conf.py", "fail_on_warning": True}
    assert rtd["python"]["install"][0]["extra_requirements"] == ["docs"]
    assert "sphinx-build -W" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize(
    "hook",
    ["ruff-check", "ruff-format", "trailing-whitespace", "end-of-file-fixer", "check-yaml", "check-toml"],
)
def test_pre_commit_hooks(hook):
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert hook in {h["id"] for repo in config["repos"] for h in repo["hooks"]}


def test_dependency_floors_are_the_versions_the_code_needs():
    """The atlas store is zarr v3 (``zarr.json``, ``Group.create_array``) and ``--write-obsm`` uses
    ``anndata.io``: lower bounds that promise zarr 2 or anndata 0.10 would install a package that fails."""
    import anndata
    import zarr

    deps = {re.split(r"[<>=!~\[ ]", d, maxsplit=1)[0]: d for d in metadata("biomjepa").get_all("Requires-Dist")
            if "extra ==" not in d}
    assert deps["zarr"].replace(" ", "").startswith("zarr>=3") and hasattr(zarr.Group, "create_array")
    assert deps["anndata"].replace(" ", "").startswith("anndata>=0.11") and hasattr(anndata, "io")
    assert metadata("biomjepa")["Requires-Python"].replace(" ", "") == ">=3.11"
