"""The one batched inference loop over tokenized cells (tensor world: no AnnData here).

Every inference path of the package runs through :func:`map_cells`: ``tl.embed`` and the atlas
embedder (:func:`embed_cells`), ``tl.max_token``, the fine-tuned head's predictions
(:func:`biomjepa.nn.finetune.predict_proba`), the training probe and the teacher-target errors
behind ``tl.programme_dependencies``. It

1. cuts the cells into length-sorted batches (:func:`biomjepa.data.collate.sorted_batches`: padding per
   batch only, at most ``batch_size`` cells and ``max_tokens`` padded tokens),
2. runs a per-batch function under ``torch.inference_mode`` and the package's one precision choice
   (:func:`biomjepa._device.autocast` with ``bj.settings.precision``: float32 by default; ``"bf16"``/``"auto"``
   run the encoder's GEMMs in bf16 while its residual stream, pooling and readout stay float32),
3. writes the rows it returns back in the cells' input order.

So batch size and cell order change no result beyond the rounding of the padded shapes, and
precision, batching and device rules change in one place. :func:`map_batches` adds the collation
(``TokenizedCells`` → padded :class:`~biomjepa.data.collate.Batch` on the device) for readouts of a
model's forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from .._device import autocast, resolve_precision
from ..data.collate import Batch, collate, sorted_batches

if TYPE_CHECKING:
    from ..data.tokenize import TokenizedCells

#: what a per-batch function returns: one ``[B, ...]`` tensor or a tuple of them
Rows = torch.Tensor | tuple[torch.Tensor, ...]

__all__ = ["embed_cells", "map_batches", "map_cells"]


@torch.inference_mode()
def map_cells(
    cells: TokenizedCells,
    step: Callable[[TokenizedCells], Rows],
    out: Sequence[np.ndarray],
    *,
    batch_size: int,
    device: torch.device | str,
    max_tokens: int | None = None,
    precision: str | None = None,
) -> tuple[np.ndarray, ...]:
    """Run ``step`` over length-sorted batches of ``cells``; its rows land in ``out`` in input order.

    Parameters
    ----------
    cells
        :class:`~biomjepa.data.tokenize.TokenizedCells`, ``n`` cells.
    step
        Called once per batch with the batch's cells (a ``TokenizedCells`` of ``B`` cells, longest
        first); returns one tensor ``[B, ...]`` or a tuple of them, one per array of ``out``.
        It runs under ``torch.inference_mode`` and :func:`biomjepa._device.autocast` for ``device`` and
        ``precision``.
    out
        Arrays ``[n, ...]`` to fill; row ``i`` of each receives cell ``i``'s row of the matching tensor.
    batch_size, max_tokens
        Cells per batch, and the cap on ``cells × (longest cell + 2)`` tokens of one batch.
    device
        The device ``step`` computes on; tensors are copied to the host.
    precision
        ``"fp32"``, ``"bf16"`` or ``"auto"`` (:func:`biomjepa._device.resolve_precision` on ``device``);
        ``None``: ``bj.settings.precision``. Rows come back as float32 arrays either way.

    Returns
    -------
    ``tuple(out)``, filled.
    """
    device = torch.device(device)
    with autocast(device, resolve_precision(precision, device)):
        for rows in sorted_batches(cells.lengths, batch_size, max_tokens=max_tokens):
            got = step(cells.subset(rows))
            got = got if isinstance(got, tuple) else (got,)
            if len(got) != len(out):
                raise ValueError(f"step returned {len(got)} tensors for {len(out)} output arrays.")
            for array, tensor in zip(out, got):
                array[rows] = tensor.float().cpu().numpy() if tensor.dtype == torch.bfloat16 else tensor.cpu().numpy()
    return tuple(out)


def map_batches(
    cells: TokenizedCells,
    readout: Callable[[Batch], Rows],
    out: Sequence[np.ndarray],
    *,
    vocab_size: int,
    batch_size: int,
    device: torch.device | str,
    max_tokens: int | None = None,
    precision: str | None = None,
) -> tuple[np.ndarray, ...]:
    """:func:`map_cells` with each batch collated: ``readout`` gets a padded :class:`Batch` on ``device``.

    ``vocab_size`` is the model's ``V`` (ids of the two technical tokens, ``V`` and ``V + 1``).
    """
    device = torch.device(device)

    def step(batch_cells: TokenizedCells) -> Rows:
        return readout(collate(batch_cells, vocab_size).to(device))

    return map_cells(cells, step, out, batch_size=batch_size, device=device, max_tokens=max_tokens,
                     precision=precision)


def embed_cells(
    model,
    cells: TokenizedCells,
    *,
    batch_size: int = 64,
    device: torch.device | str | None = None,
    max_tokens: int | None = None,
    precision: str | None = None,
) -> np.ndarray:
    """Cell embeddings ``[n, 2D]`` float32 of a :class:`~biomjepa.model.BiomJEPA`, in the cells' order.

    The model is put in eval mode on ``device`` (default CPU) and read out with its own pooling and
    readout statistics (``model(batch)``), as ``tl.embed`` and the atlas embedder do, in ``precision``
    (:func:`map_cells`; ``None``: ``bj.settings.precision``).
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    model = model.to(device).eval()
    out = np.empty((len(cells), model.config.embedding_dim), dtype=np.float32)
    (Z,) = map_batches(
        cells, lambda batch: model(batch).float(), (out,), vocab_size=model.config.vocab_size,
        batch_size=batch_size, device=device, max_tokens=max_tokens, precision=precision,
    )
    return Z
