"""A pruner that judges a trial by its paired delta: its value minus uniform's, same seed.

Ax stops a trial only after it has been worse than the leader for several checkpoints in a row;
PASHA treats configurations within a noise-estimated epsilon as tied. Neither knows that every
candidate here has a paired baseline: the uniform model of the same seed, trained on the same
batches from the same initial weights, which the search runs first and never prunes. So at each
eval (step = tokens seen) after the grace period:

    d(trial, t)  = value(trial, t) - value(uniform of trial's seed, t)
    d*(t)        = the incumbent's mean d at t: the best mean over the other candidates with
                   the most seeds there (n of them, chosen among k)
    worse(t)     = sign * (d(trial, t) - d*(t))
                   > noise(t) * (margin_sds * sqrt(1 + 1/n) + sqrt(2 ln k / n))

and the trial is pruned once ``worse`` held at ``patience`` evals in a row (its latest ones).
The second term is the winner's curse: the best of k equal means leads the truth by about
sqrt(2 ln k) standard errors, so a tied trial measured against it is not pruned for that lead.
``noise(t)`` is the sd of one paired delta at t from the block-design fit of every candidate's
values there (candidate + seed: every delta of a seed shares its uniform); while it has no
residual df, ``prior_sd`` (in the objective's units) or, unset,
1% of the baseline's value at t (a sane prior: seed noise of a proxy's loss is a fraction of a
percent to a few percent). An eval without its seed's baseline value yet is skipped (judged at
the next one that has it). Comparing deltas, not raw values, takes the seed's difficulty out of
the comparison, so a trial of a hard seed is not pruned for its seed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from optuna.pruners import BasePruner
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tlmsearch.search.attrs import BASELINE, CANDIDATE, SAME_AS, SEED


class PairedPruner(BasePruner):
    """Prune a trial whose paired delta trails the best one by more than the seed noise."""

    def __init__(
        self,
        grace_tokens: int = 0,
        patience: int = 2,
        margin_sds: float = 2.5,
        prior_sd: float | None = None,
    ) -> None:
        if grace_tokens < 0:
            raise ValueError(f"grace_tokens must be >= 0, but got {grace_tokens=}")
        if isinstance(patience, bool) or int(patience) != patience or patience < 1:
            raise ValueError(f"patience must be an integer >= 1, but got {patience=}")
        if margin_sds < 0:
            raise ValueError(f"margin_sds must be >= 0, but got {margin_sds=}")
        if prior_sd is not None and prior_sd <= 0:
            raise ValueError(f"prior_sd must be > 0, but got {prior_sd=}")
        self._grace = grace_tokens
        self._patience = int(patience)
        self._margin = margin_sds
        self._prior = prior_sd

    def prune(self, study: Any, trial: FrozenTrial) -> bool:
        attrs = trial.user_attrs
        if attrs.get(BASELINE) or SEED not in attrs:
            return False  # the baseline is every delta's reference: never pruned
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        trials = study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.PRUNED)
        )
        base = _baselines(trials)  # seed -> {step: value}
        ref = base.get(attrs[SEED], {})
        steps = sorted(
            s for s in trial.intermediate_values if s >= self._grace and s in ref
        )  # judged only where its seed's baseline has a value
        if len(steps) < self._patience:
            return False
        deltas = _deltas(trials, base)  # step -> [(candidate, seed, number, delta)]
        me = str(attrs.get(CANDIDATE, trial.number))
        streak = 0
        for step in steps[-self._patience :]:
            mine = trial.intermediate_values[step] - ref[step]
            inc = _incumbent([r for r in deltas[step] if r[0] != me], sign)
            if inc is None or not math.isfinite(mine):
                return False
            best, n_inc, k = inc
            noise = _pooled_sd(deltas[step])
            if noise is None:
                noise = self._prior if self._prior else 0.01 * abs(ref[step])
            # one delta against the incumbent's mean of n_inc; plus the winner's curse of
            # picking the best of k means (its expected lead over the truth, ~sqrt(2 ln k) se)
            margin = self._margin * noise * math.sqrt(1 + 1 / n_inc)
            margin += noise / math.sqrt(n_inc) * math.sqrt(2 * math.log(k))
            if sign * (mine - best) > margin:
                streak += 1
        return streak == self._patience


def _incumbent(
    rows: list[tuple[str, int, int, float]], sign: float
) -> tuple[float, int, int] | None:
    """(mean delta, seeds, rivals) of the best candidate among those with the most seeds."""
    by: dict[str, list[float]] = defaultdict(list)
    for cand, _, _, d in rows:
        if math.isfinite(d):
            by[cand].append(d)
    if not by:
        return None
    most = max(len(v) for v in by.values())
    top = [sum(v) / len(v) for v in by.values() if len(v) == most]
    return min(top, key=lambda m: sign * m), most, len(top)


def _baselines(trials: list[FrozenTrial]) -> dict[int, dict[int, float]]:
    out: dict[int, dict[int, float]] = {}
    for t in trials:
        if t.user_attrs.get(BASELINE) and SEED in t.user_attrs:
            out.setdefault(int(t.user_attrs[SEED]), {}).update(t.intermediate_values)
    return out


def _deltas(
    trials: list[FrozenTrial], base: dict[int, dict[int, float]]
) -> dict[int, list[tuple[str, int, int, float]]]:
    out: dict[int, list[tuple[str, int, int, float]]] = defaultdict(list)
    for t in trials:
        a = t.user_attrs
        if a.get(BASELINE) or SEED not in a or a.get(SAME_AS) is not None:
            continue  # a replayed twin repeats another trial: not another rival or noise draw
        ref = base.get(int(a[SEED]), {})
        for step, v in t.intermediate_values.items():
            if step in ref:
                out[step].append(
                    (str(a.get(CANDIDATE, t.number)), int(a[SEED]), t.number, v - ref[step])
                )
    return out


def _pooled_sd(rows: list[tuple[str, int, int, float]]) -> float | None:
    """The sd of one paired delta at one step from the block-design fit (candidate + seed), the
    noise model every decision of the study uses (:func:`tlmsearch.stats.block_noise`).

    The deltas of a seed all subtract its uniform, so uniform enters as a 0 on each seed: a
    seed-wise shift of the values, which leaves the fit's residuals those of the values.
    """
    from tlmsearch.stats import block_fit

    by_cell: dict[tuple[str, int], list[float]] = defaultdict(list)
    for cand, seed, _, d in rows:
        if math.isfinite(d):
            by_cell[(cand, seed)].append(d)
    if not by_cell:
        return None
    cells = [(c, s, sum(v) / len(v)) for (c, s), v in by_cell.items()]
    cells += [("\0uniform", s, 0.0) for s in sorted({s for _, s in by_cell})]
    rss, df = block_fit(*zip(*cells, strict=True))
    return math.sqrt(2.0 * rss / df) if df >= 1 else None
