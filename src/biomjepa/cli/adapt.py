"""``biomjepa adapt IN.h5ad --out DIR [--embed OUT.h5ad]``: adapt a checkpoint to one dataset's cells (bj.tl.adapt)."""

from __future__ import annotations

import argparse

from .embed import EMBED_FLAGS
from .outputs import STOP_CODES
from .types import (
    CHECKPOINT_HELP,
    EPILOG,
    checkpoint_ref,
    h5ad_file,
    non_negative_int,
    output_file,
    positive_int,
    positive_seconds,
)


def add_adapt_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``adapt`` subcommand; its ``func`` is :func:`run_adapt`."""
    a = subparsers.add_parser(
        "adapt", help="teach the model a dataset's own cells (self-supervised), write the adapted checkpoint",
        epilog=EPILOG + STOP_CODES,
        description="Continue pretraining a checkpoint on the cells of INPUT (raw counts; labels are never read) "
        "and write the adapted checkpoint to --out (config.json, model.safetensors, SHA256SUMS), usable as "
        "`biomjepa embed --checkpoint DIR` or bj.tl.embed(adata, checkpoint=DIR). With --embed, also write INPUT "
        "plus obsm['X_biomjepa'] from the adapted checkpoint and uns['biomjepa']['adapt'].")
    a.add_argument("input", type=h5ad_file, help="input .h5ad with raw counts (at least 200 cells)")
    a.add_argument("--out", required=True, metavar="DIR", help="new (or empty) directory for the adapted checkpoint")
    a.add_argument("--embed", type=output_file, default=None, metavar="OUT.h5ad",
                   help="also write INPUT with the adapted embedding to OUT.h5ad (replaced only once fully written)")
    a.add_argument("--checkpoint", default=None, type=checkpoint_ref, help="base " + CHECKPOINT_HELP)
    a.add_argument("--layer", default=None, help="layer holding raw counts (default: X)")
    a.add_argument("--use-raw", action="store_true", help="read the counts from adata.raw (not with --layer)")
    a.add_argument("--input", dest="input_kind", default="counts", choices=["counts", "reads", "lognorm"],
                   help="counts: raw integer counts (droplet UMIs); reads: plate-based read counts (Smart-seq), read as "
                   "molecule equivalents; lognorm: log1p(normalize_total) values (default: counts)")
    a.add_argument("--library-size-key", default=None, metavar="OBS_COLUMN",
                   help="with --input lognorm: obs column of total counts per cell (default: estimated)")
    a.add_argument("--gene-key", default=None, help="var column with gene symbols / Ensembl / Entrez ids (default: var_names)")
    a.add_argument("--id-type", default="auto", choices=["auto", "entrez"], help="as in `biomjepa embed` (default: auto)")
    a.add_argument("--species", default="human", choices=["human", "mouse"],
                   help="species of the gene identifiers (default: human)")
    a.add_argument("--steps", type=positive_int, default=None,
                   help="training steps of 64 cells (default: 6 passes over the cells, 40-1000 steps)")
    a.add_argument("--time-budget", type=positive_seconds, default=None, metavar="SECONDS",
                   help="stop training after this many seconds (default: none)")
    a.add_argument("--seed", type=non_negative_int, default=0, help="training seed (default: 0)")
    a.set_defaults(func=run_adapt, flags=ADAPT_FLAGS, parser=a)
    return a


#: the library's argument names in messages -> this command's options (those of `biomjepa embed` included)
ADAPT_FLAGS = {"`bj.tl.embed(adata, checkpoint=out_dir)`": "`biomjepa embed IN.h5ad OUT.h5ad --checkpoint DIR`",
               "`bj.tl.embed`": "`biomjepa embed`", "bj.tl.adapt": "biomjepa adapt", "^adata has ": "INPUT has ",
               "out_dir=": "--out ", "a new out_dir": "a new --out directory",
               r"~(?<![/\w'-])out_dir(?![/'\w-]|\.\w)": "--out",  # the argument's name, not a path holding it
               "time_budget": "--time-budget", "steps must": "--steps must", **EMBED_FLAGS}


def run_adapt(args: argparse.Namespace) -> None:
    """``bj.tl.adapt`` on INPUT (read backed unless ``--embed`` needs it whole), then write ``--embed``; ``--embed``
    is locked throughout, and a stop signal acts between blocks of work and says what it left
    (:func:`~.outputs.writing`, :func:`_left`). ``--out`` and the options are checked first (:func:`check_out`); a full
    disk is one line naming the directory, its free space and the fix."""
    from .embed import check_read_flags
    from .errors import check_usage
    from .outputs import writing

    check_read_flags(args)
    check_usage(args.parser, lambda: check_out(args.out, args.embed), errors=(OSError, ValueError), flags=ADAPT_FLAGS)
    run: dict = {}
    with writing(args.embed, lambda written: _left(args, run.get("adata"), written), at_safe_points=True):
        _adapt_file(args, run)


def check_out(out: str, embed: str | None) -> None:
    """``--out``, before any work: not a file, not a directory holding files, and not holding ``--embed`` (whose lock
    file, written beside it, would make an empty ``--out`` hold a file; the checkpoint directory is the checkpoint's
    alone)."""
    import os
    from pathlib import Path

    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {out!r} is a file; adapt writes a new checkpoint directory there and never "
                              "replaces a file. Give a new directory (or an empty one).")
    if path.is_dir() and any(path.iterdir()):
        raise FileExistsError(f"--out {out!r} is not an empty directory; adapt never replaces a checkpoint or other "
                              "files. Give a new directory (or an empty one).")
    if embed is not None:
        where, ck = Path(os.path.realpath(Path(embed).expanduser())), Path(os.path.realpath(path))
        if where == ck or where.is_relative_to(ck):
            raise ValueError(f"--embed {embed!r} is {'--out' if where == ck else 'inside --out'} {out!r}, the "
                             "checkpoint directory, which holds the checkpoint alone. Give --embed a file outside it, "
                             f"e.g. {str(ck.parent / (ck.name + '_embedded.h5ad'))!r}.")


def _left(args: argparse.Namespace, adata, written: bool) -> str:
    """What a stop left: the checkpoint once ``bj.tl.adapt`` has written it whole (its record is in ``adata`` only
    then: it leaves nothing otherwise), and whether ``--embed`` was ``written``."""
    rec = None if adata is None else adata.uns["biomjepa"].get("adapt")
    if rec is None:
        return f"no checkpoint was written to {args.out}."
    said = f"the checkpoint was written to {rec['checkpoint']} before it"
    if args.embed is None or written:
        return said + (f", and {args.embed} too." if args.embed else ".")
    return (f"{said}; {args.embed} was not written (`biomjepa embed {args.input} {args.embed} --checkpoint "
            f"{rec['checkpoint']}` writes it).")


def _adapt_file(args: argparse.Namespace, run: dict) -> None:
    import anndata as ad

    import biomjepa as bj

    if args.embed:  # before the work, as `biomjepa embed` says it
        from .embed import _say_if_output_is_replaced

        _say_if_output_is_replaced(args.input, args.embed, prog="biomjepa adapt")
    adata = ad.read_h5ad(args.input) if args.embed else ad.read_h5ad(args.input, backed="r")
    bj.pp.map_vocab(adata, gene_key=args.gene_key, layer=args.layer, use_raw=args.use_raw, species=args.species,
                    id_type=args.id_type)  # before training: a mapping error or warning is not met after it
    adata.uns["biomjepa"].pop("adapt", None)  # an earlier run's record (replaced anyway): one there is this run's
    run["adata"] = adata
    rep = adata.uns["biomjepa"]["vocab"]
    print(f"mapped {rep['n_matched']}/{rep['n_vars']} genes; {rep['count_fraction']:.1%} of counts kept")
    try:
        bj.tl.adapt(adata, args.checkpoint, layer=args.layer, use_raw=args.use_raw, input=args.input_kind,
                    library_size_key=args.library_size_key, species=args.species, steps=args.steps,
                    time_budget=args.time_budget, out_dir=args.out, seed=args.seed)
    except OSError as err:  # it removed what it wrote; a full disk is said in words
        full = _full_disk(err, args.out)
        if full is None:
            raise
        raise full from err
    rec = adata.uns["biomjepa"]["adapt"]
    print(f"adapted {rec['base']['name']} on {rec['n_cells']} cells: {rec['steps_done']} steps in {rec['seconds']:.0f} s; "
          f"wrote {rec['checkpoint']} (sha256 {rec['checkpoint_sha256']})")
    if args.embed:
        from .embed import write_h5ad_atomic

        write_h5ad_atomic(adata, args.embed, fix=f"Free space there, or give an --embed file on a disk with room; "
                          f"the checkpoint in {rec['checkpoint']} is complete (`biomjepa embed {args.input} OUT.h5ad "
                          f"--checkpoint {rec['checkpoint']}` writes the embedding).")
        print(f"wrote obsm['X_biomjepa'] {adata.obsm['X_biomjepa'].shape} to {args.embed}")


def _full_disk(err: OSError, out: str) -> OSError | None:
    """A full disk while adapting, in one line: where (the file the error names, else ``--out``'s folder, where the
    checkpoint is assembled with a copy of the cells' counts), its free space and the fix; ``None`` for another error."""
    import os
    from pathlib import Path

    from .._h5files import full_disk_error

    named, cause = None, err
    while cause is not None and named is None:
        named = getattr(cause, "filename", None)
        cause = cause.__cause__ or cause.__context__
    where = Path(os.fsdecode(named)).absolute().parent if named else Path(out).expanduser().absolute().parent
    return full_disk_error(err, where, what="the adapted checkpoint (or the scratch copy of the cells' counts)",
                           fix="Free space there, or give an --out on a disk with room; nothing was kept.")
