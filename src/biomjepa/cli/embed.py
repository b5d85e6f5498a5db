"""``biomjepa embed INPUT OUTPUT``: map the genes of one .h5ad, embed every cell, write INPUT + obsm.

``biomjepa embed INPUT... --store OUT.zarr`` (many files into a zarr store) is :mod:`biomjepa.cli.atlas`.
"""

from __future__ import annotations

import argparse
import os

from .outputs import STOP_CODES
from .types import (
    BATCH_SIZE_HELP,
    CHECKPOINT_HELP,
    DEVICE_HELP,
    EPILOG,
    GENE_FLAGS,
    READ_FLAGS,
    checkpoint_ref,
    device_name,
    h5ad_file,
    output_file,
    positive_int,
)


def add_embed_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``embed`` subcommand on an ``argparse`` subparsers object; its ``func`` is :func:`run_embed`."""
    e = subparsers.add_parser(
        "embed", help="map genes and embed an .h5ad of raw counts", epilog=EPILOG + STOP_CODES,
        description="Map the genes of INPUT onto the vocabulary (bj.pp.map_vocab), embed every cell "
        "(bj.tl.embed) and write INPUT plus var['biomjepa_token'], uns['biomjepa'] and "
        "obsm['X_biomjepa'] to OUTPUT. INPUT must hold raw integer counts (in X or --layer), or "
        "log1p(normalize_total) values with --input lognorm.")
    e.add_argument("input", type=h5ad_file, help="input .h5ad with raw counts")
    e.add_argument("output", type=output_file,
                   help="output .h5ad (input + obsm['X_biomjepa']); replaced only once fully written, so it may "
                   "be INPUT itself")
    e.add_argument("--checkpoint", default=None, type=checkpoint_ref, help=CHECKPOINT_HELP)
    e.add_argument("--layer", default=None, help="layer holding raw counts (default: X)")
    e.add_argument("--use-raw", action="store_true",
                   help="read the counts from adata.raw (scanpy keeps them there; not with --layer)")
    e.add_argument("--input", dest="input_kind", default="counts", choices=["counts", "reads", "lognorm"],
                   help="counts: raw integer counts (droplet UMIs); reads: raw plate-based read counts (Smart-seq, C1, STRT), read "
                   "as molecule equivalents; lognorm: log1p(normalize_total) values of every gene, checked "
                   "and read as the counts they came from (default: counts)")
    e.add_argument("--library-size-key", default=None, metavar="OBS_COLUMN",
                   help="with --input lognorm: obs column of total counts per cell (default: estimated, with a warning)")
    e.add_argument("--gene-key", default=None, help="var column with gene symbols / Ensembl / Entrez ids (default: var_names)")
    e.add_argument("--id-type", default="auto", choices=["auto", "entrez"],
                   help="auto: all-digit gene names are ambiguous and left unmapped; entrez: they are Entrez gene ids "
                   "(default: auto)")
    e.add_argument("--species", default="human", choices=["human", "mouse"],
                   help="species of the gene identifiers; mouse maps through 1:1 orthologs (default: human)")
    e.add_argument("--batch-size", type=positive_int, default=None, help=BATCH_SIZE_HELP)
    e.add_argument("--device", default="auto", type=device_name, help=DEVICE_HELP)
    e.add_argument("--precision", default=None, choices=["fp32", "bf16", "auto"],
                   help="what the encoder multiplies in: fp32, bf16 (~1.5x faster embedding on CPUs with AMX; per-cell "
                        "cosine >= 0.994 to fp32) or auto (bf16 on CUDA and on CPUs with bf16 units) (default: "
                        "bj.settings.precision, fp32)")
    e.add_argument("--store", metavar="OUT.zarr", default=None,
                   help="atlas mode: `biomjepa embed INPUT... --store OUT.zarr` embeds many .h5ad files (or globs) into "
                   "a zarr store, resumably and on many processes; `biomjepa embed IN --store OUT.zarr --help` lists its options")
    e.set_defaults(func=run_embed, flags=EMBED_FLAGS, parser=e)
    return e


#: the library's argument names in messages -> this command's options
EMBED_FLAGS = {"or layer=, not both": "or --layer, not both", "input='lognorm'": "--input lognorm", "library_size_key= ": "--library-size-key ",
               "library_size_key=": "--library-size-key ", "library_size_key": "--library-size-key",
               "Pass use_raw=False": "Drop --use-raw", "pass use_raw=False": "drop --use-raw",
               ", after mapping its genes with `bj.pp.map_vocab(adata, use_raw=True)`": "",
               "`bj.pp.map_vocab(adata, use_raw=True)`": "--use-raw", "use_raw=True": "--use-raw",
               "`layer=`": "--layer", "layer=": "--layer ", **READ_FLAGS, **GENE_FLAGS}


def run_embed(args: argparse.Namespace) -> None:
    """Run ``biomjepa embed INPUT OUTPUT``: ``bj.pp.map_vocab``, ``bj.tl.embed``, then write OUTPUT atomically; OUTPUT
    is locked throughout (a second command writing it is refused), a stop signal acts between blocks of work and
    says what it left (:func:`~.outputs.writing`). Options that cannot go together are a usage error first."""
    from .outputs import writing

    check_read_flags(args)
    _say_if_output_is_replaced(args.input, args.output)
    with writing(args.output, lambda written: f"{args.output} was written in full before it." if written
                 else f"nothing was written to {args.output}.", at_safe_points=True):
        _embed_file(args)


def check_read_flags(args: argparse.Namespace) -> None:
    """``--layer`` with ``--use-raw``, ``--library-size-key`` without ``--input lognorm``: a usage error (exit code 2)
    before any input is read (:func:`biomjepa.embed.inputs.check_read_args`), in the command's options."""
    from ..embed.inputs import check_read_args
    from .errors import check_usage

    check_usage(args.parser, lambda: check_read_args(layer=args.layer, use_raw=args.use_raw, input=args.input_kind,
                                                     library_size_key=args.library_size_key),
                flags=args.flags)


def _embed_file(args: argparse.Namespace) -> None:
    import anndata as ad

    import biomjepa as bj

    adata = ad.read_h5ad(args.input)
    bj.pp.map_vocab(adata, gene_key=args.gene_key, layer=args.layer, use_raw=args.use_raw, species=args.species,
                    id_type=args.id_type)
    rep = adata.uns["biomjepa"]["vocab"]
    print(f"mapped {rep['n_matched']}/{rep['n_vars']} genes; {rep['count_fraction']:.1%} of counts kept")
    before = bj.settings.precision
    bj.settings.precision = args.precision or before  # put back below: nothing global changes for an in-process caller
    try:
        bj.tl.embed(adata, checkpoint=args.checkpoint, layer=args.layer, use_raw=args.use_raw, batch_size=args.batch_size,
                    device=args.device, input=args.input_kind, library_size_key=args.library_size_key)
    finally:
        bj.settings.precision = before
    write_h5ad_atomic(adata, args.output)
    print(f"wrote obsm['X_biomjepa'] {adata.obsm['X_biomjepa'].shape} to {args.output}")


def _say_if_output_is_replaced(input: str, output: str, prog: str = "biomjepa embed") -> None:
    """OUTPUT, an existing file other than INPUT, is replaced: say so before the work (``biomjepa embed`` and
    ``biomjepa adapt --embed``), and, for ``embed``, name atlas mode, which is what `biomjepa embed a.h5ad b.h5ad`
    may have meant."""
    import os
    import sys
    from pathlib import Path

    out = Path(output)
    if not out.exists() or (Path(input).exists() and os.path.samefile(input, out)):
        return
    atlas = (" To embed several files, list them all and give a store: `biomjepa embed a.h5ad b.h5ad --store "
             "atlas.zarr`." if prog == "biomjepa embed" else "")
    print(f"{prog}: {output} exists and will be replaced by {input}'s cells with their embedding.{atlas}",
          file=sys.stderr)


def write_h5ad_atomic(adata, output: str | os.PathLike, *, fix: str | None = None) -> None:
    """Write to a temporary file next to ``output`` and rename it: an interrupted write (kill, full
    disk) leaves ``output``, which may be the input file itself, as it was. An ``output`` that is a
    symbolic link is written through: its target gets the new file, the link stays a link. A full disk is one
    ``OSError`` naming the directory, its free space and ``fix`` (default: free space or give another OUTPUT), with
    nothing left behind (the write runs in a child process, which a failed HDF5 write cannot crash this one from:
    :func:`biomjepa._h5files.in_child`); a stop recorded while writing acts before the rename
    (:func:`biomjepa._h5files.h5_written`)."""
    from .._h5files import h5_written, in_child
    from .outputs import output_target

    target = output_target(output)
    fix = fix or "Free space there, or give an OUTPUT on a disk with room; nothing was written, the file is as it was."
    with h5_written(target, what=f"{target.name} ({adata.n_obs} cells and their embedding)", fix=fix) as tmp:
        in_child(lambda: adata.write_h5ad(tmp))
