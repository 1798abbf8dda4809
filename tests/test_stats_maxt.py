"""The joint t distribution of comparisons with one baseline (tlmsearch.stats.maxt)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import multivariate_t
from scipy.stats import t as student_t

from tlmsearch import stats
from tlmsearch.stats import maxt


@pytest.mark.parametrize(
    ("shares", "df", "c"), [([0.5] * 4, 6, 2.6), ([0.2, 0.5, 0.9], 12, 2.3), ([0.5] * 15, 30, 3.0)]
)
def test_the_joint_chance_matches_a_multivariate_t(shares, df, c) -> None:
    # corr(i, j) = sqrt(s_i s_j): the one-factor structure of comparisons with one baseline
    lam = np.sqrt(shares)
    corr = np.outer(lam, lam)
    np.fill_diagonal(corr, 1.0)
    draws = multivariate_t(np.zeros(len(shares)), corr, df=df, seed=0).rvs(200_000)
    mc = float((np.abs(draws).max(axis=1) < c).mean())
    tolerance = 4 * np.sqrt(mc * (1 - mc) / 2e5) + 2e-4
    assert maxt.joint_below(c, shares, df) == pytest.approx(mc, abs=tolerance)


def test_groups_with_different_baselines_are_independent() -> None:
    one = maxt.joint_below(2.5, [0.5, 0.5], 10)
    assert maxt.joint_below(2.5, [0.5] * 4, 10, groups=[0, 0, 1, 1]) == pytest.approx(one**2)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.0, 0.95), min_size=2, max_size=8),
    st.integers(2, 60),
    st.sampled_from([0.9, 0.95]),
)
def test_the_joint_critical_value_lies_between_one_comparisons_and_bonferronis(
    shares, df, level
) -> None:
    m = len(shares)
    c = maxt.joint_critical(shares, df, level)
    one = student_t.ppf(0.5 + level / 2, df)
    bonferroni = student_t.ppf(1 - (1 - level) / (2 * m), df)
    assert one - 1e-3 <= c <= bonferroni + 1e-3
    # more shared noise moves the comparisons together: the critical value falls
    assert maxt.joint_critical([min(0.95, s + 0.3) for s in shares], df, level) <= c + 1e-3


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-6.0, 6.0), min_size=1, max_size=8), st.integers(2, 40))
def test_step_down_p_values_lie_between_the_raw_and_holms(t, df) -> None:
    m = len(t)
    shares = [0.5] * m
    adj = maxt.step_down(t, shares, [df] * m)
    raw = [2 * student_t.sf(abs(x), df) for x in t]
    holm = stats.adjust(raw, "holm")
    for a, r, h in zip(adj, raw, holm, strict=True):
        assert r - 2e-4 <= a <= h + 2e-4
    order = np.argsort(-np.abs(t), kind="stable")  # monotone along the step-down order
    assert all(adj[order[i]] <= adj[order[i + 1]] + 1e-12 for i in range(m - 1))


def test_a_difference_with_zero_noise_is_decided() -> None:
    # an infinite t (deltas identical on every seed) has p 0; NaN is no member
    adj = maxt.step_down([float("inf"), float("-inf"), float("nan")], [0.5] * 3, [1, 1, 1])
    assert adj[:2] == [0.0, 0.0] and np.isnan(adj[2])


def test_the_steps_go_by_each_comparisons_own_p_value() -> None:
    # a t of 5.4 on 2 df (p 0.03) is weaker than 4.2 on 18 df (p 5e-4): ordering by |t| made
    # the weak one's step carry its tail to every comparison after it (found in a grid table)
    t = [40.0, 5.43] + [4.22] * 7
    dfs = [18, 2] + [18] * 7
    adj = maxt.step_down(t, [0.5] * 9, dfs)
    assert all(a < 0.01 for a in adj[2:])
    # the 2-df comparison is stepped last, alone: its own two-sided p
    assert adj[1] == pytest.approx(2 * student_t.sf(5.43, 2), abs=2e-4)
    holm = stats.adjust([2 * student_t.sf(abs(x), d) for x, d in zip(t, dfs, strict=True)], "holm")
    assert all(a <= h + 2e-4 for a, h in zip(adj, holm, strict=True))
