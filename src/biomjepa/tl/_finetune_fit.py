"""Fitting the fine-tune head (and the last encoder block) on the train split of :func:`biomjepa.tl.finetune`."""

from __future__ import annotations

import copy as _copy
import logging

import numpy as np

from .._settings import settings

logger = logging.getLogger("biomjepa.tl._finetune")


def fit_head(
    base,
    train_cells,
    valid_cells,
    codes,
    split,
    n_classes,
    dev,
    *,
    epochs,
    batch_size,
    lr_head,
    lr_encoder,
    weight_decay,
    random_state,
):
    """Train a copy of ``base``'s encoder + a new head on the (in-memory) train split; returns ``(model, fit info)``.

    The train and validation cells are the only ones held in memory: an epoch shuffles the whole
    train split, so it is read once (:func:`biomjepa.data.stream.gather`) and reused every epoch.
    """
    import torch

    from .._progress import progress_bar
    from ..nn import finetune as ft

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(random_state)
        model = ft.FinetuneModel(_copy.deepcopy(base.encoder), n_classes)
    n_trainable = ft.mark_trainable(model)
    model = model.to(dev)
    opt = ft.make_optimizer(model, lr_head=lr_head, lr_encoder=lr_encoder, weight_decay=weight_decay)
    rng = np.random.default_rng(random_state)
    train, valid = np.flatnonzero(split == "train"), np.flatnonzero(split == "valid")
    history = {"epoch": [], "train_loss": [], "valid_macro_f1": []}
    best, best_f1, seconds = None, -1.0, 0.0
    bar = progress_bar(total=epochs * len(train), unit="cell", desc="finetune")
    for epoch in range(1, epochs + 1):
        stats = ft.train_epoch(model, train_cells, codes[train], opt, batch_size=batch_size, rng=rng, device=dev,
                               max_tokens=settings.max_batch_tokens, progress=bar.update)
        seconds += stats["seconds"]
        f1 = float("nan")
        if epochs > 1:  # with one epoch there is nothing to select; valid F1 comes from the final pass
            f1 = _valid_f1(model, valid_cells, codes[valid], batch_size, dev)
            if f1 > best_f1:
                best, best_f1 = (epoch, ft.trainable_state(model)), f1
        history["epoch"].append(epoch)
        history["train_loss"].append(stats["loss"])
        history["valid_macro_f1"].append(f1)
        logger.info("finetune epoch %d: train loss %.4f, valid macro-F1 %.4f", epoch, stats["loss"], f1)
    bar.close()
    best_epoch = epochs
    if best is not None:
        best_epoch = best[0]
        ft.restore_state(model, best[1])
    fit = {
        "history": history,
        "best_epoch": best_epoch,
        "n_trainable": n_trainable,
        "train_cells_per_s": epochs * len(train) / max(seconds, 1e-12),
    }
    return model, fit


def _valid_f1(model, valid_cells, codes, batch_size, dev) -> float:
    """Macro-F1 of the model's predictions on the validation cells."""
    from ..nn import finetune as ft

    p, _ = ft.predict_proba(model, valid_cells, batch_size=batch_size, device=dev, max_tokens=settings.max_batch_tokens)
    return macro_f1(codes, p.argmax(1))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    return float(f1_score(y_true, y_pred, average="macro", zero_division=0))
