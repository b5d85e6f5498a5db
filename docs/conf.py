"""Sphinx configuration of the biomjepa documentation (built offline).

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` after ``pip install -e ".[docs]"``.
Nothing here needs the network: no intersphinx, notebooks are not executed (they are stored
executed, with their outputs, by ``python scripts/run_tutorials.py``; the docs render those
outputs), API stubs are generated at build time by autosummary into ``docs/generated/``. The
tutorial notebooks live in ``../tutorials`` and are copied, outputs included, into
``docs/tutorials/`` (git-ignored) at the start of every build, because Sphinx only reads sources
under ``docs/``. ``python scripts/check_docs_images.py docs/_build/html`` checks afterwards that
the tutorial pages show their figures.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import biomjepa

project = "biomjepa"
author = "biomjepa developers"
copyright = "biomjepa developers (MIT licence)"
release = biomjepa.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]

# -- MyST / MyST-NB ----------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "off"  # render the stored outputs (scripts/run_tutorials.py); never execute here

# -- tutorials ---------------------------------------------------------------------------------
# ../tutorials/*.ipynb (stored with outputs by scripts/run_tutorials.py) → docs/tutorials/, byte for byte.
_HERE = Path(__file__).resolve().parent
_TUTORIALS_SRC, _TUTORIALS_DST = _HERE.parent / "tutorials", _HERE / "tutorials"
_TUTORIALS_DST.mkdir(exist_ok=True)
_notebooks = {p.name: p for p in sorted(_TUTORIALS_SRC.glob("*.ipynb"))}
for _stale in _TUTORIALS_DST.glob("*.ipynb"):
    if _stale.name not in _notebooks:
        _stale.unlink()
for _name, _src in _notebooks.items():
    _dst = _TUTORIALS_DST / _name
    if not _dst.is_file() or _dst.read_bytes() != _src.read_bytes():
        shutil.copy2(_src, _dst)  # keeps the mtime, so unchanged notebooks are not rebuilt

# -- autodoc / autosummary / napoleon ----------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_use_ivar = True
napoleon_use_param = True

# -- HTML --------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = "biomjepa"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
}
html_static_path: list[str] = []


# -- docstring pre-processing ------------------------------------------------------------------
# biomjepa's numpy-style docstrings write "Returns" as prose (scanpy's style: "``None`` or a copy,
# with" followed by the keys written), not as "name : type" fields. Napoleon would turn every
# unindented line of such a section into a separate return type (and split inline literals that
# run over a line break), so the section is taken out before napoleon runs and put back, verbatim,
# as one ``:returns:`` field after it (before ``:raises:``, else after the parameters).
_SECTION_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
_PIPE = re.compile(r"(?<![\\`|])\|(?=[^\s|])([^|`\n]*?[^\s\\|])\|(?![`|])")
_RETURNS: dict[int, list[str]] = {}


def _take_returns(app, what, name, obj, options, lines: list[str]) -> None:
    for i in range(len(lines) - 1):
        if lines[i].strip() in ("Returns", "Yields") and _SECTION_UNDERLINE.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and not (
                end + 1 < len(lines) and lines[end].strip() and _SECTION_UNDERLINE.match(lines[end + 1])
            ):
                end += 1
            body = lines[i + 2 : end]
            while body and not body[-1].strip():
                body.pop()
            field = ":returns:" if lines[i].strip() == "Returns" else ":Yields:"
            _RETURNS[id(lines)] = [field, *(f"    {ln}" if ln.strip() else "" for ln in body), ""]
            del lines[i:end]
            return


def _put_returns(app, what, name, obj, options, lines: list[str]) -> None:
    field = _RETURNS.pop(id(lines), None)
    if field is None:
        return
    fields = [k for k, ln in enumerate(lines) if ln.startswith((":param ", ":type "))]
    raises = [k for k, ln in enumerate(lines) if ln.startswith(":raises")]
    if raises:
        at = raises[0]
    elif fields:
        at = fields[-1] + 1
        while at < len(lines) and lines[at].startswith(" "):
            at += 1
    else:
        at = len(lines)
    if at > 0 and lines[at - 1].strip() and not lines[at - 1].startswith((":", " ")):
        field = ["", *field]
    lines[at:at] = field


def _escape_abs_bars(app, what, name, obj, options, lines: list[str]) -> None:
    """``|x|`` (absolute values) in prose outside inline literals would be a substitution reference.

    Only the modules listed here are treated; elsewhere the docstrings quote them as literals.
    """
    if not name.startswith(("biomjepa.train.", "biomjepa.data.graph.", "biomjepa.nn.encoder")):
        return
    for k, line in enumerate(lines):
        parts = line.split("``")
        for j in range(0, len(parts), 2):  # even parts are outside ``inline literals``
            parts[j] = _PIPE.sub(r"\\|\1\\|", parts[j])
        lines[k] = "``".join(parts)


def setup(app):
    app.connect("autodoc-process-docstring", _take_returns, priority=400)
    app.connect("autodoc-process-docstring", _put_returns, priority=600)
    app.connect("autodoc-process-docstring", _escape_abs_bars, priority=400)
