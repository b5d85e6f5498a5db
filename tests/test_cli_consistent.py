"""The command line consistent with itself (issue 57 item 5): ``demo --out`` says what it replaces and replaces it
whole, without other packages' deprecation notices; ``adapt --embed`` says what it replaces as ``embed`` does;
``-v``/``--no-progress`` after any command, as atlas mode takes them; a corpus entry declared as reads at the depth
of droplet UMIs is warned about with its numbers."""

from __future__ import annotations

import warnings
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest
from scipy import sparse

import biomjepa as bj
from biomjepa.data.vocab import Vocab

pytestmark = pytest.mark.filterwarnings("ignore:The input measures only:UserWarning")

def _h5ad(path: Path, n: int = 12, depth: float = 1.0) -> Path:
    rng = np.random.default_rng(0)
    a = ad.AnnData(sparse.csr_matrix(rng.poisson(depth, size=(n, 40)).astype(np.float32) + np.eye(n, 40)),
                   var=pd.DataFrame(index=list(Vocab.default().symbols[:40])))
    a.obs_names = [f"c{i}" for i in range(n)]
    a.write_h5ad(path)
    return path


def test_demo_says_it_replaces_an_earlier_demos_files(tmp_path, capsys, monkeypatch):
    from biomjepa.cli import demo, main

    (tmp_path / demo.H5AD).write_bytes(b"an earlier demo")
    ran = []
    monkeypatch.setattr(demo, "run_demo", lambda out, **kw: ran.append(out) or {"message": "m", "h5ad": "h", "png": "p"})
    assert main(["demo", "--out", str(tmp_path)]) == 0 and ran
    err = capsys.readouterr().err
    assert f"biomjepa demo: {tmp_path / demo.H5AD} exists and will be replaced" in err and "Give another --out" in err
    assert main(["demo", "--out", str(tmp_path / "new")]) == 0
    assert "will be replaced" not in capsys.readouterr().err


def _tiny_umap() -> ad.AnnData:
    rng = np.random.default_rng(0)
    a = ad.AnnData(np.zeros((30, 3), dtype=np.float32))
    a.obsm["X_umap"] = rng.normal(size=(30, 2))
    a.obs["cell_type"] = pd.Categorical(rng.choice(list("abc"), 30))
    a.obs["leiden"] = pd.Categorical(rng.choice(list("01"), 30))
    return a


def test_the_demo_figure_replaces_its_png_whole_without_their_deprecation_notices(tmp_path, monkeypatch):
    import scanpy as sc
    from matplotlib.figure import Figure

    from biomjepa.cli.demo import _figure

    png = tmp_path / "umap.png"
    png.write_bytes(b"an earlier figure")

    def dies_half_way(self, fname, **kw):
        Path(fname).write_bytes(b"half a png")
        raise OSError("killed during the write")

    with monkeypatch.context() as m:
        m.setattr(Figure, "savefig", dies_half_way)
        with pytest.raises(OSError, match="killed"):
            _figure(_tiny_umap(), 0.5, png)
    assert png.read_bytes() == b"an earlier figure" and [p.name for p in tmp_path.iterdir()] == ["umap.png"]
    umap = sc.pl.umap

    def deprecated(*args, **kw):  # what matplotlib and scanpy raise about the demo's calls
        warnings.warn("set_bad will be deprecated", PendingDeprecationWarning, stacklevel=2)
        warnings.warn("an argument is deprecated", DeprecationWarning, stacklevel=2)
        return umap(*args, **kw)

    monkeypatch.setattr(sc.pl, "umap", deprecated)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _figure(_tiny_umap(), 0.5, png)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_the_demo_h5ad_replaces_an_earlier_one_whole(tmp_path, monkeypatch):
    import scanpy as sc

    from biomjepa.cli import demo

    def fake_embed(adata, **kw):
        adata.obsm["X_biomjepa"] = np.zeros((adata.n_obs, 4), dtype=np.float32)
        adata.uns["biomjepa"] = {"params": {"checkpoint": "c", "device": "cpu"}}

    def clusters(adata):
        adata.obs["leiden"] = pd.Categorical(["0"] * adata.n_obs)
        return 1.0

    a = ad.read_h5ad(_h5ad(tmp_path / "in.h5ad"))
    monkeypatch.setattr(bj.datasets, "pancreas", lambda: a)
    monkeypatch.setattr(bj.tl, "embed", fake_embed)
    monkeypatch.setattr(sc.pp, "neighbors", lambda *a, **k: None)
    monkeypatch.setattr(sc.tl, "umap", lambda *a, **k: None)
    monkeypatch.setattr(demo, "_leiden", clusters)
    monkeypatch.setattr(demo, "_figure", lambda adata, ari, path: Path(path).write_bytes(b"png"))
    out = tmp_path / "demo"
    out.mkdir()
    (out / demo.H5AD).write_bytes(b"an earlier demo")

    def dies_half_way(self, filename, **kw):
        Path(filename).write_bytes(b"half an h5ad")
        raise OSError("killed during the write")

    monkeypatch.setattr(ad.AnnData, "write_h5ad", dies_half_way)
    with pytest.raises(OSError, match="killed"):
        demo.run_demo(out)
    assert (out / demo.H5AD).read_bytes() == b"an earlier demo"
    assert sorted(p.name for p in out.iterdir()) == [demo.H5AD]  # no temporary file, and the PNG (renamed only
    # after the .h5ad is whole, issue 68) not written


def test_adapt_embed_says_it_replaces_an_existing_file_as_embed_does(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    from biomjepa.cli import main

    src, existing = _h5ad(tmp_path / "in.h5ad"), _h5ad(tmp_path / "existing.h5ad")

    def refused(*a, **k):
        raise ValueError("refused for the test")

    monkeypatch.setattr(bj.tl, "adapt", refused)
    assert main(["adapt", str(src), "--out", str(tmp_path / "ck"), "--embed", str(existing),
                 "--checkpoint", tiny_checkpoint]) == 1
    err = capsys.readouterr().err
    assert f"biomjepa adapt: {existing} exists and will be replaced by {src}'s cells with their embedding." in err
    assert "--store" not in err  # embed's pointer at atlas mode is embed's own
    assert main(["adapt", str(src), "--out", str(tmp_path / "ck"), "--embed", str(src), "--checkpoint",
                 tiny_checkpoint]) == 1
    assert "will be replaced" not in capsys.readouterr().err  # in place: asked for, as in `biomjepa embed IN IN`


@pytest.mark.parametrize("after", [["--no-progress"], ["-v"], ["--verbose", "--no-progress"]])
def test_global_options_after_the_command_as_atlas_mode_takes_them(tmp_path, after):
    from biomjepa.cli.app import build_parser
    from biomjepa.cli.atlas import atlas_argv
    from biomjepa.cli.atlas import build_parser as atlas_parser

    src = str(_h5ad(tmp_path / "in.h5ad"))
    file_mode = build_parser().parse_args(["embed", src, str(tmp_path / "out.h5ad"), *after])
    atlas_mode = atlas_parser().parse_args(atlas_argv(["embed", src, "--store", str(tmp_path / "s.zarr"), *after]))
    for args in (file_mode, atlas_mode):
        assert args.no_progress is ("--no-progress" in after) and args.verbose is (after != ["--no-progress"])
    before = build_parser().parse_args([*after, "embed", src, str(tmp_path / "out.h5ad")])
    assert (before.verbose, before.no_progress) == (file_mode.verbose, file_mode.no_progress)
    plain = build_parser().parse_args(["--no-progress", "graph", src, "--out", str(tmp_path / "g"), "-v"])
    assert plain.no_progress and plain.verbose  # every command, either side


def test_a_corpus_entry_of_umi_depth_declared_as_reads_is_warned_with_its_numbers(tmp_path):
    from biomjepa.data.shards import prepare_corpus

    src = _h5ad(tmp_path / "umis.h5ad", n=20, depth=40.0)  # 40 genes × ~40: about 1,600 counts a cell
    with pytest.warns(UserWarning, match=r"umis\.h5ad:X: declared as read counts \(`counts: reads` in its corpus "
                                         r"entry\), but the median library size of its first 20 cells is 1,\d{3} "
                                         r"\(under 50,000\).*remove `counts: reads` from the entry"):
        prepare_corpus([{"path": str(src), "counts": "reads"}], tmp_path / "cache")
