"""Pretraining corpus: h5ad files → a cache of vocabulary-space CSR ``.npz`` shards → batches.

:func:`prepare_corpus` maps every file's genes onto the vocabulary with
:func:`~biomjepa.data.idtable.map_var` (the mapping of ``bj.pp.map_vocab``), validates raw counts,
drops cells with no mapped gene and excluded cells, and writes one ``shard_XXXXX.npz`` per file
(``data`` counts, ``indices``, ``indptr``, ``totals`` = library size over all input genes, ``rows`` =
source row) plus ``manifest.json``, which records the size, mtime and sha256 of every input file (the digest is a second read of each file, once
converted): a cache is
prepared again when its spec *or* an input file changed (the manifest's ``key`` stays that of the
spec); a copied file (the same bytes, a new mtime) has not changed (:mod:`~biomjepa.data.input_identity`). A cache is written under an exclusive lock and read under a shared one (``cache_dir/.lock``),
so one run never rewrites the shards another run is reading.

:class:`ShardStream` (a torch ``IterableDataset``) yields :class:`CellBatch` es. The order is a
pure function of ``(seed, epoch, rank, worker)``: per epoch the shard order is permuted and shards
are dealt to the ``world × workers`` (rank, worker) units with no overlap (when there are fewer
shards than units, every shard's rows are dealt instead); each unit's rows are shuffled, cut into
pools of ``sort_pool × batch_size`` rows, sorted by length inside a pool ("sortish"), batched, and
the pool's batches shuffled. Streams are endless (epoch after epoch); ``start`` skips the batches
a resumed run already consumed without reading any data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import weakref
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

from .._files import Lock, atomic_path, lock, write_text_atomic
from .corpus_spec import (  # noqa: F401 (corpus_inputs, changed_inputs, check_corpus_listing: public here)
    MANIFEST,
    SUFFIXES,
    _cache_dir,
    _changed,
    _identity,
    _in_entry,
    _listed,
    _specs,
    _stale,
    changed_inputs,
    check_corpus_listing,
    corpus_inputs,
)
from .input_identity import size_text, unhashed, with_sha256
from .tokenize import TokenizedCells, tokenize

logger = logging.getLogger(__name__)
LOCK = ".lock"


@dataclass
class CellBatch:
    """Cells of one micro-batch and their global ids ``[n, 2]`` = (shard, source row)."""

    cells: TokenizedCells
    ids: np.ndarray


def _excluded(adata, exclude) -> np.ndarray:
    """Boolean ``[n_obs]``: an obs column name (bool) or a text file of obs names, one per line."""
    if exclude is None:
        return np.zeros(adata.n_obs, dtype=bool)
    if exclude in adata.obs:
        return adata.obs[exclude].to_numpy().astype(bool)
    names = set(Path(exclude).read_text().split())
    return adata.obs_names.isin(list(names))


def _convert(spec: dict, out: Path, vocab_size: int) -> dict:
    """One h5ad → one vocabulary-space CSR shard; returns its manifest entry.

    Genes map as in ``bj.pp.map_vocab`` (same errors); the file is read backed, chunk by chunk, through
    :func:`biomjepa.data.stream.iter_vocab_counts` (the same count check and vocabulary map as ``bj.tl.embed``).
    """
    from .idtable import map_var
    from .reads import READS_LIKE, check_count_kind
    from .stream import iter_vocab_counts

    adata = _open_h5ad(spec["path"])
    try:
        _, res = map_var(adata.var_names, adata.var, n_obs=adata.n_obs, gene_key=spec.get("gene_key"),
                         species=spec.get("species", "human"), id_type=spec.get("id_type") or "auto")
        logger.info("prepare_corpus: %s, %d/%d genes mapped", spec["path"], (res.token >= 0).sum(), len(res.token))
        drop = _excluded(adata, spec.get("exclude_obs"))
        parts, totals, rows = [], [], []
        where = f"{spec['path']}:{spec.get('layer') or 'X'}"
        reads = check_count_kind(spec.get("counts", "umi"), f"corpus entry {spec['path']}: counts") == "reads"
        for sl, counts, tot in iter_vocab_counts(adata, layer=spec.get("layer"), vocab_size=vocab_size,
                                                 token=res.token, where=where, reads=reads):
            keep = (np.diff(counts.indptr) > 0) & ~drop[sl]
            parts.append(counts[keep].astype(np.float32))
            totals.append(tot[keep])
            rows.append(np.arange(sl.start, sl.stop)[keep])
    finally:
        adata.file.close()
    X = sparse.vstack(parts, format="csr")
    rows = np.concatenate(rows)
    if spec.get("max_cells"):
        X, rows, tot = X[: spec["max_cells"]], rows[: spec["max_cells"]], np.concatenate(totals)[: spec["max_cells"]]
    else:
        tot = np.concatenate(totals)
    if not reads and len(tot) and float(np.median(tot)) > READS_LIKE:
        logger.warning("corpus entry %s: median library size %s, the depth of plate-based read counts; if these are "
                       "reads (Smart-seq, C1, STRT), add `counts: reads` to the entry", spec["path"],
                       f"{np.median(tot):,.0f}")
    with atomic_path(out, suffix=".npz") as tmp:
        np.savez(tmp, data=X.data, indices=X.indices.astype(np.int32), indptr=X.indptr.astype(np.int64),
                 totals=tot, rows=rows)
    return {"source": spec["path"], "file": out.name, "n_cells": int(X.shape[0]), "dropped_excluded": int(drop.sum()),
            "median_genes": float(np.median(np.diff(X.indptr))) if X.shape[0] else 0.0,
            **{k: spec.get(k) for k in ("layer", "species", "gene_key", "exclude_obs", "counts")}}


def _open_h5ad(path: str):
    """``anndata.read_h5ad(path, backed="r")`` with an error naming the file when it is not an h5ad."""
    import anndata as ad

    try:
        return ad.read_h5ad(path, backed="r")
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"Corpus file {path} could not be read as an .h5ad ({type(err).__name__}: {err}); it is not an "
            "AnnData h5ad file. Rewrite it with `adata.write_h5ad(...)`."
        ) from err


def prepare_corpus(corpus, cache_dir: str | os.PathLike, *, vocab_size: int | None = None, where: str = "corpus",
                   cache_where: str = "cache_dir") -> Path:
    """Preprocess ``corpus`` once into ``cache_dir`` (reused while the spec and its input files are unchanged).

    ``corpus``: a glob, a path, or a list of paths / dicts ``{path, layer=None, species="human",
    gene_key=None, id_type="auto" ("entrez": all-digit names are Entrez ids), exclude_obs=None (bool
    obs column or file of obs names), max_cells=None}``.
    Already prepared ``.npz`` shards are copied by reference (listed in the manifest).

    The manifest records the size, mtime and sha256 of every input file (the digest costs a second read of each
    file once it is converted, logged with their count and size); a cache whose inputs changed is prepared again. Preparing takes the cache's exclusive lock, and a process reading the cache
    (a :class:`Corpus`) holds a shared one, so a run never rewrites the shards under another run:
    it stops with :class:`~biomjepa._files.LockBusy` instead. The calling process keeps a shared
    lock on the cache until it opens it as a :class:`Corpus`, so it cannot change in between.

    ``where`` and ``cache_where`` name ``corpus`` and ``cache_dir`` in errors, in the caller's words
    (training: ``data.corpus``, ``data.cache_dir``): a file that fails names its entry (``data.corpus[2]``)
    and the fix as that entry's keys (``data.corpus[2].species: mouse``); a file listed twice, a cache
    directory that is a file and a disk that fills up are refused in words, not as a raw errno.
    """
    from .vocab import Vocab

    vocab = Vocab.default()
    vocab_size = vocab_size or vocab.size
    specs, entries = _listed(corpus, where)
    key = hashlib.sha256(json.dumps([specs, vocab.hash, vocab_size], sort_keys=True).encode()).hexdigest()[:16]
    cache = _cache_dir(cache_dir, cache_where)
    inputs = _identity(specs)
    with _cache_lock(cache, shared=True):
        stale = _stale(cache, key, inputs)
        if stale is None:
            _hold(cache)
            return cache
    with _cache_lock(cache, shared=False, reason=stale):
        stale = _stale(cache, key, inputs)  # another process may have prepared it meanwhile
        if stale is not None:
            logger.info("prepare_corpus: preparing %s (%s)", cache, stale)
            _write_cache(cache, specs, {"key": key, "vocab_hash": vocab.hash, "vocab_size": vocab_size}, inputs,
                         entries=entries, cache_where=cache_where)
        _hold(cache)
    return cache


def _write_cache(cache: Path, specs: list[dict], meta: dict, inputs: list[dict], *, entries: list | None = None,
                 cache_where: str = "cache_dir") -> None:
    """Convert every spec into a shard, then write the manifest (under the cache's exclusive lock); an error names
    the file and its entry (:func:`_in_entry`), a full disk says so (:func:`~biomjepa._files.no_space_error`)."""
    from .._files import no_space_error

    try:
        _write_shards(cache, specs, meta, inputs, entries or [("corpus", i, s["path"]) for i, s in enumerate(specs)])
    except OSError as err:
        full = no_space_error(err, cache, what="the corpus shards",
                              fix=f"Free space there, or set {cache_where} to a directory on a disk with room.")
        if full is not None:
            raise full from err
        raise


def _write_shards(cache: Path, specs: list[dict], meta: dict, inputs: list[dict], entries: list) -> None:
    from .._stops import stop_point

    (cache / MANIFEST).unlink(missing_ok=True)  # a preparation killed part-way leaves no manifest to trust
    shutil.rmtree(cache / "graph", ignore_errors=True)  # the gene graph cached for the old cells
    shards = []
    for i, spec in enumerate(specs):
        if spec["path"].endswith(".npz"):
            shards.append({"source": spec["path"], "file": str(Path(spec["path"]).resolve())})
            continue
        logger.info("prepare_corpus: %s", spec["path"])
        try:
            shards.append(_convert(spec, cache / f"shard_{i:05d}.npz", meta["vocab_size"]))
        except (ValueError, KeyError, TypeError) as err:
            raise type(err)(_in_entry(err, spec, entries[i])) from err
    hashed = unhashed(inputs)  # a second read of each file: their bytes' digest, so a copy of them (new mtimes)
    if hashed:  # is still known as them
        logger.info("prepare_corpus: hashing %d input file(s) (%s) to record their content (sha256), a second read "
                    "of each", len(hashed), size_text(sum(i["size"] for i in hashed)))
    recorded = with_sha256(inputs)
    stop_point()  # a stop recorded while hashing acts before the manifest (biomjepa._stops); none comes after it
    changed = _changed(inputs, _identity(specs))
    if changed:
        raise ValueError(f"Corpus file(s) {', '.join(changed)} changed while {cache} was being prepared; "
                         "run again once they are complete.")
    write_text_atomic(cache / MANIFEST, json.dumps({**meta, "shards": shards, "inputs": recorded}, indent=2))


def _cache_lock(cache: Path, *, shared: bool, reason: str = "") -> Lock:
    """The cache's lock: shared to read it, exclusive to (re)prepare it."""
    if shared:
        return lock(cache / LOCK, shared=True, what=f"The corpus cache {cache}",
                    fix="That process is preparing it: start this run again once it has finished, or give this "
                        "run another `cache_dir`.")
    return lock(cache / LOCK, what=f"The corpus cache {cache} must be prepared again ({reason}), but it",
                fix="Rewriting its shards would feed a run reading them another corpus' cells: wait for that run "
                    "to end, or give this run another `cache_dir`.")


_HOLDS: dict[str, Lock] = {}  # caches this process prepared and has not yet opened as a Corpus


def _hold(cache: Path) -> None:
    key = os.path.realpath(cache)
    if key not in _HOLDS:
        _HOLDS[key] = _cache_lock(cache, shared=True)


SHARDS_KEPT = 64


class Corpus:
    """A prepared shard cache: ``len(corpus)`` shards, row lengths, and tokenized row access.

    While it is open (until :meth:`close` or garbage collection) the process holds a shared lock
    on the cache, so no other process can prepare another corpus into it.
    """

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.root = Path(cache_dir)
        self._lock = _cache_lock(self.root, shared=True)
        weakref.finalize(self, self._lock.release)
        held = _HOLDS.pop(os.path.realpath(self.root), None)  # prepare_corpus' lock: this one takes over
        if held is not None:
            held.release()
        meta = json.loads((self.root / MANIFEST).read_text())
        self.meta = meta
        self.paths = [self.root / s["file"] for s in meta["shards"]]
        self.lengths = [np.diff(np.load(p)["indptr"]) for p in self.paths]
        self._cache: dict[int, dict] = {}

    def close(self) -> None:
        """Release the cache's shared lock (the corpus can still be read, unprotected)."""
        self._lock.release()

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def n_cells(self) -> int:
        return int(sum(len(x) for x in self.lengths))

    def load(self, shard: int) -> dict:
        """Shard ``shard``'s arrays; the last :data:`SHARDS_KEPT` shards read stay in memory (batches that
        alternate between sources must not read a file per batch)."""
        if shard not in self._cache:
            with np.load(self.paths[shard]) as z:
                arrays = {k: z[k] for k in z.files}
            if arrays["indices"].dtype.itemsize < 4:  # a shard stored compactly (int16 ids, float16 counts):
                arrays["indices"] = arrays["indices"].astype(np.int32)  # scipy's CSR needs int32 / float32
            if arrays["data"].dtype.itemsize < 4:
                arrays["data"] = arrays["data"].astype(np.float32)
            self._cache[shard] = arrays
            while len(self._cache) > SHARDS_KEPT:
                self._cache.pop(next(iter(self._cache)))
        return self._cache[shard]

    def cells(self, shard: int, rows: np.ndarray) -> TokenizedCells:
        """Tokenize rows ``rows`` of shard ``shard`` (values ``log1p(1e4 c / total)``)."""
        z = self.load(shard)
        n = len(z["indptr"]) - 1
        X = sparse.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(n, int(self.meta["vocab_size"])))
        return tokenize(X[rows], z["totals"][rows])

    def iter_counts(self, chunk: int = 4096):
        """``(counts CSR, totals)`` chunks over the whole corpus (for the coexpression graph)."""
        for s in range(len(self)):
            z = self.load(s)
            n = len(z["indptr"]) - 1
            X = sparse.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(n, int(self.meta["vocab_size"])))
            for a in range(0, n, chunk):
                yield X[a : a + chunk].astype(np.float64), z["totals"][a : a + chunk]

    def unit_rows(self, seed: int, epoch: int, unit: int, n_units: int) -> list[tuple[int, np.ndarray]]:
        """``(shard, shuffled rows)`` assigned to (rank, worker) unit ``unit`` of ``n_units`` in ``epoch``."""
        order = np.random.default_rng([seed, epoch, 1]).permutation(len(self))
        by_shard = len(self) >= n_units
        mine = order[unit::n_units] if by_shard else order
        out = []
        for s in mine:
            rows = np.random.default_rng([seed, epoch, 2, int(s)]).permutation(len(self.lengths[s]))
            out.append((int(s), rows if by_shard else rows[unit::n_units]))
        return out

    def plan(self, seed: int, epoch: int, unit: int, n_units: int, batch_size: int, sort_pool: int):
        """Sortish batches ``(shard, rows)`` of one unit for one epoch (a pure function of its arguments)."""
        rng = np.random.default_rng([seed, epoch, 3, unit])
        for shard, rows in self.unit_rows(seed, epoch, unit, n_units):
            pool = max(1, sort_pool) * batch_size
            for a in range(0, len(rows), pool):
                chunk = rows[a : a + pool]
                chunk = chunk[np.argsort(-self.lengths[shard][chunk], kind="stable")]
                batches = [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
                for j in rng.permutation(len(batches)):
                    yield shard, batches[j]


class ShardStream(torch.utils.data.IterableDataset):
    """Endless stream of :class:`CellBatch` for one rank, split over DataLoader workers.

    With ``W`` workers the DataLoader interleaves workers round-robin, so the rank's ``start``-th
    batch is worker ``start % W``'s ``start // W``-th: each worker skips its own share.
    """

    def __init__(self, corpus: Corpus, *, batch_size: int, seed: int, rank: int = 0, world: int = 1,
                 start: int = 0, sort_pool: int = 64, batching: str = "shard", balance: float = 1.0) -> None:
        super().__init__()
        from .sampling import BATCHINGS

        if batching not in BATCHINGS:
            raise ValueError(f"data.batching={batching!r} is not a batching; use one of {list(BATCHINGS)}.")
        if not 0.0 <= float(balance) <= 1.0:
            raise ValueError(f"data.balance={balance!r} must lie in [0, 1] (1: every cell equally often, "
                             "0: every source equally often).")
        self.corpus, self.batch_size, self.seed = corpus, batch_size, seed
        self.rank, self.world, self.start, self.sort_pool = rank, world, start, sort_pool
        self.batching, self.balance = batching, float(balance)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, n_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        unit, n_units = self.rank * n_workers + worker, self.world * n_workers
        skip = (self.start - worker + n_workers - 1) // n_workers
        if self.batching != "shard":
            from .sampling import plan_batches

            for cells, ids in plan_batches(self.corpus, self.batching, self.balance, self.seed, unit, n_units,
                                           self.batch_size, self.sort_pool, skip):
                yield CellBatch(cells, ids)
            return
        for epoch in count():
            empty = True
            for shard, rows in self.corpus.plan(self.seed, epoch, unit, n_units, self.batch_size, self.sort_pool):
                empty = False
                if skip > 0:
                    skip -= 1
                    continue
                ids = np.stack([np.full(len(rows), shard), self.corpus.load(shard)["rows"][rows]], axis=1)
                yield CellBatch(self.corpus.cells(shard, rows), ids)
            if empty:
                raise ValueError(f"Data unit {unit}/{n_units} received no cells; the corpus is too small.")
