"""``bj.tl.finetune``: the paper's one-epoch partial fine-tuning, with predictions written back to AnnData.

A ``tl`` function (not ``train``): like scvi-tools' ``model.train()`` + ``predict()``, users call
it on a labelled AnnData and get per-cell predictions back in ``obs``; the tensor-level pieces
(head, trainable-parameter selection, one epoch) live in :mod:`biomjepa.nn.finetune`.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from .._device import dtype_label
from .._docs import doc_params
from .._settings import settings
from ..data.owners import marker
from ..data.resolved import resolve, store
from ._finetune_fit import fit_head, macro_f1
from ._utils import check_batch_size

if TYPE_CHECKING:
    from anndata import AnnData

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
UNLABELLED = "unlabelled"
HEAD_WEIGHTS, HEAD_CONFIG, ENCODER_DIR = "head.safetensors", "head.json", "encoder"
HEAD_FORMAT = "biomjepa-finetune-head"


@doc_params
def finetune(
    adata: AnnData,
    *,
    label_key: str,
    checkpoint: str | None = None,
    layer: str | None = None,
    use_raw: bool = False,
    input: Literal["counts", "reads", "lognorm"] = "counts",
    library_size_key: str | None = None,
    train_frac: float = 0.6,
    valid_frac: float = 0.2,
    epochs: int = 1,
    batch_size: int = 8,
    lr_head: float = 1e-3,
    lr_encoder: float = 5e-5,
    weight_decay: float = 0.01,
    random_state: int = 0,
    device: str = "auto",
    out_dir: str | os.PathLike | None = None,
    mod: str | None = None,
    key_added: str = "biomjepa_finetune",
    copy: bool = False,
) -> AnnData | None:
    """Partially fine-tune a BioM-JEPA encoder on cell labels and predict every cell.

    The paper's protocol (Supp. "Matched efficiency benchmark"): the final encoder block, the
    direct parameters of every encoder LayerNorm and a head ``LayerNorm(4D) → Linear(4D, 8D) →
    GELU → Linear(8D, C)`` are trained with AdamW (betas 0.9, 0.999); everything else is frozen.
    The head sees ``[library-size token ‖ resolution token ‖ gene-wise max ‖ gene-wise mean]`` of
    the final-layer states (the paper's last / second-last control tokens; see
    :mod:`biomjepa.nn.finetune`). Labelled cells are split per class (seeded) into train /
    validation / test; the epoch with the best validation macro-F1 is kept (ties: the earlier).
    Batches are length-sorted (padding per batch only) in shuffled order, in ``bj.settings.precision``
    (float32 by default; ``"bf16"``/``"auto"``: bf16 autocast). Cells whose label is missing (NaN) are not trained on but are predicted.
    Only the train and validation cells are held in memory (read once through the package's
    streaming reader); every cell is then predicted chunk by chunk.
    The checkpoint's cached model is never modified (the encoder is copied).

    Parameters
    ----------
    adata
        AnnData with raw counts, after :func:`biomjepa.pp.map_vocab`, or a MuData (modality ``mod``,
        which holds the labels and receives the results).
    label_key
        ``obs`` column with the class labels; every class needs at least 3 labelled cells (one
        per split), and at least 2 classes are required.
    {checkpoint}
    {layer}
    {use_raw}
    {input}
    {library_size_key}
    train_frac, valid_frac
        Fractions of each class for training and validation; the test split gets the rest
        (``1 - train_frac - valid_frac``, may be 0). Split sizes are rounded up for the
        held-out parts, so 2,133 cells give the paper's 1,279 / 427 / 427.
    epochs
        Training epochs (the paper: 1).
    batch_size
        Cells per optimizer step and per inference batch (the paper: 8).
    lr_head, lr_encoder
        AdamW learning rates of the head and of the trainable encoder parameters.
    weight_decay
        AdamW weight decay, applied to every trainable parameter.
    random_state
        Seed of the split, the head initialisation and the batch order.
    {device}
    out_dir
        If given, write the fine-tuned encoder to ``out_dir/encoder`` (a regular biomjepa
        checkpoint, loadable by :func:`biomjepa.model.load_checkpoint`) and the head to
        ``out_dir/head.safetensors`` + ``out_dir/head.json`` (classes, sha256); reload both with
        :func:`biomjepa.tl._finetune.load_finetuned`. Never pickle.
    {mod}
    key_added
        Prefix of the written keys. A key holding another tool's results is refused before any work (the error names
        a free key); this tool's own earlier results under it are replaced whole.
    {copy_backed}

    Returns
    -------
    ``None`` or a copy (``copy=True``), with (for a MuData, in its modality ``.mod[mod]``)

    ``.obs[f"{key_added}_prediction"]``
        categorical predicted class of every cell.
    ``.obs[f"{key_added}_split"]``
        categorical ``train`` / ``valid`` / ``test`` (``unlabelled`` for cells without a label).
    ``.obsm[f"{key_added}_proba"]``
        float32 ``[n_obs, C]`` class probabilities, columns in ``uns[key_added]["classes"]`` order.
    ``.uns[key_added]``
        ``params`` (``tool``: ``"bj.tl.finetune"``, and all parameters), ``classes``, ``metrics`` (per split:
        ``accuracy``, ``macro_f1``, ``n_cells``),
        ``history`` (per epoch: train loss, validation macro-F1), ``best_epoch``, ``n_trainable``
        (``encoder``, ``head``, ``total``) and ``throughput`` (``train_cells_per_s``: forward +
        backward + optimizer step; ``heldout_cells_per_s``: no-grad encoding + head).
    """
    import pandas as pd

    from .._checks import check_int, check_number
    from .._device import resolve_device
    from .._pretrained import load_model
    from ..data.stream import gather

    batch_size = _check_args(train_frac, valid_frac, epochs, batch_size)
    _check_out_dir(out_dir)  # before training, not after it
    lr_head, lr_encoder = check_number("lr_head", lr_head, low=0, low_open=True), check_number("lr_encoder", lr_encoder, low=0)
    weight_decay = check_number("weight_decay", weight_decay, low=0)
    random_state = check_int("random_state", random_state, low=0, example=0)
    r = resolve(adata, "finetune", key_added, "biomjepa_finetune", mod=mod, copy=copy, layer=layer, use_raw=use_raw,
                input=input, library_size_key=library_size_key)  # before any work: another tool's results stay
    codes, classes = _labels(r.target, label_key)
    split = stratified_split(codes, train_frac, valid_frac, random_state)
    dev = resolve_device(device)
    base = load_model(checkpoint)
    train_cells = gather(r.source, np.flatnonzero(split == "train"), layer=r.layer)
    valid_cells = gather(r.source, np.flatnonzero(split == "valid"), layer=r.layer)
    opts = dict(epochs=epochs, batch_size=batch_size, lr_head=lr_head, lr_encoder=lr_encoder, weight_decay=weight_decay,
                random_state=random_state)
    model, fit = fit_head(base, train_cells, valid_cells, codes, split, len(classes), dev, **opts)
    del train_cells, valid_cells
    proba, heldout_s = _predict_all(model, r.source, r.layer, split, batch_size, dev)
    result = _summary(fit, proba, codes, split, classes, heldout_s)
    result["params"] = {**_params(base, dev, label_key, r.matrix, train_frac, valid_frac), **opts, **r.record}
    if out_dir is not None:
        result["out_dir"] = str(save_finetuned(model, classes, out_dir, base.info, label_key))
    store(r, result, obs={"_prediction": pd.Categorical.from_codes(proba.argmax(1), categories=classes),
                          "_split": _split_column(split)}, obsm={"_proba": proba.astype(np.float32)})
    return r.adata if copy else None


def _check_out_dir(out_dir) -> None:
    """``out_dir`` is None, or a directory that exists or can be created and written to; a clear error otherwise."""
    if out_dir is None:
        return
    if not isinstance(out_dir, (str, os.PathLike)) or not str(out_dir):
        raise TypeError(f"out_dir must be a directory path (str or pathlib.Path) or None, got {out_dir!r}.")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir={str(out)!r} is an existing file, not a directory; pass out_dir= a directory.")
    base = next(p for p in (out, *out.parents) if p.exists())
    if not base.is_dir():
        raise ValueError(f"out_dir={str(out)!r} cannot be created: {str(base)!r} is a file; pass out_dir= a directory.")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError(f"out_dir={str(out)!r} cannot be written: no write permission in {str(base)!r}; pass out_dir= "
                         "a writable directory.")


def _check_args(train_frac: float, valid_frac: float, epochs: int, batch_size: int) -> int:
    if not (0 < train_frac < 1 and 0 < valid_frac < 1 and train_frac + valid_frac <= 1 + 1e-9):
        raise ValueError(
            f"Need 0 < train_frac, 0 < valid_frac and train_frac + valid_frac <= 1; got {train_frac}, {valid_frac}."
        )
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}.")
    return check_batch_size(batch_size, default=8)


def _labels(adata, label_key: str) -> tuple[np.ndarray, list[str]]:
    """Integer class codes ``[n]`` (−1 = missing label) and the class names (sorted)."""
    import pandas as pd

    if label_key not in adata.obs:
        raise KeyError(
            f"Did not find .obs[{label_key!r}]; pass `label_key=` naming the column with cell labels."
        )
    col = adata.obs[label_key]
    labelled = col.notna().to_numpy()
    names = col[labelled].astype(str)
    cat = pd.Categorical(names, categories=sorted(names.unique()))
    codes = np.full(adata.n_obs, -1, dtype=np.int64)
    codes[labelled] = cat.codes
    classes = [str(c) for c in cat.categories]
    if len(classes) < 2:
        raise ValueError(
            f".obs[{label_key!r}] has {len(classes)} labelled class(es); fine-tuning needs at least 2."
        )
    counts = np.bincount(codes[labelled], minlength=len(classes))
    rare = [f"{classes[i]!r} ({counts[i]})" for i in np.flatnonzero(counts < 3)]
    if rare:
        raise ValueError(
            f"Classes of .obs[{label_key!r}] with fewer than 3 cells cannot be split into train/valid/test: "
            f"{', '.join(rare)}. Remove them first (or set their label to NaN to only predict those cells)."
        )
    return codes, classes


def stratified_split(
    codes: np.ndarray, train_frac: float, valid_frac: float, random_state: int
) -> np.ndarray:
    """Seeded per-class split of labelled cells → ``[n]`` array of ``"train"``/``"valid"``/``"test"``.

    Cells with code −1 get ``"unlabelled"``. Test and validation sizes are ``ceil(frac · n)`` of all
    labelled cells, drawn stratified (scikit-learn), so every class with >= 3 cells reaches the
    training split.
    """
    from sklearn.model_selection import train_test_split

    split = np.full(len(codes), UNLABELLED, dtype=object)
    idx = np.flatnonzero(codes >= 0)
    y = codes[idx]
    n, n_classes = len(idx), int(y.max()) + 1
    n_test = math.ceil(round(n * (1 - train_frac - valid_frac), 9))
    n_valid = max(math.ceil(round(n * valid_frac, 9)), n_classes)
    if n_test:
        n_test = max(n_test, n_classes)
        idx, test = train_test_split(idx, test_size=n_test, stratify=y, random_state=random_state)
        split[test] = "test"
    train, valid = train_test_split(idx, test_size=n_valid, stratify=codes[idx], random_state=random_state)
    split[train], split[valid] = "train", "valid"
    return split


def _predict_all(model, adata, layer, split, batch_size, dev) -> tuple[np.ndarray, float]:
    """Probabilities for every cell, streamed chunk by chunk; also the seconds spent on the held-out (non-train) cells."""
    from ..data.stream import iter_tokenized
    from ..nn.finetune import predict_proba

    proba = np.empty((adata.n_obs, model.head[-1].out_features), dtype=np.float32)
    heldout_s = 0.0
    for sl, cells in iter_tokenized(adata, layer=layer):
        is_train = split[sl] == "train"
        for local, heldout in ((np.flatnonzero(is_train), False), (np.flatnonzero(~is_train), True)):
            if len(local):
                proba[sl.start + local], secs = predict_proba(
                    model,
                    cells.subset(local),
                    batch_size=batch_size,
                    device=dev,
                    max_tokens=settings.max_batch_tokens,
                )
                heldout_s += secs if heldout else 0.0
    return proba, heldout_s


def _summary(fit, proba, codes, split, classes, heldout_s) -> dict:
    pred = proba.argmax(1)
    metrics = {}
    for name in SPLITS:
        rows = np.flatnonzero(split == name)
        if len(rows):
            metrics[name] = {
                "accuracy": float((pred[rows] == codes[rows]).mean()),
                "macro_f1": macro_f1(codes[rows], pred[rows]),
                "n_cells": len(rows),
            }
    history = fit["history"]
    if math.isnan(history["valid_macro_f1"][-1]):
        history["valid_macro_f1"][-1] = metrics["valid"]["macro_f1"]
    n_heldout = int((split != "train").sum())
    throughput = {
        "train_cells_per_s": fit["train_cells_per_s"],
        "heldout_cells_per_s": n_heldout / max(heldout_s, 1e-12) if n_heldout else float("nan"),
    }
    return {
        "classes": list(classes),
        "metrics": metrics,
        "history": history,
        "best_epoch": fit["best_epoch"],
        "n_trainable": fit["n_trainable"],
        "throughput": throughput,
    }


def _params(base, dev, label_key, layer, train_frac, valid_frac) -> dict:
    info = base.info
    return {
        **marker("finetune"),
        "checkpoint": info.get("name", "unnamed"),
        "checkpoint_sha256": info.get("checkpoint_sha256", ""),  # every file of the checkpoint
        "weights_sha256": info.get("sha256", ""),
        "label_key": label_key,
        "layer": layer or "X",
        "device": str(dev),
        "dtype": dtype_label(dev),
        "train_frac": train_frac,
        "valid_frac": valid_frac,
        "test_frac": round(1 - train_frac - valid_frac, 9),
        "betas": [0.9, 0.999],
        "pooling": "library_token+resolution_token+gene_max+gene_mean",
        "trainable": "final_block+leaf_layernorms+head",
    }


def _split_column(split: np.ndarray):
    """``obs[f"{key_added}_split"]``: categorical, the splits that occur in their order."""
    import pandas as pd

    return pd.Categorical(split.astype(str), categories=[s for s in (*SPLITS, UNLABELLED) if (split == s).any()])


def save_finetuned(model, classes, out_dir, base_info: dict, label_key: str) -> Path:
    """Write ``out_dir/encoder`` (checkpoint), ``out_dir/head.safetensors`` and ``out_dir/head.json``."""
    from safetensors.torch import save_file

    from ..model import save_checkpoint, sha256_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prov = {
        "kind": "partial-finetune",
        "label_key": label_key,
        "base_checkpoint": base_info.get("name", ""),
        "base_checkpoint_sha256": base_info.get("checkpoint_sha256", ""),  # every file; weights only below
        "base_weights_sha256": base_info.get("sha256", ""),
        "base_provenance": base_info.get("provenance", {}),
    }
    save_checkpoint(model.encoder, out / ENCODER_DIR, provenance=prov)
    state = {k: v.detach().to("cpu").float().contiguous() for k, v in model.head.state_dict().items()}
    save_file(state, str(out / HEAD_WEIGHTS), metadata={"format": HEAD_FORMAT})
    meta = {
        "format": HEAD_FORMAT,
        "format_version": 1,
        "classes": list(classes),
        "label_key": label_key,
        "d_in": 4 * model.config.d_model,
        "n_classes": len(classes),
        "encoder": ENCODER_DIR,
        "pooling": ["library_token", "resolution_token", "gene_max", "gene_mean"],
        "head_sha256": sha256_file(out / HEAD_WEIGHTS),
    }
    (out / HEAD_CONFIG).write_text(json.dumps(meta, indent=2))
    return out


def load_finetuned(out_dir: str | os.PathLike):
    """Reload what ``finetune(out_dir=...)`` wrote → ``(FinetuneModel in eval mode, classes)``.

    Raises
    ------
    ValueError
        If ``head.json`` is missing or the head weights do not match their recorded sha256.
    """
    from safetensors.torch import load_file

    from ..model import load_checkpoint, sha256_file
    from ..nn.finetune import FinetuneModel

    out = Path(out_dir)
    if not (out / HEAD_CONFIG).is_file():
        raise ValueError(f"{out} holds no {HEAD_CONFIG}; write one with `bj.tl.finetune(..., out_dir=)`.")
    meta = json.loads((out / HEAD_CONFIG).read_text())
    if sha256_file(out / HEAD_WEIGHTS) != meta.get("head_sha256"):
        raise ValueError(f"{out / HEAD_WEIGHTS} does not match its recorded sha256; the file is damaged.")
    encoder = load_checkpoint(out / meta.get("encoder", ENCODER_DIR)).encoder
    model = FinetuneModel(encoder, int(meta["n_classes"]))
    model.head.load_state_dict(load_file(str(out / HEAD_WEIGHTS)), strict=True)
    return model.eval(), list(meta["classes"])
