"""A corpus description read and spoken of: its entries, each file once, errors in the caller's words.

:func:`_specs` normalises a corpus description (a path, a glob, a spec, or a list of them) into one spec per
file; :func:`_listed` also remembers the entry each came from and refuses a wrong type and a file listed
twice, so :func:`_in_entry` can name a failing file's entry in the words of the interface that gave it
(``data.corpus[2]`` in training, ``corpus[2]`` for the Python function, flags once the command line maps
them) and give the fix as that entry's keys (``data.corpus[2].species: mouse``), not as Python arguments.
:func:`_cache_dir` refuses a cache directory that is a file; :func:`_identity` records the input files'
size and mtime (and :mod:`~biomjepa.data.input_identity` compares records, a copy of a file being the same file);
:func:`_stale` says why a cache's manifest does not describe these files. Used by :mod:`biomjepa.data.shards` (:func:`~biomjepa.data.shards.prepare_corpus`).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from pathlib import Path

logger = logging.getLogger("biomjepa.data.shards")  # its messages are prepare_corpus'

MANIFEST = "manifest.json"


def _specs(corpus) -> list[dict]:
    """Normalise a corpus description into a list of ``{path, layer, species, gene_key, exclude_obs}``.

    A glob keeps only its ``.h5ad`` / ``.npz`` matches; a path named explicitly must exist and be one
    of those, else the error names it.
    """
    items = [corpus] if isinstance(corpus, (str, os.PathLike, dict)) else list(corpus)
    out = []
    for it in items:
        spec = dict(it) if isinstance(it, dict) else {"path": str(it)}
        unknown = set(spec) - {"path", "layer", "species", "gene_key", "id_type", "exclude_obs", "max_cells", "counts"}
        if unknown:
            raise ValueError(f"Unknown corpus spec keys {sorted(unknown)} in {spec}.")
        path = str(spec["path"])
        if glob.has_magic(path):
            paths = [p for p in sorted(glob.glob(path)) if p.endswith(SUFFIXES)]
        else:
            _check_corpus_file(path)
            paths = [path]
        out += [{**spec, "path": p} for p in paths]
    if not out:
        raise ValueError(f"Corpus {corpus!r} names no .h5ad or .npz file.")
    return out


SUFFIXES = (".h5ad", ".npz")


def _listed(corpus, where: str) -> tuple[list[dict], list[tuple]]:
    """:func:`_specs` of ``corpus`` and, per spec, the entry it came from ``(where, index or None, path)``, so
    that errors name the entry in the caller's words (``data.corpus[2]``). A corpus of another type (``5``),
    an entry of another type and a file named by two entries (trained on twice) are refused."""
    if isinstance(corpus, (str, os.PathLike, dict)):
        items, index = [corpus], [None]
    elif isinstance(corpus, (list, tuple)):
        items, index = list(corpus), list(range(len(corpus)))
    else:
        raise TypeError(f"{where}={corpus!r} ({type(corpus).__name__}): expected an .h5ad/.npz file, a glob, a prepared "
                        f"cache directory, or a list of files and specs ({{path: FILE, species: mouse, ...}}).")
    specs, entries, seen = [], [], {}
    for it, i in zip(items, index):
        label = where if i is None else f"{where}[{i}]"
        if not isinstance(it, (str, os.PathLike, dict)) or (isinstance(it, dict) and "path" not in it):
            raise TypeError(f"{label}={it!r}: expected a file path, a glob, or a spec with a `path` "
                            "({path: FILE, layer: ..., species: ..., gene_key: ...}).")
        path = str(it["path"] if isinstance(it, dict) else it)
        if glob.has_magic(path) and not any(p.endswith(SUFFIXES) for p in glob.glob(path)):
            continue  # a glob matching nothing adds nothing (an empty corpus is refused below)
        try:
            got = _specs([it])
        except (ValueError, OSError) as err:
            raise type(err)(f"{label}: {err}") from None
        for spec in got:  # the same file with the same options twice (not a split by exclude_obs / max_cells)
            real = json.dumps([os.path.realpath(spec["path"]), {k: v for k, v in spec.items() if k != "path"}],
                              sort_keys=True, default=str)
            if real in seen:
                first = seen[real][0]
                raise ValueError(f"{first} and {label} both name {spec['path']}: its cells would be trained on twice. "
                                 "List each file once.")
            seen[real] = (label, i)
            specs.append(spec)
            entries.append((where, i, path))
    if not specs:
        raise ValueError(f"Corpus {corpus!r} ({where}) names no .h5ad or .npz file.")
    return specs, entries


def check_corpus_listing(corpus, where: str = "corpus") -> None:
    """Check a corpus description without reading any cells (:func:`prepare_corpus` does it again): its type,
    its files (existing .h5ad/.npz) and no file listed twice; errors name the entry as ``where`` (``data.corpus``)."""
    _listed(corpus, where)


def _spec_fix(entry: tuple, key: str, value: str) -> str:
    """How to set ``key`` of one corpus entry, as a config would say it (``data.corpus[2].species: mouse``)."""
    where, i, path = entry
    if i is not None:
        return f"`{where}[{i}].{key}: {value}`"
    return f"`{where}: [{{path: {path}, {key}: {value}}}]`"


def _in_entry(err: BaseException, spec: dict, entry: tuple) -> str:
    """The message of an error preparing ``spec``: the file and its entry named, the fix in spec keys (not
    Python arguments: ``data.corpus[2].species: mouse`` instead of ``species="mouse"``)."""
    message = str(err.args[0] if isinstance(err, KeyError) and err.args else err)
    words = {'pass species="mouse"': "set " + _spec_fix(entry, "species", "mouse"),
             'pass id_type="entrez"': "set " + _spec_fix(entry, "id_type", "entrez"),
             "Pass `gene_key=`": "Set " + _spec_fix(entry, "gene_key", "COLUMN"),
             "pass gene_key=": "set " + _spec_fix(entry, "gene_key", "COLUMN"),
             "Pass `layer=` one of them": "Set " + _spec_fix(entry, "layer", "NAME") + " to one of them"}
    for python, spec_words in words.items():
        message = message.replace(python, spec_words)
    message = re.sub(r", or give a table of .* then read\.", ". A corpus entry takes no ortholog table.", message)
    message = re.sub(r"\b(species|gene_key|layer|id_type)=(?:'([^']*)'|None)", r"\1: \2", message)
    where, i, _ = entry
    label = where if i is None else f"{where}[{i}]"
    if "is empty (0 cells" in message:
        message += f" Remove the file from the corpus ({label})."
    return f"Corpus file {spec['path']} ({label}): {message}"


def _check_corpus_file(path: str) -> None:
    """A corpus file named explicitly: a readable ``.h5ad`` (HDF5) or a prepared ``.npz`` shard; a directory,
    an empty, text or other file is refused naming it (:func:`~biomjepa.data.files.check_h5ad_file`)."""
    from .files import check_h5ad_file

    if (Path(path) / MANIFEST).is_file():
        raise ValueError(f"Corpus entry {path} is a prepared corpus cache: give it alone (corpus: {path}), not with "
                         "other files or in a list.")
    check_h5ad_file(path, what="Corpus entry " if Path(path).is_dir() else "Corpus file ", allow_npz=True)
    if not path.endswith(SUFFIXES):
        raise ValueError(
            f"Corpus file {path} is not named .h5ad or .npz; rename it (an .h5ad file written by anndata, or an "
            ".npz shard prepared by bj.train)."
        )


def _cache_dir(cache_dir, cache_where: str) -> Path:
    """``cache_dir`` as an existing directory (created if missing); a file in its place is refused in words."""
    cache = Path(cache_dir)
    if cache.exists() and not cache.is_dir():
        raise NotADirectoryError(f"{cache_where}={str(cache)!r} is a file, not a directory: the corpus shards are "
                                 f"written into a directory. Set {cache_where} to a directory (created if missing), "
                                 "or move the file away.")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise type(err)(f"{cache_where}={str(cache)!r} cannot be created ({err.strerror or err}): set {cache_where} to "
                        "a directory this process can write.") from None
    return cache


def _identity(specs: list[dict]) -> list[dict]:
    """``{path, size, mtime_ns}`` of every input file: the corpus files and ``exclude_obs`` files."""
    out: dict[str, dict] = {}
    for spec in specs:
        for p in (spec["path"], spec.get("exclude_obs")):
            if p is not None and str(p) not in out and Path(p).is_file():
                st = os.stat(p)
                out[str(p)] = {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return list(out.values())


def corpus_inputs(corpus) -> list[dict]:
    """``{path, size, mtime_ns}`` of every input file of a corpus description (what a manifest's ``inputs`` records)."""
    return _identity(_specs(corpus))


def changed_inputs(recorded: list[dict], now: list[dict]) -> list[str]:
    """Paths whose file differs between two ``inputs`` records (or that are in one only): another size, or another
    mtime and, where ``recorded`` holds the file's sha256, other bytes (:mod:`~biomjepa.data.input_identity`)."""
    return _changed(recorded, now)


def _changed(recorded: list[dict], now: list[dict]) -> list[str]:
    """:func:`changed_inputs` (a copy of a file, same bytes and a new mtime, is the same file where a digest is recorded)."""
    from .input_identity import changed

    return changed(recorded, now)


def _stale(cache: Path, key: str, inputs: list[dict]) -> str | None:
    """Why ``cache`` must be prepared again, or ``None`` when it holds this corpus, from these very files.

    A manifest written before the inputs were recorded is trusted (its ``key`` is unchanged) and
    its inputs are recorded now, unless an input is newer than the manifest: then a warning. Inputs copied since
    (the same bytes, new mtimes: :mod:`~biomjepa.data.input_identity`) are recorded with their new mtimes.
    """
    man = cache / MANIFEST
    try:
        meta = json.loads(man.read_text())
    except FileNotFoundError:
        return "it holds no prepared corpus"
    except (OSError, ValueError):
        return f"its {MANIFEST} is unreadable"
    if meta.get("key") != key:
        return "it was prepared for another corpus or other options"
    if "inputs" in meta:
        changed = _changed(meta["inputs"], inputs)
        if changed:
            return f"{', '.join(changed)} changed since it was prepared"
        from .input_identity import refreshed

        _record_inputs(man, meta, refreshed(meta["inputs"], inputs))  # copied files: their new mtimes, not hashed again
        return None
    newer = [i["path"] for i in inputs if i["mtime_ns"] > man.stat().st_mtime_ns]
    if newer:
        logger.warning("The corpus cache %s was prepared by an older biomjepa that did not record its inputs, and "
                       "%s changed after it; delete %s to prepare it again.", cache, ", ".join(newer), man)
        return None
    _record_inputs(man, meta, inputs)
    return None


def _record_inputs(man: Path, meta: dict, inputs: list[dict] | None) -> None:
    """Record ``inputs`` in the manifest ``man`` (``None``: nothing to record; a read-only cache: left as it is)."""
    from .._files import write_text_atomic

    if inputs is None:
        return
    try:
        write_text_atomic(man, json.dumps({**meta, "inputs": inputs}, indent=2))
    except OSError as err:  # a read-only cache
        logger.debug("could not record the inputs of %s: %s", man.parent, err)
