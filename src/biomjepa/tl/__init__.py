"""Tools: functions that take an AnnData and write results into it."""

from ._ablate import ablate_programme
from ._embed import embed
from ._max_token import max_token
from ._perturb import perturbation_arithmetic

__all__ = ["ablate_programme", "embed", "max_token", "perturbation_arithmetic"]
