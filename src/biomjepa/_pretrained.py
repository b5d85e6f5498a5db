"""Registry of named checkpoints, URL downloads into ``settings.cachedir``, and a lazy model cache.

A checkpoint reference is one of

- a registry name (``bj.settings.checkpoint``, default ``"biomjepa-mini"`` once bundled), optionally pinned:
  ``"biomjepa-mini#sha256=HEX"`` refuses it unless its whole-checkpoint sha256 is ``HEX``;
- a local checkpoint directory (``config.json`` + ``model.safetensors``), optionally pinned as a URL is:
  ``"DIR#sha256=HEX"`` (or ``sha256=``; the key in any case) refuses it unless its whole-checkpoint sha256 is ``HEX``;
- an ``http(s)://`` base URL serving the checkpoint's files, pinned by the sha256 of the whole
  checkpoint (:func:`biomjepa.model.checkpoint_sha256`, the hash of its ``SHA256SUMS`` manifest)
  given as ``"URL#sha256=HEX"`` or ``sha256=``: every downloaded file is verified. A download
  shows a progress bar at ``bj.settings.verbosity >= 2`` and stops with an error once it has
  taken ``bj.settings.download_timeout`` seconds, however slowly the server trickles.

:func:`load_model` loads a checkpoint once and hands every caller its own module sharing the
cached weights: moving it to another device (``model.to("cuda")``) or switching its mode never
changes what the next caller gets.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
import urllib.error
import urllib.request
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ._files import _umask, atomic_path
from ._progress import interactive
from ._references import hex_digest as _hex_digest
from ._settings import settings

logger = logging.getLogger(__name__)

#: Named checkpoints: name → {"path": package-relative dir | "url": base URL, "version": "…",
#: "checkpoint_sha256": the whole checkpoint's sha256 (:func:`biomjepa.model.checkpoint_sha256`, that
#: of its SHA256SUMS manifest, which pins every file; ``bj.tl.embed`` records it as
#: ``uns["biomjepa"]["params"]["checkpoint_sha256"]``), "sha256": the weights' sha256 (as recorded in
#: config.json and as ``params["weights_sha256"]``)}. Entries of checkpoints written before the manifest
#: existed carry "sha256" only. ``biomjepa-mini`` (:data:`DEFAULT_ALIAS`) names the default: the same entry
#: as its versioned name (today ``biomjepa-mini-v0.5``), loaded and recorded under the versioned name.
#: v0.5 is bundled inside the package (``docs/model_card.md``): v0.4's encoder continued for 3,000 steps on the
#: v0.5 corpus (``models/biomjepa-mini-v0.5.yaml`` with ``model.init_from=biomjepa-mini-v0.4``), its EMA teacher
#: read out with the paper's ``max_top5`` and a fixed per-feature standardization measured on its own training
#: corpus (``scripts/export_bundled.py --feature-cells 4096``), chosen on the three validation tissues. v0.4 (the
#: step-2,000 teacher of ``models/biomjepa-mini-v0.4.yaml``, the same readout and map) and v0.3 stay loadable by
#: name.
REGISTRY: dict[str, dict] = {
    # the default since 2026-11-29: v0.4 continued on the v0.5 corpus (36,577 cells, every whole-transcriptome file
    # of shared/data but the held-out ones) for 192,000 presentations, the step-3,000 teacher, max_top5, with a
    # fixed standardization measured on 4,096 cells of its corpus, chosen on the three validation tissues by the
    # rule of issue 54 (docs/model_card.md)
    "biomjepa-mini-v0.5": {
        "path": "_models/biomjepa-mini-v0.5",
        "version": "0.5",
        "checkpoint_sha256": "3cd1d7a9523550f60357683cc7524b4eb48ec923f731c72cf2af539e3be4b2ab",  # SHA256SUMS
        "sha256": "f7de74a7dac2df04b4192ff7fd9c9122aef9a3cb1f0851131813a0ce76b350c6",  # model.safetensors
    },
    # the previous default (2026-11-27 to 29): the step-2,000 teacher of the 512,000-presentation run of
    # models/biomjepa-mini-v0.4.yaml (every tissue, reads on the UMI scale, one-source batches), max_top5, with a
    # fixed standardization measured on 4,096 cells of its corpus, chosen on the two validation tissues by the rule
    # of issue 43 (docs/model_card.md)
    "biomjepa-mini-v0.4": {
        "path": "_models/biomjepa-mini-v0.4",
        "version": "0.4",
        "checkpoint_sha256": "7ca7fccff92b2c4daeecfc21f1e7e4ee39c45137142773365f682503e2370e96",  # SHA256SUMS
        "sha256": "83a4614604b5101c9f9128ba34f08fae35c8c240ab1623db13244d0b5f5daaab",  # model.safetensors
    },
    # the default before it (2026-11-25 to 27)
    "biomjepa-mini-v0.3": {
        "path": "_models/biomjepa-mini-v0.3",
        "version": "0.3",
        "checkpoint_sha256": "b57cbb1979b878985e0f2e351c2a6953cd4c6fefc6fd6c21f522bca6cfd9794f",  # SHA256SUMS
        "sha256": "1cd8ee3fb026453128a5e44e3af804435895c5b6f9b445bf364d9b873e7edf89",  # model.safetensors
    },
    # the previous default: the v0.2 weights with a fixed readout map (standardization, then ZCA whitening
    # shrunk by 0.1), measured on v0.2's training corpus
    "biomjepa-mini-v0.2.1": {
        "path": "_models/biomjepa-mini-v0.2.1",
        "weights_from": "_models/biomjepa-mini-v0.2",  # the package holds the shared weights once
        "version": "0.2.1",
        "checkpoint_sha256": "fb9f735b95f27261ddefa7c0a213b7e355175a1e64633b965b1bd797816ee12b",  # SHA256SUMS
        "sha256": "c639180369e587ceae87e8228d05bd857a19b9cf45fa922968f70f375ae19cb1",  # model.safetensors
    },
    # the same weights without fixed feature statistics (embeddings stored from v0.2 differ from v0.2.1's)
    "biomjepa-mini-v0.2": {
        "path": "_models/biomjepa-mini-v0.2",
        "version": "0.2",
        "checkpoint_sha256": "27618837aaec17a197d47b31e8879ac578744a586e24994515cbbab541f0e46f",  # SHA256SUMS
        "sha256": "c639180369e587ceae87e8228d05bd857a19b9cf45fa922968f70f375ae19cb1",  # model.safetensors
    },
    # the first default (depth-dominated embedding, docs/model_card.md), kept for comparison and max-token analyses
    "biomjepa-mini-v0.1": {
        "path": "_models/biomjepa-mini-v0.1",
        "version": "0.1",
        "sha256": "8c6a2a76b8b1664fa352ffe6b7f9c89950bd21f9724fd115fdfc680099f60152",
    },
}
#: The default's name (``bj.settings.checkpoint``): an alias of the current release's entry, the same files.
DEFAULT_ALIAS, DEFAULT_RELEASE = "biomjepa-mini", "biomjepa-mini-v0.5"
REGISTRY[DEFAULT_ALIAS] = REGISTRY[DEFAULT_RELEASE]


def _bundled_dir(rel: str) -> Path:
    return Path(str(resources.files("biomjepa"))) / rel


def _bundled_path(entry: dict) -> Path:
    """The directory of a bundled registry entry; one with ``weights_from`` (v0.2.1: v0.2's weights behind its own
    readout map, held once in the package) is put together in ``settings.cachedir`` (:mod:`biomjepa._shared_weights`)."""
    path = _bundled_dir(entry["path"])
    if "weights_from" not in entry:
        return path
    from ._shared_weights import put_together

    return put_together(path, _bundled_dir(entry["weights_from"]), settings.cachedir, entry["checkpoint_sha256"])


def resolve_checkpoint(checkpoint: str | os.PathLike | None = None, *, sha256: str | None = None) -> tuple[Path, str]:
    """Turn a checkpoint reference into ``(local directory, display name)``, downloading if needed.

    ``sha256`` (or ``#sha256=HEX`` after a registered name, a URL or a directory; the key in any case) pins the whole
    checkpoint (:func:`biomjepa.model.checkpoint_sha256`): a URL is downloaded and a directory or a registered
    checkpoint loaded only if it matches. The reference's form is checked first (:func:`biomjepa._references.
    parse_reference`).
    """
    from ._references import parse_reference

    kind, ref, pin = parse_reference(settings.checkpoint if checkpoint is None else checkpoint, sha256,
                                     registry=REGISTRY)
    if kind == "name":
        entry = REGISTRY[ref]
        if "path" not in entry:
            registered = entry.get("checkpoint_sha256") or entry["sha256"]
            if pin is not None and pin != registered:
                raise ValueError(f"Checkpoint {ref!r} is registered with sha256 {registered}, expected {pin}; refusing "
                                 f"it.{_pinned_elsewhere(pin, ref)}")
            return _download(entry["url"], registered), ref
        path = _bundled_path(entry)
        _check_registered(path, entry, ref)
        if pin is not None:
            _check_pin(path, pin, repr(ref), hint=_pinned_elsewhere(pin, ref))
        version = f"-v{entry.get('version', '?')}"
        return path, ref if ref.endswith(version) else ref + version
    if kind == "url":
        return _download(ref, pin), ref
    path = Path(ref).expanduser()
    if pin is not None:
        _check_pin(path, pin, str(path))
    return path, str(path)


def _check_registered(path: Path, entry: dict, name: str) -> None:
    """A bundled checkpoint must match its registry pins (each listed file is checked again on load).

    ``checkpoint_sha256`` pins every file (through the ``SHA256SUMS`` manifest, or the files
    themselves if the manifest is gone); ``sha256`` the weights, as recorded in ``config.json``.
    """
    import json

    from .model import CONFIG, checkpoint_sha256

    if "checkpoint_sha256" in entry and checkpoint_sha256(path, verify=False) != entry["checkpoint_sha256"]:
        raise ValueError(f"Bundled checkpoint {name!r} does not match its registry checkpoint_sha256; reinstall biomjepa.")
    if "sha256" in entry and json.loads((path / CONFIG).read_text()).get("weights_sha256") != entry["sha256"]:
        raise ValueError(f"Bundled checkpoint {name!r} does not match its registry sha256; reinstall biomjepa.")


def _pinned_elsewhere(pin: str, ref: str) -> str:
    """When ``pin`` is another registered checkpoint's (a script pinned ``biomjepa-mini`` before a release moved the
    name on), the sentence naming that checkpoint and its pin; else ``""``."""
    pin = _hex_digest(pin)
    names = [name for name, entry in REGISTRY.items() if entry is not REGISTRY[ref] and name != DEFAULT_ALIAS
             and pin in (entry.get("checkpoint_sha256"), entry.get("sha256"))]
    if not names:
        return ""
    whole = REGISTRY[names[0]].get("checkpoint_sha256") or REGISTRY[names[0]]["sha256"]
    moved = f" ({ref!r} names the newer release {DEFAULT_RELEASE!r})" if ref == DEFAULT_ALIAS else ""
    return (f" That digest is now {' and '.join(map(repr, names))}{moved}: give '{names[0]}#sha256={whole}' to "
            "keep loading the checkpoint it pinned.")


def _check_pin(path: Path, digest: str, where: str, hint: str = "") -> None:
    """Refuse a checkpoint directory whose :func:`~biomjepa.model.checkpoint_sha256` is not ``digest`` (``hint``: a
    sentence added to the refusal, :func:`_pinned_elsewhere`)."""
    from .model import WEIGHTS, checkpoint_sha256, sha256_file

    digest = _hex_digest(digest)
    actual = checkpoint_sha256(path)
    if actual == digest:
        return
    if (path / WEIGHTS).is_file() and sha256_file(path / WEIGHTS) == digest:
        raise ValueError(
            f"sha256={digest[:12]}… pins only {WEIGHTS} of {where}, which leaves config.json (heads, eps, "
            f"pooling) unpinned. Pin the whole checkpoint: its sha256 is {actual} for these files "
            "(compute it on a trusted copy with `biomjepa.model.checkpoint_sha256(dir)`)."
        )
    raise ValueError(f"Checkpoint {where} has sha256 {actual}, expected {digest}; refusing it.{hint}")


#: The longest a single read may wait for data (less when the download's deadline is nearer).
READ_TIMEOUT = 60.0


class DownloadTimeout(TimeoutError):
    """A checkpoint download did not finish within ``bj.settings.download_timeout``."""


def _fetch(url: str, dest: Path, deadline: float) -> bool:
    """Download ``url`` to ``dest`` (through a temporary file) before ``deadline`` (``time.monotonic``);
    ``False`` on HTTP 404."""
    logger.info("Downloading %s", url)
    try:
        with (atomic_path(dest, suffix=".part") as tmp, open(tmp, "wb") as f,
              urllib.request.urlopen(url, timeout=_read_timeout(url, deadline)) as r):
            _copy(r, f, url, deadline)
    except DownloadTimeout:
        raise
    except urllib.error.URLError as err:  # HTTPError included
        if getattr(err, "code", None) == 404:
            return False
        _raise_if_late(url, deadline, err)
        raise OSError(
            f"Could not download {url}: {getattr(err, 'reason', err)}. Check the URL and the network, or download "
            "the checkpoint's files (SHA256SUMS, config.json, model.safetensors) yourself and pass their directory "
            "as `checkpoint=`."
        ) from err
    except OSError as err:  # timeouts, connection resets
        _raise_if_late(url, deadline, err)
        raise OSError(
            f"Could not download {url}: {err}. Retry, or download the checkpoint's files yourself and pass their "
            "directory as `checkpoint=`."
        ) from err
    return True


def _copy(r, f, url: str, deadline: float) -> None:
    """Copy response ``r`` into file ``f`` with a progress bar (verbosity >= 2), stopping at ``deadline``."""
    from tqdm.auto import tqdm

    from ._stops import stop_point

    sock = getattr(getattr(r.fp, "raw", None), "_sock", None)  # to shorten each read's timeout near the deadline
    size = r.headers.get("Content-Length")
    with tqdm(total=int(size) if size and size.isdigit() else None, unit="B", unit_scale=True, unit_divisor=1024,
              desc=url.rsplit("/", 1)[-1], disable=not (settings.show_progress and interactive()), leave=False) as bar:
        while True:
            timeout = _read_timeout(url, deadline)
            if sock is not None:
                sock.settimeout(timeout)
            stop_point()  # a stop a command recorded acts between chunks (biomjepa._stops); the partial file goes
            chunk = r.read1(1 << 20)
            if not chunk:
                return
            f.write(chunk)
            bar.update(len(chunk))


def _read_timeout(url: str, deadline: float) -> float:
    left = deadline - time.monotonic()
    _raise_if_late(url, deadline, None)
    return min(READ_TIMEOUT, max(left, 0.01))


def _raise_if_late(url: str, deadline: float, err: Exception | None) -> None:
    if time.monotonic() >= deadline:
        raise DownloadTimeout(
            f"Downloading {url} did not finish within bj.settings.download_timeout = {settings.download_timeout:g} s. "
            "Check the network or the server, raise `bj.settings.download_timeout`, or download the checkpoint's "
            "files (SHA256SUMS, config.json, model.safetensors) yourself and pass their directory as `checkpoint=`."
        ) from err


def _download(url: str, sha256: str) -> Path:
    """Fetch a checkpoint from base ``url`` into the cache, verified against its pin ``sha256``.

    The pin is the sha256 of the checkpoint's ``SHA256SUMS`` manifest; every file it lists is
    downloaded and checked. A server without a manifest (checkpoints written before it existed)
    serves ``config.json`` and ``model.safetensors``, whose manifest is computed here.
    """
    from .model import MANIFEST

    digest = _hex_digest(sha256)
    target = settings.cachedir / "checkpoints" / digest[:16]
    if (target / MANIFEST).is_file() and hashlib.sha256((target / MANIFEST).read_bytes()).hexdigest() == digest:
        return target  # the files are verified against the manifest when loaded
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"Cannot create the cache directory {target} ({err}). Set a writable one with "
            "`bj.settings.cachedir = '/path'` or the BIOMJEPA_CACHE environment variable."
        ) from err
    base = url.rstrip("/")
    deadline = time.monotonic() + settings.download_timeout  # one deadline for all the files
    (target / MANIFEST).unlink(missing_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".download", dir=target)
    os.close(fd)
    manifest = Path(name)
    try:
        return _download_files(url, base, target, manifest, digest, deadline)
    finally:
        manifest.unlink(missing_ok=True)


def _download_files(url: str, base: str, target: Path, manifest: Path, digest: str, deadline: float) -> Path:
    """The files of :func:`_download`; ``manifest``: the (random, exclusive) file the manifest is fetched into."""
    from .model import CONFIG, MANIFEST, WEIGHTS, read_manifest

    served = _fetch(f"{base}/{MANIFEST}", manifest, deadline)
    if served:
        actual = hashlib.sha256(manifest.read_bytes()).hexdigest()
        listed = read_manifest(manifest.read_text(), f"{base}/{MANIFEST}")
        if actual != digest:
            manifest.unlink()
            if listed.get(WEIGHTS) == digest:
                raise ValueError(
                    f"sha256={digest[:12]}… pins only {WEIGHTS} of {url}, which leaves config.json unpinned. Pin the "
                    f"whole checkpoint: its manifest's sha256 is {actual} (check it against a trusted copy with "
                    "`biomjepa.model.checkpoint_sha256(dir)`)."
                )
            raise ValueError(f"The checkpoint manifest {base}/{MANIFEST} has sha256 {actual}, expected {digest}; refusing it.")
        files = list(listed)
    else:
        files = [CONFIG, WEIGHTS]
    for name in files:
        if not _fetch(f"{base}/{name}", target / name, deadline):
            raise FileNotFoundError(
                f"{base}/{name} does not exist (HTTP 404); is {url} the base URL of a biomjepa checkpoint (the "
                "directory holding config.json and model.safetensors)? Or download the files yourself and pass "
                "their directory as `checkpoint=`."
            )
    if served:
        os.chmod(manifest, 0o666 & ~_umask())  # mkstemp made it 0600: a shared cache must stay readable to others
        os.replace(manifest, target / MANIFEST)
    try:
        _check_pin(target, digest, url)
    except Exception:
        for name in (*files, MANIFEST):
            (target / name).unlink(missing_ok=True)
        raise
    if not (target / MANIFEST).is_file():
        from .model import write_manifest

        write_manifest(target, [CONFIG, WEIGHTS])
    return target


@lru_cache(maxsize=4)
def _load_cached(path: str, name: str, stamp: tuple):
    from .model import load_checkpoint

    return load_checkpoint(path, name=name)


def _view(model):
    """A new module sharing ``model``'s weight tensors: ``.to(device)``, ``.train()`` or replacing a
    parameter on the view leave ``model`` (the cached one) as it is."""
    import copy
    from itertools import chain

    import torch

    with torch.device("meta"):  # structure only; the weights come from the cached model
        view = type(model)(model.config, copy.deepcopy(model.info), readout=copy.deepcopy(model.readout))
    view.load_state_dict(model.state_dict(), strict=True, assign=True)
    if any(t.is_meta for t in chain(view.parameters(), view.buffers())):  # state kept outside state_dict
        view = copy.deepcopy(model)
    return view.eval()


def load_model(checkpoint: str | os.PathLike | None = None, *, sha256: str | None = None):
    """Load (once, then reuse) a :class:`~biomjepa.model.BiomJEPA` in eval mode on CPU.

    Parameters
    ----------
    checkpoint
        Registry name, checkpoint directory or URL; default ``bj.settings.checkpoint``.
    sha256
        Expected sha256 of the whole checkpoint (:func:`biomjepa.model.checkpoint_sha256`, the
        hash of its ``SHA256SUMS`` manifest); required for URLs, checked for directories.

    Returns
    -------
    A CPU model of your own that shares the cached weights (loaded and verified once per
    checkpoint): moving it to a device or changing its mode does not affect later calls.
    """
    from .model import CONFIG, MANIFEST, WEIGHTS

    path, name = resolve_checkpoint(checkpoint, sha256=sha256)
    stamp = tuple((path / f).stat().st_mtime_ns if (path / f).exists() else 0 for f in (CONFIG, WEIGHTS, MANIFEST))
    return _view(_load_cached(str(path.resolve()), name, stamp))
