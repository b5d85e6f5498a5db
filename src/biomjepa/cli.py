"""``biomjepa`` command line: ``demo``, ``embed``, ``train``, ``bench``, ``graph``.

Exit codes: 0 success, 1 runtime error (message on stderr), 2 usage error (argparse).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time


def _demo(args: argparse.Namespace) -> None:
    import resource

    import biomjepa as bj

    from ._demo import run_demo

    t0 = time.perf_counter()
    out = run_demo(args.out, checkpoint=args.checkpoint, batch_size=args.batch_size, device=args.device)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"biomjepa {bj.__version__}: {out['message']}")
    print(f"wrote {out['h5ad']} and {out['png']} in {time.perf_counter() - t0:.1f} s (peak RSS {peak:.0f} MiB)")


def _embed(args: argparse.Namespace) -> None:
    import anndata as ad

    import biomjepa as bj

    adata = ad.read_h5ad(args.input)
    bj.pp.map_vocab(adata, gene_key=args.gene_key, layer=args.layer, species=args.species)
    rep = adata.uns["biomjepa"]["vocab"]
    print(f"mapped {rep['n_matched']}/{rep['n_vars']} genes; {rep['count_fraction']:.1%} of counts kept")
    bj.tl.embed(adata, checkpoint=args.checkpoint, layer=args.layer, batch_size=args.batch_size, device=args.device)
    adata.write_h5ad(args.output)
    print(f"wrote obsm['X_biomjepa'] {adata.obsm['X_biomjepa'].shape} to {args.output}")


def _train(args: argparse.Namespace) -> None:
    from .train.__main__ import main as train_main

    overrides = [arg for s in args.set or [] for arg in ("--set", s)]
    train_main([args.config, *overrides])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="biomjepa", description="BioM-JEPA single-cell foundation model.")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO level, progress bars)")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="embed the bundled pancreas demo and write a UMAP PNG")
    d.add_argument("--out", default="demo_out", help="output directory (default: demo_out)")
    d.add_argument("--checkpoint", default=None, help="checkpoint name, directory or URL (default: bundled)")
    d.add_argument("--batch-size", type=int, default=None, help="cells per forward pass")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.set_defaults(func=_demo)

    e = sub.add_parser("embed", help="map genes and embed an .h5ad of raw counts")
    e.add_argument("input", help="input .h5ad with raw counts")
    e.add_argument("output", help="output .h5ad (input + obsm['X_biomjepa'])")
    e.add_argument("--checkpoint", default=None, help="checkpoint name, directory or URL")
    e.add_argument("--layer", default=None, help="layer holding raw counts (default: X)")
    e.add_argument("--gene-key", default=None, help="var column with gene symbols/Ensembl ids (default: var_names)")
    e.add_argument("--species", default="human", help="human or mouse (1:1 orthologs)")
    e.add_argument("--batch-size", type=int, default=None, help="cells per forward pass")
    e.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    e.set_defaults(func=_embed)

    t = sub.add_parser("train", help="pretrain from a YAML config (see biomjepa/configs)")
    t.add_argument("config", help="YAML config file or preset name (tiny, mini, base)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    t.set_defaults(func=_train)

    try:
        from .cli_bench import add_bench_parser

        add_bench_parser(sub)
    except ImportError:  # pragma: no cover - bench extras not installed
        pass
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose:
        import biomjepa as bj

        bj.settings.verbosity = 2
    try:
        args.func(args)
    except (ValueError, KeyError, FileNotFoundError, RuntimeError, PermissionError) as err:
        print(f"biomjepa {args.command}: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
