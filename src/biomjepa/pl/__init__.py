"""Plotting functions (matplotlib is imported only when a plot is drawn)."""

from ._ablate import ablate_programme
from ._bench import bench
from ._dependencies import programme_dependencies
from ._max_token import max_token
from ._perturb import perturbation_arithmetic

__all__ = ["ablate_programme", "bench", "max_token", "perturbation_arithmetic", "programme_dependencies"]
