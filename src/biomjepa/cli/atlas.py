"""``biomjepa embed INPUT... --store OUT.zarr`` / ``torchrun ... -m biomjepa.embed``: the atlas command line."""

from __future__ import annotations

import argparse
import logging

from .embed import EMBED_FLAGS
from .errors import check_usage, run_command
from .types import BATCH_SIZE_HELP, CHECKPOINT_HELP, checkpoint_ref, device_name, positive_int

DESCRIPTION = """\
Embed the cells of one or many .h5ad files of raw counts (in X, --layer or with --use-raw adata.raw), or of
log1p(normalize_total) values with --input lognorm (paths or quoted globs; large files are read
backed, block by block) into a zarr store: one group per input (named after the file stem) holding
X_biomjepa [n_obs, D] float32, obs_names and n_genes. Each block of --block-rows rows is written
and then recorded as done; running the same command again skips the finished blocks, so a killed
run resumes where it stopped. Under torchrun every rank takes its own share of the blocks (one GPU
per rank where there are GPUs, CPU processes otherwise); the result is identical, bit for bit,
whatever the number of processes.
"""

EPILOG = """\
examples:
  biomjepa embed data/*.h5ad --store atlas.zarr
  biomjepa embed scanpy_processed/*.h5ad --use-raw --store atlas.zarr
  biomjepa embed lognormalized/*.h5ad --input lognorm --library-size-key total_counts --store atlas.zarr
  torchrun --nproc_per_node=8 -m biomjepa.embed 'data/*.h5ad' --store atlas.zarr
  python -c "from biomjepa.embed import read_atlas; print(read_atlas('atlas.zarr'))"

exit codes: 0 success, 1 error while running (message on stderr), 2 usage error (bad arguments,
missing or non-h5ad inputs, unwritable store); 130/143 stopped by SIGINT/SIGTERM (one line says what the store
holds; the same command resumes it)
"""


def build_parser(prog: str = "biomjepa embed") -> argparse.ArgumentParser:
    """The atlas embedding parser (``biomjepa embed ... --store`` and ``python -m biomjepa.embed``)."""
    from ..embed.run import BLOCK_ROWS

    p = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=".h5ad files of raw counts, or quoted globs ('data/*.h5ad')")
    p.add_argument("--store", required=True, metavar="OUT.zarr", help="output zarr store (a directory; created, or resumed)")
    p.add_argument("--checkpoint", default=None, type=checkpoint_ref, help=CHECKPOINT_HELP)
    p.add_argument("--layer", default=None, help="layer holding raw counts in every input (default: X)")
    p.add_argument("--use-raw", action="store_true",
                   help="read the counts from adata.raw of every input (scanpy keeps them there; not with --layer)")
    p.add_argument("--input", dest="input_kind", default="counts", choices=["counts", "reads", "lognorm"],
                   help="counts: raw integer counts (droplet UMIs); reads: raw plate-based read counts (Smart-seq, C1, STRT), read "
                   "as molecule equivalents; lognorm: log1p(normalize_total) values of every gene, checked "
                   "and read as the counts they came from (default: counts)")
    p.add_argument("--library-size-key", default=None, metavar="OBS_COLUMN",
                   help="with --input lognorm: obs column of total counts per cell (default: estimated, with a warning)")
    p.add_argument("--gene-key", default=None, help="var column with gene identifiers (default: var_names)")
    p.add_argument("--id-type", default="auto", choices=["auto", "entrez"], help="as in `biomjepa embed` (default: auto)")
    p.add_argument("--species", default="human", choices=["human", "mouse"], help="species of the gene identifiers (default: human)")
    p.add_argument("--batch-size", type=positive_int, default=None, help=BATCH_SIZE_HELP)
    p.add_argument("--device", default="auto", type=device_name,
                   help="auto (cuda:LOCAL_RANK if CUDA is available, else CPU), cpu, cuda or cuda:N (default: auto)")
    p.add_argument("--precision", default=None, choices=["fp32", "bf16", "auto"],
                   help="what the encoder multiplies in: fp32, bf16 (~1.5x faster embedding on CPUs with AMX; per-cell "
                        "cosine >= 0.994 to fp32) or auto (bf16 on CUDA and on CPUs with bf16 units) (default: "
                        "bj.settings.precision, fp32)")
    p.add_argument("--block-rows", type=positive_int, default=BLOCK_ROWS,
                   help=f"rows per block: the unit of work and of resumption (default: {BLOCK_ROWS})")
    p.add_argument("--write-obsm", action="store_true",
                   help="once complete, replace each input by a copy with obsm['X_biomjepa'] (temporary file + rename)")
    p.add_argument("--overwrite", action="store_true", help="start an existing store again from nothing (one process)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO level, progress bars)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (shown on stderr by default; also accepted before `embed`, as in "
                   "`biomjepa --no-progress embed ... --store OUT.zarr`)")
    return p


def atlas_argv(argv: list[str]) -> list[str] | None:
    """The arguments for :func:`main` when ``biomjepa`` ``argv`` asks for ``embed ... --store``, else ``None``;
    the global options before ``embed`` (``-v``, ``--no-progress``) are the atlas parser's own."""
    lead = 0
    while lead < len(argv) and argv[lead] in ("-v", "--verbose", "--no-progress"):
        lead += 1
    if lead == len(argv) or argv[lead] != "embed":
        return None
    rest = argv[lead + 1 :]
    if not any(a == "--store" or a.startswith("--store=") for a in rest):
        return None
    return argv[:lead] + rest


#: the library's argument names in messages -> this command's options (those of `biomjepa embed` included)
ATLAS_FLAGS = {"overwrite=True": "--overwrite", "write_obsm=True": "--write-obsm", "store='": "--store '",
               "block_rows": "--block-rows", "drop use_raw=True": "drop --use-raw", **EMBED_FLAGS}


def main(argv: list[str] | None = None, prog: str = "biomjepa embed") -> int:
    """Run the atlas embedding on this rank; returns the exit code (usage errors exit 2)."""
    from ..embed.inputs import check_read_args, resolve_inputs
    from ..embed.run import check_store_path, dist_env

    parser = build_parser(prog)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    def check() -> None:  # every input and the store are checked before a model is loaded
        dist_env()
        resolve_inputs(args.inputs, writable=args.write_obsm)
        check_store_path(args.store)
        check_read_args(layer=args.layer, use_raw=args.use_raw, input=args.input_kind,
                        library_size_key=args.library_size_key)

    check_usage(parser, check, flags=ATLAS_FLAGS)
    from .._settings import settings

    if args.verbose:
        settings.verbosity = 2
    if args.no_progress:
        settings.progress = False  # as `biomjepa --no-progress COMMAND` does
    rank, world, _ = dist_env()
    who = f" (rank {rank}/{world})" if world > 1 else ""
    return run_command(lambda: run_atlas(args), prog=f"{prog}{who}", verbose=args.verbose, flags=ATLAS_FLAGS)


def run_atlas(args: argparse.Namespace) -> None:
    """Embed ``args.inputs`` into ``args.store`` on this rank (:func:`biomjepa.embed.embed_atlas`), print a summary.
    A stop signal ends it with one line saying what the store holds (:func:`stop_left`; the store's lock is given
    back and its lock file removed first), exit code 143 (SIGTERM) or 130 (SIGINT) (:func:`~.outputs.writing`)."""
    from .outputs import writing

    with writing(None, lambda written: stop_left(args.store, args.write_obsm)):
        _run_atlas(args)


def stop_left(store: str, write_obsm: bool = False) -> str:
    """What a stopped atlas command left in ``store``, and that running it again resumes it (blocks are written
    whole under a stop signal; a half-created store is created again; each input ``write_obsm`` replaces is either
    the new file, recorded in the store, or the old one: the line names those written)."""
    from ..embed.obsm import obsm_written_into
    from ..embed.store import AtlasStore

    again = "running the same command again"
    try:
        if AtlasStore.state(store) != "ready":
            return f"nothing was embedded into {store} yet; {again} starts it."
        st = AtlasStore(store)
        done = sum(int(st.done(i["name"]).sum()) for i in st.manifest["inputs"])
        total = sum(len(st.bounds(i["name"])) for i in st.manifest["inputs"])
        complete, obsm = st.root.attrs.get("complete", False), st.root.attrs.get("obsm_written", False)
        written, n_inputs = obsm_written_into(st.manifest), len(st.manifest["inputs"])
    except Exception:  # unreadable now: the next run verifies every block it would skip
        return f"{store} keeps the blocks written so far; {again} resumes it."
    if not complete:
        return f"{store} holds {done} of {total} blocks, each written whole; {again} resumes it from there."
    if write_obsm and not obsm:
        return f"{store} is complete; obsm['X_biomjepa'] was {_obsm_written(written, n_inputs, again)}"
    return f"{store} is complete."


def _obsm_written(written: list[str], n: int, again: str) -> str:
    """Into which of the store's ``n`` inputs ``write_obsm`` wrote before a stop, and what running ``again`` does."""
    if not written:
        inputs = "the input" if n == 1 else f"any of the {n} inputs"
        return f"not written into {inputs} yet; {again} writes it into {'it' if n == 1 else 'them'}."
    if len(written) == n:  # the stop came after the last input was recorded
        return f"written into {'the input' if n == 1 else f'all {n} inputs'}."
    rest = n - len(written)
    others = "the other input is as it was" if rest == 1 else f"the other {rest} are as they were"
    return (f"written into {len(written)} of {n} inputs ({_first(written)}); {others}; {again} writes it into "
            f"{'that one' if rest == 1 else 'them'}.")


def _first(paths: list[str], n: int = 10) -> str:
    """``paths`` for one line: the first ``n``, then how many more."""
    return ", ".join(paths[:n]) + (f" (+{len(paths) - n} more)" if len(paths) > n else "")


def _run_atlas(args: argparse.Namespace) -> None:
    from ..embed.run import embed_atlas

    out = embed_atlas(args.inputs, args.store, checkpoint=args.checkpoint, block_rows=args.block_rows,
                      batch_size=args.batch_size, device=args.device, layer=args.layer, use_raw=args.use_raw,
                      input=args.input_kind, library_size_key=args.library_size_key, gene_key=args.gene_key,
                      species=args.species, id_type=args.id_type, precision=args.precision, write_obsm=args.write_obsm,
                      overwrite=args.overwrite)
    print(f"rank {out['rank']}/{out['world']}: embedded {out['blocks']} blocks, {out['cells']} cells in "
          f"{out['seconds']:.1f} s ({out['cells_per_s']:.1f} cells/s), peak RSS {out['peak_rss_mib']:.0f} MiB")
    if out.get("repaired"):
        listed = ", ".join(out["repaired"][:5]) + (f" (+{len(out['repaired']) - 5} more)" if len(out["repaired"]) > 5 else "")
        print(f"{args.store}: repaired {len(out['repaired'])} damaged block(s), embedded again: {listed}")
    if out["complete"]:
        print(f"{args.store}: complete, {out['n_obs']} cells" + (", obsm written into the inputs" if args.write_obsm else ""))
