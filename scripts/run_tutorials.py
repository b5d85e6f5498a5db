"""Execute the tutorials and store them **with their outputs**; redraw the documentation's figures.

Run from anywhere (paths are relative to the repository); the notebooks read ``../../shared/data``::

    python scripts/run_tutorials.py              # every tutorials/*.ipynb, then the figures in docs/figures/
    python scripts/run_tutorials.py --only 02    # one notebook (file name, stem or unique prefix)
    python scripts/run_tutorials.py --only demo  # only docs/figures/umap_pancreas.png (``biomjepa demo``)

Each notebook runs top to bottom in a fresh ``python3`` kernel with ``tutorials/`` as working
directory (``nbclient``). Figures are drawn by matplotlib's inline backend (headless; ``Agg`` would
draw nothing into the notebook) and re-encoded as PNG at most ``MAX_WIDTH`` px wide (with a
256-colour palette when still large); widget state, widget outputs and per-cell timing metadata are dropped and progress bars
keep their last state only. The notebook metadata records what produced the outputs::

    "biomjepa": {"checkpoint": "biomjepa-mini v0.2", "checkpoint_sha256": "...", "biomjepa_version": "..."}

``tests/test_tutorials.py`` compares ``checkpoint_sha256`` with the default checkpoint's registry
pin (``checkpoint_record``), so changing the default model makes the stored outputs stale until
this script is re-run.
Every file is written atomically (temporary file + ``os.replace``); a notebook that fails is left
as it was and the script exits non-zero after running the others.

Figures under ``docs/figures/`` (used by the docs and the README) carry the same record in PNG
text chunks: ``umap_pancreas.png`` is the PNG written by ``biomjepa demo``, and a notebook cell
tagged ``figure:NAME.png`` has its last image output copied to ``docs/figures/NAME.png``.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
FIGURES = ROOT / "docs" / "figures"
MAX_WIDTH = 900  # px; wider PNG outputs are downsampled
MAX_LOSSLESS_BYTES = 100_000  # larger PNGs are re-encoded with a 256-colour palette
FIGURE_TAG = "figure:"  # cell tag "figure:NAME.png" → docs/figures/NAME.png
INLINE = "module://matplotlib_inline.backend_inline"
WIDGET_MIMES = ("application/vnd.jupyter.widget-view+json", "application/vnd.jupyter.widget-state+json")
DROP_CELL_METADATA = ("execution", "ExecuteTime", "collapsed", "scrolled")


def checkpoint_record() -> dict[str, str]:
    """Name + version, registry sha256 and package version of the default checkpoint.

    The sha256 is the registry's pin of the checkpoint: ``checkpoint_sha256`` (every file, through
    its ``SHA256SUMS`` manifest) or, for an entry pinned by its weights only, ``sha256``.
    ``tests/test_tutorials.py`` compares the stored record with this function's answer.
    """
    import biomjepa as bj
    from biomjepa._pretrained import REGISTRY

    name = bj.settings.checkpoint
    if name not in REGISTRY:
        raise SystemExit(f"bj.settings.checkpoint = {name!r} is not a registry name; the stored outputs "
                         f"must come from a registered default ({', '.join(REGISTRY)}).")
    entry = REGISTRY[name]
    pin = entry.get("checkpoint_sha256") or entry["sha256"]
    return {"checkpoint": f"{name} v{entry.get('version', '?')}", "checkpoint_sha256": pin,
            "biomjepa_version": bj.__version__}


def shrink_png(data: bytes, max_width: int = MAX_WIDTH, text: dict[str, str] | None = None) -> bytes:
    """PNG bytes → PNG at most ``max_width`` px wide, flattened on white, optimized.

    Images still larger than ``MAX_LOSSLESS_BYTES`` get a 256-colour palette (dense scatter plots).
    ``text`` is written as PNG text chunks.
    """
    from PIL import Image, PngImagePlugin

    im = Image.open(io.BytesIO(data))
    im.load()
    if im.mode in ("RGBA", "LA", "P"):
        im = im.convert("RGBA")
        flat = Image.new("RGB", im.size, "white")
        flat.paste(im, mask=im.getchannel("A"))
        im = flat
    im = im.convert("RGB")
    if im.width > max_width:
        im = im.resize((max_width, round(im.height * max_width / im.width)), Image.Resampling.LANCZOS)
    info = PngImagePlugin.PngInfo()
    for key, value in (text or {}).items():
        info.add_text(key, value)
    png = _encode(im, info)
    if len(png) > MAX_LOSSLESS_BYTES:  # a palette bands colour bars a little, so only when it pays
        png = _encode(im.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE), info)
    return png


def _encode(im, info) -> bytes:
    out = io.BytesIO()
    im.save(out, format="PNG", optimize=True, pnginfo=info)
    return out.getvalue()


def _collapse_carriage_returns(text: str) -> str:
    """Keep what a terminal would show: the last ``\\r``-separated state of every line (progress bars)."""
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))


def clean_output(output) -> bool:
    """Shrink images, drop widgets, collapse progress bars in place; ``False`` if nothing is left."""
    if output.output_type == "stream":
        output.text = _collapse_carriage_returns(output.text)
        return bool(output.text.strip())
    data = output.get("data")
    if data is None:
        return True
    for mime in WIDGET_MIMES:
        data.pop(mime, None)
    if "image/png" in data:
        png = shrink_png(base64.b64decode(data["image/png"]))
        data["image/png"] = base64.b64encode(png).decode("ascii")
        output.get("metadata", {}).pop("image/png", None)  # width/height of the original
    return bool(data)


def clean(nb) -> None:
    """Strip what does not belong in a stored notebook (widget state, timings) and shrink outputs."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        for key in DROP_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if clean_output(o)]


def execute(path: Path, timeout: int):
    """Run the notebook at ``path`` top to bottom (``tutorials/`` as working directory); return it."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=timeout, record_timing=False,
                            resources={"metadata": {"path": str(TUTORIALS)}})
    client.execute()  # raises CellExecutionError (the cell and its traceback) on any error
    return nb


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path`` (same mode)."""
    umask = os.umask(0)
    os.umask(umask)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~umask
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def png_text(record: dict[str, str], source: str) -> dict[str, str]:
    return {"biomjepa:source": source, **{f"biomjepa:{k}": v for k, v in record.items()}}


def export_figures(nb, name: str, record: dict[str, str]) -> list[Path]:
    """Copy the last image of every cell tagged ``figure:NAME.png`` to ``docs/figures/NAME.png``."""
    written = []
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            if not tag.startswith(FIGURE_TAG):
                continue
            images = [o.data["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
            if not images:
                raise RuntimeError(f"{name}: the cell tagged {tag!r} drew no image")
            target = FIGURES / tag[len(FIGURE_TAG):]
            png = shrink_png(base64.b64decode(images[-1]), text=png_text(record, f"tutorials/{name}"))
            write_atomic(target, png)
            written.append(target)
    return written


def run_notebook(path: Path, record: dict[str, str], timeout: int) -> None:
    import nbformat

    t0 = time.perf_counter()
    nb = execute(path, timeout)
    clean(nb)
    nb.metadata["biomjepa"] = dict(record)
    nbformat.validate(nb)
    figures = export_figures(nb, path.name, record)
    write_atomic(path, (nbformat.writes(nb) + "\n").encode())
    extra = "".join(f", {f.relative_to(ROOT)}" for f in figures)
    print(f"{path.name}: {time.perf_counter() - t0:.0f} s, {path.stat().st_size / 1e3:.0f} kB{extra}", flush=True)


def run_demo(record: dict[str, str]) -> None:
    """``biomjepa demo`` → ``docs/figures/umap_pancreas.png`` (downsampled, record in its text chunks)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MPLBACKEND": "Agg"}  # a plain process: the inline backend needs a kernel
        subprocess.run(["biomjepa", "demo", "--out", tmp], check=True, env=env)
        png = shrink_png((Path(tmp) / "umap_pancreas.png").read_bytes(), text=png_text(record, "biomjepa demo"))
    target = FIGURES / "umap_pancreas.png"
    write_atomic(target, png)
    print(f"{target.relative_to(ROOT)}: {time.perf_counter() - t0:.0f} s, {len(png) / 1e3:.0f} kB", flush=True)


def select(only: str | None) -> tuple[list[Path], bool]:
    """Notebooks to run and whether to run the demo, for ``--only``."""
    notebooks = sorted(TUTORIALS.glob("*.ipynb"))
    if only is None:
        return notebooks, True
    if only == "demo":
        return [], True
    hits = [p for p in notebooks if p.name == only or p.stem == only] or [
        p for p in notebooks if p.name.startswith(only)]
    if len(hits) != 1:
        names = ", ".join(p.stem for p in notebooks)
        raise SystemExit(f"--only {only!r} matches {len(hits)} notebooks; give one of: {names}, demo")
    return hits, False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", metavar="NAME", help="one notebook (name, stem or unique prefix) or 'demo'")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    notebooks, demo = select(args.only)
    os.environ["MPLBACKEND"] = INLINE  # inherited by the kernels and `biomjepa demo`
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # without ipywidgets, tqdm.auto warns in every notebook; its progress bars fall back to text
    os.environ.setdefault("PYTHONWARNINGS", "ignore:IProgress not found")
    record = checkpoint_record()
    print(f"default checkpoint: {record['checkpoint']} (sha256 {record['checkpoint_sha256'][:12]}…)", flush=True)
    failed = []
    for path in notebooks:
        try:
            run_notebook(path, record, args.timeout)
        except Exception as err:  # report, keep the stored notebook, go on with the others
            failed.append(path.name)
            print(f"{path.name}: FAILED, left unchanged\n{err}", file=sys.stderr, flush=True)
    if demo:
        run_demo(record)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
