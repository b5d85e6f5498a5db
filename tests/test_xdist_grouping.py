"""README's test command runs on two pytest-xdist workers (``-n 2``): ``tests/conftest.py`` deals the tests out file
by file, so a module fixture (the quick GPU suite, a torchrun store) is made once, not once per worker."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_conftest():
    """``tests/conftest.py`` as a module of its own name (``conftest`` alone may name another folder's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = _load_conftest()


class _Item:
    def __init__(self, path: Path):
        self.path, self.marks = path, []

    def add_marker(self, mark):
        self.marks.append(mark)


def _config(has_xdist=True, asked="no", **option):
    return SimpleNamespace(option=SimpleNamespace(**option), rootpath=ROOT,
                           known_args_namespace=SimpleNamespace(dist=asked),  # --dist as the command line gave it
                           pluginmanager=SimpleNamespace(hasplugin=lambda name: has_xdist and name == "xdist"))


def _groups(files: list[str], has_xdist=True) -> dict[str, list]:
    items = [_Item(ROOT / f) for f in files]
    conftest.pytest_collection_modifyitems(_config(has_xdist), items)
    return {i.path.relative_to(ROOT).as_posix(): [m.args[0] for m in i.marks if m.name == "xdist_group"] for i in items}


def test_the_tutorials_are_dealt_first_and_the_rest_keeps_its_order():
    files = ["tests/a/test_x.py", "tests/test_tutorials.py", "tests/b/test_y.py", "tests/test_tutorials.py"]
    items = [_Item(ROOT / f) for f in files]
    conftest.pytest_collection_modifyitems(_config(), items)
    assert [i.path for i in items] == [ROOT / files[i] for i in (1, 3, 0, 2)]


@pytest.mark.parametrize(("dist", "grouped"), [("no", True), ("load", True), ("loadfile", False)])
def test_a_worker_suffixes_test_ids_with_their_group(dist, grouped):
    """xdist's workers re-parse the command line, where ``--dist`` is absent: conftest asks for the suffixes that
    ``--dist loadgroup`` would have them add (the controller schedules by them)."""
    config = _config(asked=dist, loadgroup=False)
    config.workerinput = {"workerid": "gw0"}
    conftest.pytest_collection_modifyitems(config, [_Item(ROOT / "tests/test_benchmarks.py")])
    assert config.option.loadgroup is grouped


def test_each_file_is_one_group_and_the_tutorials_are_dealt_out_one_by_one():
    groups = _groups(["tests/test_benchmarks.py", "tests/test_benchmarks.py", "tests/embed/test_torchrun.py",
                      "tests/test_tutorials.py", "tests/model/test_bundled.py", "tests/nn/test_precision_accuracy.py"])
    assert groups["tests/test_benchmarks.py"] == ["tests/test_benchmarks.py"]
    assert groups["tests/embed/test_torchrun.py"] == ["tests/embed/test_torchrun.py"]
    assert groups["tests/test_tutorials.py"] == []  # each notebook runs in a kernel of its own
    # the two files that share the session's 1,074 embedded demo cells go to one worker
    assert groups["tests/nn/test_precision_accuracy.py"] == groups["tests/model/test_bundled.py"]
    for name in conftest.XDIST_SPREAD | set(conftest.XDIST_TOGETHER) | set(conftest.XDIST_TOGETHER.values()):
        assert (ROOT / name).is_file(), f"tests/conftest.py names {name}, which is gone"


def test_no_marks_without_xdist():
    assert _groups(["tests/test_benchmarks.py"], has_xdist=False) == {"tests/test_benchmarks.py": []}


@pytest.mark.parametrize(("workers", "dist", "want"), [(2, "load", "loadgroup"), (2, "no", "loadgroup"),
                                                        (2, "loadfile", "loadfile"), (0, "no", "no"),
                                                        (None, "no", "no")])
def test_workers_deal_by_group(workers, dist, want):
    config = _config(numprocesses=workers, dist=dist)
    conftest.pytest_configure(config)
    assert config.option.dist == want
