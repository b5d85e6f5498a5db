"""Parameter documentation written once: named docstring fragments and :func:`doc_params`.

scanpy's pattern (``scanpy/tools/_docs.py`` and its ``_doc_params`` decorator): a parameter that
several tools share, with the same meaning, is described here once, and each tool's docstring names
the fragment on a line of its own where the entry belongs::

    @doc_params
    def embed(adata, *, checkpoint=None, ...):
        \"\"\"Embed cells ...

        Parameters
        ----------
        adata
            ...
        {checkpoint}
        \"\"\"

:func:`doc_params` replaces each such line ``{name}`` by the fragment ``name`` (the parameter
name and its indented description), indented like the placeholder, so ``help()``, IDEs and Sphinx
all read the full text. Only lines that hold nothing but ``{name}`` are placeholders: braces in
prose (``f"{key_added}_gene"``, ``{programme: group}``) are left alone. An unknown name raises
at import, so a typo cannot ship. Where two tools' parameters differ in substance (the
``checkpoint`` of :func:`biomjepa.tl.programme_dependencies`, the ``batch_size`` of
:func:`biomjepa.tl.finetune`, every ``key_added``), the tool keeps its own text.

The command line's help strings are one-liners, written once as constants next to the parsers:
``CHECKPOINT_HELP``, ``BATCH_SIZE_HELP``, ``DEVICE_HELP`` in :mod:`biomjepa.cli.types` (``demo``,
``embed``, atlas ``embed --store``) and ``CONFIG_HELP`` … ``EXPORT_OVERWRITE_HELP`` in
:mod:`biomjepa.cli.train` (``biomjepa train`` and ``python -m biomjepa.train``).
"""

from __future__ import annotations

import re
from textwrap import dedent
from typing import TypeVar

T = TypeVar("T")

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}[ \t]*$", re.MULTILINE)


def _fragments(**texts: str) -> dict[str, str]:
    return {name: dedent(text).strip("\n") for name, text in texts.items()}


#: The shared entries, by fragment name. The ``tl`` tools that stream AnnData rows through
#: :mod:`biomjepa.data.stream` (``embed``, ``max_token``, ``ablate_programme``,
#: ``programme_dependencies``, ``finetune``) share ``layer`` … ``copy_backed``.
FRAGMENTS: dict[str, str] = _fragments(
    # -- tl: AnnData -> model ------------------------------------------------------------------
    adata_counts="""
        adata
            AnnData with raw counts, after :func:`biomjepa.pp.map_vocab`, or a MuData (modality ``mod``,
            which receives the results).
        """,
    checkpoint="""
        checkpoint
            Registry name, checkpoint directory or URL (default ``bj.settings.checkpoint``); ``"DIR#sha256=HEX"`` or
            ``"URL#sha256=HEX"`` pins the whole checkpoint (:func:`biomjepa.model.checkpoint_sha256`).
        """,
    layer="""
        layer
            Layer with raw counts; default ``X``.
        """,
    use_raw="""
        use_raw
            Read the counts from ``adata.raw`` (scanpy's convention; its genes mapped first with
            ``bj.pp.map_vocab(adata, use_raw=True)``), e.g. when ``X`` holds log-normalized values of a
            subset of genes. Not together with ``layer``.
        """,
    input="""
        input
            ``"counts"`` (default): raw integer counts (droplet UMIs). ``"reads"``: raw plate-based read counts
            (Smart-seq, C1, STRT; 0.2–3 M reads per cell), read as molecule equivalents on the droplet scale
            (:func:`biomjepa.data.reads.molecule_equivalents`: counts per 10,000, genes under one unit dropped,
            library 10,000); raw counts with read depth and ``"counts"`` get a warning that says so.
            ``"lognorm"``: ``log1p(normalize_total(target_sum=T))``
            values of every gene (``sc.pp.normalize_total`` + ``sc.pp.log1p``, any ``T``), the only form many
            public datasets ship. They are checked (one ``T`` from the ``expm1`` row sums; ``expm1(x) · L / T``
            must be integer counts) and read as those counts, so the model sees the same input; scaled or
            z-scored values are refused. Backed, lazy and MuData input work as for counts.
        """,
    library_size_key="""
        library_size_key
            With ``input="lognorm"``: ``obs`` column of library sizes (total counts over all genes, e.g.
            ``"total_counts"``) for the library-size token. Without it they are estimated from the data,
            with a warning (see :mod:`biomjepa.data.lognorm`).
        """,
    batch_size="""
        batch_size
            Cells per forward pass, a positive integer (default ``bj.settings.batch_size``); batches are
            also capped at ``bj.settings.max_batch_tokens`` tokens.
        """,
    device="""
        device
            ``"auto"``, ``"cpu"``, ``"cuda"``...; requesting CUDA without CUDA raises.
        """,
    mod="""
        mod
            MuData modality to read and write (default ``"rna"``); only for MuData input.
        """,
    copy="""
        copy
            Return a modified copy instead of writing into ``adata``.
        """,
    copy_backed="""
        copy
            Return a modified copy instead of writing into ``adata`` (not for backed AnnData: load it
            with ``adata.to_memory()`` first, or keep ``copy=False``).
        """,
    # -- tl: matched random gene sets (tl._null), shared by ablate_programme and programme_dependencies
    n_bins_null="""
        n_bins
            Quantile bins per axis (mean expression, detection frequency) of the null grid.
        """,
    random_state_null="""
        random_state
            Seed of the cell sampling and the random gene sets.
        """,
    # -- pl ------------------------------------------------------------------------------------
    ax="""
        ax
            Axes to draw into (new figure otherwise).
        """,
    show="""
        show
            Call ``plt.show()`` after drawing.
        """,
    # -- bench ---------------------------------------------------------------------------------
    adata_bench="""
        adata
            AnnData with embeddings in ``obsm`` and labels in ``obs``. Not modified, except for the
            baseline keys written when ``baselines`` is given.
        """,
    use_reps="""
        use_reps
            ``obsm`` keys to score side by side.
        """,
    baselines="""
        baselines
            Baselines to compute and add to ``use_reps``: any of ``"pca", "umap", "hvg", "scvi"``, see
            :func:`biomjepa.bench.add_baselines`.
        """,
    baseline_kwargs="""
        baseline_kwargs
            Further arguments of :func:`biomjepa.bench.add_baselines`, e.g. ``{"scvi_max_epochs": 50}``.
        """,
    layer_baselines="""
        layer, use_raw, input, library_size_key
            Where the counts for the baselines (and count-based metrics) are and what they hold, as for
            :func:`biomjepa.tl.embed`: ``layer`` (None: X) or ``use_raw=True`` (``adata.raw``);
            ``input="counts"`` (checked raw counts) or ``"lognorm"`` (``log1p(normalize_total)`` values, taken
            as such through the counts they came from; ``library_size_key``: ``obs`` column of total counts,
            else estimated). Values that are neither are refused.
        """,
    y_true="""
        y
            True labels.
        """,
    c_clusters="""
        c
            Cluster assignments.
        """,
    max_epochs="""
        max_epochs
            Epoch limit.
        """,
    patience="""
        patience
            Early-stopping patience.
        """,
)


def fill_doc(doc: str, fragments: dict[str, str] | None = None) -> str:
    """``doc`` with every placeholder line ``{name}`` replaced by ``fragments[name]``, indented like it.

    Parameters
    ----------
    doc
        A docstring (as written in the source, or already dedented).
    fragments
        Fragments by name (default :data:`FRAGMENTS`).

    Returns
    -------
    The filled docstring; a ``KeyError`` names an unknown placeholder.
    """
    table = FRAGMENTS if fragments is None else fragments

    def fill(m: re.Match) -> str:
        name, indent = m["name"], m["indent"]
        if name not in table:
            raise KeyError(f"docstring placeholder {{{name}}} names no fragment of biomjepa._docs (have {sorted(table)}).")
        return "\n".join(indent + line if line else "" for line in table[name].splitlines())

    return _PLACEHOLDER.sub(fill, doc)


def doc_params(obj: T) -> T:
    """Decorator: fill the ``{name}`` placeholder lines of ``obj.__doc__`` from :data:`FRAGMENTS`.

    The unfilled text stays in ``obj.__orig_doc__`` (as scanpy keeps it).
    """
    if obj.__doc__:
        obj.__orig_doc__ = obj.__doc__
        obj.__doc__ = fill_doc(obj.__doc__)
    return obj
