"""Statistics of a study, in one place: paired deltas, intervals over seeds, censoring, ranking.

The pure formulas (pandas, numpy, scipy: no torch, ray or plotting), one module per concern:

- ``quantiles.py``: Student t quantiles, a mean's interval, tail p-values, Tukey's range
- ``deltas.py``: each candidate's outcome on each seed, paired deltas vs uniform
- ``noise.py``: the noise of one paired delta from the block-design fit; with settings, each
  setting's own and the noise across settings
- ``across.py``: the noise of a comparison between two settings' cells on the rows model
- ``rows.py``: each row's (candidate's, uniform's) own variance where its seeds show it
  noisier, and the noise of each pair: the model every comparison uses
- ``multiplicity.py``: Holm / BH adjusted p-values and how a family is said
- ``ranking.py``: the per-candidate summary and the ranking with censored seeds
- ``effects_vs_uniform.py``: effects vs uniform in units of noise, the family's decision
- ``pairs.py``: which candidates can be told apart, multiple comparisons with the best (Hsu)
- ``questions.py``: the questions a study asks (a schedule or a family vs uniform over its
  settings, at each, interactions with each setting dimension) as weights on its cells
- ``contrasts.py``: those contrasts from one fit of every cell, with their noise and words
- ``words.py``: better / worse / equivalent within +-d / inconclusive over one family
- ``shrinkage.py``: a selection-adjusted estimate for the best (empirical-Bayes shrinkage)
- ``snr.py``: signal-to-noise (arXiv 2508.13144)
- ``variances.py``: equal variances of paired samples (Pitman-Morgan)

Every name is re-exported here: callers use ``from tlmsearch import stats; stats.rank(...)`` or
``from tlmsearch.stats import rank``. The defaults of ``level`` and ``family`` are
:data:`tlmsearch.constants.LEVEL` and :data:`tlmsearch.constants.FAMILY`; docs/statistics.md
says what every number means.
"""

from __future__ import annotations

from tlmsearch.stats.across import PairNoises, across_pair
from tlmsearch.stats.contrasts import CONTRAST_COLUMNS, contrast_table, contrasts_rule
from tlmsearch.stats.deltas import (
    PENDING_STATES,
    UNKNOWN_SEED,
    Seeds,
    any_pruned,
    baseline_by_seed,
    paired_deltas,
    seed_outcomes,
)
from tlmsearch.stats.effects_vs_uniform import (
    EFFECT_COLUMNS,
    MODEL,
    UNKNOWN,
    ci_level,
    decide,
    effects,
)
from tlmsearch.stats.multiplicity import FAMILIES, adjust, family_words
from tlmsearch.stats.noise import (
    Noise,
    block_fit,
    block_noise,
    setting_column,
    setting_noise,
    setting_noises,
)
from tlmsearch.stats.noise import (
    interaction as noise_interaction,
)
from tlmsearch.stats.pairs import MCB_COLUMNS, PAIR_COLUMNS, mcb, pairwise
from tlmsearch.stats.quantiles import Interval, mean_interval, range_critical, t_quantile, t_sf
from tlmsearch.stats.questions import FAMILY_NAMES, Question
from tlmsearch.stats.ranking import (
    RANK_COLUMNS,
    SUMMARY_COLUMNS,
    TIERS,
    rank,
    summarise,
    tier_name,
)
from tlmsearch.stats.row_variances import (
    NO_DF,
    POOLED,
    ROWS,
    VARIANCES,
    RowNoise,
    RowVariance,
    row_fit,
    row_noise,
    unknown_why,
)
from tlmsearch.stats.shrinkage import shrunk
from tlmsearch.stats.snr import (
    CHECKPOINT_EVALS,
    CheckpointNoise,
    SignalToNoise,
    candidate_means,
    checkpoint_noise,
    expected_range,
    relative_dispersion,
    signal_to_noise,
)
from tlmsearch.stats.variances import pitman_morgan
from tlmsearch.stats.words import WORDS

__all__ = [
    "CHECKPOINT_EVALS",
    "CONTRAST_COLUMNS",
    "EFFECT_COLUMNS",
    "FAMILIES",
    "FAMILY_NAMES",
    "MCB_COLUMNS",
    "MODEL",
    "NO_DF",
    "PAIR_COLUMNS",
    "PENDING_STATES",
    "POOLED",
    "RANK_COLUMNS",
    "ROWS",
    "SUMMARY_COLUMNS",
    "TIERS",
    "UNKNOWN",
    "UNKNOWN_SEED",
    "VARIANCES",
    "WORDS",
    "CheckpointNoise",
    "Interval",
    "Noise",
    "PairNoises",
    "Question",
    "RowNoise",
    "RowVariance",
    "Seeds",
    "SignalToNoise",
    "across_pair",
    "adjust",
    "any_pruned",
    "baseline_by_seed",
    "block_fit",
    "block_noise",
    "candidate_means",
    "checkpoint_noise",
    "ci_level",
    "contrast_table",
    "contrasts_rule",
    "decide",
    "effects",
    "expected_range",
    "family_words",
    "mcb",
    "mean_interval",
    "noise_interaction",
    "paired_deltas",
    "pairwise",
    "pitman_morgan",
    "range_critical",
    "rank",
    "relative_dispersion",
    "row_fit",
    "row_noise",
    "seed_outcomes",
    "setting_column",
    "setting_noise",
    "setting_noises",
    "shrunk",
    "signal_to_noise",
    "summarise",
    "t_quantile",
    "t_sf",
    "tier_name",
    "unknown_why",
]
