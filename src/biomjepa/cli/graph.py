"""``biomjepa graph CORPUS... --out DIR``: the STRING ∪ coexpression gene graph of a corpus.

The same graph a pretraining run builds for itself (:func:`biomjepa.train.loop.open_graph`), as a
separate step: the corpus is prepared into a shard cache (:func:`biomjepa.train.prepare_corpus`),
its coexpression sketched (:func:`biomjepa.data.graph.coexpression_adjacency`), united with
STRING (:func:`~biomjepa.data.graph.string_adjacency`) by
:func:`~biomjepa.data.graph.build_graph` and saved with ``GeneGraph.save``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .types import GENE_FLAGS, corpus_file, existing_file, non_negative_int, output_dir, positive_int

DESCRIPTION = """\
Build the gene graph of BioM-JEPA pretraining for a corpus of .h5ad files of raw counts: STRING v12
links (combined score >= 700) united with the corpus' coexpression (random-projection estimate of
|Pearson|), cut to the --top-k strongest out-neighbours per gene.

Steps: (1) every file's genes are mapped onto the vocabulary (as bj.pp.map_vocab) and its counts
written to a shard cache (--cache); (2) the coexpression sketch is streamed over the cache;
(3) STRING (the bundled table, or the official files) and coexpression are united; (4) the graph
is written to --out as graph.npz/graph.json (the block table) and coexp.npz/coexp.json (the
coexpression neighbours used by DMT pooling), and its statistics are printed next to the paper's.
"""

EPILOG = """\
example:
  biomjepa graph data/*.h5ad --out graph_out
  biomjepa train mini --set corpus=graph_out/corpus --set graph=graph_out

The bundled STRING table lacks the text-mining channel (a subset of the official >= 700 edges);
for the paper's graph pass the official 9606.protein.links.v12.0.txt.gz and
9606.protein.info.v12.0.txt.gz with --string-links and --string-info.

exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments,
missing files)
"""


def add_graph_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``graph`` subcommand on an ``argparse`` subparsers object; its ``func`` is :func:`run_graph`."""
    g = subparsers.add_parser(
        "graph", help="build the STRING + coexpression gene graph of a corpus of .h5ad files",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("corpus", nargs="+", metavar="CORPUS", type=corpus_file,
                   help=".h5ad files of raw counts (cells x genes), or .npz shards already prepared by bj.train")
    g.add_argument("--out", required=True, metavar="DIR", type=output_dir,
                   help="output directory for graph.npz/json and coexp.npz/json (created)")
    g.add_argument("--cache", metavar="DIR", default=None, type=output_dir,
                   help="shard cache of the prepared corpus (default: OUT/corpus); reused when the corpus is unchanged")
    g.add_argument("--string-links", metavar="FILE", type=existing_file, default=None,
                   help="official STRING links file (9606.protein.links.v12.0.txt.gz); default: the bundled table")
    g.add_argument("--string-info", metavar="FILE", type=existing_file, default=None,
                   help="official STRING protein info file (9606.protein.info.v12.0.txt.gz); required with --string-links")
    g.add_argument("--string-aliases", metavar="FILE", type=existing_file, default=None,
                   help="optional STRING aliases file (9606.protein.aliases.v12.0.txt.gz): maps more proteins to genes")
    g.add_argument("--min-score", type=non_negative_int, default=700,
                   help="keep STRING links with combined score >= this (default: 700)")
    g.add_argument("--top-k", type=positive_int, default=64,
                   help="neighbours kept per gene in STRING, coexpression and the union (default: 64)")
    g.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the coexpression random projections (default: 0; training uses its run's `seed`)")
    g.add_argument("--layer", default=None,
                   help="layer holding raw counts in every file (default: X)")
    g.add_argument("--gene-key", default=None,
                   help="var column with gene symbols / Ensembl ids in every file (default: var_names)")
    g.add_argument("--species", default="human", choices=["human", "mouse"],
                   help="species of the gene identifiers; mouse maps through 1:1 orthologs (default: human)")
    g.set_defaults(func=run_graph, parser=g, flags=GRAPH_FLAGS)
    return g


#: the library's argument names in messages -> this command's options
GRAPH_FLAGS = {"`layer=`": "--layer", "layer=": "--layer ", **GENE_FLAGS,
               r"~(?:[Ss]et )?`corpus(?:\[\d+\])?\.layer: NAME`": "pass --layer NAME"}


def run_graph(args: argparse.Namespace) -> dict[str, Path]:
    """Run ``biomjepa graph`` with the parsed ``args``: prepare the corpus, build and save the graph, print its
    statistics; returns ``{"graph", "coexp", "cache"}``: the saved block table (``graph.npz``), coexpression
    table (``coexp.npz``) and the corpus cache directory."""
    if (args.string_links is None) != (args.string_info is None) or (args.string_aliases and not args.string_links):
        _usage_error(args, "--string-links and --string-info must be given together (--string-aliases only with both)")

    from ..data.graph import build_corpus_graph, format_stats, graph_params
    from ..data.shards import Corpus
    from ..data.vocab import Vocab
    from ..train import prepare_corpus

    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out / "corpus"
    spec = {k: v for k, v in (("layer", args.layer), ("gene_key", args.gene_key)) if v}
    if args.species != "human":
        spec["species"] = args.species
    V = Vocab.default().size
    corpus = Corpus(prepare_corpus([{"path": p, **spec} for p in args.corpus], cache, vocab_size=V))
    print(f"corpus: {corpus.n_cells:,} cells in {len(corpus)} shard(s) at {cache}")
    params = graph_params(top_k=args.top_k, seed=args.seed, min_score=args.min_score, string_links=args.string_links)
    meta = {"corpus_files": list(args.corpus), "seed": args.seed, "min_score": args.min_score,
            "string_source": args.string_links or "bundled (no text-mining channel)"}
    graph = build_corpus_graph(corpus, params, string_info=args.string_info, string_aliases=args.string_aliases,
                               meta=meta)
    graph.save(out)
    print(format_stats(graph))
    print(f"wrote {out / 'graph.npz'}, {out / 'coexp.npz'} (+ .json); train with "
          f"`--set corpus={cache} --set graph={out}`")
    return {"graph": out / "graph.npz", "coexp": out / "coexp.npz", "cache": cache}


def _usage_error(args: argparse.Namespace, message: str) -> None:
    parser = getattr(args, "parser", None)
    if parser is None:
        raise ValueError(message)
    parser.error(message)  # exits with code 2
