"""The layer map of ``docs/contributing.md``, checked: which part of ``src/biomjepa`` may import which.

Every import anywhere in a module (function-level ones included) of another part of the package, or of
anndata/mudata/scanpy, must be allowed by :data:`MAY_IMPORT`. The table is the one in the docs; a new
arrow means changing both, on purpose.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "biomjepa"
BASE = {"_settings", "_keys", "_files", "_lockfile", "_h5files", "_stops", "_references", "_checks", "_version", "_device",
        "_progress", "_docs"}
ANNDATA = {"<anndata>", "<mudata>", "<scanpy>"}
#: part → the parts (and AnnData libraries) it may import; BASE may be imported by everything
MAY_IMPORT: dict[str, set[str]] = {
    **{b: BASE | ({"<anndata>"} if b == "_checks" else set()) for b in BASE},
    "data": BASE | ANNDATA,
    "nn": BASE | {"data"},
    "model": BASE | {"data", "nn"},
    "_pretrained": BASE | {"model", "_shared_weights"},
    "_shared_weights": BASE | {"model"},  # a bundled checkpoint sharing another's weights, put together in the cache
    "train": BASE | {"data", "nn", "model", "_pretrained"},  # model.init_from resolves registry names
    "pp": BASE | {"data"} | ANNDATA,
    "tl": BASE | {"data", "nn", "model", "_pretrained", "train", "pp"} | ANNDATA,  # tl.adapt maps genes (species=)
    "embed": BASE | {"data", "nn", "model", "_pretrained", "pp"} | ANNDATA,
    "bench": BASE | {"data", "nn", "model", "_pretrained", "pp", "tl"} | ANNDATA,
    "pl": BASE | {"bench"} | ANNDATA,
    "datasets": BASE | ANNDATA,
    "_data": set(), "configs": set(),  # bundled files (an __init__.py so importlib.resources finds them)
    "cli": BASE | {"data", "nn", "model", "_pretrained", "train", "pp", "tl", "pl", "bench", "embed", "datasets"} | ANNDATA,
    "__main__": {"cli"},  # ``python -m biomjepa``: the command line, nothing else
}
#: ``python -m biomjepa.train`` / ``python -m biomjepa.embed`` are two-line shims into the command line
SHIMS = {"train/__main__.py", "embed/__main__.py"}
#: what tl takes from train: functions of plain arrays and paths (target errors; adapt's training on a written shard)
TL_FROM_TRAIN = {"biomjepa.train.target_errors", "biomjepa.train.adapt"}


def part_of(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imports(path: Path):
    """``(line, absolute module)`` of every import in ``path``, relative ones resolved."""
    package = ["biomjepa", *path.relative_to(SRC).parent.parts]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if not node.level:
                yield node.lineno, node.module or ""
                continue
            base = ".".join(package[: len(package) - node.level + 1])
            if node.module:
                yield node.lineno, f"{base}.{node.module}"
            else:
                yield from ((node.lineno, f"{base}.{a.name}") for a in node.names)


def target(module: str) -> str | None:
    head = module.split(".")
    if head[0] in ("anndata", "mudata", "scanpy"):
        return f"<{head[0]}>"
    return head[1] if head[0] == "biomjepa" and len(head) > 1 else None


def offences() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        part, rel = part_of(path), path.relative_to(SRC).as_posix()
        if part == "__init__" or rel in SHIMS:
            continue
        for line, module in imports(path):
            t = target(module)
            if t is None or t == part or t in MAY_IMPORT.get(part, set()):
                if part == "tl" and t == "train" and not any(module.startswith(m) for m in TL_FROM_TRAIN):
                    found.append(f"{rel}:{line}: {module} (tl uses train through target_errors only)")
                continue
            found.append(f"{rel}:{line}: {part} → {module}")
    return found


def test_every_part_is_in_the_layer_map():
    parts = {part_of(p) for p in SRC.rglob("*.py")} - {"__init__"}
    assert parts <= set(MAY_IMPORT), f"parts missing from the layer map: {sorted(parts - set(MAY_IMPORT))}"


def test_imports_follow_the_layer_map():
    assert offences() == []


def test_the_layer_check_sees_an_arrow_against_the_layers(tmp_path, monkeypatch):
    fake = tmp_path / "biomjepa"
    (fake / "train").mkdir(parents=True)
    (fake / "train" / "bad.py").write_text("def f():\n    import anndata\n    from ..tl import embed\n")
    (fake / "tl").mkdir()
    (fake / "tl" / "worse.py").write_text("from ..train.loop import pretrain\nfrom ..train.target_errors import x\n")
    monkeypatch.setitem(globals(), "SRC", fake)
    assert offences() == [
        "tl/worse.py:1: biomjepa.train.loop (tl uses train through target_errors only)",
        "train/bad.py:2: train → anndata",
        "train/bad.py:3: train → biomjepa.tl",
    ]
