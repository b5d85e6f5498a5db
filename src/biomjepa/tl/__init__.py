"""Tools: functions that take an AnnData and write results into it."""

from ._ablate import ablate_programme
from ._adapt import adapt
from ._dependencies import programme_dependencies
from ._embed import embed
from ._finetune import finetune
from ._max_token import max_token
from ._perturb import perturbation_arithmetic

__all__ = ["ablate_programme", "adapt", "embed", "finetune", "max_token", "perturbation_arithmetic", "programme_dependencies"]
