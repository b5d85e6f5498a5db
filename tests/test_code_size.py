"""Sizes a newcomer can read (STYLE.md, issue 23): no file in ``src/`` over 400 lines, no function over
60 code lines (lines holding code: not blank, not comments, not the docstring)."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "biomjepa"
MAX_FILE_LINES = 400
MAX_FUNCTION_CODE_LINES = 60


def token_lines(source: str) -> set[int]:
    """Line numbers that hold a code token (not a comment, not only whitespace)."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def code_lines(node: ast.AST, lines: set[int]) -> int:
    """Lines of ``node`` in ``lines`` (:func:`token_lines`), its docstring excluded."""
    span = set(range(node.lineno, node.end_lineno + 1))
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        span -= set(range(body[0].lineno, body[0].end_lineno + 1))
    return len(span & lines)


def sizes():
    files, functions = {}, {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(SRC.parent))
        files[rel] = len(text.splitlines())
        lines = token_lines(text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{rel}:{node.lineno} {node.name}"] = code_lines(node, lines)
    return files, functions


def test_code_lines_counts_code_not_docstrings_or_comments():
    src = 'def f(x):\n    """Doc.\n\n    More."""\n    # a comment\n\n    y = (x +\n         1)\n    return y\n'
    node = ast.parse(src).body[0]
    assert code_lines(node, token_lines(src)) == 4  # def, y = (x +, 1), return


def test_no_file_over_400_lines():
    files, _ = sizes()
    long = {f: n for f, n in files.items() if n > MAX_FILE_LINES}
    assert not long, f"files over {MAX_FILE_LINES} lines (split them): {long}"


def test_no_function_over_60_code_lines():
    _, functions = sizes()
    long = {f: n for f, n in functions.items() if n > MAX_FUNCTION_CODE_LINES}
    assert not long, f"functions over {MAX_FUNCTION_CODE_LINES} code lines (split them): {long}"
