"""Commands that write a file, stopped or run twice (issue 57): ``biomjepa embed IN OUT`` and ``biomjepa adapt
--embed OUT`` stopped by SIGTERM/SIGINT while they write remove their temporary file, say in one line what they left
and exit 143/130; two commands writing one file: the second is refused, naming the first.

The stop comes at a controlled point: a child process runs the command with ``AnnData.write_h5ad`` wrapped so that
it sends itself the signal once the temporary file is complete, before its rename. The tools themselves are
replaced by stand-ins that write what they would (the embedding and training are not what is tested).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

from biomjepa.data.vocab import Vocab

CHILD = r"""
import os, signal, sys
import anndata as ad
import numpy as np
import biomjepa as bj
from biomjepa.cli.app import main

sig, argv = sys.argv[1], sys.argv[2:]


def embed(adata, **kw):
    if sig == "wait":  # hold the command here until the test says go
        print("embedding", flush=True)
        sys.stdin.readline()
    adata.obsm["X_biomjepa"] = np.zeros((adata.n_obs, 4), np.float32)


def adapt(adata, checkpoint=None, *, out_dir, **kw):  # what bj.tl.adapt leaves when it returns
    os.makedirs(out_dir)
    open(os.path.join(out_dir, "config.json"), "w").write("{}")
    embed(adata)
    adata.uns["biomjepa"]["adapt"] = {"checkpoint": str(out_dir), "base": {"name": "tiny"}, "n_cells": adata.n_obs,
                                      "steps_done": 1, "seconds": 0.0, "checkpoint_sha256": "0" * 64}


bj.tl.embed, bj.tl.adapt = embed, adapt
if sig != "wait":
    real = ad.AnnData.write_h5ad

    def write_h5ad(self, filename=None, **kw):
        real(self, filename, **kw)  # the temporary file is complete; the stop comes before its rename
        signal.raise_signal(getattr(signal, sig))

    ad.AnnData.write_h5ad = write_h5ad
sys.exit(main(argv))
"""


def _defaults():
    for s in (signal.SIGTERM, signal.SIGINT):  # whatever this process inherited (nohup … &)
        signal.signal(s, signal.SIG_DFL)


def child(sig: str, argv: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, sig, *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True, preexec_fn=_defaults, **kw)


@pytest.fixture
def h5ad(tmp_path):
    X = np.random.default_rng(0).poisson(1.0, size=(30, 50)).astype(np.float32)
    X[:, 0] += 1
    a = ad.AnnData(sparse.csr_matrix(X), var=pd.DataFrame(index=list(Vocab.default().symbols[:50])))
    a.write_h5ad(tmp_path / "in.h5ad")
    return tmp_path / "in.h5ad"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("in_place", [True, False])
def test_embed_stopped_while_writing_leaves_the_output_as_it_was(h5ad, sig, in_place):
    out = h5ad if in_place else h5ad.with_name("out.h5ad")
    before = h5ad.read_bytes()
    proc = child(sig, ["embed", h5ad, out])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert err.strip().splitlines()[-1] == f"biomjepa embed: stopped by {sig}; nothing was written to {out}."
    assert "Traceback" not in err
    assert sorted(p.name for p in h5ad.parent.iterdir()) == ["in.h5ad"]  # no temporary file, no lock file
    assert h5ad.read_bytes() == before


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_adapt_stopped_while_writing_embed_says_the_checkpoint_was_written(h5ad, sig):
    ck, out = h5ad.with_name("ck"), h5ad.with_name("out.h5ad")
    proc = child(sig, ["adapt", h5ad, "--out", ck, "--embed", out])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert err.strip().splitlines()[-1] == (
        f"biomjepa adapt: stopped by {sig}; the checkpoint was written to {ck} before it; {out} was not written "
        f"(`biomjepa embed {h5ad} {out} --checkpoint {ck}` writes it).")
    assert "Traceback" not in err
    assert sorted(p.name for p in h5ad.parent.iterdir()) == ["ck", "in.h5ad"]


def test_a_second_command_writing_the_same_file_is_refused_naming_the_first(h5ad, capsys, monkeypatch):
    import biomjepa as bj
    from biomjepa.cli.app import main

    first = child("wait", ["embed", h5ad, h5ad])
    try:
        assert "embedding\n" in iter(first.stdout.readline, "")  # it holds the file (lines before: its mapping)
        monkeypatch.setattr(bj.tl, "embed", lambda *a, **k: pytest.fail("embedded a file another command writes"))
        for argv in (["embed", h5ad, h5ad], ["adapt", h5ad, "--out", h5ad.with_name("ck"), "--embed", h5ad]):
            assert main(list(map(str, argv))) == 1
            out, err = capsys.readouterr()
            assert f"The output {h5ad} is in use by another process (pid {first.pid} " in err and "wrote" not in out
        first.stdin.write("go\n")
        first.stdin.flush()
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0 and f"to {h5ad}" in out, err
    assert "X_biomjepa" in ad.read_h5ad(h5ad).obsm
    assert sorted(p.name for p in h5ad.parent.iterdir()) == ["in.h5ad"]  # the lock file went with the command


def test_a_stop_no_command_said_more_about_is_one_line_not_a_traceback(capsys):
    from biomjepa.cli.errors import run_command

    def interrupted():
        raise KeyboardInterrupt

    assert run_command(interrupted, prog="biomjepa graph") == 130
    assert capsys.readouterr().err == "biomjepa graph: stopped by SIGINT.\n"
