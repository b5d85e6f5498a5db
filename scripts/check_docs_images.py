"""Check that the built HTML docs show the tutorials' figures and that every image they reference exists.

    python scripts/check_docs_images.py docs/_build/html

For every ``tutorials/NAME.ipynb`` the page ``tutorials/NAME.html`` must exist and hold at least one
``<img>`` and at least as many as the notebook has stored image outputs. On every page, each local
``<img src>`` must point to a file of the build. Exits 1 and lists the problems otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml", "image/gif")


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "img":
            self.srcs.append(dict(attrs).get("src") or "")


def page_images(page: Path) -> list[str]:
    """``src`` of every ``<img>`` of an HTML page."""
    parser = _Images()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser.srcs


def notebook_images(notebook: Path) -> int:
    """Number of image outputs stored in a notebook."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    return sum(any(m in o.get("data", {}) for m in IMAGE_MIMES) for o in outputs)


def missing_files(page: Path, srcs: list[str]) -> list[str]:
    """Local image sources of ``page`` that do not exist in the build."""
    missing = []
    for src in srcs:
        parts = urlsplit(src)
        if parts.scheme or src.startswith("//"):
            continue  # data: URIs and remote images are not files of the build
        if not (page.parent / unquote(parts.path)).is_file():
            missing.append(src)
    return missing


def check(html: Path, tutorials: Path) -> list[str]:
    problems = []
    for notebook in sorted(tutorials.glob("*.ipynb")):
        page = html / "tutorials" / f"{notebook.stem}.html"
        if not page.is_file():
            problems.append(f"{page}: no page for {notebook.name}")
            continue
        n_img, n_out = len(page_images(page)), notebook_images(notebook)
        print(f"{page.relative_to(html)}: {n_img} <img>, {n_out} image outputs in {notebook.name}")
        if n_img == 0 or n_img < n_out:
            problems.append(f"{page}: {n_img} <img> for {n_out} image outputs of {notebook.name} "
                            "(stored without outputs? run `python scripts/run_tutorials.py`)")
    for page in sorted(html.rglob("*.html")):
        problems += [f"{page}: <img src={src!r}> does not exist" for src in missing_files(page, page_images(page))]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", type=Path, help="the HTML build directory, e.g. docs/_build/html")
    parser.add_argument("--tutorials", type=Path, default=ROOT / "tutorials", help="folder of the notebooks")
    args = parser.parse_args(argv)
    if not args.html.is_dir():
        print(f"{args.html} is not a directory (build the docs first)", file=sys.stderr)
        return 1
    problems = check(args.html, args.tutorials)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
