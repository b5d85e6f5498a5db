"""``biomjepa demo``, the README's main job: embed the bundled pancreas cells, cluster them with Leiden, draw UMAPs."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import warnings
from pathlib import Path

from .outputs import STOP_CODES
from .types import (
    BATCH_SIZE_HELP,
    CHECKPOINT_HELP,
    DEVICE_HELP,
    EPILOG,
    checkpoint_ref,
    device_name,
    output_dir,
    positive_int,
)

logger = logging.getLogger(__name__)
#: the files the demo writes into ``--out``
H5AD, PNG = "pancreas_embedded.h5ad", "umap_pancreas.png"


def add_demo_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``demo`` subcommand on an ``argparse`` subparsers object; its ``func`` is :func:`run_demo_command`."""
    d = subparsers.add_parser(
        "demo", help="embed the bundled pancreas demo, cluster it (Leiden) and write a UMAP PNG",
        epilog=EPILOG + STOP_CODES,
        description="Embed the 1,074 bundled Baron pancreas cells (bj.datasets.pancreas), run "
        "scanpy neighbors + UMAP + Leiden on obsm['X_biomjepa'], print the clusters' adjusted Rand index "
        "against the cell types and write OUT/pancreas_embedded.h5ad and OUT/umap_pancreas.png "
        "(coloured by cell type and by Leiden cluster), with the bundled pretrained `biomjepa-mini` checkpoint unless "
        "--checkpoint is given.")
    d.add_argument("--out", default="demo_out", metavar="DIR", type=output_dir, help="output directory (default: demo_out)")
    d.add_argument("--checkpoint", default=None, type=checkpoint_ref, help=CHECKPOINT_HELP)
    d.add_argument("--batch-size", type=positive_int, default=None, help=BATCH_SIZE_HELP)
    d.add_argument("--device", default="auto", type=device_name, help=DEVICE_HELP)
    d.set_defaults(func=run_demo_command)
    return d


def run_demo_command(args: argparse.Namespace) -> None:
    """Run ``biomjepa demo``: :func:`run_demo`, then print what was written, how long it took and the peak memory. A
    stop signal acts between steps and blocks, never inside a write, and ends it with one line saying what it left
    (exit code 143, 130 for SIGINT; :func:`~.outputs.writing`)."""
    import resource

    import biomjepa as bj

    from .outputs import file_identity, writing

    t0 = time.perf_counter()
    where = Path(args.out)
    _say_if_replaced(where)
    before = {name: file_identity(where / name) for name in (H5AD, PNG)}
    existed = where.exists()

    def left(_) -> str:  # what a stop left: both files new, or neither (the PNG is renamed after the .h5ad)
        new = [str(where / name) for name in (H5AD, PNG) if file_identity(where / name) != before[name]]
        if new:
            return f"{' and '.join(new)} {'was' if len(new) == 1 else 'were'} written in full before it."
        if not existed:
            with contextlib.suppress(OSError):
                where.rmdir()  # the folder this command made, empty
        return f"nothing was written to {where}" + (" (an earlier demo's files are as they were)." if any(
            before.values()) else ".")

    with writing(None, left, at_safe_points=True):  # a stop acts between steps and blocks, never inside a write
        out = run_demo(args.out, checkpoint=args.checkpoint, batch_size=args.batch_size, device=args.device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"biomjepa {bj.__version__}: {out['message']}")
    print(f"wrote {out['h5ad']} and {out['png']} in {time.perf_counter() - t0:.1f} s (peak RSS {peak:.0f} MiB)")


def run_demo(out: str | Path, *, checkpoint=None, batch_size=None, device="auto") -> dict:
    """Embed :func:`biomjepa.datasets.pancreas`, run scanpy neighbors/UMAP/Leiden, write .h5ad and PNG.

    The PNG has two panels: the UMAP coloured by cell type and by Leiden cluster; the returned
    message gives the adjusted Rand index of the clusters against the cell types. A progress bar
    names the step under way (``bj.settings.progress``), above the embedding's own bar. Each file replaces an
    earlier demo's only once written in full, the PNG only after the .h5ad; scanpy's and matplotlib's deprecation
    notices about the demo's own calls are not shown (they are for the package's maintainers, not for its user).
    """
    import scanpy as sc

    import biomjepa as bj

    from .._files import atomic_path
    from .._progress import progress_bar
    from .._stops import stop_point
    from .embed import write_h5ad_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with progress_bar(total=4, desc="demo", unit="step") as steps:
        steps.set_postfix_str("embedding")
        adata = bj.datasets.pancreas()
        bj.pp.map_vocab(adata)
        t0 = time.perf_counter()
        bj.tl.embed(adata, checkpoint=checkpoint, batch_size=batch_size, device=device)
        seconds = time.perf_counter() - t0
        steps.update()
        stop_point()  # a stop a command recorded acts between the steps (biomjepa._stops)
        steps.set_postfix_str("neighbours, UMAP, Leiden")
        with _their_deprecations_quiet():
            sc.pp.neighbors(adata, use_rep="X_biomjepa")
            sc.tl.umap(adata, random_state=0)
            ari = _leiden(adata)
        steps.update()
        stop_point()
        steps.set_postfix_str("figure")
        with atomic_path(out / PNG, suffix=".png") as png:  # renamed over an earlier PNG only once the .h5ad is whole
            _figure(adata, ari, png)
            steps.update()
            steps.set_postfix_str("writing .h5ad")
            write_h5ad_atomic(adata, out / H5AD, fix="Free space there, or give an --out on a disk with room.")
        steps.update()
    params = adata.uns["biomjepa"]["params"]
    message = (
        f"embedded {adata.n_obs} cells with {params.get('checkpoint')} in {seconds:.1f} s "
        f"on {params.get('device')} ({adata.obsm['X_biomjepa'].shape[1]}-d); "
        f"{adata.obs['leiden'].nunique()} Leiden clusters, ARI vs cell type {ari:.2f}"
    )
    return {"message": message, "h5ad": out / H5AD, "png": out / PNG}


def _say_if_replaced(out: Path) -> None:
    """An earlier demo's files in ``out`` are replaced: say so before the work."""
    there = [str(out / name) for name in (H5AD, PNG) if (out / name).exists()]
    if there:
        print(f"biomjepa demo: {' and '.join(there)} exist{'s' if len(there) == 1 else ''} and will be replaced (each "
              "once its new version is written in full). Give another --out to keep them.", file=sys.stderr)


@contextlib.contextmanager
def _their_deprecations_quiet():
    """Deprecation notices (``DeprecationWarning``, ``PendingDeprecationWarning``, ``FutureWarning``) that scanpy and
    matplotlib raise about the demo's own calls: for the package's maintainers, not shown to the demo's user."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=category)
        yield


def _figure(adata, ari: float, path: Path) -> None:
    """UMAP coloured by cell type and by Leiden cluster, two panels, written to ``path`` (whole or not at all)."""
    with _their_deprecations_quiet():
        _draw(adata, ari, path)


def _draw(adata, ari: float, path: Path) -> None:
    import scanpy as sc
    from matplotlib.figure import Figure  # no pyplot: the caller's matplotlib backend is left alone

    from .._files import atomic_path

    fig = Figure(figsize=(13, 5), layout="constrained")
    ax_type, ax_leiden = fig.subplots(1, 2)
    sc.pl.umap(adata, color="cell_type", ax=ax_type, show=False, title="BioM-JEPA embedding: cell type")
    sc.pl.umap(
        adata,
        color="leiden",
        ax=ax_leiden,
        show=False,
        legend_loc="on data",
        title=f"Leiden clusters (ARI vs cell type {ari:.2f})",
    )
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")


def _leiden(adata) -> float:
    """Leiden clusters on the BioM-JEPA neighbour graph into ``obs["leiden"]``; ARI against ``obs["cell_type"]``."""
    import scanpy as sc
    from sklearn.metrics import adjusted_rand_score

    # scanpy's recommended settings (the igraph implementation; its future default)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False, random_state=0)
    return float(adjusted_rand_score(adata.obs["cell_type"], adata.obs["leiden"]))
