"""One way in (issue 67): every ``bj.tl`` tool resolves its input once, before any work
(:func:`biomjepa.data.resolved.resolve`). A bad ``layer`` is refused before a model is loaded, a row read or a step
trained, and the AnnData, and a view of it, are left as they were (the view still a view)."""

from __future__ import annotations

import warnings

import pytest
from _inputs import assert_unchanged

import biomjepa as bj


def _genes(a, start: int, n: int = 5) -> list[str]:
    return [str(g) for g in a.var_names[start : start + n]]


TOOLS = {
    "embed": lambda a, ck, **kw: bj.tl.embed(a, checkpoint=ck, device="cpu", **kw),
    "max_token": lambda a, ck, **kw: bj.tl.max_token(a, checkpoint=ck, groupby="group", device="cpu", **kw),
    "ablate_programme": lambda a, ck, **kw: bj.tl.ablate_programme(a, _genes(a, 0), checkpoint=ck, n_cells=4,
                                                                   device="cpu", **kw),
    "programme_dependencies": lambda a, ck, **kw: bj.tl.programme_dependencies(
        a, {"p": _genes(a, 0), "q": _genes(a, 5)}, checkpoint=ck, groupby="group", matched={"p": "a", "q": "b"},
        device="cpu", **kw),
    "finetune": lambda a, ck, **kw: bj.tl.finetune(a, label_key="group", checkpoint=ck, epochs=1, device="cpu", **kw),
    "adapt": lambda a, ck, **kw: bj.tl.adapt(a, ck, steps=1, **kw),
}


def no_work(monkeypatch) -> None:
    """From now on, loading a model, reading a matrix, training or reading a training state fails the test."""
    from biomjepa import _pretrained
    from biomjepa.data import stream
    from biomjepa.tl import _perturb
    from biomjepa.train import adapt, target_errors

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the input was checked")

    monkeypatch.setattr(_pretrained, "load_model", forbidden)
    monkeypatch.setattr(stream, "count_matrix", forbidden)  # every reader takes its matrix from it
    monkeypatch.setattr(adapt, "adapt_encoder", forbidden)
    monkeypatch.setattr(target_errors, "programme_errors", forbidden)
    monkeypatch.setattr(_perturb, "_check_keys", forbidden)  # the first look perturbation_arithmetic takes


def _refused_twice(call, adata, exc, match) -> None:
    """``call`` refuses ``adata`` and a view of it with ``exc``, no warning said, both left as they were."""
    before = adata.copy()
    view = adata[5:45]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even the "made an AnnData of its own" warning
        for a in (adata, view):
            with pytest.raises(exc, match=match):
                call(a)
    assert view.is_view
    assert_unchanged(adata, before)
    assert_unchanged(view, before[5:45])


def test_every_tool_is_checked_here():
    assert {*TOOLS, "perturbation_arithmetic"} == set(bj.tl.__all__)  # the one without a layer: below


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_bad_layer_is_refused_before_any_work(tool, mapped, tiny_checkpoint, monkeypatch):
    no_work(monkeypatch)
    _refused_twice(lambda a: TOOLS[tool](a, tiny_checkpoint, layer="nope"), mapped, KeyError,
                   r"Layer 'nope' not found; available layers: \[\]\. Pass `layer=` one of them\.")


def test_perturbation_arithmetic_checks_its_input_before_any_work(mapped, monkeypatch):
    """It reads no counts (no ``layer``): a ``mod`` for an AnnData is the bad input it is given."""
    no_work(monkeypatch)
    mapped.obsm["X_rep"] = mapped.X[:, :4].toarray()
    mapped.obs["perturbation"] = "control"
    _refused_twice(lambda a: bj.tl.perturbation_arithmetic(a, use_rep="X_rep", mod="rna"), mapped, ValueError,
                   r"`mod=` is only meaningful for MuData input\.")
