"""Parameter text written once (:mod:`biomjepa._docs`): every public function's docstring is filled
and documents exactly the parameters of its signature."""

from __future__ import annotations

import importlib
import inspect
import pydoc
import re

import pytest

from biomjepa._docs import FRAGMENTS, doc_params, fill_doc

NAMESPACES = ("pp", "tl", "pl", "bench")
PLACEHOLDER_LINE = re.compile(r"^\s*\{\w+\}\s*$", re.MULTILINE)
SECTION = re.compile(r"^(\S[^\n]*)\n-{3,}\s*$", re.MULTILINE)


def _public_functions():
    for ns in NAMESPACES:
        mod = importlib.import_module(f"biomjepa.{ns}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not inspect.isclass(obj):
                yield pytest.param(obj, id=f"{ns}.{name}")


def documented_parameters(doc: str) -> list[str]:
    """Names of the numpydoc ``Parameters`` section; ``a, b`` lines count for both, ``*args`` as ``args``."""
    doc = inspect.cleandoc(doc)
    heads = list(SECTION.finditer(doc))
    for k, head in enumerate(heads):
        if head.group(1).strip() == "Parameters":
            end = heads[k + 1].start() if k + 1 < len(heads) else len(doc)
            body = doc[head.end() : end]
            break
    else:
        return []
    names = []
    for line in body.splitlines():
        if line.strip() and not line[0].isspace():
            entry = line.split(" : ")[0]
            names += [n.strip().lstrip("*") for n in entry.split(",") if n.strip()]
    return names


@pytest.mark.parametrize("func", _public_functions())
def test_docstring_filled_and_complete(func):
    doc = func.__doc__
    assert doc, f"{func.__qualname__} has no docstring"
    assert not PLACEHOLDER_LINE.search(doc), f"unfilled placeholder in {func.__qualname__}: {PLACEHOLDER_LINE.search(doc)[0]!r}"
    params = [p.name for p in inspect.signature(func).parameters.values() if p.name != "self"]
    documented = documented_parameters(doc)
    missing = [p for p in params if p not in documented]
    unknown = [p for p in documented if p not in params]
    assert not missing, f"{func.__qualname__}: parameters not documented: {missing}"
    assert not unknown, f"{func.__qualname__}: documented but not in the signature: {unknown}"
    assert len(documented) == len(set(documented)), f"{func.__qualname__}: a parameter is documented twice"


def test_every_fragment_is_one_entry_named_like_a_parameter():
    for name, text in FRAGMENTS.items():
        lines = text.splitlines()
        assert lines[0] and not lines[0][0].isspace(), name
        assert all(ln.startswith("    ") for ln in lines[1:]), f"fragment {name}: description must be indented"
        assert len(lines) >= 2, f"fragment {name}: a name line and a description"


def test_every_fragment_is_used():
    """A fragment nobody names is dead text; every one is filled into some public function."""
    used = set()
    for param in _public_functions():
        used |= set(re.findall(r"^\s*\{(\w+)\}\s*$", getattr(param.values[0], "__orig_doc__", ""), re.MULTILINE))
    assert set(FRAGMENTS) <= used, f"unused fragments: {sorted(set(FRAGMENTS) - used)}"


def test_fill_doc_indents_and_leaves_prose_braces():
    doc = '''Summary with {prose} braces.

    Parameters
    ----------
    {device}
    key_added
        Writes ``obs[f"{key_added}_gene"]`` and ``{programme: group}``.
    '''
    out = fill_doc(doc)
    assert "    device\n        ``\"auto\"``" in out
    assert "{prose}" in out and 'f"{key_added}_gene"' in out and "{programme: group}" in out
    assert documented_parameters(out) == ["device", "key_added"]


def test_unknown_placeholder_fails_at_decoration():
    def f(x):
        """Doc.

        Parameters
        ----------
        {no_such_fragment}
        """

    with pytest.raises(KeyError, match="no_such_fragment"):
        doc_params(f)


def test_help_shows_the_full_text():
    import biomjepa as bj

    text = pydoc.render_doc(bj.tl.embed, renderer=pydoc.plaintext)
    assert "Registry name, checkpoint directory or URL" in text
    assert "{checkpoint}" not in text
    assert bj.tl.embed.__orig_doc__.count("{checkpoint}") == 1
