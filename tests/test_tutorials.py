"""Execute every tutorial notebook top to bottom (``tutorials/*.ipynb``); any cell error fails.

Each notebook runs in a fresh ``python3`` kernel with ``tutorials/`` as working directory (so
``../../shared/data`` resolves to the ``shared`` folder beside the repository root) and
``MPLBACKEND=Agg``. Notebooks that read ``../shared/data`` skip when it is absent; the others use
bundled data only and always run. A few minutes each on one CPU core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "tutorials"
CELL_TIMEOUT = 600  # seconds per cell

# notebook → whether it needs ../shared/data
NOTEBOOKS = {
    "01_embed_and_explore.ipynb": False,
    "02_biology.ipynb": True,
    "03_pretrain_your_own.ipynb": True,
    "04_benchmark_and_finetune.ipynb": False,
}


def test_every_tutorial_is_listed():
    assert sorted(p.name for p in TUTORIALS.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_tutorials_are_stored_without_outputs(name):
    import nbformat

    nb = nbformat.read(TUTORIALS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{name}: clear the outputs before saving"


def _execute(name: str, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MPLBACKEND", "Agg")  # inherited by the kernel process
    nb = nbformat.read(TUTORIALS / name, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    client.execute()  # raises CellExecutionError (with the cell and its traceback) on any error


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.shared) if shared else n for n, shared in NOTEBOOKS.items()],
)
def test_tutorial_executes(name, request, monkeypatch):
    if NOTEBOOKS[name]:
        request.getfixturevalue("shared_data")  # skips when ../shared/data is absent
    _execute(name, monkeypatch)
