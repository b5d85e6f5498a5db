"""The tutorials (``tutorials/*.ipynb``): stored executed and current, and executable top to bottom.

The notebooks are stored **with their outputs**, produced by ``python scripts/run_tutorials.py``
with the default checkpoint; the docs render those outputs. The fast tests check that every code
cell has outputs, that they come from the current default checkpoint (its registry sha256 is
recorded in the notebook metadata) and that each notebook stays small; the same holds for the
figures of ``docs/figures/`` (record in PNG text chunks).

The slow tests execute an in-memory copy of every notebook (the stored file is not modified) in a
fresh ``python3`` kernel with ``tutorials/`` as working directory (so ``../../shared/data``
resolves to the ``shared`` folder beside the repository root) and ``MPLBACKEND=Agg``. Notebooks that
read ``../shared/data`` skip when it is absent; the others use bundled data only and always run. A
few minutes each on one CPU core.
"""

from __future__ import annotations

import functools
import importlib.util
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
FIGURES = ROOT / "docs" / "figures"
CELL_TIMEOUT = 600  # seconds per cell
MAX_NOTEBOOK_BYTES = 1_500_000
MAX_FIGURE_BYTES = 300_000
NO_OUTPUT_TAG = "no-output"  # a code cell that legitimately shows nothing
REGENERATE = "run `python scripts/run_tutorials.py` (or `--only NAME`) to store fresh outputs"

# notebook → whether it needs ../shared/data
NOTEBOOKS = {
    "01_embed_and_explore.ipynb": False,
    "02_biology.ipynb": True,
    "03_pretrain_your_own.ipynb": True,
    "04_benchmark_and_finetune.ipynb": False,
    "05_multimodal_muon.ipynb": True,
    "06_lognormalized_data.ipynb": False,
    "07_adapt_to_your_cells.ipynb": False,
}
# docs/figures/*.png → what draws it (scripts/run_tutorials.py)
FIGURE_SOURCES = {
    "umap_pancreas.png": "biomjepa demo",
    "bench_pancreas.png": "tutorials/04_benchmark_and_finetune.ipynb",
    "integration_pbmc_chemistries.png": "tutorials/06_lognormalized_data.ipynb",
}


@functools.cache
def _run_tutorials():
    """``scripts/run_tutorials.py`` as a module: it defines what the stored record must say."""
    spec = importlib.util.spec_from_file_location("run_tutorials", ROOT / "scripts" / "run_tutorials.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _default() -> dict[str, str]:
    """The default checkpoint's name + version and registry sha256 (as the script records them)."""
    return _run_tutorials().checkpoint_record()


def _read(name: str):
    import nbformat

    nb = nbformat.read(TUTORIALS / name, as_version=4)
    nbformat.validate(nb)
    return nb


def test_every_tutorial_is_listed():
    assert sorted(p.name for p in TUTORIALS.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_tutorials_are_stored_executed(name):
    nb = _read(name)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{name}: not executed top to bottom in one run; {REGENERATE}"
    for i, cell in enumerate(code):
        assert not any(o.output_type == "error" for o in cell.outputs), f"{name}: code cell {i} stored an error"
        if NO_OUTPUT_TAG not in cell.metadata.get("tags", []):
            assert cell.outputs, (
                f"{name}: code cell {i} has no stored output ({cell.source[:60]!r}); {REGENERATE}, or make the "
                f"cell show something (tag it {NO_OUTPUT_TAG!r} only if it legitimately shows nothing)"
            )
    assert "widgets" not in nb.metadata, f"{name}: widget state stored; {REGENERATE}"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_stored_outputs_come_from_the_default_checkpoint(name):
    record, default = _read(name).metadata.get("biomjepa", {}), _default()
    assert record.get("checkpoint_sha256") == default["checkpoint_sha256"], (
        f"{name}: stored outputs were produced with {record.get('checkpoint', 'an unrecorded checkpoint')}, "
        f"not with the default checkpoint {default['checkpoint']}; {REGENERATE}"
    )


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_stored_notebooks_stay_small(name):
    size = (TUTORIALS / name).stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, f"{name}: {size / 1e6:.2f} MB stored; shrink its figures or outputs"


@pytest.mark.parametrize("figure", sorted(FIGURE_SOURCES))
def test_docs_figures_come_from_the_default_checkpoint(figure):
    from PIL import Image

    path = FIGURES / figure
    assert path.is_file(), f"docs/figures/{figure} is missing; {REGENERATE}"
    assert path.stat().st_size < MAX_FIGURE_BYTES
    with Image.open(path) as im:
        text = dict(im.text)
    assert text.get("biomjepa:source") == FIGURE_SOURCES[figure]
    default = _default()
    assert text.get("biomjepa:checkpoint_sha256") == default["checkpoint_sha256"], (
        f"docs/figures/{figure} was drawn with {text.get('biomjepa:checkpoint', 'an unrecorded checkpoint')}, "
        f"not with the default checkpoint {default['checkpoint']}; {REGENERATE}"
    )


def test_run_tutorials_shrinks_pngs():
    from PIL import Image

    run_tutorials = _run_tutorials()
    wide = io.BytesIO()
    Image.new("RGBA", (1800, 600), (255, 0, 0, 128)).save(wide, format="PNG")
    png = run_tutorials.shrink_png(wide.getvalue(), text={"biomjepa:source": "test"})
    with Image.open(io.BytesIO(png)) as im:
        assert im.size == (run_tutorials.MAX_WIDTH, 300)
        assert im.text == {"biomjepa:source": "test"}
        r, g, b = im.convert("RGB").getpixel((0, 0))
    assert r == 255 and abs(g - 127) <= 1 and abs(b - 127) <= 1  # half-transparent red flattened on white


def _execute(name: str, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MPLBACKEND", "Agg")  # inherited by the kernel process
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # as scripts/run_tutorials.py runs them
    monkeypatch.setenv("PYTHONWARNINGS", "ignore:IProgress not found")
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
