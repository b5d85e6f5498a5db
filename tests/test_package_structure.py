"""The scanpy API contract for every public ``pp``/``tl``/``pl`` function (as scanpy's own test)."""

from __future__ import annotations

import inspect

import pytest

import biomjepa as bj

FUNCS = [(mod, name, getattr(getattr(bj, mod), name)) for mod in ("pp", "tl", "pl") for name in getattr(bj, mod).__all__]


@pytest.mark.parametrize(("mod", "name", "func"), FUNCS, ids=[f"{m}.{n}" for m, n, _ in FUNCS])
def test_signature_contract(mod, name, func):
    params = list(inspect.signature(func).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(positional) <= 3, f"{mod}.{name} takes more than 3 positional parameters"
    assert params[0].name in ("adata", "data"), f"{mod}.{name} must take adata first"
    names = {p.name: p for p in params}
    if mod in ("pp", "tl"):
        for key in ("copy", "key_added"):
            assert key in names, f"{mod}.{name} lacks `{key}`"
            assert names[key].kind is inspect.Parameter.KEYWORD_ONLY, f"{mod}.{name}: `{key}` must be keyword-only"
        assert "AnnData | None" in str(inspect.signature(func).return_annotation)
    else:
        assert "ax" in names and "show" in names, f"{mod}.{name} must take ax= and show="


@pytest.mark.parametrize(("mod", "name", "func"), FUNCS, ids=[f"{m}.{n}" for m, n, _ in FUNCS])
def test_numpy_docstring(mod, name, func):
    doc = inspect.getdoc(func) or ""
    assert "Parameters\n----------" in doc, f"{mod}.{name} has no numpy-style Parameters section"
    assert "Returns\n-------" in doc, f"{mod}.{name} has no Returns section"
    documented = doc.split("Parameters\n----------")[1]
    for p in inspect.signature(func).parameters:
        assert p in documented, f"{mod}.{name}: parameter `{p}` is not documented"


TL = [(name, func) for mod, name, func in FUNCS if mod == "tl"]


@pytest.mark.parametrize(("name", "func"), TL, ids=[f"tl.{n}" for n, _ in TL])
def test_tl_reads_a_mudata_modality(name, func):
    """Every tool takes a MuData and works on its modality ``mod`` (default ``"rna"``), as muon's tools do."""
    param = inspect.signature(func).parameters.get("mod")
    assert param is not None, f"tl.{name} lacks `mod`"
    assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is None
