"""Registry of named checkpoints, URL downloads into ``settings.cachedir``, and a lazy model cache.

A checkpoint reference is one of

- a registry name (``bj.settings.checkpoint``, default ``"biomjepa-mini"`` once bundled);
- a local checkpoint directory (``config.json`` + ``model.safetensors``);
- an ``http(s)://`` base URL serving ``config.json`` and ``model.safetensors``, with the expected
  sha256 of ``model.safetensors`` given as ``"URL#sha256=HEX"`` or ``sha256=`` (downloads are verified).
"""

from __future__ import annotations

import logging
import os
import shutil
import urllib.request
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ._settings import settings

logger = logging.getLogger(__name__)

#: Named checkpoints: name → {"path": package-relative dir | "url": base URL, "sha256": weights hash}.
#: ``biomjepa-mini`` is bundled inside the package (``docs/model_card.md``; produced by
#: ``models/biomjepa-mini-v0.1.yaml`` and ``scripts/export_bundled.py``).
REGISTRY: dict[str, dict] = {
    "biomjepa-mini": {
        "path": "_models/biomjepa-mini-v0.1",
        "version": "0.1",
        "sha256": "8c6a2a76b8b1664fa352ffe6b7f9c89950bd21f9724fd115fdfc680099f60152",
    },
}


def _bundled_dir(rel: str) -> Path:
    return Path(str(resources.files("biomjepa"))) / rel


def resolve_checkpoint(checkpoint: str | os.PathLike | None = None, *, sha256: str | None = None) -> tuple[Path, str]:
    """Turn a checkpoint reference into ``(local directory, display name)``, downloading if needed."""
    ref = settings.checkpoint if checkpoint is None else checkpoint
    ref = str(ref)
    if ref in REGISTRY:
        entry = REGISTRY[ref]
        if "path" in entry:
            path = _bundled_dir(entry["path"])
            _check_registered(path, entry, ref)
            return path, f"{ref}-v{entry.get('version', '?')}"
        return _download(entry["url"], entry["sha256"]), ref
    if ref.startswith(("http://", "https://")):
        url, _, frag = ref.partition("#")
        sha256 = sha256 or (frag.split("=", 1)[1] if frag.startswith("sha256=") else None)
        if sha256 is None:
            raise ValueError(f"Downloading {url} needs its sha256: pass `{url}#sha256=<hex>` or sha256=.")
        return _download(url, sha256), url
    path = Path(ref).expanduser()
    if path.exists():
        return path, str(path)
    known = ", ".join(sorted(REGISTRY)) or "none bundled in this version"
    raise FileNotFoundError(
        f"Checkpoint {ref!r} is neither a registered name ({known}), an existing directory, nor an "
        "http(s) URL. Pass `checkpoint=` a directory exported by `bj.train` or set `bj.settings.checkpoint`."
    )


def _check_registered(path: Path, entry: dict, name: str) -> None:
    """The bundled config must record the sha256 the registry pins (the weights are checked on load)."""
    import json

    from .model import CONFIG

    recorded = json.loads((path / CONFIG).read_text()).get("weights_sha256")
    if recorded != entry["sha256"]:
        raise ValueError(f"Bundled checkpoint {name!r} does not match its registry sha256; reinstall biomjepa.")


def _download(url: str, sha256: str) -> Path:
    """Fetch ``url/config.json`` and ``url/model.safetensors`` into the cache, verified by sha256."""
    from .model import CONFIG, WEIGHTS, sha256_file

    target = settings.cachedir / "checkpoints" / sha256[:16]
    if (target / WEIGHTS).is_file() and sha256_file(target / WEIGHTS) == sha256:
        return target
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"Cannot create the cache directory {target} ({err}). Set a writable one with "
            "`bj.settings.cachedir = '/path'` or the BIOMJEPA_CACHE environment variable."
        ) from err
    base = url.rstrip("/")
    for fname in (CONFIG, WEIGHTS):
        tmp = target / (fname + ".part")
        logger.info("Downloading %s/%s", base, fname)
        with urllib.request.urlopen(f"{base}/{fname}", timeout=60) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        os.replace(tmp, target / fname)
    digest = sha256_file(target / WEIGHTS)
    if digest != sha256:
        (target / WEIGHTS).unlink()
        raise ValueError(f"Downloaded weights from {url} have sha256 {digest}, expected {sha256}; refusing them.")
    return target


@lru_cache(maxsize=4)
def _load_cached(path: str, name: str, mtime: float):
    from .model import load_checkpoint

    return load_checkpoint(path, name=name)


def load_model(checkpoint: str | os.PathLike | None = None, *, sha256: str | None = None):
    """Load (once, then reuse) a :class:`~biomjepa.model.BiomJEPA` in eval mode on CPU.

    Parameters
    ----------
    checkpoint
        Registry name, checkpoint directory or URL; default ``bj.settings.checkpoint``.
    sha256
        Expected sha256 of ``model.safetensors`` for URLs.

    Returns
    -------
    The cached model; later calls with the same checkpoint return the same object.
    """
    path, name = resolve_checkpoint(checkpoint, sha256=sha256)
    from .model import WEIGHTS

    mtime = (path / WEIGHTS).stat().st_mtime if (path / WEIGHTS).exists() else 0.0
    return _load_cached(str(path.resolve()), name, mtime)
