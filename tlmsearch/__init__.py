"""tlmsearch: search how MLP capacity should be spread across the depth of a language model.

The public API is small and import-light (no torch, no ray):

>>> from tlmsearch import plan_widths
>>> plan_widths("cosine", n_layer=4, d_ff=64, multiple_of=8, r_start=1.5).widths
(96, 80, 48, 32)
"""

from tlmsearch.config import StudyConfig, load_study
from tlmsearch.constants import VERSION
from tlmsearch.errors import ConfigError
from tlmsearch.widths.schedules import ScheduleError, WidthPlan, plan_from_params, plan_widths
from tlmsearch.widths.space import SearchSpace, load_space

__all__ = [
    "ConfigError",
    "ScheduleError",
    "SearchSpace",
    "StudyConfig",
    "WidthPlan",
    "load_space",
    "load_study",
    "plan_from_params",
    "plan_widths",
]
__version__ = VERSION
