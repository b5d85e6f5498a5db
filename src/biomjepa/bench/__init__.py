"""CellBench-style evaluation of any cell embedding in ``adata.obsm`` (``bj.bench``).

Every task takes ``adata`` and returns a tidy :class:`pandas.DataFrame` in long format with the columns
``task, rep, setting, seed, metric, value`` — one row per representation × setting × seed × metric
(``seed`` is missing for deterministic tasks). :func:`summarize` turns it into mean ± s.d. over seeds
and :func:`biomjepa.pl.bench` plots it. Tasks never modify ``adata`` except for the baseline keys
written on request (``baselines=["pca"]`` → ``obsm["X_pca50"]``, ``"umap"`` → ``obsm["X_umap_pca50"]``,
``"hvg"`` → ``obsm["X_hvg"]`` (log-normalized top-2,000 HVGs), ``"scvi"`` → ``obsm["X_scvi"]``
(scvi-tools, ``pip install "biomjepa[scvi]"``); see :func:`add_baselines`).

Tasks: :func:`annotation` (few-shot SVM), :func:`clustering` (k-means), :func:`reconstruction` (MLP probe
to a 400-gene expression vector), :func:`perturbation` (response prediction), :func:`geometry`
(effective rank, participation ratio, depth association), :func:`depth_robustness` (binomially thinned
counts against full depth), :func:`integration` (batch mixing and label/batch silhouettes for a
``batch_key``; scib-metrics' aggregate scores with :func:`scib_scores`), and :func:`run` for several at once.
Array-level metrics: :func:`effective_rank`, :func:`participation_ratio`, :func:`procrustes_similarity`,
:func:`nmi`, :func:`ari`, :func:`hungarian_accuracy`, :func:`knn_overlap`.
"""

from __future__ import annotations

from ._utils import summarize
from .annotation import annotation, support_split
from .baselines import add_baselines
from .clustering import ari, clustering, hungarian_accuracy, nmi
from .depth import depth_robustness
from .geometry import depth_association, effective_rank, geometry, participation_ratio, procrustes_similarity
from .integration import integration, scib_scores
from .perturbation import perturbation, perturbation_split
from .probe import probe_hook
from .reconstruction import budget_split, canonical_genes, knn_overlap, reactome_sets, reconstruction
from .run import run

__all__ = [
    "add_baselines",
    "annotation",
    "ari",
    "budget_split",
    "canonical_genes",
    "clustering",
    "depth_association",
    "depth_robustness",
    "effective_rank",
    "geometry",
    "hungarian_accuracy",
    "integration",
    "knn_overlap",
    "nmi",
    "participation_ratio",
    "perturbation",
    "perturbation_split",
    "probe_hook",
    "procrustes_similarity",
    "reactome_sets",
    "reconstruction",
    "run",
    "scib_scores",
    "summarize",
    "support_split",
]
