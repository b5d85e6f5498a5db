"""The vocabulary genes an adapted checkpoint learnt from, and how much of a query falls outside them.

``bj.tl.adapt`` re-initialises the gene embeddings and trains them on its cells: a gene without counts in any of
those cells never enters the encoder, so its embedding stays as initialised. The adapted checkpoint records which
genes its cells detected (:func:`genes_record`, under ``provenance[KEY]`` of its ``config.json``, pinned with the
other files by ``SHA256SUMS``), and ``bj.tl.embed`` warns when a query's counts lean on the others
(:class:`OutsideShare`). A checkpoint without the record (not adapted, or adapted by an older version) is not checked.
"""

from __future__ import annotations

import warnings

import numpy as np

#: ``provenance`` key of the record in an adapted checkpoint's ``config.json``
KEY = "adapted_genes"
#: share of a query's counts (on vocabulary genes) outside the adapted genes above which ``bj.tl.embed`` warns
WARN_SHARE = 0.05


def genes_record(mask: np.ndarray) -> dict:
    """The record of the vocabulary genes ``mask`` (bool ``[V]``): their number, the vocabulary size and the mask
    as hexadecimal bytes (``numpy.packbits``, little bit order: gene ``i`` is bit ``i % 8`` of byte ``i // 8``)."""
    mask = np.asarray(mask, dtype=bool)
    return {"rule": "counts > 0 in at least one adapted cell", "n_genes": int(mask.sum()), "vocab_size": len(mask),
            "mask_hex": np.packbits(mask, bitorder="little").tobytes().hex()}


def shard_genes(shard) -> dict:
    """:func:`genes_record` of the genes with counts in a corpus shard ``.npz`` (:func:`~biomjepa.data.shard_file.
    write_shard`, whose ``indices`` are vocabulary indices)."""
    from .vocab import Vocab

    mask = np.zeros(Vocab.default().size, dtype=bool)
    with np.load(shard, allow_pickle=False) as cells:
        mask[cells["indices"][cells["data"] > 0]] = True
    return genes_record(mask)


def adapted_mask(info: dict) -> np.ndarray | None:
    """The genes a checkpoint's adaptation detected (bool ``[V]``) from its metadata (``model.info``); ``None`` when
    it records none."""
    rec = (info.get("provenance") or {}).get(KEY) if isinstance(info.get("provenance"), dict) else None
    if rec is None:
        return None
    try:
        n = int(rec["vocab_size"])
        mask = np.unpackbits(np.frombuffer(bytes.fromhex(rec["mask_hex"]), dtype=np.uint8), count=n,
                             bitorder="little").astype(bool)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"The checkpoint {info.get('name', '')!r} records a damaged provenance.{KEY} ({err}); "
                         "export it again with `bj.tl.adapt`.") from None
    return mask


class OutsideShare:
    """Tallies, over tokenized cells (:meth:`add`), the share of their counts on genes outside ``mask``."""

    def __init__(self, mask: np.ndarray) -> None:
        self.mask = mask
        self.outside = self.total = 0.0
        self.genes = np.zeros(len(mask), dtype=bool)  # genes outside the mask that hold counts

    @classmethod
    def of(cls, model) -> OutsideShare | None:
        """A tally for ``model``'s adapted genes; ``None`` when its checkpoint records none."""
        mask = adapted_mask(model.info)
        return None if mask is None else cls(mask)

    def add(self, cells) -> None:
        """Add :class:`~biomjepa.data.tokenize.TokenizedCells`: counts are ``expm1(values) · library / 1e4``."""
        counts = np.expm1(cells.values.astype(np.float64)) * np.repeat(cells.library, cells.lengths) / 1e4
        out = ~self.mask[cells.genes]
        self.outside += float(counts[out].sum())
        self.total += float(counts.sum())
        self.genes[cells.genes[out]] = True

    @property
    def share(self) -> float:
        return self.outside / self.total if self.total > 0 else 0.0

    def warn(self, checkpoint: str, tool: str = "bj.tl.embed") -> None:
        """Warn when more than :data:`WARN_SHARE` of the counts fell outside the adapted genes."""
        if self.share <= WARN_SHARE:
            return
        warnings.warn(
            f"{tool}: {self.share:.1%} of these cells' counts (on vocabulary genes) fall on {int(self.genes.sum()):,} "
            f"genes that the cells adapted into checkpoint {checkpoint!r} never detected (it learnt "
            f"{int(self.mask.sum()):,}): their gene embeddings stayed as initialised, so the embedding reads them "
            "without having learnt them. Adapt on cells that cover these cells' genes (the same tissue), or embed "
            "them with the base checkpoint.", UserWarning, stacklevel=3)
