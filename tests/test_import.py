"""``import biomjepa`` stays light: no torch, scanpy, matplotlib or fla at import time."""

from __future__ import annotations

import subprocess
import sys


def test_import_is_light():
    code = (
        "import sys, biomjepa as bj; "
        "assert bj.pp and bj.tl and bj.pl and bj.settings; "
        "heavy = [m for m in ('torch', 'scanpy', 'matplotlib', 'fla', 'muon', 'pynndescent') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout}"


def test_lazy_submodules():
    code = "import sys, biomjepa as bj; bj.train; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_lower_layers_are_reachable_as_attributes():
    """Downstream code writes ``biomjepa.data.vocab.Vocab`` after ``import biomjepa``: the lazy package and its
    data layer load what is named on first use (and nothing of the AnnData tools before)."""
    import subprocess
    import sys

    code = ("import sys, biomjepa; v = biomjepa.data.vocab.Vocab.default(); assert v.size == 19264; "
            "assert 'biomjepa.pp' not in sys.modules and 'biomjepa.tl' not in sys.modules; "
            "assert biomjepa.data.graph.GeneGraph and biomjepa.nn.inference.map_cells; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_every_named_module_is_an_attribute_after_import_biomjepa():
    """``biomjepa.model`` (named by the package's own warnings), ``biomjepa.nn.readout``, ``biomjepa.train.graph``
    and ``biomjepa.cli`` after a plain ``import biomjepa`` (issue 30); unknown names stay AttributeErrors."""
    code = ("import biomjepa; assert biomjepa.model.write_manifest and biomjepa.nn.readout and "
            "biomjepa.train.graph and biomjepa.cli.main\n"
            "for mod, name in ((biomjepa, 'nope'), (biomjepa.nn, 'nope'), (biomjepa.train, 'nope')):\n"
            "    try:\n        getattr(mod, name)\n    except AttributeError:\n        pass\n"
            "    else:\n        raise SystemExit(name)\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
