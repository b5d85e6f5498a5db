"""Which ``var`` column of vocabulary indices the readers take (issue 57).

``var["biomjepa_token"]``, the column :func:`biomjepa.pp.map_vocab` writes by default; without it, the column the
latest ``map_vocab`` wrote under another ``key_added`` (its report, ``uns["biomjepa"]["vocab"]["params"]
["key_added"]``, names it), so ``bj.pp.map_vocab(adata, key_added="tok")`` followed by any tool reads ``var["tok"]``.
When both columns are there the default one is read, with a warning naming both (the report then describes the
other). The rule is a function of the AnnData alone, so every reader of one call (the checks before the work, each
pass over the rows) takes the same column. When the genes changed after the mapping, the report describes other genes:
:func:`warn_if_stale` says so.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from .._keys import TOKEN_KEY, UNS_KEY

logger = logging.getLogger(__name__)


def mapped_key(adata, key: str = TOKEN_KEY) -> str:
    """The ``var`` column to read for ``key``: ``key`` itself, except that an absent default column
    (:data:`~biomjepa._keys.TOKEN_KEY`) gives way to the column the latest ``map_vocab`` wrote, when it is there.
    ``adata``: an AnnData or a reader's view of one (``use_raw``: ``.raw.var``)."""
    if key != TOKEN_KEY or key in adata.var:
        return key
    reported = reported_key(adata)
    return reported if reported is not None and reported in adata.var else key


def reported_key(adata) -> str | None:
    """``key_added`` of the latest :func:`biomjepa.pp.map_vocab` on ``adata`` (or the AnnData behind a reader's
    view of it), from its report; ``None`` without one."""
    record = getattr(_base(adata)[0], "uns", None)
    for name in (UNS_KEY, "vocab", "params", "key_added"):
        record = record.get(name) if hasattr(record, "get") else None
    return record if isinstance(record, str) else None


def check_mapping(adata) -> str:
    """:func:`mapped_key`, said: a log line when a column other than the default is read, a warning when another
    mapping is left unread (the default column beside a newer one, or other columns that look like mappings)."""
    key, reported, where = mapped_key(adata), reported_key(adata), _where(adata)
    if key != TOKEN_KEY:
        logger.info("Reading %s[%r], the column the latest bj.pp.map_vocab wrote (key_added=%r).", where, key, key)
        others = [c for c in _looking_mapped(adata) if c != key]
        if others:
            warnings.warn(
                f"Reading {where}[{key!r}], the column the latest bj.pp.map_vocab wrote (key_added={key!r}); "
                f"{where} also holds {others}, which look like other mappings and are not read. To read one of "
                f"them, run `bj.pp.map_vocab(adata)` again, or copy it: `adata{where}[{TOKEN_KEY!r}] = "
                f"adata{where}[{others[0]!r}]` (the tools read {where}[{TOKEN_KEY!r}] first).",
                UserWarning, stacklevel=_stacklevel())
    elif reported not in (None, TOKEN_KEY) and reported in adata.var:
        warnings.warn(
            f"Reading {where}[{TOKEN_KEY!r}], the column bj.pp.map_vocab writes by default, although the latest "
            f"bj.pp.map_vocab wrote {where}[{reported!r}] (key_added={reported!r}; uns['biomjepa']['vocab'] describes "
            f"that mapping). To read {where}[{reported!r}], delete the default column (`del adata{where}"
            f"[{TOKEN_KEY!r}]`: without it the tools read the latest mapping's column); to keep reading "
            f"{where}[{TOKEN_KEY!r}], run `bj.pp.map_vocab(adata)` again.",
            UserWarning, stacklevel=_stacklevel())
    return key


def warn_if_stale(adata, token: np.ndarray, token_key: str) -> None:
    """Warn when the genes of ``adata`` changed after :func:`biomjepa.pp.map_vocab` wrote its report (``adata[:, hvg]``, a
    concatenation): ``uns["biomjepa"]["vocab"]`` then describes other genes, and a subset that became a gene panel
    would otherwise go without the panel warning. ``token``: the ``var`` column the tool reads now."""
    from .._checks import user_stacklevel
    from .vocab import PANEL_COVERAGE, Vocab, warn_panel

    report = adata.uns.get(UNS_KEY, {}).get("vocab") if hasattr(adata, "uns") else None
    if not isinstance(report, dict) or "n_vars" not in report:
        return
    if report.get("params", {}).get("key_added", TOKEN_KEY) != token_key or report["n_vars"] == len(token):
        return
    n_tokens = int(np.unique(token[token >= 0]).size)
    coverage = n_tokens / Vocab.default().size
    level = user_stacklevel()
    warnings.warn(
        f"The genes changed after `bj.pp.map_vocab`: it mapped {report['n_vars']:,} genes ({report.get('n_tokens', 0):,} "
        f"tokens, vocab_coverage={report.get('vocab_coverage', float('nan')):.3f}), the data now hold {len(token):,} "
        f"({n_tokens:,} tokens, vocab_coverage={coverage:.3f}), so uns['biomjepa']['vocab'] describes other genes. "
        "Run `bj.pp.map_vocab(adata)` again on the data as they are now.",
        UserWarning,
        stacklevel=level,
    )
    if coverage < PANEL_COVERAGE <= report.get("vocab_coverage", 0.0):
        warn_panel(n_tokens, coverage, stacklevel=level)


def missing_hint(adata) -> str:
    """For the error when no column is found: the latest mapping's column, gone, and columns that look like
    mappings (integers from −1, map_vocab's "unmapped"), each named, with what to run."""
    reported, where = reported_key(adata), _where(adata)
    hint = ""
    if reported not in (None, TOKEN_KEY):
        hint = f" The latest bj.pp.map_vocab wrote {where}[{reported!r}] (key_added={reported!r}), which is gone too."
    others = _looking_mapped(adata)
    if others:
        hint += (f" {where} holds {others}, which look like mappings of bj.pp.map_vocab, but the tools read "
                 f"{where}[{TOKEN_KEY!r}] or, without it, the column the latest bj.pp.map_vocab wrote (named in "
                 f"uns['biomjepa']['vocab']): copy one, e.g. `adata{where}[{TOKEN_KEY!r}] = adata{where}"
                 f"[{others[0]!r}]`, or run `bj.pp.map_vocab` again.")
    return hint


def _looking_mapped(adata) -> list[str]:
    """``var`` columns (not the default one) of integers whose smallest value is −1, map_vocab's "unmapped"."""
    from pandas.api.types import is_integer_dtype  # categorical and object columns are not integers

    var = adata.var
    return [str(c) for c in var.columns if c != TOKEN_KEY and is_integer_dtype(var[c].dtype)
            and len(var) and int(var[c].min()) == -1]


def _base(adata):
    """``(the AnnData behind a reader's view, whether its .raw is read)``: through :class:`RawCounts` and the
    log-normalized and read-count views (``_inner``)."""
    raw = False
    for _ in range(4):
        if getattr(adata, "reads_raw", False) is True:
            adata, raw = adata._adata, True
        elif "_inner" in getattr(adata, "__dict__", {}):
            adata = adata.__dict__["_inner"]
        else:
            break
    return adata, raw


def _where(adata) -> str:
    return ".raw.var" if _base(adata)[1] else ".var"


def _stacklevel() -> int:
    from .._checks import user_stacklevel

    return user_stacklevel() - 1  # this helper's own frame
