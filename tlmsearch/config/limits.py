"""Upper bounds on every size a study YAML gives, checked when it is read.

They are checked before anything is allocated (a study with n_layer 2**63 made `tlmsearch
validate` allocate until the machine ran out of memory), and are generous, so that no real study
meets them: MAX_LAYERS and MAX_D_FF (schedules.py) are 8x and 14x the largest public dense LMs;
d_model 65,536 is 3.5x PaLM 540B's 18,432; a vocabulary of 2**21 is 8x Gemma's 262,144; 2**20
tokens of context is the longest trained today; 10**15 tokens is 25x the largest training runs
(~40T). Pure data: no torch, no ray.
"""

from __future__ import annotations

from tlmsearch.widths.schedules import MAX_D_FF, MAX_LAYERS
from tlmsearch.widths.space import MAX_CANDIDATES

__all__ = [
    "MAX_CANDIDATES",
    "MAX_D_FF",
    "MAX_D_MODEL",
    "MAX_LAYERS",
    "MAX_RUNGS",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_TOKENS",
    "MAX_VOCAB",
    "MAX_WORKERS",
]

MAX_D_MODEL = 2**16
MAX_VOCAB = 2**21
MAX_SEQ_LEN = 2**20
MAX_TOKENS = 10**15
MAX_SEED = 2**32 - 1  # numpy and Optuna seeds are 32-bit
MAX_WORKERS = 4096  # threads, CPUs, concurrent trials
MAX_RUNGS = 16  # proxy sizes in a ladder
