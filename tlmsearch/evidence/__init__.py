"""A study's evidence, built once from its trials table: every decision tlmsearch prints.

One :class:`Evidence` per (study, metric) holds the design (candidate x seed cells: complete,
censored, pending), the noise model that fits it (a randomized block design: seeds are blocks,
uniform one level of candidate, every delta of a seed sharing its uniform; each row, candidate
or uniform, on its own residual variance where its seeds show it noisier than the pooled one:
:func:`tlmsearch.stats.row_noise`), the effects vs uniform with the family-wise decision
(Holm by default, ``stats.family``), the race and its decisions (racing studies), the ranking,
and multiple comparisons with the best (Hsu's MCB, uniform included) for the verdict, and the
signal-to-noise ratio of arXiv 2508.13144 (the candidates' spread over seed and checkpoint
noise; :func:`tlmsearch.stats.signal_to_noise`).
best.yaml, ``tlmsearch status``, the report and the conclusions read it; nothing re-derives a
statistic. What each decision's error rate is, and the simulation that checks it:
``benchmarks/stats.py``.

One decision per question:

- *Does X differ from uniform?* In a study racing against uniform, the race decides (its
  sequential test baselines the family-wise error over every candidate and look); otherwise
  the family-wise test over all comparisons with uniform at the end (``family``).
- *Which is the best?* MCB over the ranked candidates and uniform: a candidate is called the
  best only when it is better than every other one, uniform included, jointly at ``level``.
- *Does it still win at its own best setting?* A study with setting dimensions (``train.lr``)
  compares within a setting (each candidate with the uniform of its own setting and seed) and,
  in :attr:`Evidence.tuned`, each schedule at its own best setting
  (:mod:`tlmsearch.evidence.tuned`).
- *Does a schedule, or a family of them, beat uniform over the settings, and does that depend
  on a setting?* :attr:`Evidence.contrasts`: each question a contrast from one fit of every
  cell, worded better / worse / equivalent within +-d / inconclusive over one family
  (:func:`tlmsearch.stats.contrast_table`; ``stats.contrasts``, ``stats.equivalence``).

Pure pandas / numpy / scipy (no torch, ray or plotting).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from tlmsearch import constants, stats
from tlmsearch.config import PartialStudy, StudyConfig
from tlmsearch.evidence import tuned as tuning  # the module: `tuned` is Evidence's field
from tlmsearch.evidence.contrast_power import study_questions
from tlmsearch.evidence.racing import (
    SEPARATED,
    TIED,
    Lane,
    planned_seeds,
    race,
    race_family_size,
    race_settings,
    recorded_lanes,
)
from tlmsearch.evidence.tuned import Tuned
from tlmsearch.stats.deltas import cells_once
from tlmsearch.stats.effects_vs_uniform import uses_joint
from tlmsearch.widths.candidate import IDENTITY, Candidate

RACE, FAMILY = "race", "family"


@dataclass(frozen=True)
class Evidence:
    metric: str  # the trials column judged (val_bpb, val_loss, ...)
    sense: str  # minimize | maximize
    key: str  # the column naming a candidate
    level: float  # 1 - the stated error rate of every decision
    family: str  # holm | bh | none: the comparisons with uniform
    noise: stats.Noise | None  # one paired delta's sd from the block-design fit (pooled)
    ranking: pd.DataFrame  # stats.rank, on the seeds the race planned for each candidate
    effects: pd.DataFrame  # stats.effects + decided_by (race | family), keyed by ``key``
    best: pd.DataFrame  # stats.mcb over the ranked candidates, uniform included, rank order
    lanes: tuple[Lane, ...] | None  # the race on this metric (None: no racing, or not raced)
    against: str | None  # the race's reference (uniform | best)
    race_size: int = 0  # m: the candidates the race's levels are corrected over
    note: str = ""  # why a racing study's race could not be read (then the family decides)
    snr: stats.SignalToNoise | None = None  # signal over seed and checkpoint noise
    tuned: Tuned | None = None  # each schedule at its best setting (studies with settings)
    # the noise "which is best" (MCB) and the pairs matrix judge on: ``noise``, or with setting
    # dimensions the widest of each setting's own and the across-settings one (conservative)
    pair_noise: stats.Noise | None = None
    # the seeds each candidate is ranked on: the study's, or in a race each candidate's own
    # (racing.planned_seeds); None: every seed any trial ran on
    plan: list[int] | dict[Any, tuple[int, ...]] | None = None
    # the variance model every comparison uses (stats.row_noise; ``noise`` is its pooled part);
    # with variance "pooled", the block fit's one noise for every comparison
    model: stats.RowNoise | stats.Noise | None = None
    variance: str = stats.ROWS
    # why ``noise`` is None, in words (stats.unknown_why); "" when it is known
    noise_why: str = ""
    # the study's questions as contrasts (stats.contrast_table: each schedule and family vs
    # uniform over the settings, at each, the interactions; or stats.contrasts), each with its
    # word over one family; None for an empty table or one without uniform and a candidate
    contrasts: pd.DataFrame | None = None
    # each key's name in words (identity -> the trials table's candidate label): a display
    # mapping only; every table stays keyed by ``key``, every text says names from the start
    labels: Mapping[Any, str] = field(default_factory=dict)

    @classmethod
    @cells_once()  # every statistic below reads the same trials' cells: computed once
    def build(
        cls,
        trials: pd.DataFrame,
        value: str,
        sense: str = "minimize",
        *,
        key: str = "candidate",
        level: float = constants.LEVEL,
        family: str = constants.FAMILY,
        seeds: Sequence[int] | None = None,
        config: StudyConfig | None = None,
        curves: pd.DataFrame | None = None,
        variance: str = stats.ROWS,
        questions: Sequence[stats.Question] | None = None,
        margin: float | None = None,
        labels: Mapping[Any, str] | None = None,
    ) -> Evidence:
        """From a trials table (docs/run_dir.md); ``config``: the study (a run dir's:
        :func:`tlmsearch.config.frozen_study`), for its racing settings and seeds; ``seeds``:
        the study's seeds without one;
        ``curves``: the run's learning curves, for the checkpoint noise (None: n/a);
        ``variance``: rows (each comparison its own noise, :func:`tlmsearch.stats.row_noise`)
        or pooled (the block fit's one noise for all, every row on the same variance);
        ``questions``: the contrasts to ask (default: ``config``'s ``stats.contrasts``, else
        :func:`tlmsearch.stats.contrasts.default_questions`); ``margin``: their equivalence
        margin (default: ``config``'s, :func:`equivalence_margin`); ``labels``: each key's
        name in words (default: the trials table's ``candidate`` of each ``key``,
        :func:`names_of`), what the race's reasons and :meth:`name` say."""
        labels = names_of(trials, key) if labels is None else dict(labels)
        if variance not in stats.VARIANCES:
            raise ValueError(
                f"variance must be one of {', '.join(stats.VARIANCES)}, but got {variance=}"
            )
        settings, lanes, plan, m, note = _raced(
            trials, value, key, variance, labels, config, seeds
        )
        model = _model(trials, value, key, level, variance)
        noise = model.pooled if isinstance(model, stats.RowNoise) else model
        ranking = stats.rank(trials, value, sense, key=key, level=level, seeds=plan)
        by_setting = stats.setting_noises(trials, value, key=key)
        planned = race_family_size(config) if config is not None else 0  # before the data
        models = _setting_models(trials, value, key, level, variance, model)
        against = settings["against"] if settings else None
        eff = _effect_table(
            trials,
            value,
            sense,
            key,
            level,
            models,
            family,
            planned,
            lanes if against == "uniform" else None,
            labels,
        )
        pairs_noise = _pairs_noise(trials, value, key, level, model, noise, by_setting, eff)
        measured = list(ranking.loc[ranking["tier"] < 3, key])
        mcb = stats.mcb(trials, value, measured, sense, key=key, level=level, noise=pairs_noise)
        best = _no_best_within_noise(mcb, eff, key)
        snr = _signal_to_noise(trials, value, key, noise, curves)
        order = plan if isinstance(plan, list) else None  # a race's plan is per candidate
        tuned_ = (
            tuning.tuned(trials, value, sense, level=level, family=family, seeds=order)
            if "schedule" in trials and not trials.empty
            else None
        )
        why = stats.unknown_why(trials, value, key=key) if noise is None else ""
        if questions is None:
            questions = study_questions(config)
        if margin is None and config is not None:
            margin = equivalence_margin(config, value)
        asked = _contrasts(trials, value, sense, key, level, models, margin, questions)
        return cls(
            value,
            sense,
            key,
            level,
            family,
            noise,
            ranking,
            eff,
            best,
            lanes,
            against,
            m,
            note,
            snr,
            tuned_,
            pairs_noise,
            plan,
            model,
            variance,
            why,
            asked,
            labels,
        )

    def pairs(self, trials: pd.DataFrame, candidates: Sequence[Any]) -> pd.DataFrame:
        """:func:`tlmsearch.stats.pairwise` of ``candidates`` (keys) on this evidence's noise,
        level and family: every ordered pair's mean difference and whether it is separated.
        ``trials``: the table this evidence was built from. The family is every pair of the
        ranking's measured candidates, uniform included, whichever are shown: a matrix of the
        top k shows the pairs the data make look most different."""
        measured = self.ranking.loc[self.ranking["tier"] < 3, self.key].nunique()
        k = max(int(measured), len(set(candidates)))
        return stats.pairwise(
            trials,
            self.metric,
            list(candidates),
            self.sense,
            key=self.key,
            level=self.level,
            noise=self.pair_noise or self.noise,
            family=self.family,
            family_size=k * (k - 1) // 2,
        )

    def name(self, key: Any) -> str:
        """The candidate ``key`` in words: its label (:attr:`labels`), else the key itself."""
        return str(self.labels.get(key, key))

    def decision_words(self) -> str:
        """How 'separated from uniform' was decided, in words (for every sentence that says it)."""
        if self.lanes is not None and self.against == "uniform":
            return (
                f"decided by the race against uniform (Bonferroni over {self.race_size} "
                f"candidate(s) and every look: family-wise {1 - self.level:.0%})"
            )
        m = int(self.effects["family_size"].max()) if len(self.effects) else 0
        joint = uses_joint(self.effects, self.family, m)
        return (
            stats.family_words(self.family, m)
            + " with uniform"
            + (", each step at their joint t" if joint else "")
            + (f"; {self.note}" if self.note else "")
        )


def _no_best_within_noise(best: pd.DataFrame, eff: pd.DataFrame, key: str) -> pd.DataFrame:
    """MCB's selection, less a candidate the family's decision (or the race) calls within noise
    of uniform: one answer per question. MCB's one-sided level over k - 1 comparisons is
    looser than Holm's first step over the m comparisons with uniform, so near that border
    the two could say "the best, jointly" and "within noise of uniform" in one breath."""
    within = set(eff.loc[eff["separated"].eq(False).fillna(False), key])
    if not within:
        return best
    best = best.copy()
    best["selected"] = best["selected"] & ~best["candidate"].isin(within)
    return best


def _pairs_noise(
    trials: pd.DataFrame,
    value: str,
    key: str,
    level: float,
    model: Any,
    noise: stats.Noise | None,
    by_setting: Any,
    eff: pd.DataFrame,
) -> Any:
    """The noise pairs of candidates are judged on: with setting dimensions the widest
    (docs/search_dimensions.md), never narrower than any comparison with uniform; else the
    model, each pair on its own rows' variances."""
    if not by_setting:
        return model
    used = [
        stats.Noise(float(sd), int(df))
        for sd, df in zip(eff["noise_sd"], eff["noise_df"], strict=True)
        if df >= 1
    ]
    return pair_noise(trials, value, key, noise, level, by_setting, used)


def _raced(
    trials: pd.DataFrame,
    value: str,
    key: str,
    variance: str,
    labels: Mapping[Any, str],
    config: StudyConfig | None,
    seeds: Sequence[int] | None,
) -> tuple[dict[str, Any] | None, tuple | None, Any, int, str]:
    """The study's race, replayed: (its settings, the lanes when ``value`` is the raced
    objective, each candidate's planned seeds, the family size, a note when it cannot be)."""
    lanes, plan, m, note = None, seeds, 0, ""
    if config is not None and seeds is None:
        plan = _study_seeds(config)
    try:
        settings = race_settings(config) if config is not None else None
        if settings is not None and not trials.empty:
            # the driver races the first objective only: its lanes plan every metric's
            # seeds, and decide "separated from uniform" for that metric alone
            first, first_sense = _first_objective(config)
            raced = race(
                trials,
                first,
                sense=first_sense,
                key=key,
                variance=variance,
                labels=labels,
                **settings,
            )
            plan = planned_seeds(trials, raced, key=key)
            if first == value:
                lanes = tuple(raced)
            cands = trials.loc[~trials["is_baseline"].astype(bool), key]
            m = max(int(cands.nunique()), int(settings["family_size"]))
    except ValueError as err:  # a hand-edited study.yaml or record: the family decides
        settings, lanes, note = None, None, f"race not computable ({err})"
    return settings, lanes, plan, m, note


def _effect_table(
    trials: pd.DataFrame,
    value: str,
    sense: str,
    key: str,
    level: float,
    models: Any,
    family: str,
    planned: int,
    lanes: tuple | None,
    labels: Mapping[Any, str],
) -> pd.DataFrame:
    """Each candidate against uniform: the family's decisions, the simultaneous intervals, the
    shrunk estimate, survivors flagged, and a race against uniform's own decisions."""
    eff = _effects(trials, value, sense, key, level, models, family, planned)
    eff = _simultaneous(eff, family, level, planned)
    eff["shrunk"] = stats.shrunk(eff)  # the winner's curse taken out (best.yaml's best)
    eff = _conditional(eff, trials, value, key)
    eff["decided_by"] = FAMILY
    if lanes is not None:
        eff = _race_decides(eff, lanes, key, trials, labels)
    return eff


def _model(
    trials: pd.DataFrame,
    value: str,
    key: str,
    level: float,
    variance: str,
    pruned: bool | None = None,
) -> stats.RowNoise | stats.Noise | None:
    """The variance model of one table: :func:`tlmsearch.stats.row_noise`, or the block fit's
    pooled noise (``variance`` pooled); ``pruned``: whether the whole study pruned anything
    (for a table of one setting)."""
    if trials.empty:
        return None
    if variance == stats.POOLED:  # one noise for every comparison, every completed cell in the fit
        return stats.block_noise(trials, value, key=key, unselected=False)
    return stats.row_noise(trials, value, key=key, level=level, pruned=pruned)


def _setting_models(
    trials: pd.DataFrame,
    value: str,
    key: str,
    level: float,
    variance: str,
    model: stats.RowNoise | stats.Noise | None,
) -> dict[str, stats.RowNoise | stats.Noise | None]:
    """Each setting's variance model ({"": ``model``}, the whole table's, without settings): the
    noise the effects vs uniform and the contrasts judge that setting's cells on."""
    settings = stats.setting_column(trials)
    if settings is None:
        return {"": model}
    pruned = stats.any_pruned(trials)  # the study's pruner judged every setting's trials
    return {
        str(s): _model(sub, value, key, level, variance, pruned)
        for s, sub in trials.groupby(settings, sort=True)
    }


def _effects(
    trials: pd.DataFrame,
    value: str,
    sense: str,
    key: str,
    level: float,
    models: Mapping[str, stats.RowNoise | stats.Noise | None],
    family: str,
    planned: int = 0,
) -> pd.DataFrame:
    """The effects vs uniform, one family. With setting dimensions each setting's comparisons
    use that setting's own fit (its own uniform and rows, ``models``): at taper_lr a paired
    delta's sd was 0.012 at lr 1.25e-3 and ~0.07 at 5e-3 (docs/results.md section 7), so one
    pooled sd made the quiet LR's intervals 4x too wide and the noisy LRs' too narrow."""
    settings = stats.setting_column(trials)
    if settings is None:
        return stats.effects(
            trials,
            value,
            sense,
            key=key,
            level=level,
            noise=models[""],
            family=family,
            planned=planned,
        )
    parts = [
        stats.effects(
            sub, value, sense, key=key, level=level, family=family, noise=models[str(s)]
        ).assign(noise_group=i)
        for i, (s, sub) in enumerate(trials.groupby(settings, sort=True))
    ]
    eff = stats.decide(pd.concat(parts, ignore_index=True), family, level, planned)
    return eff.sort_values(key, kind="stable").reset_index(drop=True)


def _simultaneous(eff: pd.DataFrame, family: str, level: float, planned: int = 0) -> pd.DataFrame:
    """``eff`` with ``sim_lo``/``sim_hi``: each comparison's interval simultaneous over the
    family at the comparisons' joint t (holm's own ``lo``/``hi``), whatever ``family`` decides.
    The best is picked by the data; only an interval that holds for every comparison at once
    holds for it at ``level`` (under bh, Benjamini and Yekutieli's false-coverage interval
    covered the best's true effect in 90.7% of null studies). best.yaml prints this one."""
    sim = eff if family == "holm" or eff.empty else stats.decide(eff, "holm", level, planned)
    return eff.assign(sim_lo=sim["lo"].to_numpy(), sim_hi=sim["hi"].to_numpy())


def _conditional(eff: pd.DataFrame, trials: pd.DataFrame, value: str, key: str) -> pd.DataFrame:
    """``eff`` with ``conditional``: a candidate of a pruned study that the pruner could have
    stopped (not uniform, not unpruned) and let run on every seed it has. It survived by looking
    good on its early evals, so its mean is conditional on surviving the pruner (biased by about
    -rho x lambda(p) noise sd, which more seeds do not shrink): never called separated (its
    ``separated`` <NA>) until confirmed on seeds no pruner selected. A candidate pruned on some
    seed is ``censored`` instead (its own rule)."""
    from tlmsearch.stats.deltas import pruner_selected, trial_cells

    eff = eff.copy()
    if trials.empty or eff.empty or not stats.any_pruned(trials):
        eff["conditional"] = False
        return eff
    selected = pruner_selected(trial_cells(trials, value, key), True)
    at = eff[key].isin(selected) & ~eff["censored"].astype(bool)
    eff["conditional"] = at.to_numpy()
    if at.any():
        sep = eff["separated"].astype("boolean").copy()
        sep[at] = pd.NA
        eff["separated"] = sep
    return eff


def _contrasts(
    trials: pd.DataFrame,
    value: str,
    sense: str,
    key: str,
    level: float,
    models: Mapping[str, stats.RowNoise | stats.Noise | None],
    margin: float | None,
    questions: Sequence[stats.Question],
) -> pd.DataFrame | None:
    """The study's contrasts (:func:`tlmsearch.stats.contrast_table`), each candidate's
    settings read from its params; None without uniform and a candidate."""
    if trials.empty or key not in trials or "is_baseline" not in trials:
        return None
    settings = None
    if IDENTITY in trials:
        settings = {}
        for k, p in zip(trials[key], trials[IDENTITY], strict=True):
            try:
                settings[k] = Candidate.from_identity(p).settings if isinstance(p, str) else {}
            except (TypeError, ValueError):
                settings[k] = {}
    table = stats.contrast_table(
        trials,
        value,
        sense,
        models=models,
        key=key,
        level=level,
        margin=margin,
        questions=questions,
        settings=settings,
    )
    return table if len(table) else None


def equivalence_margin(config: StudyConfig, value: str) -> float | None:
    """The margin d of "equivalent within +-d" for the metric in trials column ``value``:
    ``stats.equivalence`` for the first objective, else that objective's ``min_effect``; None
    where neither is given (then nothing is called equivalent)."""
    from tlmsearch.metrics import metric_column

    for i, o in enumerate(config.objectives):
        if metric_column(o.metric) == value:
            if i == 0 and config.stats.equivalence is not None:
                return config.stats.equivalence
            return o.min_effect
    return None


def pair_noise(
    trials: pd.DataFrame,
    value: str,
    key: str = "candidate",
    noise: stats.Noise | stats.RowNoise | None = None,
    level: float = constants.LEVEL,
    by_setting: dict[str, stats.Noise | None] | None = None,
    comparisons: Sequence[stats.Noise] = (),
) -> stats.Noise | stats.RowNoise | None:
    """The noise MCB and the pairs matrix judge every pair on: ``noise`` (default the
    study's block fit; a :class:`tlmsearch.stats.RowNoise` judges each pair on its own), or
    with setting dimensions the widest of each setting's own noise
    (``by_setting``, default :func:`tlmsearch.stats.setting_noises`) and the noise of a delta
    across settings (:func:`tlmsearch.stats.setting_noise`), widest by its interval, sd x t
    quantile at ``level``, and of ``comparisons`` (the noises the effects vs uniform used: a
    uniform on its own variance in one setting widens them). A pair at a quiet LR is then
    judged as conservatively as one at a noisy LR or across LRs, never the reverse
    (docs/search_dimensions.md, known limits)."""
    if noise is None and not trials.empty:
        noise = stats.block_noise(trials, value, key=key)
    if by_setting is None:
        by_setting = stats.setting_noises(trials, value, key=key)
    if not by_setting:
        return noise
    found = [*by_setting.values(), stats.setting_noise(trials, value, key=key), *comparisons]
    found = [n for n in found if n is not None and n.df > 0]
    if not found:
        return noise
    return max(found, key=lambda n: n.sd * n.quantile(level))


def _signal_to_noise(
    trials: pd.DataFrame,
    value: str,
    key: str,
    noise: stats.Noise | None,
    curves: pd.DataFrame | None,
) -> stats.SignalToNoise:
    """The study's SNR: its candidates' means over the seed noise and over the checkpoint noise
    of its complete trials' last evals (:mod:`tlmsearch.stats`, arXiv 2508.13144)."""
    means = stats.candidate_means(trials, value, key=key) if not trials.empty else None
    ck, why = None, ""
    if curves is None:
        why = "no learning curves given"
    elif value not in curves:
        why = f"the learning curves have no {value}"
    elif not trials.empty and "trial_id" in trials:
        done = trials.loc[trials["state"].astype(str).str.upper() == "COMPLETE", "trial_id"]
        if "same_as" in trials:  # a replayed twin repeats another trial's curve
            done = trials.loc[trials["trial_id"].isin(done) & trials["same_as"].isna(), "trial_id"]
        ck = stats.checkpoint_noise(curves[curves["trial_id"].isin(set(done))], value)
    if means is None or means.empty:
        has_uniform = "is_baseline" in trials and bool(
            trials["is_baseline"].fillna(False).astype(bool).any()
        )
        return stats.signal_to_noise(
            [], [], noise, ck, why_checkpoint=why, baseline=trials.empty or has_uniform
        )
    return stats.signal_to_noise(
        means["mean"].tolist(), means["n"].tolist(), noise, ck, why_checkpoint=why
    )


def _study_seeds(config: StudyConfig) -> list[int] | None:
    """The seeds a study plans for every candidate; None where a partial study names none
    (then every seed any trial ran on)."""
    given = not isinstance(config, PartialStudy) or "seeds" in config.search.model_fields_set
    return list(config.search.seeds) if given else None


def _first_objective(config: StudyConfig) -> tuple[str, str]:
    """(trials column, sense) of a study's first objective: the metric its race runs on."""
    from tlmsearch.metrics import metric_column

    first = config.objectives[0]
    return metric_column(first.metric), first.sense


def _race_decides(
    eff: pd.DataFrame,
    lanes: Sequence[Lane],
    key: str,
    trials: pd.DataFrame,
    labels: Mapping[Any, str] | None = None,
) -> pd.DataFrame:
    """Effects rows the race decides: its decision (separated / tied; <NA> while it races or
    after a prune stopped it) and its own interval (mean delta +- its half-width at the race's
    corrected level, where it decided on the seeds the row has), with no family p-value beside
    them: one decision, one interval."""
    out = eff.copy()
    lane_of = {ln.candidate: ln for ln in lanes}
    # the one reader of the records, as race() reads them
    recorded = recorded_lanes(trials, key, labels)
    if recorded:
        # a run that records its decisions: only those decide; a lane this table alone would
        # decide may be one the driver keeps racing (its next seed queued, not in the table)
        lane_of = {
            c: ln if c in recorded else replace(ln, status="racing") for c, ln in lane_of.items()
        }
    sep = []
    for i, cand in zip(out.index, out[key].astype(str), strict=True):
        ln = lane_of.get(cand)
        if ln is None:
            sep.append(out.at[i, "separated"])
            continue
        out.at[i, "decided_by"] = RACE
        out.at[i, "p"] = out.at[i, "p_adj"] = math.nan
        sep.append(True if ln.status == SEPARATED else False if ln.status == TIED else pd.NA)
        same_data = tuple(ln.seeds) == tuple(out.at[i, "seeds"])  # not a later seed since
        if same_data and math.isfinite(ln.half_width) and math.isfinite(ln.mean_delta):
            out.at[i, "half_width"] = ln.half_width
            out.at[i, "lo"] = ln.mean_delta - ln.half_width
            out.at[i, "hi"] = ln.mean_delta + ln.half_width
    out["separated"] = pd.array(sep, dtype="boolean")
    return out


def study_evidence(
    trials: pd.DataFrame,
    config: StudyConfig,
    metric: str | None = None,
    sense: str | None = None,
    *,
    key: str = "candidate",
    curves: pd.DataFrame | None = None,
) -> Evidence:
    """The :class:`Evidence` of a run: its study (its ``stats`` level and family, its race) and
    trials table (and its curves, for the checkpoint noise); the first objective unless
    ``metric`` / ``sense`` are given. The confirmation stage's trials (``search.confirm``) are
    left out: they have evidence of their own
    (:func:`tlmsearch.evidence.confirm.confirm_evidences`)."""
    from tlmsearch.evidence.stages import main_stage
    from tlmsearch.metrics import metric_column, objectives_of

    trials = main_stage(trials)

    if metric is None or sense is None:
        metric, sense = objectives_of(config)[0]
    return Evidence.build(
        trials,
        metric_column(metric),
        sense,
        key=key,
        level=config.stats.level,
        family=config.stats.family,
        config=config,
        curves=curves,
    )


def study_evidences(
    trials: pd.DataFrame,
    config: StudyConfig,
    metrics: Sequence[str] | None = None,
    *,
    curves: pd.DataFrame | None = None,
) -> dict[str, Evidence]:
    """metric -> the run's :class:`Evidence` of it, keyed by identity (one candidate, one
    key, named by the table's labels: :meth:`Evidence.name`), for each of ``metrics`` (default
    the study's objectives) the trials table has: the one set a run's tables, best.yaml and
    ``tlmsearch status`` build, once, and pass to every reader. The first
    objective's is built with ``curves`` (its checkpoint noise, for its snr); a metric that is
    no objective is judged in its default sense. Empty for an empty table (the confirmation
    stage's trials left out, :func:`study_evidence`)."""
    from tlmsearch.config import METRICS
    from tlmsearch.metrics import metric_column, objectives_of

    if trials.empty:
        return {}
    objectives = objectives_of(config)
    senses = dict(objectives)
    first = objectives[0][0] if objectives else None
    out = {}
    for metric in metrics if metrics is not None else [m for m, _ in objectives]:
        if metric_column(metric) not in trials:
            continue
        sense = senses.get(metric) or METRICS.get(metric, "minimize")
        out[metric] = study_evidence(
            trials, config, metric, sense, key=IDENTITY, curves=curves if metric == first else None
        )
    return out


def names_of(trials: pd.DataFrame, key: str) -> dict[Any, str]:
    """Each ``key`` of ``trials`` in words: the table's ``candidate`` label of it (one label
    per identity, :func:`tlmsearch.run_dir.tables.unique_labels`); ``{}`` where the table is
    keyed by its labels already or has none."""
    if key == "candidate" or key not in trials or "candidate" not in trials:
        return {}
    return {k: str(c) for k, c in zip(trials[key], trials["candidate"], strict=True)}
