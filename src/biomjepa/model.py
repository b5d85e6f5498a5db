"""``BiomJEPA``: an encoder plus its checkpoint metadata; safetensors + config.json, never pickle.

A checkpoint is a directory holding ``model.safetensors`` (encoder weights, float32 or bfloat16),
``config.json``::

    {"format": "biomjepa-checkpoint", "format_version": 1, "model": {...ModelConfig...},
     "vocab_hash": "...", "weights_sha256": "...", "weights_dtype": "float32",
     "biomjepa_version": "...", "provenance": {...}}

and ``SHA256SUMS``, the manifest: one ``<sha256>  <file>`` line per checkpoint file, sorted by name
(``sha256sum -c SHA256SUMS`` checks it). The sha256 of the manifest itself,
:func:`checkpoint_sha256`, pins the whole checkpoint: it is what ``URL#sha256=`` and a registry
entry's ``checkpoint_sha256`` name. Loading verifies every file the manifest lists (checkpoints
written before the manifest existed: the weights' sha256 recorded in ``config.json``), the
vocabulary hash, and always restores float32.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ._checks import check_readout_record
from ._files import atomic_path, write_text_atomic
from .data.collate import Batch
from .nn.config import ModelConfig
from .nn.encoder import Encoder
from .nn.pooling import pool
from .nn.readout import stats_tensors

FORMAT = "biomjepa-checkpoint"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
MANIFEST = "SHA256SUMS"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupted, or incompatible with this package."""


class BiomJEPA(nn.Module):
    """A frozen-embedding model: :class:`~biomjepa.nn.Encoder` + the checkpoint's pooling (``config.pooling``).

    Attributes
    ----------
    config
        The :class:`~biomjepa.nn.ModelConfig`.
    info
        Checkpoint metadata (name, sha256, vocab hash, provenance) when loaded from disk.
    """

    def __init__(self, config: ModelConfig, info: dict | None = None, readout: dict | None = None) -> None:
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.info = dict(info or {})
        self.readout = readout  # the checkpoint's fixed feature statistics (biomjepa.nn.readout), or None
        stats = stats_tensors(readout, config.embedding_dim, "readout")
        self.register_buffer("feature_mean", None if stats is None else stats[0])
        self.register_buffer("feature_scale", None if stats is None else stats[1])
        self.register_buffer("feature_whiten", None if stats is None else stats[2])

    def hidden(self, batch: Batch) -> torch.Tensor:
        """Token states ``[B, T, D]``."""
        return self.encoder(batch.gene_ids, batch.values, batch.mask)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Cell embeddings ``[B, 2D]`` with the checkpoint's readout (``config.pooling``), standardized
        by the checkpoint's fixed feature statistics when it records them."""
        return self.map_readout(pool(self.hidden(batch), batch.gene_mask, batch.values, self.config.pooling))

    def map_readout(self, z: torch.Tensor) -> torch.Tensor:
        """Pooled readouts ``[B, 2D]`` mapped by the checkpoint's fixed feature statistics (``z`` itself without them)."""
        if self.feature_mean is None:
            return z
        z = (z.float() - self.feature_mean) / self.feature_scale
        if self.feature_whiten is None:
            return z
        # float64: a float32 GEMM rounds differently for different batch sizes (other kernel blocking), and the
        # whitening amplifies it; in float64 every cell's result is the same whatever it is embedded with
        return (z.double() @ self.feature_whiten.double()).float()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _manifest_text(digests: dict[str, str]) -> str:
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests))


def write_manifest(path: str | os.PathLike, files: list[str] | None = None) -> str:
    """Write ``path/SHA256SUMS`` hashing ``files`` (default: every regular file but the manifest and
    temporary files); returns the checkpoint's sha256 (:func:`checkpoint_sha256`)."""
    path = Path(path)
    if files is None:
        files = [p.name for p in path.iterdir() if p.is_file() and p.name != MANIFEST
                 and not p.name.endswith((".tmp", ".part"))]
    text = _manifest_text({name: sha256_file(path / name) for name in files})
    write_text_atomic(path / MANIFEST, text)
    return hashlib.sha256(text.encode()).hexdigest()


def read_manifest(text: str, where: str = MANIFEST) -> dict[str, str]:
    """``{file name: sha256}`` of a manifest's text; plain file names only (no paths). Lines are those of
    ``sha256sum``: ``HEX  NAME``, or ``HEX *NAME`` as ``sha256sum -b`` (binary mode) writes them."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([0-9a-f]{64}) [ *]([^/\\]+)", line)
        if m is None or m.group(2) in (".", "..") or m.group(2) in out:
            raise CheckpointError(f"{where} is not a valid checkpoint manifest (line {line[:100]!r}); the checkpoint is damaged.")
        out[m.group(2)] = m.group(1)
    for name in (CONFIG, WEIGHTS):
        if name not in out:
            raise CheckpointError(f"{where} does not list {name}; the checkpoint is damaged or was assembled by hand.")
    return out


def verify_manifest(path: str | os.PathLike) -> dict[str, str]:
    """Check every file ``path/SHA256SUMS`` lists; returns their digests (``{}`` without a manifest).

    Raises
    ------
    CheckpointError
        A listed file is missing or its sha256 differs (damaged, truncated or edited).
    """
    path = Path(path)
    if not (path / MANIFEST).is_file():
        return {}
    listed = read_manifest((path / MANIFEST).read_text(), str(path / MANIFEST))
    for name, recorded in listed.items():
        if not (path / name).is_file():
            raise CheckpointError(f"{path / name} is missing (listed in {MANIFEST}). Download or export the checkpoint again.")
        digest = sha256_file(path / name)
        if digest != recorded:
            raise CheckpointError(
                f"{path / name} is corrupted or truncated: sha256 {digest[:12]}… does not match the recorded "
                f"{recorded[:12]}… in {MANIFEST} (damaged or edited after export). Download or export it again."
            )
    return listed


def checkpoint_sha256(path: str | os.PathLike, *, verify: bool = True) -> str:
    """The sha256 that pins a whole checkpoint directory: that of its ``SHA256SUMS`` manifest.

    Give it as ``URL#sha256=…`` or as a registry entry's ``checkpoint_sha256``. With ``verify``
    (default) every listed file is checked first. For a checkpoint without a manifest (written
    before it existed) the digest is that of the manifest :func:`save_checkpoint` would write
    for its ``config.json`` and ``model.safetensors``.
    """
    path = Path(path)
    if (path / MANIFEST).is_file():
        if verify:
            verify_manifest(path)
        return hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()
    read_config(path)
    text = _manifest_text({name: sha256_file(path / name) for name in (CONFIG, WEIGHTS)})
    return hashlib.sha256(text.encode()).hexdigest()


def _whole_sha256(path: Path, weights_sha256: str) -> str:
    """:func:`checkpoint_sha256` of a checkpoint being loaded, without hashing its weights a second time."""
    if (path / MANIFEST).is_file():
        return hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()
    text = _manifest_text({CONFIG: sha256_file(path / CONFIG), WEIGHTS: weights_sha256})
    return hashlib.sha256(text.encode()).hexdigest()


def save_checkpoint(
    model: BiomJEPA | Encoder,
    path: str | os.PathLike,
    *,
    provenance: dict | None = None,
    dtype: torch.dtype = torch.float32,
    readout: dict | None = None,
) -> Path:
    """Write ``model``'s encoder to directory ``path`` (created); returns the directory.

    ``dtype=torch.bfloat16`` halves the file; loading restores float32. Files are written to a
    temporary name first and renamed, so a crash never leaves a half-written checkpoint; the
    ``SHA256SUMS`` manifest (:func:`checkpoint_sha256`) is written last. ``readout``: fixed feature
    statistics (:func:`biomjepa.nn.readout.readout_entry`; default: those of a :class:`BiomJEPA`
    ``model``) recorded in ``config.json``.
    """
    from ._version import __version__
    from .data.vocab import Vocab

    encoder = model.encoder if isinstance(model, BiomJEPA) else model
    if readout is None and isinstance(model, BiomJEPA):
        readout = model.readout
    check_readout_record(readout, encoder.config.embedding_dim, "readout")  # refuse bad statistics before writing
    stats_tensors(readout, encoder.config.embedding_dim, "readout")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in encoder.state_dict().items()}
    with atomic_path(path / WEIGHTS) as tmp:
        save_file(tensors, str(tmp), metadata={"format": FORMAT})
    vocab_hash = Vocab.default().hash if encoder.config.vocab_size == Vocab.default().size else None
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": encoder.config.to_dict(),
        "vocab_hash": vocab_hash,
        "weights_sha256": sha256_file(path / WEIGHTS),
        "weights_dtype": str(dtype).replace("torch.", ""),
        "biomjepa_version": __version__,
        "provenance": provenance or {},
    }
    if readout:
        meta["readout"] = readout
    write_text_atomic(path / CONFIG, json.dumps(meta, indent=2, sort_keys=True))
    write_manifest(path, [CONFIG, WEIGHTS])
    return path


def read_config(path: str | os.PathLike) -> dict:
    """Read and validate a checkpoint's ``config.json``."""
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise CheckpointError(
            f"{path} is not a biomjepa checkpoint directory (expected {CONFIG} and {WEIGHTS}). "
            "Create one with `bj.train` export or `biomjepa.model.save_checkpoint`."
        )
    try:
        meta = json.loads((path / CONFIG).read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path / CONFIG} is not valid JSON ({err}); the checkpoint is corrupted.") from err
    if not isinstance(meta, dict):
        raise CheckpointError(f"{path / CONFIG} holds a JSON {type(meta).__name__}, not an object; the checkpoint is corrupted.")
    version = meta.get("format_version", 0)
    if meta.get("format") != FORMAT or not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format {meta.get('format')!r} v{meta.get('format_version')}; this biomjepa "
            f"reads {FORMAT!r} up to v{FORMAT_VERSION}. Upgrade biomjepa."
        )
    return meta


#: ``config.json`` ``model`` keys every checkpoint has (the others default, for older checkpoints).
REQUIRED_MODEL_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "n_value_bins")
_ARCH_KEYS = ("d_model", "n_layers", "n_heads", "d_ff", "n_value_bins")


def model_config(meta: dict, path: str | os.PathLike) -> ModelConfig:
    """The :class:`ModelConfig` of a checkpoint's ``config.json`` (``meta``), every key checked.

    Raises
    ------
    CheckpointError
        ``model`` missing or not an object, a required key missing, a value of the wrong type or
        out of range, or (checkpoints without ``SHA256SUMS``) an architecture other than the one
        its training run recorded in ``provenance``; the message names the file and the key.
    """
    where = Path(path) / CONFIG
    model = meta.get("model")
    if not isinstance(model, dict):
        raise CheckpointError(f"{where}: key 'model' is missing or not an object; the checkpoint is corrupted.")
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in model]
    if missing:
        raise CheckpointError(f"{where}: 'model' lacks the keys {missing}; the checkpoint is corrupted or was edited.")
    types = {f.name: f.type for f in fields(ModelConfig)}
    for key, value in model.items():
        if key not in types:
            raise CheckpointError(f"{where}: unknown key 'model.{key}' (known: {sorted(types)}). Upgrade biomjepa?")
        kind = getattr(types[key], "__name__", str(types[key]))
        want = {"int": (int,), "float": (int, float), "str": (str,)}.get(kind, (object,))
        if isinstance(value, bool) or not isinstance(value, want) or (kind == "int" and value < 1):
            raise CheckpointError(
                f"{where}: 'model.{key}' is {value!r} ({type(value).__name__}); expected {kind}"
                f"{' >= 1' if kind == 'int' else ''}. The checkpoint is corrupted or was edited."
            )
    try:
        config = ModelConfig.from_dict(model)
    except ValueError as err:
        raise CheckpointError(f"{where}: invalid 'model' config: {err}") from err
    _check_provenance(config, meta, where)
    return config


def _check_provenance(config: ModelConfig, meta: dict, where: Path) -> None:
    """Compare the architecture with the one the training run recorded (``provenance.config``)."""
    run = (meta.get("provenance") or {}).get("config") if isinstance(meta.get("provenance"), dict) else None
    if not isinstance(run, dict) or "model" not in run:
        return
    try:
        trained = ModelConfig.preset(run["model"], **(run.get("model_overrides") or {}))
    except (TypeError, ValueError):
        return  # a preset this version does not know: nothing to compare with
    for key in _ARCH_KEYS:
        if getattr(trained, key) != getattr(config, key):
            raise CheckpointError(
                f"{where}: 'model.{key}' is {getattr(config, key)!r}, but the training run that produced these "
                f"weights used {key}={getattr(trained, key)!r} (provenance.config); config.json was edited. "
                "Restore it, or export the checkpoint again with `bj.train.export`."
            )


def _warn_unpinned(path: Path) -> None:
    bundled = Path(__file__).resolve().parent / "_models"
    if bundled in path.resolve().parents:
        return  # bundled checkpoints are pinned by the registry
    warnings.warn(
        f"{path} has no {MANIFEST} manifest, so its {CONFIG} (n_heads, attn_eps, pooling) cannot be checked: an "
        f"edited {CONFIG} would load silently. Re-export it with `bj.train.export(run_dir, out_dir)`, or write a "
        f"manifest on a trusted copy with `biomjepa.model.write_manifest(dir)`.",
        UserWarning,
        stacklevel=3,
    )


def load_checkpoint(path: str | os.PathLike, *, name: str | None = None, verify: bool = True) -> BiomJEPA:
    """Load a checkpoint directory into a float32 :class:`BiomJEPA` in eval mode.

    Raises
    ------
    CheckpointError
        Missing files, a sha256 mismatch (a file corrupted, truncated or edited after export,
        checked against ``SHA256SUMS``), a malformed ``config.json`` (the message names the key),
        a vocabulary other than the bundled one, or weights that do not fit the recorded config.

    Warns
    -----
    UserWarning
        A local checkpoint without ``SHA256SUMS`` (written before the manifest existed): its
        ``config.json`` cannot be verified.
    """
    from .data.vocab import Vocab

    path = Path(path)
    meta = read_config(path)
    listed = verify_manifest(path) if verify else {}
    digest = listed.get(WEIGHTS) or sha256_file(path / WEIGHTS)
    if verify and digest != meta.get("weights_sha256"):
        raise CheckpointError(
            f"{path / WEIGHTS} is corrupted or truncated: sha256 {digest[:12]}… does not match the "
            f"recorded {str(meta.get('weights_sha256'))[:12]}…. Download or export it again."
        )
    config = model_config(meta, path)
    if verify and not listed:
        _warn_unpinned(path)
    vocab = Vocab.default()
    if config.vocab_size != vocab.size or meta.get("vocab_hash") != vocab.hash:
        raise CheckpointError(
            f"{path} was trained on another vocabulary (hash {meta.get('vocab_hash')}, this package "
            f"uses {vocab.hash}). Use a checkpoint built on the bundled 19,264-gene vocabulary."
        )
    try:
        state = {k: v.float() for k, v in load_file(str(path / WEIGHTS)).items()}
    except Exception as err:  # safetensors raises several types for damaged files
        raise CheckpointError(f"Could not read {path / WEIGHTS} ({err}); the file is damaged.") from err
    info = {"name": name or str(path), "path": str(path), "sha256": digest, **meta,
            "checkpoint_sha256": _whole_sha256(path, digest)}
    try:
        check_readout_record(meta.get("readout"), config.embedding_dim, f"{path / CONFIG}: readout")
        stats_tensors(meta.get("readout"), config.embedding_dim, f"{path / CONFIG}: readout")
    except ValueError as err:
        raise CheckpointError(f"{err} The checkpoint is corrupted or was edited.") from err
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"{path / WEIGHTS} holds NaN or Inf weights (in {len(bad)} tensors, e.g. {bad[0]!r}): "
                              "its embeddings would not be finite. Export it again from a healthy training state.")
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten: leave the caller's RNG alone
        model = BiomJEPA(config, info, readout=meta.get("readout")).float()
    try:
        model.encoder.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"Weights in {path} do not match its config: {err}") from err
    return model.eval()
