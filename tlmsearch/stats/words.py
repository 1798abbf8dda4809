"""Four words per contrast: better, worse, equivalent within +-d, or inconclusive, decided over
one family with a stated family-wise error.

Each contrast theta (schedule minus uniform, in the metric's units) asks two questions: *does
it differ from 0?* (a two-sided t test) and, given a margin d, *is it inside (-d, d)?* (two
one-sided tests, TOST: the (1 - 2 alpha') interval inside (-d, d); Schuirmann 1987). For one
contrast at most one of the two null hypotheses is true (theta = 0 rules out |theta| >= d), so
the family of 2m hypotheses of m contrasts holds at most m true ones. The step-down here is
Holm's with that logical restriction (Shaffer 1986, method 2): the p-values of all 2m questions
in increasing order, the j-th compared with alpha / t_j, t_j the contrasts with a question not
yet answered, stopping at the first that fails. Its family-wise error over every "better",
"worse" and "equivalent" it prints is at most alpha; its first step is Holm's over the m
contrasts, not over 2m.

Each contrast's interval is the one its decision used: ``lo``/``hi`` at 1 - alpha / t (its
difference question's step, or the step where the procedure stopped), ``eq_lo``/``eq_hi`` at
1 - 2 alpha / t (its equivalence question's). So "equivalent" holds exactly when ``eq_lo`` >
-d and ``eq_hi`` < d, and "better" / "worse" exactly when ``lo``/``hi`` exclude 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tlmsearch.stats.quantiles import t_quantile, t_sf

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "better", "worse", "equivalent", "inconclusive"
WORDS = (BETTER, WORSE, EQUIVALENT, INCONCLUSIVE)
# below this many df a contrast's noise is too poorly known to print a bound: its t quantile
# at 2 df is 4.3 (95%) and grows without end as the family widens it
MIN_DF = 3


def p_difference(estimate: float, se: float, df: float) -> float:
    """Two-sided p of theta = 0.

    >>> round(p_difference(2.0, 1.0, 10), 4)
    0.0734
    """
    if not (se >= 0 and df >= 1 and math.isfinite(estimate)):
        return math.nan
    if se == 0:  # a noise measured at exactly 0: any difference is certain
        return 0.0 if estimate != 0 else 1.0
    return min(1.0, 2.0 * t_sf(abs(estimate) / se, df))


def p_equivalent(estimate: float, se: float, df: float, margin: float) -> float:
    """TOST p of |theta| >= margin: the larger of the two one-sided p-values.

    >>> round(p_equivalent(0.0, 1.0, 10, 3.0), 4)  # 3 se inside either bound
    0.0067
    >>> p_equivalent(0.0, 1.0, 10, 0.0)
    1.0
    """
    if not (se >= 0 and df >= 1 and math.isfinite(estimate)):
        return math.nan
    if not margin > 0:
        return 1.0
    if se == 0:
        return 0.0 if abs(estimate) < margin else 1.0
    below = t_sf((estimate + margin) / se, df)  # H0: theta <= -margin
    above = t_sf((margin - estimate) / se, df)  # H0: theta >= +margin
    return min(1.0, max(below, above))


def step_down(
    p_diff: Sequence[float], p_eq: Sequence[float], alpha: float
) -> tuple[list[float], list[float], list[int], list[int]]:
    """Shaffer's step-down over every contrast's two questions (the module docstring).

    Returns the adjusted p-values of the difference and the equivalence questions (NaN where a
    p-value is NaN: no such question) and, per contrast, the divisor t each question was judged
    at: its own step's where it is answered (adjusted p below ``alpha``), else the step where
    the procedure stopped. Its interval at 1 - alpha / t (two-sided) agrees with the answer.

    >>> adj_d, adj_e, t_d, t_e = step_down([0.001, 0.5], [0.9, 0.01], 0.05)
    >>> [round(x, 3) for x in adj_d], [round(x, 3) for x in adj_e], t_d, t_e
    ([0.002, 1.0], [1.0, 0.02], [2, 2], [2, 2])
    """
    m = len(p_diff)
    hyps = [
        (p, i, k)
        for k, ps in enumerate((p_diff, p_eq))
        for i, p in enumerate(ps)
        if p is not None and math.isfinite(p)
    ]
    hyps.sort(key=lambda h: (h[0], h[2], h[1]))
    left = [0] * m
    for _, i, _ in hyps:
        left[i] += 1
    t = sum(1 for n in left if n > 0)
    adj = [[math.nan] * m, [math.nan] * m]
    div = [[max(t, 1)] * m, [max(t, 1)] * m]
    running, stopped = 0.0, None
    for p, i, k in hyps:
        running = max(running, min(1.0, t * p))
        adj[k][i] = running
        if stopped is None and not running < alpha:
            stopped = t  # the first question not answered: every later one is judged here
        div[k][i] = t if stopped is None else stopped
        left[i] -= 1
        if left[i] == 0:
            t -= 1
    return adj[0], adj[1], div[0], div[1]


def decide_words(
    estimate: Sequence[float],
    se: Sequence[float],
    df: Sequence[float],
    sign: float,
    margin: float | None,
    level: float,
    blocked: Sequence[bool] | None = None,
) -> dict[str, np.ndarray]:
    """Every contrast's word, adjusted p-values and intervals over the family of all of them.

    ``sign``: 1 when lower is better (minimize), -1 otherwise; ``margin``: the equivalence
    margin d in the metric's units (None: no equivalence question, never "equivalent");
    ``blocked``: contrasts that may not be called better nor equivalent (a member pruned or
    failed on some seed: its complete seeds flatter it); they can still be called worse.

    >>> w = decide_words([-1.0, 0.01, 0.3], [0.1, 0.1, 0.3], [20, 20, 20], 1.0, 0.5, 0.95)
    >>> list(w["word"])
    ['better', 'equivalent', 'inconclusive']
    """
    est = np.asarray(estimate, dtype="float64")
    se_ = np.asarray(se, dtype="float64")
    df_ = np.asarray(df, dtype="float64")
    m = len(est)
    alpha = 1.0 - level
    pd_ = [p_difference(e, s, d) for e, s, d in zip(est, se_, df_, strict=True)]
    pe_ = [
        p_equivalent(e, s, d, margin) if margin is not None else math.nan
        for e, s, d in zip(est, se_, df_, strict=True)
    ]
    adj_d, adj_e, t_d, t_e = step_down(pd_, pe_, alpha)
    blocked = [False] * m if blocked is None else list(blocked)
    out = {k: np.full(m, math.nan) for k in ("lo", "hi", "ci_level", "eq_lo", "eq_hi", "eq_level")}
    words = []
    for i in range(m):
        known = se_[i] >= 0 and df_[i] >= 1
        if known:
            conf = 1.0 - alpha / t_d[i]
            half = t_quantile(df_[i], conf) * se_[i]
            out["lo"][i], out["hi"][i], out["ci_level"][i] = est[i] - half, est[i] + half, conf
            if margin is not None:
                conf_e = 1.0 - 2.0 * alpha / t_e[i]
                half_e = t_quantile(df_[i], conf_e) * se_[i] if conf_e > 0 else math.inf
                out["eq_lo"][i], out["eq_hi"][i] = est[i] - half_e, est[i] + half_e
                out["eq_level"][i] = conf_e
        separated = bool(adj_d[i] < alpha)
        equivalent = margin is not None and bool(adj_e[i] < alpha)
        good = sign * est[i] < 0
        if separated and not (good and blocked[i]):
            words.append(BETTER if good else WORSE)
        elif equivalent and not blocked[i]:
            words.append(EQUIVALENT)
        else:
            words.append(INCONCLUSIVE)
    return {
        "p": np.asarray(pd_, dtype="float64"),
        "p_adj": np.asarray(adj_d, dtype="float64"),
        "p_equiv": np.asarray(pe_, dtype="float64"),
        "p_equiv_adj": np.asarray(adj_e, dtype="float64"),
        "word": np.asarray(words, dtype=object),
        **out,
    }


def family_rule(m: int, level: float, margin: float | None) -> str:
    """How the family's words are decided, in one line.

    >>> family_rule(3, 0.95, 0.01)
    'Holm over 3 contrasts, family-wise error 5%; each asks "differs from 0?" and "within +-0.01?" (TOST), counted once (Shaffer)'
    """  # noqa: E501
    head = f"Holm over {m} contrast{'s' * (m != 1)}, family-wise error {1 - level:.0%}"
    if margin is None:
        return head + "; no equivalence margin, so none is called equivalent"
    return (
        f'{head}; each asks "differs from 0?" and "within +-{margin:g}?" (TOST), counted '
        "once (Shaffer)"
    )
