"""Studies sized by power: the seeds per candidate that separate the smallest effect that matters.

A study compares m candidates with uniform, every one on the same n seeds: a randomized block
design (docs/contributing.md). A candidate's mean paired delta over n seeds has the standard
error sd / sqrt(n), sd the sd of *one* paired delta (:class:`tlmsearch.stats.Noise`), and
:func:`tlmsearch.stats.effects` tests it two-sided on the comparison's own df: uniform's own
variance (n - 1 df) beside the candidates' pool ((C - 1)(n - 1) for C = m + 1), Satterthwaite's
:func:`comparison_df` (7 for 15 candidates on 3 seeds, not the pool's 30), at the family's level:

- ``holm``: sized by Bonferroni's per-comparison level (1 - level) / m, which Holm's first step
  uses and every later step loosens, so the seeds are an upper bound (conservative);
- ``bh``: the same Bonferroni level, approximate: Benjamini-Hochberg rejects at least what
  Bonferroni does, so again an upper bound, by more when several candidates have effects;
- ``none``: 1 - level per comparison.

First the normal approximation, n ~ ((z_{1-a/2} + z_{power}) * sd / delta)^2 with a the
per-comparison level (:func:`normal_seeds`), then the smallest n at which the noncentral t power
of that test reaches the target (:func:`t_seeds`, ``scipy.stats.nct``). At 80% or 90% power
the t answer is never below the normal one (tests/test_power.py) and a seed or more above it
where few seeds suffice. The candidates' pool grows with m, so a larger family can need
*fewer* seeds at a large effect although the normal formula only grows with m; uniform's n - 1
df cap what that buys.

A pilot's sd is itself an estimate on few df: the plan also says what its one-sided 80% upper
confidence bound, sd * sqrt(df / chi2_{0.2, df}), would need.

:func:`build_plan` reads a study (and a pilot run's trials table) into a :class:`Plan`;
:func:`plan_lines` prints it; :func:`seed_notes` is ``tlmsearch validate``'s warning. No torch,
ray or optuna; scipy only inside the functions that need it (``validate`` stays fast).

>>> normal_seeds(0.02, 0.015, comparison_alpha(0.95, "holm", 5))  # docs/contributing.md
7
>>> t_seeds(0.02, 0.015, comparison_alpha(0.95, "holm", 5), m=5)
8
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from tlmsearch.constants import FAMILIES, MAX_SEEDS, SAMPLER_TRIALS
from tlmsearch.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from tlmsearch.config import StudyConfig
    from tlmsearch.evidence.contrast_power import ContrastPlan

TARGET_POWER = 0.8
_NORMAL_DF = 10**5  # above it the t test is the normal one to ~1e-5 in power
_MAX_NC = 1e8


def _check(effect: float, sd: float, alpha: float, power: float, m: int = 1) -> None:
    if not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a finite number > 0, but got {effect=}")
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd must be a finite number > 0, but got {sd=}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), but got {alpha=}")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), but got {power=}")
    if m < 1:
        raise ValueError(f"m (comparisons with uniform) must be >= 1, but got {m=}")


def comparison_alpha(level: float, family: str, m: int) -> float:
    """The two-sided level each comparison is sized at: Bonferroni's (1 - level) / m for
    ``holm`` and ``bh`` (conservative for both), 1 - level for ``none``.

    >>> round(comparison_alpha(0.95, "holm", 5), 4), comparison_alpha(0.9, "none", 5)
    (0.01, 0.09999999999999998)
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, but got {family=}")
    if m < 1:
        raise ValueError(f"m (comparisons with uniform) must be >= 1, but got {m=}")
    return (1.0 - level) / (1 if family == "none" else m)


def normal_seeds(effect: float, sd: float, alpha: float, power: float = TARGET_POWER) -> int:
    """Seeds per candidate by the normal approximation: ceil(((z_{1-alpha/2} + z_power) *
    sd / effect)^2), at least 1.

    >>> normal_seeds(0.02, 0.015, 0.01)  # ((2.576 + 0.842) * 0.75)^2 = 6.57
    7
    """
    _check(effect, sd, alpha, power)
    z = NormalDist().inv_cdf
    root = (z(1.0 - alpha / 2.0) + z(power)) * sd / effect
    if not root <= math.sqrt(MAX_SEEDS):  # its square could overflow
        raise ValueError(f"more than {MAX_SEEDS:,} seeds: {effect=} is too small for {sd=}")
    n = root**2
    if n > MAX_SEEDS:
        raise ValueError(f"more than {MAX_SEEDS:,} seeds: {effect=} is too small for {sd=}")
    return max(1, math.ceil(n - 1e-9))  # 7.0000000001 from rounding is 7


def block_df(n: int, m: int) -> int:
    """Residual df of the complete block design: (C - 1)(n - 1), C = m + 1 with uniform.

    With setting dimensions the blocks are (setting, seed) and each setting s has its own
    uniform: the sum over settings of (C_s - 1)(n - 1) is again m (n - 1), m counting the
    comparisons within settings (:func:`family_size`)."""
    return m * (n - 1)


def comparison_df(n: int, m: int) -> int:
    """The df of one comparison with uniform as the study judges it with every row equally
    noisy: uniform on its own variance (n - 1 df) plus a candidate on the pool
    (:func:`block_df`), Satterthwaite's 4 / (1 / pool + 1 / (n - 1)), rounded down
    (:func:`tlmsearch.stats.row_noise`; 0 at one seed). With one candidate the block fit is
    the paired test itself, n - 1 df.

    >>> comparison_df(3, 15), comparison_df(5, 15), block_df(3, 15), comparison_df(3, 1)
    (7, 15, 30, 2)
    """
    pool = block_df(n, m)
    if n < 2 or pool < 1:
        return 0
    if m < 2:
        return pool
    return max(1, math.floor(4.0 / (1.0 / pool + 1.0 / (n - 1)) + 1e-9))


def t_power(n: int, effect: float, sd: float, alpha: float, m: int) -> float:
    """Power of the two-sided t test of one candidate's mean paired delta over ``n`` seeds
    at ``alpha``, df = :func:`comparison_df`, when its true effect is ``effect``:
    P(|T| > t_crit) for T noncentral t with noncentrality effect / (sd / sqrt(n)). 0 at one
    seed (no df).

    >>> round(t_power(8, 0.02, 0.015, 0.01, 5), 3)
    0.821
    """
    _check(effect, sd, alpha, 0.5, m)
    return nct_power(effect / sd * math.sqrt(n), comparison_df(n, m), alpha)


def nct_power(nc: float, df: int, alpha: float) -> float:
    """P(|T| > t_{1 - alpha/2, df}) for T noncentral t with noncentrality ``nc`` on ``df``
    df: the power of a two-sided t test whose estimate is ``nc`` standard errors from 0; 0
    without df.

    >>> round(nct_power(0.0, 10, 0.05), 3)
    0.05
    """
    if df < 1:
        return 0.0
    # noncentrality; scipy's nct is NaN from ~1e12 on, and at 1e8 the power is 1.0 already
    nc = min(nc, _MAX_NC)
    if df > _NORMAL_DF:
        nd = NormalDist()
        crit = nd.inv_cdf(1.0 - alpha / 2.0)
        return nd.cdf(nc - crit) + nd.cdf(-nc - crit)
    from scipy.stats import nct
    from scipy.stats import t as student_t  # here: scipy.stats takes ~0.5 s to import

    crit = float(student_t.ppf(1.0 - alpha / 2.0, df))
    # the lower tail P(T < -crit) as P(-T > crit), -T noncentral t with -nc: scipy 1.17's
    # nct.cdf(-crit, df, nc) is NaN for a large nc (df 10, nc 8.7), this form is not
    return float(nct.sf(crit, df, nc) + nct.sf(crit, df, -nc))


def t_seeds(effect: float, sd: float, alpha: float, m: int, power: float = TARGET_POWER) -> int:
    """The smallest n >= 2 whose :func:`t_power` reaches ``power`` (power grows with n: the
    noncentrality and the df both do).

    >>> t_seeds(0.02, 0.015, 0.01, m=5)
    8
    """
    _check(effect, sd, alpha, power, m)
    lo, hi = 1, max(2, normal_seeds(effect, sd, alpha, power))  # power(lo) = 0 < target
    while t_power(hi, effect, sd, alpha, m) < power:
        lo, hi = hi, hi * 2
        if hi > MAX_SEEDS:
            raise ValueError(f"more than {MAX_SEEDS:,} seeds: {effect=} is too small for {sd=}")
    while hi - lo > 1:  # invariant: power(lo) < target <= power(hi)
        mid = (lo + hi) // 2
        if t_power(mid, effect, sd, alpha, m) >= power:
            hi = mid
        else:
            lo = mid
    return hi


# -------------------------------------------------------------------------------------------------
# A study's plan


@dataclass(frozen=True)
class Row:
    """One line of the plan's table."""

    label: str
    seeds: int  # per candidate (uniform runs on the same seeds)
    trainings: int  # (m + the uniform baselines) x seeds
    power: float  # noncentral t power at min_effect


@dataclass(frozen=True)
class Plan:
    """What ``tlmsearch plan`` prints: the inputs, the answer and what it costs."""

    metric: str
    effect: float  # min_effect, in the metric's units
    effect_from: str  # objectives[i].min_effect or --min-effect
    sd: float  # of one paired delta
    df: int | None  # of the noise estimate; None: racing.prior_sd, an assumption
    noise_from: str  # where the noise came from, in words
    family: str
    level: float
    m: int  # comparisons with uniform (candidates trained besides uniform)
    alpha: float  # two-sided, per comparison
    target: float  # power
    rows: tuple[Row, ...]  # normal approximation, needed (t), this study's seeds
    tokens: int  # train.tokens of one training
    tokens_per_s: float | None  # the pilot's median per trial; None: no pilot
    concurrency: int  # search.concurrency
    notes: tuple[str, ...] = ()
    baselines: int = 1  # uniform trainings per seed: one per setting value (train.lr)
    m_df: int = 0  # the m of the residual df, m_df x (seeds - 1): the fewest in any setting
    contrasts: ContrastPlan | None = None  # the study's contrasts and equivalence questions

    @property
    def needed(self) -> Row:
        return self.rows[1]

    def hours(self, trainings: int) -> float | None:
        """Trial-hours of ``trainings`` full trainings at the pilot's tokens/s (None: no pilot)."""
        if self.tokens_per_s is None:
            return None
        return trainings * self.tokens / self.tokens_per_s / 3600.0


def _family_words(family: str, m: int, level: float, alpha: float) -> str:
    from tlmsearch.stats import family_words

    head = f"{family_words(family, m)} with uniform at {level:.0%}"
    if family == "holm":
        return (
            f"{head}: each comparison sized at {alpha:.3g} two-sided (Bonferroni, "
            "Holm's first step: conservative, the seeds are an upper bound)"
        )
    if family == "bh":
        return (
            f"{head}: each comparison sized at {alpha:.3g} two-sided (Bonferroni; "
            "approximate for BH, which rejects at least as much: an upper bound)"
        )
    return f"{head}: each comparison at {alpha:.3g} two-sided, not family-wise"


def family_size(cfg: StudyConfig) -> int:
    """m: the candidates a study compares with uniform, each trained on every seed (a grid's
    distinct proxy width vectors, or ``search.n_trials`` of a sampler, as ``validate`` counts).
    With setting dimensions each setting's uniform is that setting's baseline, not a candidate:
    m is the sum over settings of (schedules - 1)."""
    if cfg.search.sampler == "grid":
        per = _trainings_per_setting(cfg)
        return sum(per.values()) - (len(per) if cfg.search.baseline else 0)
    return cfg.search.n_trials or SAMPLER_TRIALS


def _trainings_per_setting(cfg: StudyConfig) -> Counter[str]:
    """A grid's trainings per seed, by setting value (one key "" without settings)."""
    from tlmsearch.widths.space import setting_label

    return Counter(setting_label(t.candidate, exact=True) for t in cfg.trainings())


def df_size(cfg: StudyConfig, m: int) -> int:
    """The m whose block design gives a comparison's residual df, m (n - 1): every candidate's
    without setting dimensions; with them each setting's effects are judged on that setting's
    own fit, so the fewest candidates any setting holds (a sampler's settings: 1, as each draw
    may be a new value)."""
    if not cfg.space.settings:
        return m
    if cfg.search.sampler != "grid":
        return 1
    per = _trainings_per_setting(cfg)
    compared = [n - int(cfg.search.baseline) for n in per.values() if n > int(cfg.search.baseline)]
    return max(1, min(compared, default=1))  # a setting with only uniform compares nothing


def baselines(cfg: StudyConfig) -> int:
    """Uniform trainings per seed: one per setting combination (each setting's baseline; a
    sampler's settings: the most it may draw, as
    :func:`tlmsearch.search.sampling.samplers.planned_trials` counts), else one."""
    if not cfg.search.baseline:
        return 0
    if not cfg.space.settings:
        return 1
    if cfg.search.sampler == "grid":
        return len(_trainings_per_setting(cfg))
    n = cfg.search.n_trials or SAMPLER_TRIALS
    combos = 1
    for name in cfg.space.settings:
        dim = cfg.space.dimensions[name]
        combos *= dim.count() if dim.finite else n
    return min(n, combos)


def _objective(cfg: StudyConfig, metric: str | None) -> tuple[int, Any]:
    names = [o.metric for o in cfg.objectives]
    if metric is None:
        return 0, cfg.objectives[0]
    if metric not in names:
        raise ConfigError(
            f"--metric {metric!r} is not an objective of the study "
            f"({', '.join(names)}); give one of them"
        )
    i = names.index(metric)
    return i, cfg.objectives[i]


def pilot_noise(trials: pd.DataFrame, column: str, run: str) -> tuple[float, int, str]:
    """(sd of one paired delta, its df, words) from a pilot's trials table; ConfigError when
    the table cannot give it."""
    from tlmsearch.stats import NO_DF, block_noise, unknown_why

    if trials.empty:
        raise ConfigError(
            "has no trials table (trials.parquet or trials.csv): give the run dir of a pilot "
            "that finished some trials, e.g. tlmsearch plan STUDY --from runs/pilot",
            source=run,
        )
    if column not in trials or not trials[column].notna().any():
        raise ConfigError(
            f"the pilot recorded no {column}: run a pilot of this study's objectives", source=run
        )
    done = trials[(trials["state"] == "COMPLETE") & trials[column].notna()]
    if "same_as" in done:  # a replayed twin repeats another trial's numbers (block_noise)
        done = done[done["same_as"].isna()]
    n_seeds, n_cands = int(done["seed"].nunique()), int(done["candidate"].nunique())
    noise = block_noise(trials, column)
    if noise is None and (why := unknown_why(trials, column)) != NO_DF:
        raise ConfigError(
            f"the pilot's noise is unknown: {why}; size with a pilot with unpruned candidates "
            "(search.unpruned_candidates) or prunes nothing (search.pruner: none)",
            source=run,
        )
    if noise is None:
        what = "one seed" if n_seeds < 2 else "one candidate" if n_cands < 2 else "no residual df"
        raise ConfigError(
            f"the pilot has {what} ({n_seeds} seed(s) x {n_cands} candidate(s) completed "
            f"with {column}), so no noise to size with: run 2+ seeds of 2+ candidates "
            "(uniform and one more), e.g. --set search.seeds='[0,1,2]'",
            source=run,
        )
    if not noise.sd > 0:
        raise ConfigError(
            f"the pilot's noise is 0 (every candidate's {column} moves with uniform's on "
            "every seed): no seed-to-seed noise to size with; check that the pilot's seeds "
            "differ and its trials trained",
            source=run,
        )
    words = (
        f"the pilot {run} (block-design fit on {n_seeds} seeds x {n_cands} candidates completed)"
    )
    return noise.sd, noise.df, words


def setting_noises(trials: pd.DataFrame, column: str) -> dict[str, float]:
    """{setting: sd of one paired delta} of a pilot with setting dimensions (each setting's
    own block fit, :func:`tlmsearch.stats.setting_noises`, as its effects are judged), for the
    settings with residual df; {} without settings."""
    from tlmsearch.stats import setting_noises as fits

    return {s: n.sd for s, n in fits(trials, column).items() if n is not None and n.sd > 0}


def pilot_tokens_per_s(trials: pd.DataFrame) -> float | None:
    """The median tokens/s of a pilot's completed trials (None when it recorded none)."""
    if "tokens_per_s" not in trials:
        return None
    tps = trials.loc[trials["state"] == "COMPLETE", "tokens_per_s"].astype("float64")
    tps = tps[tps.gt(0) & tps.lt(math.inf)]
    return float(tps.median()) if len(tps) else None


def _plan_effect(obj: Any, where: str, min_effect: float | None) -> tuple[float, str]:
    """(min_effect, where it came from): ``--min-effect`` over the objective's own."""
    if min_effect is not None:
        if not (math.isfinite(min_effect) and min_effect > 0):
            raise ConfigError(
                f"--min-effect: {min_effect!r} is not a positive number; give the "
                f"smallest {obj.metric} difference you care about, e.g. "
                "--min-effect 0.01"
            )
        return float(min_effect), "--min-effect"
    if obj.min_effect is not None:
        return obj.min_effect, where
    raise ConfigError(
        f"{where}: not set, and no --min-effect: give the smallest {obj.metric} difference "
        f"you care about, in its units: `min_effect: 0.01` in the objective, or "
        "--min-effect 0.01"
    )


@dataclass(frozen=True)
class _Noise:
    """The noise a plan is sized with, and what the pilot (if any) also tells."""

    sd: float
    df: int | None
    noise_from: str
    tokens_per_s: float | None  # the pilot's median; None: no pilot, or it recorded none
    by_setting: dict[str, float]  # a pilot's sd per setting value ({} without settings)


def _plan_noise(
    cfg: StudyConfig, i: int, obj: Any, pilot: pd.DataFrame | None, pilot_name: str
) -> _Noise:
    """The pilot's measured noise, or ``search.racing.prior_sd`` (first objective only)."""
    from tlmsearch.run_dir.tables import metric_column

    if pilot is not None:
        sd, df, noise_from = pilot_noise(pilot, metric_column(obj.metric), pilot_name)
        tps = pilot_tokens_per_s(pilot)
        by_setting = setting_noises(pilot, metric_column(obj.metric))
        return _Noise(sd, df, noise_from, tps, by_setting)
    prior = cfg.search.racing.prior_sd if cfg.search.racing else None
    if prior is None or i != 0:
        raise ConfigError(
            "no noise to size with: pass --from RUN (a pilot run of 2+ seeds of 2+ "
            "candidates) or set search.racing.prior_sd (the sd of one paired delta of the "
            "first objective, an assumption)"
        )
    noise_from = (
        "search.racing.prior_sd: an assumption, not a measurement (run a pilot "
        "and pass --from RUN to measure it)"
    )
    return _Noise(float(prior), None, noise_from, None, {})


def _upper_sd_note(
    effect: float, sd: float, df: int, alpha: float, m_df: int, power: float
) -> str:
    """What the pilot sd's one-sided 80% upper confidence bound would need."""
    from scipy.stats import chi2

    sd_hi = sd * math.sqrt(df / float(chi2.ppf(0.2, df)))
    try:
        n_hi = f"{t_seeds(effect, sd_hi, alpha, m_df, power)} seeds are needed"
    except ValueError:
        n_hi = f"more than {MAX_SEEDS:,} seeds are needed"
    return (
        f"the pilot's sd is an estimate on {df} df: at its 80% upper confidence bound, "
        f"{sd_hi:.4g}, {n_hi}"
    )


def _settings_note(
    by_setting: dict[str, float], effect: float, alpha: float, m_df: int, power: float
) -> str:
    """The seeds the quietest and the noisiest setting of the pilot would each need."""
    quiet, noisy = (
        min(by_setting.items(), key=lambda kv: kv[1]),
        max(by_setting.items(), key=lambda kv: kv[1]),
    )
    need = []
    for setting, s_sd in (quiet, noisy):
        try:
            need.append(
                f"{t_seeds(effect, s_sd, alpha, m_df, power)} seeds at {setting} (sd {s_sd:.3g})"
            )
        except ValueError:
            need.append(f"more than {MAX_SEEDS:,} seeds at {setting} (sd {s_sd:.3g})")
    return (
        "each setting's effects are judged on that setting's own noise, and the pilot's "
        f"settings differ: {' and '.join(need)}; the pooled sd above sizes the average"
    )


def _study_notes(cfg: StudyConfig, n_t: int, n_now: int) -> list[str]:
    """The notes on the study's design: one seed, a race, a tuned comparison, shared widths."""
    from tlmsearch.evidence.tuned import STRATA

    notes: list[str] = []
    racing = cfg.search.racing
    if n_now == 1:
        notes.append("one seed has no residual df: nothing separates on it (power 0)")
    if racing is not None and racing.against == "uniform":
        notes.append(
            f"the race decides this study: it tests each look at (1 - {racing.confidence:g}) / "
            f"(max_seeds x m), stricter than the fixed-n test sized here, so its power at "
            "max_seeds is lower"
        )
    tunes = any(name not in STRATA for name in cfg.space.settings)  # a tuned comparison
    if tunes and n_t > 0:
        from tlmsearch.evidence.tuned import HOLDOUT_MIN_SEEDS

        twice = max(2 * n_t, HOLDOUT_MIN_SEEDS)
        notes.append(
            f"the tuned comparison (each schedule at its own best setting) chooses each best on "
            f"the first half of the seeds and measures on the rest: {twice} seeds give it "
            f"{twice // 2} measuring seeds, {'at least ' if twice // 2 > n_t else ''}what this "
            "plan needs"
        )
    if cfg.search.sampler == "grid" and len(cfg.trainings()) < len(cfg.candidates()):
        notes.append(
            "candidates with the same proxy widths train once per seed: m counts "
            "trainings, as the study's family does"
        )
    moved = _heads_moved(cfg)
    if moved:
        hold = cfg.model.attention.hold
        kept, other = (
            ("FLOPs per token", "parameters")
            if hold == "flops"
            else ("parameters", "FLOPs per token")
        )
        notes.append(
            f"{moved} candidate(s) move capacity between attention and the MLPs (heads.share "
            f"!= 1): model.attention.hold {hold} keeps their {kept} equal to uniform's, but "
            f"their {other} differ (tlmsearch validate shows each); the cost assumes the "
            "pilot's median tokens/s for every training"
        )
    return notes


def _heads_moved(cfg: StudyConfig) -> int:
    """How many candidates realise a ``heads.share`` other than 1 (their FLOPs or parameters
    then differ from uniform's: tlmsearch/widths/heads.py)."""
    from tlmsearch.widths.heads import heads_schedule
    from tlmsearch.widths.schedules import ScheduleError

    n = 0
    for cand in cfg.candidates():
        if heads_schedule(cand) is None:
            continue
        try:
            n += cfg.model.plan(cand).heads_share != 1.0
        except ScheduleError:  # validation names it; the plan only counts
            continue
    return n


def _plan_seeds(
    effect: float, effect_from: str, sd: float, alpha: float, m_df: int, power: float
) -> tuple[int, int]:
    """(normal approximation, noncentral t) seeds per candidate; ConfigError past MAX_SEEDS."""
    try:
        return normal_seeds(effect, sd, alpha, power), t_seeds(effect, sd, alpha, m_df, power)
    except ValueError:
        raise ConfigError(
            f"{effect_from}: {effect:g} is too small to separate at noise sd {sd:.3g}: more "
            f"than {MAX_SEEDS:,} seeds; give a larger min_effect"
        ) from None


def build_plan(
    cfg: StudyConfig,
    *,
    pilot: pd.DataFrame | None = None,
    pilot_name: str = "",
    metric: str | None = None,
    min_effect: float | None = None,
    power: float = TARGET_POWER,
) -> Plan:
    """A study's :class:`Plan` from a pilot's trials table (``pilot``) or, without one, the
    study's ``search.racing.prior_sd``. ConfigError (exit 2) names what is missing."""
    i, obj = _objective(cfg, metric)
    effect, effect_from = _plan_effect(obj, f"objectives[{i}].min_effect", min_effect)
    if not 0 < power < 1:
        raise ConfigError(f"--power: {power!r} must lie strictly between 0 and 1, e.g. 0.8")
    if not cfg.search.baseline:
        raise ConfigError(
            "search.baseline: false: a plan sizes each candidate's comparison "
            "with the uniform baseline; set search.baseline: true"
        )
    m = family_size(cfg)
    if m < 1:
        raise ConfigError("space: the study has no candidate besides uniform: nothing to size")
    m_df = df_size(cfg, m)
    noise = _plan_noise(cfg, i, obj, pilot, pilot_name)
    sd, df = noise.sd, noise.df
    alpha = comparison_alpha(cfg.stats.level, cfg.stats.family, m)
    n_norm, n_t = _plan_seeds(effect, effect_from, sd, alpha, m_df, power)
    n_now = cfg.race_seeds
    racing = cfg.search.racing
    now_from = "racing.max_seeds" if racing and racing.max_seeds else "search.seeds"
    per_seed = m + baselines(cfg)

    def row(label: str, n: int) -> Row:
        return Row(label, n, per_seed * n, t_power(n, effect, sd, alpha, m_df))

    rows = (
        row("normal approximation", n_norm),
        row(f"needed (t, df {comparison_df(n_t, m_df)})", n_t),
        row(f"this study ({now_from})", n_now),
    )
    notes: list[str] = []
    if df is not None:
        notes.append(_upper_sd_note(effect, sd, df, alpha, m_df, power))
    if len(noise.by_setting) > 1:
        notes.append(_settings_note(noise.by_setting, effect, alpha, m_df, power))
    notes += _study_notes(cfg, n_t, n_now)
    from tlmsearch.evidence.contrast_power import size_contrasts

    margin, margin_from = (
        (cfg.stats.equivalence, "stats.equivalence")
        if i == 0 and cfg.stats.equivalence is not None
        else (effect, f"the smallest effect ({effect_from})")
    )
    contrasts = size_contrasts(
        cfg,
        effect=effect,
        sd=sd,
        margin=margin,
        margin_from=margin_from,
        target=power,
        n_now=n_now,
    )
    return Plan(
        metric=obj.metric,
        effect=effect,
        effect_from=effect_from,
        sd=sd,
        df=df,
        noise_from=noise.noise_from,
        family=cfg.stats.family,
        level=cfg.stats.level,
        m=m,
        alpha=alpha,
        target=power,
        rows=rows,
        tokens=cfg.train.tokens,
        tokens_per_s=noise.tokens_per_s,
        concurrency=cfg.search.concurrency,
        notes=tuple(notes),
        baselines=per_seed - m,
        m_df=m_df,
        contrasts=contrasts,
    )


def percent(p: float) -> str:
    """A power as a whole percent, rounded down: 79.96% is '79%', never the target's '80%'.

    >>> percent(0.7996), percent(0.8), percent(0.57)
    ('79%', '80%', '57%')
    """
    return f"{math.floor(p * 100 + 1e-9)}%"


def _hours(h: float | None) -> str:
    return "-" if h is None else f"{h:,.1f}" if h >= 1 else f"{h:.2f}"


def plan_lines(plan: Plan) -> list[str]:
    """The plan in words and a small table (what ``tlmsearch plan`` prints)."""
    df = "assumed" if plan.df is None else f"df {plan.df}"
    out = [
        f"plan for {plan.metric}: smallest effect {plan.effect:g} ({plan.effect_from}), "
        f"{plan.target:.0%} power",
        f"noise: sd of one paired delta {plan.sd:.4g} ({df}), from {plan.noise_from}",
        f"family: {_family_words(plan.family, plan.m, plan.level, plan.alpha)}",
        "",
    ]
    width = max(len(r.label) for r in plan.rows)
    cost = plan.tokens_per_s is not None
    head = f"{'':<{width}}  {'seeds':>5}  {'trainings':>9}  {'power':>5}"
    if cost:
        head += f"  {'trial-hours':>11}  {'wall hours':>10}"
    out.append(head)
    for r in plan.rows:
        line = f"{r.label:<{width}}  {r.seeds:>5}  {r.trainings:>9}  {percent(r.power):>5}"
        if cost:
            h = plan.hours(r.trainings)
            wall = None if h is None else h / plan.concurrency
            line += f"  {_hours(h):>11}  {_hours(wall):>10}"
        out.append(line)
    out.append("")
    uniform = "uniform" if plan.baselines == 1 else f"uniform at each of {plan.baselines} settings"
    out.append(
        f"seeds: per candidate, uniform on the same ones; trainings: "
        f"{plan.m + plan.baselines} x seeds ({plan.m} candidate(s) and {uniform}); power: "
        f"of the t test on each comparison's df (uniform's own seeds - 1 beside the "
        f"pool, {plan.m_df or plan.m} x (seeds - 1): power.comparison_df)"
        + (
            ""
            if not plan.m_df or plan.m_df == plan.m
            else " (each setting is judged on its own fit: the fewest candidates in one)"
        )
    )
    if cost:
        out.append(
            f"cost: {plan.tokens:,} tokens a training (train.tokens) at the pilot's median "
            f"{plan.tokens_per_s:,.0f} tokens/s per trial; wall hours with "
            f"{plan.concurrency} trial(s) at once (search.concurrency), on the pilot's "
            "hardware; every training runs to the end (a pruner or race stops some sooner)"
        )
    else:
        reason = "no pilot" if plan.df is None else "the pilot recorded no tokens_per_s"
        out.append(f"cost: {reason}: cost unknown")
    out += [f"note: {n}" for n in plan.notes]
    from tlmsearch.evidence.contrast_power import contrast_plan_lines

    out += contrast_plan_lines(
        plan.contrasts,
        plan.effect,
        plan.level,
        plan.m + plan.baselines,
        plan.rows[2].seeds,
        percent,
    )
    return out


def seed_notes(cfg: StudyConfig, power: float = TARGET_POWER) -> list[str]:
    """``validate``'s warning: the first objective's min_effect cannot reach ``power`` on the
    study's seeds, judged by ``search.racing.prior_sd`` (the only noise without a pilot).
    Nothing when either is unset, or the study has no candidate to compare with uniform."""
    racing = cfg.search.racing
    effect = cfg.objectives[0].min_effect
    if effect is None or racing is None or racing.prior_sd is None or not cfg.search.baseline:
        return []
    m = family_size(cfg)
    if m < 1:
        return []
    alpha = comparison_alpha(cfg.stats.level, cfg.stats.family, m)
    n = cfg.race_seeds
    got = t_power(n, effect, racing.prior_sd, alpha, m)
    if got >= power:
        return []
    try:
        need = f"{t_seeds(effect, racing.prior_sd, alpha, m, power)} seeds"
    except ValueError:  # an effect far below the noise
        need = f"more than {MAX_SEEDS:,} seeds"
    source = "racing.max_seeds" if racing.max_seeds else "search.seeds"
    from tlmsearch.stats import family_words

    return [
        f"warning: objectives[0].min_effect {effect:g}: {n} seed(s) per candidate "
        f"({source}) give {percent(got)} power to separate it from uniform "
        f"({family_words(cfg.stats.family, m)} at {cfg.stats.level:.0%}), assuming "
        f"racing.prior_sd {racing.prior_sd:g}; {power:.0%} needs {need} "
        "(`tlmsearch plan STUDY --from PILOT` sizes it on measured noise)"
    ]
