"""Racing seeds: a candidate gets another seed only while the data cannot yet place it.

SMAC3's intensification races a challenger against the incumbent over (instance, seed) pairs and
adds evaluations only while the challenger could still win. Here every candidate has a natural
paired baseline, the uniform model of the same seed (common random numbers: same data order and
init), so a seed gives one *paired delta* d = value - uniform. After each finished trial,
:func:`race` looks at a candidate's deltas and decides:

- ``separated``: its mean delta is further from the reference than the noise allows: each
  look tests at ``(1 - confidence) / (max_seeds x m)``, m the candidates in the race
  (Bonferroni over every candidate and every look), so the chance that *any* candidate equal
  to its reference is ever declared separated is at most ``1 - confidence`` (family-wise, over
  the whole race): no more seeds;
- ``tied``: it reached ``max_seeds`` without separating: the data cannot tell it apart;
- ``stopped``: a seed was pruned or diverged (the pruner or the trainer judged it; more seeds
  buy nothing). A seed lost to the system (a killed worker) is only missing;
- ``done``: the incumbent (``against: best``) raced every seed;
- ``racing``: not yet decided: its next seed is due (``next_seed``) or in flight.

The noise of each comparison is the one every other part of tlmsearch judges with
(:func:`tlmsearch.stats.row_noise`: the block-design fit of candidates x seeds, every delta of
a seed sharing its uniform, a row's own variance where its seeds show it noisier; uniform's
where they cannot rule out twice the others' sd): a candidate's delta vs uniform on their two
rows' variances, one against the incumbent on theirs. Before the fit has residual df,
``prior_sd`` (if given) only steers: a lane it would separate is held (no next seed while others
measure the noise) and judged again on measured noise; nothing is recorded as separated on a
prior, and when nothing else runs the held lanes get the seed that measures it. Without a prior
nothing separates before that.

The reference (``against``) is ``uniform`` (the delta itself, a two-sided test) or ``best``:
the difference to the current incumbent on their common seeds (the candidate still racing with
the best mean delta among those with the most seeds). The incumbent is *selected* by the data
(the best of m noisy means leads the truth), so a challenger is declared worse only at Tukey's
range critical value over every pair of the m candidates (Bonferroni over the looks): the
chance of any false "worse than" over the whole race stays at most ``1 - confidence``, also
when every candidate is equal. The incumbent itself races
every seed, as SMAC's does; a challenger separated as *better* races on, and takes its place
once it has as many seeds. A seed whose uniform baseline failed for good leaves the pool
(nothing can be paired on it).

A final decision (separated, tied) is taken only when every cell of its seeds has landed
(other candidates' and uniform's too: they change the noise it is judged with). Once taken it
stands: the driver records it (search/sampling/race.py) and the trials table
carries it (``race_decision``), and :func:`race` returns a recorded lane as it was decided,
whatever later looks would say. Pure pandas (no ray, no optuna): a function of the trials table,
so a resumed race continues where the stored trials left it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from tlmsearch.constants import LEVEL, SAMPLER_TRIALS
from tlmsearch.reasons import is_lost
from tlmsearch.stats import POOLED, ROWS, Noise, RowNoise, block_noise, paired_deltas, row_noise

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig

RACING, SEPARATED, TIED, STOPPED, DONE = "racing", "separated", "tied", "stopped", "done"


@dataclass(frozen=True)
class Lane:
    """Where one candidate stands in the race."""

    candidate: str
    status: str  # racing | separated | tied | stopped
    reason: str
    seeds: tuple[int, ...]  # seeds with a paired delta
    mean_delta: float  # vs uniform, or vs the incumbent (against: best)
    half_width: float  # of its interval; NaN when no noise estimate yet
    next_seed: int | None  # due now (not queued, not running); None otherwise


def race_noise(trials: pd.DataFrame, value: str, key: str, prior_sd: float | None) -> Noise | None:
    """The study's :func:`tlmsearch.stats.block_noise` of every completed cell (the pooled model:
    one noise for every comparison); before it has residual df the prior (df 0), or None
    without one."""
    noise = block_noise(trials, value, key=key, unselected=False)
    if noise is not None:
        return noise
    return Noise(float(prior_sd), 0) if prior_sd else None


def race_model(
    trials: pd.DataFrame,
    value: str,
    key: str,
    prior_sd: float | None,
    confidence: float = LEVEL,
    variance: str = ROWS,
) -> RowNoise | Noise | None:
    """The noise every look judges with: the study's :func:`tlmsearch.stats.row_noise` (each
    pair on its rows' variances; ``variance`` pooled: :func:`race_noise`'s one noise); before
    the fit has residual df the prior (df 0), or None without one."""
    if variance == POOLED:
        return race_noise(trials, value, key, prior_sd)
    model = row_noise(trials, value, key=key, level=confidence)
    if model is not None:
        return model
    return Noise(float(prior_sd), 0) if prior_sd else None


def critical(noise: Noise, confidence: float, max_seeds: int, m: int, against: str) -> float:
    """The critical value of one look, in standard errors: Bonferroni over ``max_seeds`` looks,
    and over the ``m`` candidates (against uniform: two-sided t at (1 - confidence) /
    (looks x m)) or over every pair of them (against the best: Tukey's range, since the
    incumbent is whichever the data rank first; :func:`tlmsearch.stats.range_critical`).

    >>> round(critical(Noise(0.01, 30), 0.95, 3, 10, "uniform"), 2)
    3.45
    """
    from tlmsearch.stats import range_critical

    if against == "best":
        return range_critical(m, noise.df, 1.0 - (1.0 - confidence) / max_seeds)
    return noise.quantile(1.0 - (1.0 - confidence) / (max_seeds * max(1, m)))


def race(
    trials: pd.DataFrame,
    value: str,
    *,
    sense: str = "minimize",
    seeds: Sequence[int],
    max_seeds: int,
    confidence: float = LEVEL,
    against: str = "uniform",
    prior_sd: float | None = None,
    queued: set[tuple[str, int]] | frozenset = frozenset(),
    key: str = "candidate",
    parallel_seeds: int = 1,
    family_size: int = 0,
    variance: str = ROWS,
    labels: Mapping[str, str] | None = None,
) -> list[Lane]:
    """One :class:`Lane` per non-baseline candidate in ``trials`` (sorted by ``key``).

    ``trials``: the run's trials table (``key``, ``seed``, ``state``, ``is_baseline``, ``value``;
    optional ``reason`` and ``same_as``); ``seeds``: the seed pool in the order seeds are raced;
    ``queued``: (candidate, seed) pairs already waiting in the queue (they count as in flight).
    ``parallel_seeds``: how many seeds of one candidate may be in flight at once. With 1 a
    candidate's next seed waits for the last one's verdict; with more, a candidate the finished
    seeds leave undecided gets its next seed beside those in flight (trial slots stay busy near
    the end of a race; a seed started that way may turn out not to have been needed).
    A candidate is looked at up to ``max_seeds`` times and the race has m candidates (those in
    ``trials``, at least ``family_size``: a sampler that adds candidates later should name
    how many it will), so each look tests at :func:`critical`'s value: ``confidence`` bounds
    the chance that any candidate no different from its reference is ever declared separated.
    ``variance``: the noise model (:func:`race_model`), rows unless pooled is asked for.
    ``labels``: each ``key``'s name in the lanes' reasons (the incumbent a challenger is judged
    against; default the key itself): a race keyed by identity says labels, and nothing renames
    its text afterwards.
    """
    if against not in ("uniform", "best"):
        raise ValueError(f"against must be 'uniform' or 'best', but got {against=}")
    if not 1 <= max_seeds <= len(seeds):
        raise ValueError(f"max_seeds must lie in 1..{len(seeds)}, but got {max_seeds=}")
    if parallel_seeds < 1:
        raise ValueError(f"parallel_seeds must be >= 1, but got {parallel_seeds=}")
    sign = 1.0 if sense == "minimize" else -1.0  # a better candidate has sign * delta < 0
    deltas = paired_deltas(trials, value, key=key)
    noise = race_model(trials, value, key, prior_sd, confidence, variance)
    by_cand = {c: g.set_index("seed")["delta"] for c, g in deltas.groupby(key, sort=True)}
    base = trials[trials["is_baseline"].astype(bool)]
    base_done = set(base.loc[base["state"] == "COMPLETE", "seed"].dropna().astype(int))
    # a seed whose baseline failed for good cannot pair anything: out of the pool
    base_failed = set(base.loc[base["state"] == "FAIL", "seed"].dropna().astype(int)) - base_done
    baseline = base[key].iloc[0] if len(base) else None  # uniform's row in the noise model
    pool = [s for s in seeds if s not in base_failed]
    cands = trials[~trials["is_baseline"].astype(bool)]
    m = max(int(cands[key].nunique()), int(family_size))
    look = (confidence, max_seeds, m, against)
    stopped = {str(c): _stop_reason(g) for c, g in cands.groupby(key, sort=True)}
    recorded = recorded_lanes(cands, key, labels)
    racing_ = {c for c, why in stopped.items() if not why and c not in recorded}
    incumbent = _incumbent(deltas, key, sign, racing_) if against == "best" else None
    running = trials["state"].isin(["RUNNING", "WAITING"])
    busy_seeds = set(trials.loc[running, "seed"].dropna().astype(int))  # any row's cells
    busy_seeds |= {s for _, s in queued}
    prior = noise is not None and noise.df < 1  # an assumption, no measurement yet
    lanes = []
    for cand, g in cands.groupby(key, sort=True):
        cand = str(cand)
        if cand in recorded:  # decided at an earlier look: a decision stands
            lanes.append(recorded[cand])
            continue
        ran = set(g["seed"].dropna().astype(int))
        in_flight = set(
            g.loc[g["state"].isin(["RUNNING", "WAITING"]), "seed"].dropna().astype(int)
        )
        in_flight |= {s for c, s in queued if c == cand}
        tried = (ran | in_flight) - base_failed
        # a finished seed whose baseline has not finished yet cannot be judged: wait for it
        in_flight |= (ran - base_done) - base_failed
        d = by_cand.get(cand, pd.Series(dtype="float64"))
        ref = incumbent if incumbent is not None and incumbent != cand else baseline
        lane = _decide(
            cand,
            d,
            stopped[cand],
            in_flight,
            tried,
            pool,
            max_seeds,
            look,
            None if noise is None else noise.pair(cand, ref),
            incumbent,
            by_cand,
            sign,
            parallel_seeds,
            labels,
        )
        lanes.append(_provisional(lane, prior, busy_seeds))
    return _unpause(lanes, pool, trials, key, max_seeds, bool(queued)) if prior else lanes


PAUSED = "on the prior"  # a lane's reason starts so: separated on racing.prior_sd, held
HELD = "held until the noise is measured (a prior only steers)"


def _provisional(lane: Lane, prior: bool, busy_seeds: set[int]) -> Lane:
    """A final decision only on measured noise, with every cell of its seeds landed.

    On the prior (``racing.prior_sd``, no residual df yet) a separated lane is held: no next
    seed for now (the prior steers where seeds go), and it is judged again once the fit
    measures the noise; nothing is recorded or printed as separated on an assumption. A lane
    whose seeds still have cells running or queued (any candidate's, uniform's) waits for
    them: they change the noise it would be judged with (a decision taken with 1 residual df
    while its seed's other cells ran printed an interval 30x the study's noise).
    """
    if lane.status not in (SEPARATED, TIED):
        return lane
    if prior and lane.status == SEPARATED:
        why = f"{PAUSED}: {lane.reason}; {HELD}"
        return replace(lane, status=RACING, reason=why, next_seed=None)
    waiting = sorted(set(lane.seeds) & busy_seeds)
    if waiting:
        why = f"decided when seed {waiting[0]}'s running cells land ({lane.status} so far)"
        return replace(lane, status=RACING, reason=why, next_seed=None)
    return lane


def _unpause(
    lanes: list[Lane],
    pool: Sequence[int],
    trials: pd.DataFrame,
    key: str,
    max_seeds: int,
    queued: bool,
) -> list[Lane]:
    """When every lane is decided, held on the prior or waiting, and nothing is due, running or
    queued, the held lanes get their next seed (within ``max_seeds``): the race must measure
    the noise the prior stood in for."""
    if any(ln.next_seed is not None for ln in lanes):
        return lanes
    if queued or trials["state"].isin(["RUNNING", "WAITING"]).any():
        return lanes  # cells in flight will measure it
    out = []
    for ln in lanes:
        if ln.status == RACING and ln.reason.startswith(PAUSED):
            ran = set(
                trials.loc[trials[key].astype(str) == ln.candidate, "seed"].dropna().astype(int)
            )
            left = [s for s in pool if s not in ran]
            if left and len(ran) < max_seeds:
                why = ln.reason.replace(HELD, f"seed {left[0]} next, to measure the noise")
                ln = replace(ln, reason=why, next_seed=left[0])
        out.append(ln)
    return out


FINAL = (SEPARATED, TIED, STOPPED)  # what the driver records (DONE: the incumbent may change)


def recorded_lanes(
    trials: pd.DataFrame, key: str = "candidate", labels: Mapping[str, str] | None = None
) -> dict[str, Lane]:
    """candidate -> the Lane the race recorded for it (the trials table's ``race_decision``,
    JSON of :func:`decision`); a candidate without one is still to be decided. ``labels``:
    each key's name in the error a record that is no decision raises."""
    if "race_decision" not in trials:
        return {}
    out = {}
    for cand, text in zip(trials[key].astype(str), trials["race_decision"], strict=True):
        if isinstance(text, str) and text and cand not in out:
            try:
                d = json.loads(text)
                out[cand] = Lane(
                    cand,
                    str(d["status"]),
                    str(d.get("reason") or ""),
                    tuple(int(x) for x in d.get("seeds") or ()),
                    _num(d.get("mean_delta")),
                    _num(d.get("half_width")),
                    None,
                )
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                name = (labels or {}).get(cand, cand)
                raise ValueError(f"race_decision of {name}: not a decision ({err})") from None
    return out


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def decision(lane: Lane) -> dict[str, Any]:
    """What the driver records once a lane is decided (:data:`FINAL`): JSON-ready."""

    def num(x: float) -> float | None:  # strict JSON: no NaN (optuna-dashboard reads it)
        return float(x) if math.isfinite(x) else None

    return {
        "status": lane.status,
        "reason": lane.reason,
        "seeds": list(lane.seeds),
        "mean_delta": num(lane.mean_delta),
        "half_width": num(lane.half_width),
    }


def race_family_size(config: StudyConfig) -> int:
    """How many candidates (uniform aside) a study's race may hold, and its conclusions compare:
    the grid's, the explicit list's, or ``search.n_trials`` of a sampler (its default,
    :data:`tlmsearch.constants.SAMPLER_TRIALS`, when unset).

    Fixed before the first look, so every look tests at the same level: counting only the
    candidates started so far would test the early looks at a looser level than promised.
    """
    from tlmsearch.config import PartialStudy
    from tlmsearch.widths.space import is_baseline, is_flat

    search = config.search
    if isinstance(config, PartialStudy):  # no whole study: what its search section says plainly
        named = [c for c in search.candidates or [] if not is_baseline(c)]
        return len(named) or int(search.n_trials or 0)
    if search.sampler == "grid" or search.candidates is not None:
        return sum(not is_flat(c, [config.model.n_layer]) for c in config.candidates())
    return int(search.n_trials or SAMPLER_TRIALS)  # what the sampler will draw


def race_settings(config: StudyConfig) -> dict[str, Any] | None:
    """:func:`race`'s settings from a study's ``search`` (its ``racing``); None: no racing."""
    racing = config.search.racing
    if racing is None:
        return None
    return {
        "family_size": race_family_size(config),
        "seeds": list(config.search.seeds),
        "max_seeds": config.race_seeds,
        "confidence": racing.confidence,
        "against": racing.against,
        "prior_sd": racing.prior_sd,
        "parallel_seeds": racing.parallel_seeds,
    }


def race_plan(
    trials: pd.DataFrame,
    config: StudyConfig,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
) -> dict[Any, tuple[int, ...]] | None:
    """:func:`planned_seeds` of a racing study's trials (None without racing or trials).

    Settings the race cannot run with (more max_seeds than seeds) raise ValueError.
    """
    settings = race_settings(config)
    if settings is None or trials.empty:
        return None
    lanes = race(trials, value, sense=sense, key=key, **settings)
    return planned_seeds(trials, lanes, key=key)


def planned_seeds(
    trials: pd.DataFrame, lanes: Sequence[Lane], *, key: str = "candidate"
) -> dict[Any, tuple[int, ...]]:
    """Each candidate's seeds as the race plans them, for :func:`tlmsearch.stats.rank`.

    A decided candidate (separated, tied, stopped, done) is planned on the seeds it ran: a race
    that stopped it after one seed did not leave it short of seeds. One still racing is planned
    on those plus its next seed (pending). The uniform baseline: every seed any trial ran on.
    """
    ran: dict[Any, set[int]] = {}
    for cand, seed in zip(
        trials[key], pd.to_numeric(trials["seed"], errors="coerce"), strict=True
    ):
        if pd.notna(seed):
            ran.setdefault(cand, set()).add(int(seed))
    nxt = {ln.candidate: ln.next_seed for ln in lanes if ln.next_seed is not None}
    out = {
        c: tuple(sorted(s | ({nxt[str(c)]} if str(c) in nxt else set()))) for c, s in ran.items()
    }
    every = set().union(*out.values()) if out else set()
    base = trials[trials["is_baseline"].astype(bool)]
    done = set(pd.to_numeric(base.loc[base["state"] == "COMPLETE", "seed"]).dropna().astype(int))
    failed = set(pd.to_numeric(base.loc[base["state"] == "FAIL", "seed"]).dropna().astype(int))
    # not on a seed whose baseline failed for good: out of the pool
    for cand in base[key].unique():
        out[cand] = tuple(sorted(every - (failed - done)))
    return out


def _stop_reason(g: pd.DataFrame) -> str:
    """Why a candidate's race is over whatever its numbers: pruned, or failed of its own on a
    seed (diverged, a non-finite objective, an exception: it would fail the same way again).

    A trial lost to the system (a killed worker, a lost node) says nothing about the candidate:
    that seed is only missing (tlmsearch/reasons.py, as the ranking judges it).
    """
    states = set(g["state"].astype(str))
    reasons = g["reason"].fillna("").astype(str) if "reason" in g else pd.Series([""] * len(g))
    own = [r for st, r in zip(g["state"], reasons, strict=True) if st == "FAIL" and not is_lost(r)]
    if "PRUNED" in states:
        return "pruned on a seed"
    if any(r.startswith("diverged") for r in own):
        return "diverged on a seed"
    return "failed on a seed" if own else ""


def _incumbent(deltas: pd.DataFrame, key: str, sign: float, racing: set[str]) -> str | None:
    """The candidate with the best mean delta among those still racing with the most seeds."""
    d = deltas[~deltas["is_baseline"] & deltas[key].astype(str).isin(racing)]
    if d.empty:
        return None
    stats = d.groupby(key, sort=True)["delta"].agg(["count", "mean"])
    stats["score"] = sign * stats["mean"]
    top = stats[stats["count"] == stats["count"].max()]
    return str(top["score"].idxmin())


def _decide(
    cand: str,
    d: pd.Series,
    stop: str,
    in_flight: set[int],
    tried: set[int],
    pool: Sequence[int],
    max_seeds: int,
    look: tuple[float, int, int, str],
    noise: Noise | None,
    incumbent: str | None,
    by_cand: dict[Any, pd.Series],
    sign: float,
    parallel: int = 1,
    labels: Mapping[str, str] | None = None,
) -> Lane:
    def lane(status: str, reason: str, mean: float, half: float, nxt: int | None) -> Lane:
        return Lane(cand, status, reason, tuple(int(s) for s in d.index), mean, half, nxt)

    if stop:
        return lane(STOPPED, stop, math.nan, math.nan, None)
    ref, challenger = "uniform", incumbent is not None and incumbent != cand
    diffs = d
    if incumbent is not None and challenger:
        inc = by_cand[incumbent]
        common = d.index.intersection(inc.index)
        # on a seed d_c - d_inc = v_c - v_inc (uniform cancels): one candidate against
        # another, with the same seed-noise scale as a delta
        diffs, ref = d[common] - inc[common], str((labels or {}).get(incumbent, incumbent))
    n = len(diffs)
    mean = float(diffs.mean()) if n else math.nan
    half = math.nan
    if n and noise is not None:
        conf, looks, m, against = look
        half = critical(noise, conf, looks, m, against) * noise.sd / math.sqrt(n)
    waiting = (
        lane(RACING, f"seed {min(in_flight)} in flight (or its baseline)", mean, half, None)
        if in_flight
        else None
    )
    if waiting is not None and len(in_flight) >= parallel:
        return waiting
    left = [s for s in pool if s not in tried]
    separated = n and math.isfinite(half) and abs(mean) > half and incumbent != cand
    side = "better" if sign * mean < 0 else "worse"
    if waiting is not None and (
        n == 0  # nothing finished yet: no verdict to be undecided about
        or (separated and not (challenger and side == "better"))
        or len(tried) >= max_seeds
        or not left
    ):
        return waiting  # the verdict waits for the seeds in flight
    said = (
        ""
        if noise is None
        else (
            f" (prior noise sd {noise.sd:.2g})"
            if noise.df < 1
            else f" (noise sd {noise.sd:.2g}, {noise.df} df)"
        )
    )
    if separated and not (challenger and side == "better"):
        return lane(
            SEPARATED,
            f"{side} than {ref} after {n} seed(s): {mean:+.4g} ± {half:.2g}{said}",
            mean,
            half,
            None,
        )
    if len(tried) >= max_seeds or not left:
        if incumbent == cand:
            return lane(DONE, f"the incumbent: raced {len(tried)} seed(s)", mean, half, None)
        if separated:  # better than the incumbent, and out of seeds: it ends as a challenger
            why = f"better than {ref} after {n} seed(s) ({mean:+.4g} ± {half:.2g})"
            return lane(SEPARATED, why, mean, half, None)
        why = f"not separated from {ref} after {n} of {max_seeds} seeds"
        return lane(
            TIED, why if left else why + " (no seed left with a baseline)", mean, half, None
        )
    nxt = left[0]
    if waiting is not None:
        why = f"undecided on its finished seeds; seed {nxt} next, beside seed {min(in_flight)}"
        return lane(RACING, why, mean, half, nxt)
    if incumbent == cand:
        why = "the incumbent races every seed"
    elif separated:  # better than the incumbent: races on, to take its place with more seeds
        why = f"better than {ref} ({mean:+.4g} ± {half:.2g}): races on as the challenger"
    else:
        why = "no noise estimate yet" if not math.isfinite(half) else f"within noise of {ref}"
    return lane(RACING, f"{why}: seed {nxt} next", mean, half, nxt)
