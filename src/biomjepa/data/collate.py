"""Ragged tokens → padded tensors, with the two technical tokens, in length-sorted batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .tokenize import TokenizedCells

#: number of technical tokens prepended to every cell (positions 0 and 1).
N_TECH = 2
#: value of the fixed "resolution" technical token (scFoundation-style).
RESOLUTION_VALUE = 4.0


@dataclass
class Batch:
    """A padded batch of cells.

    Attributes
    ----------
    gene_ids
        ``[B, T]`` long: vocabulary index; ``V`` (resolution) and ``V + 1`` (library) at
        positions 0 and 1; 0 at padding.
    values
        ``[B, T]`` float: normalized expression; 4.0 and log10(total counts) for the technical tokens.
    mask
        ``[B, T]`` bool: real tokens (technical + genes).
    gene_mask
        ``[B, T]`` bool: gene tokens only (what pooling and targets use).
    """

    gene_ids: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    gene_mask: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.gene_ids, self.values, self.mask, self.gene_mask)))

    @property
    def n_tokens(self) -> int:
        """Real (non-padding) tokens in the batch."""
        return int(self.mask.sum())


def collate(cells: TokenizedCells, vocab_size: int, rows: np.ndarray | None = None) -> Batch:
    """Pad cells ``rows`` (default: all) to the longest of them, plus two technical tokens."""
    if rows is not None:
        cells = cells.subset(rows)
    n, lens = len(cells), cells.lengths
    width = N_TECH + int(lens.max(initial=0))
    gene_ids = np.zeros((n, width), dtype=np.int64)
    values = np.zeros((n, width), dtype=np.float32)
    gene_mask = np.zeros((n, width), dtype=bool)
    row = np.repeat(np.arange(n), lens)
    col = N_TECH + np.arange(len(cells.genes)) - np.repeat(cells.indptr[:-1], lens)
    gene_ids[row, col] = cells.genes
    values[row, col] = cells.values
    gene_mask[row, col] = True
    gene_ids[:, 0], gene_ids[:, 1] = vocab_size, vocab_size + 1
    values[:, 0] = RESOLUTION_VALUE
    values[:, 1] = np.log10(np.maximum(cells.library, 1.0))
    mask = gene_mask.copy()
    mask[:, :N_TECH] = True
    return Batch(
        torch.from_numpy(gene_ids), torch.from_numpy(values), torch.from_numpy(mask), torch.from_numpy(gene_mask)
    )


def sorted_batches(lengths: np.ndarray, batch_size: int, *, max_tokens: int | None = None) -> list[np.ndarray]:
    """Split cell positions into batches of similar length (longest first).

    Padding is per batch only. With ``max_tokens``, a batch is also cut when
    ``len(batch) * longest`` would exceed it (bounds memory for very long cells).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = batch_size
        if max_tokens is not None:
            longest = int(lengths[order[start]]) + N_TECH
            size = max(1, min(batch_size, max_tokens // max(longest, 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def padding_waste(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """Padded tokens / real tokens for a batching of cells with ``lengths`` (technical tokens included)."""
    lengths = np.asarray(lengths) + N_TECH
    real = lengths.sum()
    padded = sum(len(b) * lengths[b].max() for b in batches)
    return float(padded - real) / float(real)
