"""The tutorials (``tutorials/*.ipynb``): stored executed and current, and executable top to bottom.

The notebooks are stored **with their outputs**, produced by ``python scripts/run_tutorials.py``
with the default checkpoint; the docs render those outputs. The fast tests check that every code
cell has outputs, that they come from the current default checkpoint (its registry sha256 is
recorded in the notebook metadata) and that each notebook stays small; the same holds for the
figures of ``docs/figures/`` (record in PNG text chunks).

The slow tests execute an in-memory copy of every notebook (the stored file is not modified) in a
fresh ``python3`` kernel with ``tutorials/`` as working directory (so ``../../shared/data``
resolves to the ``shared`` folder beside the repository root) and ``MPLBACKEND=Agg``. Notebooks that
read ``../shared/data`` skip when it is absent; the others use bundled data only and always run.
They run the notebooks' code on less data than the stored run (issue 58: the test command within 25 minutes on
two AVX2 cores): a first cell, not stored, makes the bundled datasets' loaders return a fixed subset of each
group's cells (:data:`SMALLER`: a quarter, at least 20 of a group that has them, so every threshold the
notebooks apply still holds, e.g. 20 cells of a type picked to fine-tune on, ``bj.tl.adapt``'s 200 cells), and
:data:`LIGHTER` shortens two heavy calls. The code paths are those of the stored run; the stored outputs come
from the full run (``scripts/run_tutorials.py``). ``BIOMJEPA_FULL_TUTORIALS=1`` executes them at full size.
A minute or two each on two CPU cores.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import os
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
#: :data:`SMALLER`, the hidden first cell of an executed copy: ``_smaller(load, key)`` wraps a dataset loader to
#: return, of each group of ``obs[key]``, ceil(fraction · n) cells but at least min(n, floor), spread over the
#: group in file order; the bundled datasets' loaders are replaced by their wrapped selves
SMALLER_FUNCTION = '''
def _smaller(load, key, fraction=0.25, floor=20):
    import functools

    import numpy as np

    @functools.wraps(load)
    def smaller(*args, **kwargs):
        adata = load(*args, **kwargs)
        groups = adata.obs[key].astype(str).to_numpy()
        keep = []
        for group in np.unique(groups):
            rows = np.flatnonzero(groups == group)
            n = min(len(rows), max(floor, int(np.ceil(fraction * len(rows)))))
            keep.append(rows[np.round(np.linspace(0, len(rows) - 1, n)).astype(int)])
        return adata[np.sort(np.concatenate(keep))].copy()

    return smaller
'''
SMALLER_LOADERS = '''
import biomjepa.datasets as _datasets

_datasets.pancreas = _smaller(_datasets.pancreas, "cell_type")  # 335 of 1,074 cells, every type
# 100 of each chemistry's 300: every marker type of tutorial 6 still occurs (a quarter left out its 4 platelets)
_datasets.pbmc_chemistries = _smaller(_datasets.pbmc_chemistries, "chemistry", fraction=1 / 3)
del _datasets
'''
SMALLER = SMALLER_FUNCTION + SMALLER_LOADERS
#: notebook → (text, replacement) made in the executed copy; each text occurs once in the notebook's code
LIGHTER = {
    # fine-tune on 10 cells of each type (6 / 2 / 2 per split), not 20: half the fine-tuning time
    "04_benchmark_and_finetune.ipynb": [('"] == t), 20, replace=False)', '"] == t), 10, replace=False)')],
    # adapt for 10 steps, not 40: the same recipe (its warm-up a quarter of the steps), time budget, export, embedding
    "07_adapt_to_your_cells.ipynb": [("steps=40, time_budget=120", "steps=10, time_budget=120")],
}
FULL_ENV = "BIOMJEPA_FULL_TUTORIALS"

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


def _lighter(nb, name: str):
    """The copy the slow test executes: :data:`LIGHTER`'s replacements made, :data:`SMALLER` run first."""
    import nbformat

    for text, replacement in LIGHTER.get(name, []):
        cells = [c for c in nb.cells if c.cell_type == "code" and text in c.source]
        assert len(cells) == 1 and cells[0].source.count(text) == 1, (
            f"{name}: {text!r} is not in exactly one place of the notebook's code; update LIGHTER in {__name__}"
        )
        cells[0].source = cells[0].source.replace(text, replacement)
    nb.cells.insert(0, nbformat.v4.new_code_cell(SMALLER))
    return nb


@pytest.mark.parametrize("name", sorted(LIGHTER))
def test_lighter_finds_what_it_shortens(name):
    before = [c.source for c in _read(name).cells]
    after = [c.source for c in _lighter(_read(name), name).cells]
    assert after[0] == SMALLER and len(after) == len(before) + 1
    assert sum(a != b for a, b in zip(after[1:], before)) == len(LIGHTER[name])


def test_smaller_datasets_keep_what_the_notebooks_need():
    """The subsets keep every cell type and chemistry, 20 cells of each type that has them (tutorial 4 picks 20 of
    each type of 10 or more to fine-tune on), and more reference cells than ``bj.tl.adapt`` needs (tutorial 7)."""
    import biomjepa as bj
    from biomjepa.tl._adapt import MIN_CELLS

    namespace = {}
    exec(SMALLER_FUNCTION, namespace)  # the wrapper only: bj.datasets stays as it is
    full, small = bj.datasets.pancreas(), namespace["_smaller"](bj.datasets.pancreas, "cell_type")()
    assert small.n_obs == 335 and set(small.obs_names) < set(full.obs_names)
    assert list(small.obs_names) == [n for n in full.obs_names if n in set(small.obs_names)]  # file order
    n_full, n_small = full.obs["cell_type"].value_counts(), small.obs["cell_type"].value_counts()
    assert set(n_small.index) == set(n_full.index)
    assert (n_small[n_full.index] >= n_full.clip(upper=20)).all()
    assert (small.obs["donor"] != "human4").sum() >= MIN_CELLS + 50
    assert small.obs_names.equals(namespace["_smaller"](bj.datasets.pancreas, "cell_type")().obs_names)
    pbmc = namespace["_smaller"](bj.datasets.pbmc_chemistries, "chemistry", fraction=1 / 3)()
    assert pbmc.obs["chemistry"].value_counts().to_dict() == {c: 100 for c in ("3prime_v2", "3prime_v3", "5prime")}


def _execute(name: str, monkeypatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MPLBACKEND", "Agg")  # inherited by the kernel process
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # as scripts/run_tutorials.py runs them
    monkeypatch.setenv("PYTHONWARNINGS", "ignore:IProgress not found")
    nb = nbformat.read(TUTORIALS / name, as_version=4)
    if os.environ.get(FULL_ENV) != "1":
        nb = _lighter(nb, name)
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
