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

The family can be split into groups that share the error rate unequally (Bretz, Maurer,
Brannath and Posch 2009's weighted Holm, a graphical procedure): a contrast of a group with
share s is judged at alpha x s / (the shares of the groups still open) / (its group's contrasts
still open), and a group that has answered every question passes its share to the groups still
open. The question a study is run for
("does the early-heavy family beat uniform over the LRs?") can then be asked at alpha / 2.5
rather than alpha / 32 beside the contrasts that drill into it. The weights only grow
as contrasts are answered and never sum above 1, so the family-wise error stays at most alpha
(Hommel, Bretz and Maurer 2007: the step-down is a shortcut of closed testing).

Each contrast's interval is the one its decision used: ``lo``/``hi`` at 1 - alpha w (its
difference question's weight at its step, or at the step where the procedure stopped),
``eq_lo``/``eq_hi`` at 1 - 2 alpha w (its equivalence question's). So "equivalent" holds
exactly when ``eq_lo`` > -d and ``eq_hi`` < d, and "better" / "worse" exactly when
``lo``/``hi`` exclude 0.
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


def group_weights(shares: Sequence[float], counts: Sequence[int]) -> list[float]:
    """Each group's weight per contrast: its share of the error rate over the shares of the
    groups with a contrast (``counts`` > 0), split evenly among its ``counts`` contrasts; 0 for
    a group with none.

    >>> [round(w, 4) for w in group_weights([0.4, 0.3, 0.3], [2, 0, 3])]  # 0.4 / 0.7 / 2, ...
    [0.2857, 0.0, 0.1429]
    """
    total = sum(s for s, n in zip(shares, counts, strict=True) if n > 0)
    return [s / total / n if n > 0 else 0.0 for s, n in zip(shares, counts, strict=True)]


def step_down(
    p_diff: Sequence[float],
    p_eq: Sequence[float],
    alpha: float,
    groups: Sequence[int] | None = None,
    shares: Sequence[float] | None = None,
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Shaffer's step-down over every contrast's two questions (the module docstring), weighted
    by groups.

    ``groups``: each contrast's group (an index into ``shares``; default: one group); ``shares``:
    each group's part of the error rate (default: the whole). A contrast of group g is judged at
    alpha x w, w = share_g / (the shares of the groups with a question left) / (its group's
    contrasts with a question left): Holm's alpha / t within one group.

    Returns the adjusted p-values of the difference and the equivalence questions (NaN where a
    p-value is NaN: no such question) and, per contrast, the divisor 1 / w each question was
    judged at: its own step's where it is answered (adjusted p below ``alpha``), else the step
    where the procedure stopped. Its interval at 1 - alpha / divisor (two-sided) agrees with
    the answer.

    >>> adj_d, adj_e, t_d, t_e = step_down([0.001, 0.5], [0.9, 0.01], 0.05)
    >>> [round(x, 3) for x in adj_d], [round(x, 3) for x in adj_e], t_d, t_e
    ([0.002, 1.0], [1.0, 0.02], [2.0, 2.0], [2.0, 2.0])
    >>> adj_d, _, t_d, _ = step_down([0.01, 0.01], [math.nan] * 2, 0.05, [0, 1], [0.75, 0.25])
    >>> [round(x, 4) for x in adj_d], [round(x, 3) for x in t_d]  # 0.01 / 0.75, then / 1
    ([0.0133, 0.0133], [1.333, 1.0])
    """
    m = len(p_diff)
    group = [0] * m if groups is None else [int(g) for g in groups]
    share = (1.0,) if shares is None else tuple(float(s) for s in shares)
    if len(group) != m or any(not 0 <= g < len(share) for g in group):
        raise ValueError(f"groups must give each of the {m} contrasts an index into shares")
    if not all(x > 0 for x in share):
        raise ValueError(f"every share must be positive, but got {shares=}")
    queues: list[list[tuple[float, int, int]]] = [[] for _ in share]
    for k, ps in enumerate((p_diff, p_eq)):
        for i, p in enumerate(ps):
            if p is not None and math.isfinite(p):
                queues[group[i]].append((p, k, i))
    for q in queues:
        q.sort(reverse=True)  # the smallest p last: popped first
    left = [0] * m
    for q in queues:
        for _, _, i in q:
            left[i] += 1
    live = [0] * len(share)  # contrasts of each group with a question left
    for i in range(m):
        live[group[i]] += left[i] > 0

    def weights() -> list[float]:
        return group_weights(share, live)

    adj = [[math.nan] * m, [math.nan] * m]
    first = weights() if any(live) else [1.0] * len(share)
    div = [[1.0 / max(first[g], 1e-300) for g in group] for _ in range(2)]
    running, stopped = 0.0, None
    while any(queues):
        w = weights()
        g = min(
            (g for g in range(len(share)) if queues[g]),
            key=lambda g: (queues[g][-1][0] / w[g], g),
        )
        p, k, i = queues[g].pop()
        running = max(running, min(1.0, p / w[g]))
        adj[k][i] = running
        if stopped is None and not running < alpha:
            stopped = w  # the first question not answered: every later one is judged here
        div[k][i] = 1.0 / (w[g] if stopped is None else stopped[g])
        left[i] -= 1
        if left[i] == 0:
            live[g] -= 1
    return adj[0], adj[1], div[0], div[1]


def decide_words(
    estimate: Sequence[float],
    se: Sequence[float],
    df: Sequence[float],
    sign: float,
    margin: float | None,
    level: float,
    blocked: Sequence[bool] | None = None,
    groups: Sequence[int] | None = None,
    shares: Sequence[float] | None = None,
) -> dict[str, np.ndarray]:
    """Every contrast's word, adjusted p-values and intervals over the family of all of them.

    ``sign``: 1 when lower is better (minimize), -1 otherwise; ``margin``: the equivalence
    margin d in the metric's units (None: no equivalence question, never "equivalent");
    ``blocked``: contrasts that may not be called better nor equivalent (a member pruned or
    failed on some seed: its complete seeds flatter it); they can still be called worse;
    ``groups`` and ``shares``: how the family's error rate is split (:func:`step_down`).

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
    adj_d, adj_e, t_d, t_e = step_down(pd_, pe_, alpha, groups, shares)
    blocked = [False] * m if blocked is None else list(blocked)
    out = {k: np.full(m, math.nan) for k in ("lo", "hi", "ci_level", "eq_lo", "eq_hi", "eq_level")}
    words = []
    for i in range(m):
        known = se_[i] >= 0 and df_[i] >= 1 and t_d[i] < 1e299
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


def family_size(m: int, asked: int | None = None) -> str:
    """The family's size in words, with how many can be estimated where some cannot.

    >>> family_size(1), family_size(20, 18), family_size(3, 3)
    ('1 contrast', '20 contrasts (18 estimable)', '3 contrasts')
    """
    text = f"{m} contrast{'s' * (m != 1)}"
    return text + (f" ({asked} estimable)" if asked is not None and asked < m else "")


def group_split(groups: Sequence[tuple[str, int, float]]) -> str:
    """How the error rate is split, in words: each group present (what, contrasts, share) with
    its share renormalised over them.

    >>> group_split([("schedules", 2, 0.3), ("per-setting", 6, 0.1)])
    'schedules (2) 75%, per-setting (6) 25%'
    """
    total = sum(s for _, _, s in groups)
    return ", ".join(f"{what} ({n}) {s / total:.0%}" for what, n, s in groups)


def family_rule(
    m: int,
    level: float,
    margin: float | None,
    groups: Sequence[tuple[str, int, float]] = (),
    asked: int | None = None,
) -> str:
    """How the family's words are decided, in one line; ``groups``: (what, contrasts, share)
    of each group with a question asked, where the family is split (:func:`step_down`);
    ``asked``: how many of the ``m`` contrasts ask a question (the others cannot be estimated;
    default: all).

    >>> family_rule(3, 0.95, 0.01)
    'Holm over 3 contrasts, family-wise error 5%; each asks "differs from 0?" and "within +-0.01?" (TOST), counted once (Shaffer)'
    >>> family_rule(8, 0.95, None, [("schedules", 2, 0.7), ("per-setting", 6, 0.3)])
    'weighted Holm over 8 contrasts, family-wise error 5% shared: schedules (2) 70%, per-setting (6) 30%; a group done passes its share on (Bretz et al. 2009); no equivalence margin, so none is called equivalent'
    >>> family_rule(3, 0.95, None, [("schedules", 1, 0.3)], asked=1).split(";")[0]
    'Holm over 3 contrasts (1 estimable), family-wise error 5%'
    """  # noqa: E501
    over = family_size(m, asked)
    if len(groups) > 1:
        head = (
            f"weighted Holm over {over}, family-wise error {1 - level:.0%} shared: "
            f"{group_split(groups)}; a group done passes its share on (Bretz et al. 2009)"
        )
    else:
        head = f"Holm over {over}, family-wise error {1 - level:.0%}"
    if margin is None:
        return head + "; no equivalence margin, so none is called equivalent"
    return (
        f'{head}; each asks "differs from 0?" and "within +-{margin:g}?" (TOST), counted '
        "once (Shaffer)"
    )


MOST_SEEDS = 1000  # seeds_to_decide looks no further


def seeds_to_decide(
    estimate: float,
    se: float,
    df: float,
    n: int,
    conf: float,
    conf_eq: float,
    margin: float | None,
) -> float | None:
    """The fewest seeds n' > n at which a contrast with this estimate and noise would be
    decided at the step it was judged at: its standard error scaled by sqrt(n / n'), its df by
    (n' - 1) / (n - 1); separated where its ``conf`` interval excludes 0, equivalent where its
    ``conf_eq`` interval lies inside +-``margin``. Arithmetic on the present estimate, not a
    power calculation (``tlmsearch plan`` gives that): the estimate itself moves with more seeds.
    None where it cannot be said (no noise estimate, fewer than 2 seeds); ``math.inf`` where it
    needs more than :data:`MOST_SEEDS`. With rows of unequal seeds, n is the fewest of them and
    the whole standard error is scaled: an optimistic count.

    >>> seeds_to_decide(0.004, 0.004, 9, 4, 0.99, 0.98, 0.01)  # inside +-0.01: equivalence
    11
    >>> seeds_to_decide(0.02, 0.01, 9, 4, 0.99, 0.98, 0.01)  # outside it: separation
    9
    """
    if not (se > 0 and df >= 1 and n >= 2 and math.isfinite(estimate)):
        return None

    def decided(m: int) -> bool:
        s = se * math.sqrt(n / m)
        d = max(1.0, df * (m - 1) / (n - 1))
        if abs(estimate) > t_quantile(d, conf) * s:
            return True
        if margin is None or not margin > 0 or not 0 < conf_eq < 1:
            return False
        return abs(estimate) + t_quantile(d, conf_eq) * s < margin

    if n >= MOST_SEEDS or not decided(MOST_SEEDS):
        return math.inf
    lo, hi = n, MOST_SEEDS  # decided(hi), not decided(lo) (the contrast is inconclusive at n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decided(mid) else (mid, hi)
    return hi
