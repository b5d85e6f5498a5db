"""``biomjepa`` command line: ``demo``, ``embed``, ``train``, ``bench``, ``graph``.

Exit codes: 0 success, 1 runtime error (message on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from .types import TRAIN_PRESETS, h5ad_file, output_file, positive_int, train_config


def _demo(args: argparse.Namespace) -> None:
    import resource

    import biomjepa as bj

    from .._demo import run_demo

    t0 = time.perf_counter()
    out = run_demo(args.out, checkpoint=args.checkpoint, batch_size=args.batch_size, device=args.device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"biomjepa {bj.__version__}: {out['message']}")
    print(f"wrote {out['h5ad']} and {out['png']} in {time.perf_counter() - t0:.1f} s (peak RSS {peak:.0f} MiB)")


def _embed(args: argparse.Namespace) -> None:
    import anndata as ad

    import biomjepa as bj

    adata = ad.read_h5ad(args.input)
    bj.pp.map_vocab(adata, gene_key=args.gene_key, layer=args.layer, species=args.species, id_type=args.id_type)
    rep = adata.uns["biomjepa"]["vocab"]
    print(f"mapped {rep['n_matched']}/{rep['n_vars']} genes; {rep['count_fraction']:.1%} of counts kept")
    bj.tl.embed(adata, checkpoint=args.checkpoint, layer=args.layer, batch_size=args.batch_size, device=args.device,
                input=args.input_kind, library_size_key=args.library_size_key)
    write_h5ad_atomic(adata, args.output)
    print(f"wrote obsm['X_biomjepa'] {adata.obsm['X_biomjepa'].shape} to {args.output}")


def write_h5ad_atomic(adata, output: str) -> None:
    """Write to a temporary file next to ``output`` and rename it: an interrupted write (kill, full
    disk) leaves ``output``, which may be the input file itself, as it was."""
    from .._files import atomic_path

    with atomic_path(output, suffix=".h5ad") as tmp:  # a random name, created exclusively
        adata.write_h5ad(tmp)


def _train(args: argparse.Namespace) -> None:
    from ..train.__main__ import main as train_main

    overrides = [arg for s in args.set or [] for arg in ("--set", s)]
    export = ["--export", args.export] if args.export else []
    export += ["--export-overwrite"] if args.export_overwrite else []
    code = train_main([args.config, *overrides, *export])
    if code:
        raise RuntimeError(f"training exited with code {code}")


_DEVICE_HELP = "auto (CUDA if available, else CPU), cpu, cuda or cuda:N; CUDA without CUDA is an error (default: auto)"
_CHECKPOINT_HELP = (
    "registry name, checkpoint directory (config.json + model.safetensors) or URL#sha256=HEX "
    "(default: bj.settings.checkpoint)"
)
_EPILOG = "exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments, missing files)"


def build_parser() -> argparse.ArgumentParser:
    """The ``biomjepa`` argument parser with its ``demo``, ``embed``, ``train``, ``bench`` and ``graph`` subcommands."""
    p = argparse.ArgumentParser(prog="biomjepa", description="BioM-JEPA single-cell foundation model.",
                                epilog=_EPILOG + ". `biomjepa COMMAND --help` explains a command.")
    p.add_argument("-v", "--verbose", action="store_true", help="log what is done (INFO level)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (shown on stderr by default for steps longer than 2 s; "
                   "bj.settings.progress in Python)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="embed the bundled pancreas demo, cluster it (Leiden) and write a UMAP PNG",
                       epilog=_EPILOG,
                       description="Embed the 1,074 bundled Baron pancreas cells (bj.datasets.pancreas), run "
                       "scanpy neighbors + UMAP + Leiden on obsm['X_biomjepa'], print the clusters' adjusted Rand index "
                       "against the cell types and write OUT/pancreas_embedded.h5ad and OUT/umap_pancreas.png "
                       "(coloured by cell type and by Leiden cluster), with the bundled pretrained `biomjepa-mini` checkpoint unless "
                       "--checkpoint is given.")
    d.add_argument("--out", default="demo_out", metavar="DIR", help="output directory (default: demo_out)")
    d.add_argument("--checkpoint", default=None, help=_CHECKPOINT_HELP)
    d.add_argument("--batch-size", type=positive_int, default=None, help="cells per forward pass (default: bj.settings.batch_size, 64)")
    d.add_argument("--device", default="auto", help=_DEVICE_HELP)
    d.set_defaults(func=_demo)

    e = sub.add_parser("embed", help="map genes and embed an .h5ad of raw counts", epilog=_EPILOG,
                       description="Map the genes of INPUT onto the vocabulary (bj.pp.map_vocab), embed every cell "
                       "(bj.tl.embed) and write INPUT plus var['biomjepa_token'], uns['biomjepa'] and "
                       "obsm['X_biomjepa'] to OUTPUT. INPUT must hold raw integer counts (in X or --layer), or log1p(normalize_total) values with --input lognorm.")
    e.add_argument("input", type=h5ad_file, help="input .h5ad with raw counts")
    e.add_argument("output", type=output_file,
                   help="output .h5ad (input + obsm['X_biomjepa']); replaced only once fully written, so it may "
                   "be INPUT itself")
    e.add_argument("--checkpoint", default=None, help=_CHECKPOINT_HELP)
    e.add_argument("--layer", default=None, help="layer holding raw counts (default: X)")
    e.add_argument("--input", dest="input_kind", default="counts", choices=["counts", "lognorm"],
                   help="counts: raw integer counts; lognorm: log1p(normalize_total) values of every gene, checked "
                   "and read as the counts they came from (default: counts)")
    e.add_argument("--library-size-key", default=None, metavar="OBS_COLUMN",
                   help="with --input lognorm: obs column of total counts per cell (default: estimated, with a warning)")
    e.add_argument("--gene-key", default=None, help="var column with gene symbols / Ensembl / Entrez ids (default: var_names)")
    e.add_argument("--id-type", default="auto", choices=["auto", "entrez"],
                   help="auto: all-digit gene names are ambiguous and left unmapped; entrez: they are Entrez gene ids "
                   "(default: auto)")
    e.add_argument("--species", default="human", choices=["human", "mouse"],
                   help="species of the gene identifiers; mouse maps through 1:1 orthologs (default: human)")
    e.add_argument("--batch-size", type=positive_int, default=None, help="cells per forward pass (default: bj.settings.batch_size, 64)")
    e.add_argument("--device", default="auto", help=_DEVICE_HELP)
    e.add_argument("--store", metavar="OUT.zarr", default=None,
                   help="atlas mode: `biomjepa embed INPUT... --store OUT.zarr` embeds many .h5ad files (or globs) into "
                   "a zarr store, resumably and on many processes; `biomjepa embed IN --store OUT.zarr --help` lists its options")
    e.set_defaults(func=_embed)

    t = sub.add_parser("train", help="pretrain from a YAML config or preset (see biomjepa/configs)", epilog=_EPILOG,
                       description="Pretrain BioM-JEPA (block-level JEPA) as `python -m biomjepa.train` does; a run "
                       "resumes from its latest checkpoint. For many GPUs use `torchrun --nproc_per_node=N -m "
                       "biomjepa.train CONFIG ...`. Prints the run directory.")
    t.add_argument("config", type=train_config,
                   help=f"YAML config file or preset name ({', '.join(TRAIN_PRESETS)}); see biomjepa/configs/*.yaml")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config key, value parsed as YAML, e.g. --set corpus=data/*.h5ad (repeatable)")
    t.add_argument("--export", metavar="DIR", default=None,
                   help="after training, export the teacher encoder as an inference checkpoint to DIR")
    t.add_argument("--export-overwrite", action="store_true",
                   help="replace DIR when it already holds a checkpoint (refused otherwise, before training)")
    t.set_defaults(func=_train)

    from .graph import add_graph_parser

    add_graph_parser(sub)
    try:
        from .bench import add_bench_parser

        add_bench_parser(sub)
    except ImportError:  # pragma: no cover - bench extras not installed
        pass
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``biomjepa`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code (usage errors exit 2)."""
    from ..embed.cli import atlas_argv
    from ..embed.cli import main as atlas_main

    atlas = atlas_argv(sys.argv[1:] if argv is None else list(argv))  # `embed IN... --store OUT.zarr`
    if atlas is not None:
        return atlas_main(atlas)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    import biomjepa as bj

    if args.verbose:
        bj.settings.verbosity = 2
    if args.no_progress:
        bj.settings.progress = False
    try:
        args.func(args)
    except (ValueError, KeyError, TypeError, RuntimeError, OSError) as err:
        if args.verbose:
            logging.getLogger("biomjepa").exception("traceback")
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"biomjepa {args.command}: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
