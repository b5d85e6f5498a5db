"""One rule for ``key_added`` (issue 46, item 1): every ``pp``/``tl`` tool that takes it refuses a key that is not a
non-empty string (or ``uns["biomjepa"]``, which holds other tools' records) before any work, naming ``key_added``
and the fix, and leaves the AnnData as it was.

Each call below also gets an input that the tool would refuse later (genes not mapped, a missing column or
representation, too few cells), so only a check made first can name ``key_added``.
"""

from __future__ import annotations

import inspect

import pytest

import biomjepa as bj
from biomjepa import _pretrained

#: tool → a call of it (``a``: unmapped counts; ``ck``: a checkpoint; ``out``: a directory to leave alone)
CALLS = {
    "pp.map_vocab": lambda a, ck, out, **kw: bj.pp.map_vocab(a, gene_key="nope", **kw),
    "tl.embed": lambda a, ck, out, **kw: bj.tl.embed(a, checkpoint=ck, device="cpu", **kw),
    "tl.adapt": lambda a, ck, out, **kw: bj.tl.adapt(a, ck, steps=1, out_dir=out, **kw),
    "tl.max_token": lambda a, ck, out, **kw: bj.tl.max_token(a, checkpoint=ck, device="cpu", **kw),
    "tl.ablate_programme": lambda a, ck, out, **kw: bj.tl.ablate_programme(a, ["INS"], checkpoint=ck, device="cpu",
                                                                           **kw),
    "tl.programme_dependencies": lambda a, ck, out, **kw: bj.tl.programme_dependencies(
        a, {"p": ["INS"], "q": ["GCG"]}, checkpoint=ck, groupby="nope", matched={"p": "x", "q": "y"}, **kw),
    "tl.perturbation_arithmetic": lambda a, ck, out, **kw: bj.tl.perturbation_arithmetic(a, use_rep="X_nope", **kw),
    "tl.finetune": lambda a, ck, out, **kw: bj.tl.finetune(a, label_key="nope", checkpoint=ck, device="cpu", **kw),
}


def test_every_tool_with_key_added_is_checked_here():
    tools = {f"{mod}.{name}" for mod in ("pp", "tl") for name in getattr(bj, mod).__all__
             if "key_added" in inspect.signature(getattr(getattr(bj, mod), name)).parameters}
    assert tools == set(CALLS)


@pytest.fixture
def no_work(monkeypatch):
    """Loading a model or training fails the test: the key is checked before either."""
    import biomjepa.train.adapt

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before key_added was checked")

    monkeypatch.setattr(_pretrained, "load_model", forbidden)
    monkeypatch.setattr(biomjepa.train.adapt, "adapt_encoder", forbidden)


@pytest.mark.parametrize("tool", list(CALLS))
@pytest.mark.parametrize(("bad", "said"), [(5, "got 5"), ("", "got an empty string"), ("  ", "got an empty string"),
                                           ("a/b", "without '/'")])
def test_a_key_that_is_not_a_non_empty_string_is_refused_first(tool, bad, said, counts_adata, tiny_checkpoint,
                                                               tmp_path, no_work):
    a = counts_adata.copy()
    error = ValueError if isinstance(bad, str) else TypeError
    with pytest.raises(error, match=rf"key_added must be a non-empty string.*{said}.*Pass e\.g\. key_added="):
        CALLS[tool](a, tiny_checkpoint, tmp_path / "out", key_added=bad)
    assert not a.uns and not a.obsm and list(a.var.columns) == list(counts_adata.var.columns)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tool", [t for t in CALLS if t != "pp.map_vocab"])  # map_vocab's key names a .var column
def test_the_uns_entry_of_map_vocab_and_embed_is_not_a_key_added(tool, counts_adata, tiny_checkpoint, tmp_path,
                                                                 no_work):
    a = counts_adata.copy()
    with pytest.raises(ValueError, match=r"key_added='biomjepa' would replace uns\['biomjepa'\].*Pass another key"):
        CALLS[tool](a, tiny_checkpoint, tmp_path / "out", key_added="biomjepa")
    assert not a.uns and not a.obsm


@pytest.mark.parametrize("tool", [t for t in CALLS if t != "pp.map_vocab"])  # map_vocab writes a .var column
def test_a_key_holding_another_tools_results_is_refused_first(tool, counts_adata, tiny_checkpoint, tmp_path, no_work):
    """Issue 57: one owner per key, checked before any work, naming a free key; nothing changes."""
    a = counts_adata.copy()
    other = "bj.tl.perturbation_arithmetic" if tool == "tl.max_token" else "bj.tl.max_token"
    a.uns["k"] = {"params": {"tool": other}}
    with pytest.raises(ValueError, match=rf"key_added='k': bj\.{tool} would write uns\['k'\], which holds the results "
                                         rf"of {other}.*Pass another key, e\.g\. key_added='k_2'"):
        CALLS[tool](a, tiny_checkpoint, tmp_path / "out", key_added="k")
    assert list(a.uns) == ["k"] and a.uns["k"] == {"params": {"tool": other}} and not a.obsm
    assert not (tmp_path / "out").exists()
