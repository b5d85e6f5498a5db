"""README is the front door (issue 58): short enough to read in five minutes, naming every public tool, every
command-line subcommand and every tutorial, with its set-up commands exactly those that ``.ci/run`` runs."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAX_LINES = 150


def test_readme_is_short():
    n = len(README.splitlines())
    assert n < MAX_LINES, f"README.md has {n} lines; keep it under {MAX_LINES} (move detail into docs/)"


@pytest.mark.parametrize("ns", ["pp", "tl", "pl"])
def test_readme_names_every_analysis_tool(ns):
    names = importlib.import_module(f"biomjepa.{ns}").__all__
    missing = [n for n in names if f"`bj.{ns}.{n}`" not in README]
    assert missing == [], f"README.md 'What is inside' lacks bj.{ns}: {missing}"


@pytest.mark.parametrize("ns", ["datasets", "train", "embed"])
def test_readme_names_every_public_function(ns):
    mod = importlib.import_module(f"biomjepa.{ns}")
    names = [n for n in mod.__all__ if inspect.isfunction(getattr(mod, n))]
    missing = [n for n in names if f"`{n}`" not in README]
    assert names and missing == [], f"README.md 'What is inside' lacks bj.{ns}: {missing}"


def test_readme_names_every_command():
    from biomjepa.cli.app import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    missing = [c for c in sub.choices if f"`biomjepa {c}" not in README]
    assert missing == [], f"README.md's command line list lacks: {missing}"


def test_readme_links_every_tutorial():
    notebooks = sorted(p.name for p in (ROOT / "tutorials").glob("*.ipynb"))
    missing = [n for n in notebooks if f"(tutorials/{n})" not in README]
    assert len(notebooks) >= 7 and missing == [], f"README.md's tutorial list lacks: {missing}"


def test_readme_setup_commands_are_what_ci_runs():
    """The two numbered set-up commands (install + demo; tests) stand verbatim in ``.ci/run``."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^ {3}```bash\n {3}(.+)\n {3}```$", setup, re.MULTILINE)
    assert len(commands) == 2, commands
    assert all(c in ci for c in commands), [c for c in commands if c not in ci]


def test_bundled_corpus_size_agrees_with_the_model_card():
    """README and the user guide state the default model's corpus as the model card's training table does."""
    card = (ROOT / "docs" / "model_card.md").read_text()
    truth = re.search(r"^\| corpus \| ([\d,]+) cells", card, re.MULTILINE).group(1)
    guide = (ROOT / "docs" / "user_guide.md").read_text()
    stated = re.findall(r"(?:pretrained|learnt) (?:on a CPU )?(?:on|from) (?:about )?([\d,]+)(?: public whole-transcriptome)? cells",
                        README + guide)
    assert len(stated) >= 3 and set(stated) == {truth}, (stated, truth)
