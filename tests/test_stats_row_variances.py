"""tlmsearch.stats.row_variances: each row's own variance, its flags, each pair's noise."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.stats.row_variances import OWN, POOLED, RowNoise, RowVariance, row_fit


def table(values: np.ndarray, missing: frozenset = frozenset()) -> pd.DataFrame:
    """Row 0 is uniform; values[r, s] is row r on seed s; ``missing``: (r, s) not run."""
    rows = [
        {
            "candidate": "uniform" if r == 0 else f"c{r}",
            "seed": s,
            "state": "COMPLETE",
            "is_baseline": r == 0,
            "v": float(values[r, s]),
        }
        for r in range(values.shape[0])
        for s in range(values.shape[1])
        if (r, s) not in missing
    ]
    return pd.DataFrame(rows)


def _long(values: np.ndarray, missing: frozenset = frozenset()):
    cells = [
        (r, s, values[r, s])
        for r in range(values.shape[0])
        for s in range(values.shape[1])
        if (r, s) not in missing
    ]
    return tuple(zip(*cells, strict=True))


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 7), st.integers(2, 5), st.integers(0, 2**32 - 1))
def test_row_variances_are_shuklas_in_a_complete_table(n_rows, n_seeds, seed) -> None:
    # Shukla (1972): sigma_i^2 = (R SS_i / (S - 1) - pooled) / (R - 2); their mean is the pooled
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n_rows, n_seeds)) * rng.uniform(0.2, 3.0, size=(n_rows, 1))
    r = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    ss = (r**2).sum(1)
    pooled = ss.sum() / ((n_rows - 1) * (n_seeds - 1))
    shukla = (n_rows * ss / (n_seeds - 1) - pooled) / (n_rows - 2)
    own, rss, df = row_fit(*_long(y))
    assert df == (n_rows - 1) * (n_seeds - 1) and rss / df == pytest.approx(pooled)
    assert [own[i][0] for i in range(n_rows)] == pytest.approx(list(shukla), abs=1e-9)
    assert np.mean([own[i][0] for i in range(n_rows)]) == pytest.approx(pooled)


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 6), st.integers(3, 5), st.integers(0, 2**32 - 1), st.data())
def test_row_variances_are_unbiased_with_cells_missing(n_rows, n_seeds, seed, data) -> None:
    # own_r is a quadratic form e'Q_r e of the cells' errors, so E[own_r] = sum_k sigma_k^2
    # Q_r[k, k], and Q_r[k, k] is own_r of the unit vector at cell k: exact, no sampling
    rng = np.random.default_rng(seed)
    cells = [(r, s) for r in range(n_rows) for s in range(n_seeds)]
    # drop a few cells off the first seed's column and uniform's row (the design stays connected)
    droppable = [(r, s) for r, s in cells if r > 0 and s > 0]
    missing = frozenset(data.draw(st.lists(st.sampled_from(droppable), max_size=3, unique=True)))
    sigma2 = rng.uniform(0.1, 9.0, size=n_rows)
    kept = [c for c in cells if c not in missing]
    rows, blocks = [r for r, _ in kept], [s for _, s in kept]
    expected = np.zeros(n_rows)
    informative = None
    for k, (r, _) in enumerate(kept):
        unit = np.zeros(len(kept))
        unit[k] = 1.0
        own, _, _ = row_fit(rows, blocks, unit)
        informative = [i for i in range(n_rows) if math.isfinite(own[i][0])]
        expected += sigma2[r] * np.array(
            [own[i][0] if i in informative else 0.0 for i in range(n_rows)]
        )
    assert informative
    assert expected[informative] == pytest.approx(sigma2[informative], rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1, 1), st.floats(-1, 1)), min_size=2, max_size=6))
def test_with_uniform_and_one_candidate_the_noise_is_the_paired_tests(cells) -> None:
    # two rows: the block fit of value ~ candidate + seed is the paired t test exactly
    y = np.array([[2.0 + a for a, _ in cells], [2.0 + b for _, b in cells]])
    model = stats.row_noise(table(y), "v")
    d = y[1] - y[0]
    if model is None or not d.std(ddof=1) > 1e-9:
        return
    n = model.pair("c1", "uniform")
    assert n.df == len(cells) - 1 and n.sd == pytest.approx(d.std(ddof=1), rel=1e-6)
    assert all(r.source == POOLED for r in model.rows.values())  # nothing to tell apart


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(3, 6))
def test_a_pair_of_two_noisy_rows_is_the_paired_sample_variance(seed, n_seeds) -> None:
    # uniform and c1 scatter 10x more than the other 14 rows: both use their own, and their
    # pair is the exact paired test, the sample variance of c1 - uniform over their seeds
    rng = np.random.default_rng(seed)
    y = np.zeros((16, n_seeds)) + rng.normal(0, 1, size=(1, n_seeds))
    for row in range(16):  # errors of sample sd exactly 0.01, or 0.1 in rows 0 and 1
        e = rng.normal(size=n_seeds)
        y[row] += (0.1 if row < 2 else 0.01) * (e - e.mean()) / e.std(ddof=1)
    model = stats.row_noise(table(y), "v")
    assert model.rows["uniform"].source == model.rows["c1"].source == OWN
    assert sum(model.rows[f"c{r}"].source == OWN for r in range(2, 16)) <= 2
    n = model.pair("c1", "uniform")
    d = y[1] - y[0]
    assert n.df == n_seeds - 1 and n.sd == pytest.approx(d.std(ddof=1))
    assert model.pair("c2", "c3") == model.pooled  # two quiet rows: the pooled noise


def test_a_noisy_candidate_is_flagged_and_welch_combines_it_with_the_pool() -> None:
    rng = np.random.default_rng(3)
    y = rng.normal(0, 0.01, size=(16, 3))
    y[5] = rng.normal(0, 0.3, size=3)  # c5: 30x the others' sd
    model = stats.row_noise(table(y), "v")
    c5 = model.rows["c5"]
    assert c5.source == OWN and c5.df == 2 and c5.p < 0.05
    assert sum(r.source == OWN for r in model.rows.values()) == 1
    n = model.pair("c5", "uniform")
    var_p = model.pooled.sd**2 / 2
    assert n.sd**2 == pytest.approx(c5.var + var_p)
    satterthwaite = (c5.var + var_p) ** 2 / (c5.var**2 / 2 + var_p**2 / model.pooled.df)
    assert n.df == max(1, int(satterthwaite))
    assert model.source("c5", "uniform") == "c5" and model.source("c4", "uniform") == "pooled"


def test_uniform_keeps_the_pool_only_where_its_seeds_rule_out_twice_the_sd() -> None:
    base = np.random.default_rng(1).normal(0, 0.01, size=(16, 8))
    quiet = stats.row_noise(table(base), "v")
    assert quiet.rows["uniform"].source == POOLED  # 8 seeds: 7 df show it is not 2x noisier
    loud = base.copy()
    loud[0] *= 3.0
    model = stats.row_noise(table(loud), "v")
    assert model.rows["uniform"].source == OWN and model.rows["uniform"].df == 7
    # and never below the pool: a uniform quieter than the rest keeps the pooled variance
    calm = base.copy()
    calm[0] *= 0.1
    assert stats.row_noise(table(calm), "v").rows["uniform"].source == POOLED


def test_a_modestly_noisier_uniform_on_many_seeds_takes_its_own_variance() -> None:
    # uniform's sd 1.5x the candidates' on 20 seeds: its 19 df pin its variance near 2.25x
    # the others', well below 4x, so a gate "pooled unless 4x is ruled out at 80%" pooled it
    # and understated every comparison; its own estimate exceeds the pool, so it is its own
    y = np.random.default_rng(5).normal(0, 0.01, size=(16, 20))
    y[0] *= 1.5
    model = stats.row_noise(table(y), "v")
    u = model.rows["uniform"]
    assert u.own > 1.5 * model.pooled.sd**2 / 2  # clearly above the pool...
    assert u.own < 3.0 * model.pooled.sd**2 / 2  # ...and clearly below 4x
    assert u.source == OWN and u.df == 19 and u.var == pytest.approx(u.own)
    # every comparison with it is then wider than on the pool
    assert model.pair("c1", "uniform").sd > model.pooled.sd


def test_uniforms_share_of_each_comparison_is_how_they_move_together() -> None:
    base = np.random.default_rng(1).normal(0, 0.01, size=(16, 8))
    loud = base.copy()
    loud[0] *= 3.0
    model = stats.row_noise(table(loud), "v")
    u = model.rows["uniform"]
    assert u.source == OWN
    for c in ("c3", "c7"):
        row = model.rows[c]
        v = row.var if row.source == OWN else model.pooled.sd**2 / 2
        assert model.share(c, "uniform") == pytest.approx(u.var / (u.var + v))
    quiet = stats.row_noise(table(base), "v")
    assert quiet.rows["uniform"].source == POOLED  # 8 seeds rule out 2x
    pooled = [c for c, r in quiet.rows.items() if r.source == POOLED and c != "uniform"]
    assert pooled and all(quiet.share(c, "uniform") == 0.5 for c in pooled)  # both pooled: half
    assert stats.Noise(0.1, 3).share("c3", "uniform") == 0.5  # the pooled model: half


def test_a_row_variance_model_reads_like_a_noise() -> None:
    model = RowNoise(stats.Noise(0.02, 10), {"u": RowVariance(0.0002, 10, POOLED, 0.0, 0.5)})
    assert (model.sd, model.df) == (0.02, 10)
    assert model.quantile(0.95) == stats.Noise(0.02, 10).quantile(0.95)
    assert model.pair("u", "ghost") == model.pooled and model.source("u", "x") == "pooled"
    noise = stats.Noise(0.1, 3)  # the pooled model: one noise for every pair
    assert noise.pair("a", "b") is noise and noise.source("a", "b") == "pooled"


def test_no_residual_df_no_model() -> None:
    y = np.array([[2.0, 2.1]])  # uniform alone
    assert stats.row_noise(table(y), "v") is None
    assert stats.row_noise(table(np.array([[2.0], [2.1]])), "v") is None  # one seed


def test_a_row_the_pruner_censored_is_left_out_of_the_fit() -> None:
    # a pruned row kept the seeds it did well on; its cells would shrink the noise.
    # It is judged on the pool of the rows no pruner could stop (uniform, the unpruned ones)
    rng = np.random.default_rng(7)
    y = rng.normal(0, 0.01, size=(6, 4))
    full = table(y)
    full["unpruned"] = full["candidate"] != "c5"
    pruned = full.copy()
    c5 = pruned["candidate"] == "c5"
    pruned.loc[c5 & (pruned["seed"] == 3), "state"] = "PRUNED"
    quiet = pruned.copy()
    pruned.loc[c5 & (pruned["seed"] < 3), "v"] = [0.5, -0.5, 0.4]  # wild, but left out
    model = stats.row_noise(pruned, "v")
    without = stats.row_noise(full[full["candidate"] != "c5"], "v")
    assert model.pooled.sd == pytest.approx(without.pooled.sd)
    assert model.pooled.df == without.pooled.df
    # its own deltas scatter ~25x the pair's noise: its comparison takes their variance
    c5row = model.rows["c5"]
    assert c5row.source == OWN and c5row.df == 2 and c5row.p < 0.05
    assert model.pair("c5", "uniform").sd > 0.3
    assert not bool(stats.effects(pruned, "v").set_index("candidate").loc["c5", "separated"])
    # a pruned row as quiet as the rest keeps the pool
    calm = stats.row_noise(quiet, "v").rows["c5"]
    assert calm.source == POOLED and calm.var == pytest.approx(model.pooled.sd**2 / 2)


def pruned_null(seed: int, unpruned: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A null study of 12 candidates on 3 seeds (sd 0.01, a per-seed level) and the same study
    after a pruner that keeps a candidate's seed only where it looks better than uniform there
    (its survivors are selected on the value itself); the first ``unpruned`` candidates
    unpruned."""
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 0.01, size=(13, 3)) + rng.normal(0, 0.05, size=(1, 3))
    full = table(y)
    full["unpruned"] = full["candidate"].isin([f"c{r}" for r in range(1, unpruned + 1)])
    pruned = full.copy()
    worse = (y[1:] > y[0]).ravel()
    cand = ~pruned["is_baseline"] & ~pruned["unpruned"]
    pruned.loc[cand & np.r_[np.zeros(3, bool), worse], "state"] = "PRUNED"
    return full, pruned


def test_once_anything_is_pruned_the_survivors_are_left_out_of_the_fit() -> None:
    # a candidate the pruner let run on every seed survived by looking good; with
    # the survivors in the fit a median-pruned null study read its noise at 0.65x the truth.
    # Only the rows it could not stop measure it: uniform and the unpruned ones
    for seed in range(20):
        full, pruned = pruned_null(seed, unpruned=3)
        if (pruned["state"] == "PRUNED").any():
            break
    model = stats.row_noise(pruned, "v")
    fit = full[full["is_baseline"] | full["unpruned"]]
    alone = stats.row_noise(fit, "v")
    assert model.pooled.sd == pytest.approx(alone.pooled.sd)
    assert model.pooled.df == alone.pooled.df == 6  # (4 - 1) x (3 - 1)
    # nothing pruned: nothing selected, every row measures it
    assert stats.row_noise(full, "v").pooled.df == 24
    # a row the pruner could stop on one of its seeds (a resume under another setting) is at
    # risk: left out too, (3 - 1) x (3 - 1) df left
    mixed = pruned.copy()
    mixed.loc[(mixed["candidate"] == "c1") & (mixed["seed"] == 0), "unpruned"] = False
    assert stats.row_noise(mixed, "v").pooled.df == 4
    # no unpruned rows: only uniform is left, so the noise is unknown, not the survivors'
    assert stats.row_noise(pruned.assign(unpruned=False), "v") is None


def test_the_unpruned_rows_noise_is_unbiased_where_the_survivors_read_low() -> None:
    # the simulation behind the rule: over many pruned null studies the unpruned rows' variance
    # averages the truth, the survivors' (the rows the pruner let finish: what the fit read
    # before, with no unpruned rows) far below it
    mine, survivors = [], []
    for seed in range(300):
        _, pruned = pruned_null(seed, unpruned=3)
        model = stats.row_noise(pruned, "v")
        if model is None or not (pruned["state"] == "PRUNED").any():
            continue
        mine.append(model.pooled.sd**2 / 2)
        done = pruned[(pruned["state"] == "COMPLETE") & ~pruned["unpruned"]]
        kept = done.groupby("candidate")["seed"].transform("size") == 3
        old = stats.row_noise(done[kept].drop(columns="unpruned"), "v")
        if old is not None and old.pooled.df >= 1:
            survivors.append(old.pooled.sd**2 / 2)
    assert len(mine) > 250
    se = np.std(mine) / math.sqrt(len(mine))
    assert abs(np.mean(mine) / 1e-4 - 1.0) < 3 * se / 1e-4
    assert len(survivors) > 150 and np.mean(survivors) / 1e-4 < 0.5  # measured: 0.36


def test_a_replayed_twin_is_its_originals_row() -> None:
    # a twin (same_as) and its original, identical data, get one noise
    rng = np.random.default_rng(3)
    y = rng.normal(0, 0.01, size=(16, 3))
    y[5] = rng.normal(0, 0.3, size=3)  # c5: flagged noisier
    t = table(y)
    t["number"] = range(len(t))
    t["same_as"] = pd.array([pd.NA] * len(t), dtype="Int64")
    twin = t[t["candidate"] == "c5"].copy()
    twin["candidate"] = "c5twin"
    twin["same_as"] = twin["number"].astype("Int64")
    twin["number"] = range(len(t), len(t) + len(twin))
    both = pd.concat([t, twin], ignore_index=True)
    model = stats.row_noise(both, "v")
    assert model.rows["c5twin"] == model.rows["c5"] and model.rows["c5"].source == OWN
    e = stats.effects(both, "v").set_index("candidate")
    assert e.loc["c5twin", "noise_sd"] == pytest.approx(e.loc["c5", "noise_sd"])


def test_a_noise_only_the_pruners_survivors_could_measure_is_unknown() -> None:
    # every candidate pruned on some seed leaves only selected cells; their scatter
    # is not the study's noise (0.66x the truth on median-pruned null studies)
    y = np.random.default_rng(5).normal(0, 0.01, size=(4, 3))
    t = table(y)
    for c in ("c1", "c2", "c3"):
        t.loc[(t["candidate"] == c) & (t["seed"] == 2), "state"] = "PRUNED"
    assert stats.row_noise(t, "v") is None
    e = stats.effects(t, "v")
    assert (e["noise"] == "unknown").all() and not e["separated"].fillna(False).any()


def test_two_rows_have_no_own_variances_only_their_sum() -> None:
    """Uniform and one candidate share every residual (one is minus the other): only the sum of
    their variances is measured. A split of it was the linear algebra library's choice (numpy
    2.4's least squares gave uniform +0.007 and the candidate -0.007), so uniform took an
    "own" variance 140x the pool and a clear paired effect read inconclusive."""
    fit, _, df = row_fit(["u"] * 3 + ["c"] * 3, [0, 1, 2] * 2, [2.0, 2.1, 1.9, 1.9, 2.01, 1.79])
    assert df == 2 and all(math.isnan(v[0]) for v in fit.values())
    t = pd.DataFrame(
        {
            "candidate": ["u"] * 3 + ["c"] * 3,
            "is_baseline": [True] * 3 + [False] * 3,
            "seed": [0, 1, 2] * 2,
            "state": "COMPLETE",
            "v": [2.0, 2.1, 1.9, 1.9, 2.01, 1.79],
        }
    )
    noise = stats.row_noise(t, "v")
    assert noise.rows["u"].source == POOLED and noise.rows["u"].var == pytest.approx(5e-5)


def _dense_row_fit(rows, blocks, values):
    """row_fit as it was, from the cells x cells residual projection (pinv of the design): the
    reference the structured fit must equal."""
    y = np.asarray(values, dtype="float64")
    r_codes = pd.factorize(pd.Series(list(rows), dtype="object").astype(str))[0]
    b_codes = pd.factorize(pd.Series(list(blocks), dtype="object").astype(str))[0]
    x = np.column_stack(
        [np.ones(len(y))]
        + [(r_codes == k).astype(float) for k in range(1, r_codes.max() + 1)]
        + [(b_codes == k).astype(float) for k in range(1, b_codes.max() + 1)]
    )
    m = np.eye(len(y)) - x @ np.linalg.pinv(x)
    m[np.abs(m) < 1e-12] = 0.0
    resid = m @ y
    df = len(y) - int(np.linalg.matrix_rank(x))
    rss = float(resid @ resid)
    if rss <= len(y) * (1e-12 * float(np.abs(y).max())) ** 2:
        rss, resid = 0.0, np.zeros_like(resid)
    codes, names = pd.factorize(pd.Series(list(rows), dtype="object"))
    g = np.zeros((len(y), len(names)))
    g[np.arange(len(y)), codes] = 1.0
    a, ss, share = g.T @ (m * m) @ g, g.T @ (resid * resid), g.T @ np.diag(m)
    informative = share > 1e-9
    own = np.full(len(names), math.nan)
    if informative.any() and df > 0:
        sub = np.ix_(informative, informative)
        solved, _, rank, _ = np.linalg.lstsq(a[sub], ss[informative], rcond=1e-9)
        if rank == informative.sum():
            own[informative] = solved
    n = g.sum(axis=0)
    return ({name: (own[i], ss[i], share[i], int(n[i])) for i, name in enumerate(names)}, rss, df)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 9),
    st.integers(1, 6),
    st.floats(0.0, 0.6),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_the_structured_row_fit_is_the_dense_one(n_rows, n_blocks, drop, seed, ties) -> None:
    # any design: cells missing anywhere (a row or block may vanish, the design may fall apart
    # into unconnected pieces), rows of very different noise, or exact ties (rounded values)
    rng = np.random.default_rng(seed)
    cells = [(r, b) for r in range(n_rows) for b in range(n_blocks) if rng.random() >= drop]
    if not cells:
        return
    rows, blocks = [f"r{r}" for r, _ in cells], [b for _, b in cells]
    y = (
        2.0
        + rng.normal(size=len(cells)) * rng.uniform(0.01, 3.0, size=n_rows)[[r for r, _ in cells]]
    )
    if ties:
        y = np.round(y, 1)
    got, rss, df = row_fit(rows, blocks, y)
    want, rss0, df0 = _dense_row_fit(rows, blocks, y)
    assert df == df0 and rss == pytest.approx(rss0, abs=1e-9)
    assert list(got) == list(want)
    for name, (own, ss, share, n) in want.items():
        assert got[name][3] == n
        assert got[name][1:3] == pytest.approx((ss, share), abs=1e-9)
        assert math.isnan(got[name][0]) == math.isnan(own), (name, got, want)
        if not math.isnan(own):
            assert got[name][0] == pytest.approx(own, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 40), st.integers(1, 9), st.integers(0, 2**32 - 1))
def test_woodburys_solve_is_the_least_squares_one(n, p, seed) -> None:
    from tlmsearch.stats.row_variances import _solve_rows

    rng = np.random.default_rng(seed)
    d, f, b = rng.uniform(0.5, 4.0, n), rng.normal(size=(n, p)), rng.normal(size=n)
    want = np.linalg.lstsq(np.diag(d) + f @ f.T, b, rcond=1e-9)[0]
    assert _solve_rows(d, f, b) == pytest.approx(want, abs=1e-9, rel=1e-9)
    # a singular system (a row of zeros in d and f): not every unknown is pinned
    d[0], f[0] = 0.0, 0.0
    assert _solve_rows(d, f, b) is None


def test_the_row_solve_factorizes_the_smaller_system(monkeypatch) -> None:
    """With settings the blocks are seed x setting: 10 seeds x 4 settings give f 1,521 columns
    against 24 rows, and Woodbury's 1,521 x 1,521 capacitance (its condition number an SVD)
    took 2.6 s a fit where the 24 x 24 system is the answer. Every matrix factorized is at
    most rows x rows."""
    from tlmsearch.stats.row_variances import _solve_rows

    sizes: list[int] = []
    for name in ("cond", "solve", "lstsq"):
        real = getattr(np.linalg, name)

        def spy(a, *args, _real=real, **kw):
            sizes.append(np.asarray(a).shape[0])
            return _real(a, *args, **kw)

        monkeypatch.setattr(np.linalg, name, spy)
    rng = np.random.default_rng(0)
    d, f, b = rng.uniform(0.5, 4.0, 24), rng.normal(size=(24, 1521)), rng.normal(size=24)
    want = np.linalg.lstsq(np.diag(d) + f @ f.T, b, rcond=1e-9)[0]
    sizes.clear()
    assert _solve_rows(d, f, b) == pytest.approx(want, abs=1e-9, rel=1e-9)
    assert sizes and max(sizes) <= 24, sizes


def test_the_rows_model_at_5000_candidates_takes_no_cells_by_cells_matrix() -> None:
    # the dense fit held a 15,000 x 15,000 projection (1.8 GB) and a pinv of the 15,000 x 5,002
    # design (minutes); the structured one is linear in the cells
    import time

    rng = np.random.default_rng(0)
    k, seeds = 5000, 3
    rows = [r for r in range(k) for _ in range(seeds)]
    blocks = [s for _ in range(k) for s in range(seeds)]
    y = rng.normal(size=k * seeds)
    start = time.process_time()
    fit, rss, df = row_fit(rows, blocks, y)
    assert time.process_time() - start < 10.0
    assert df == (k - 1) * (seeds - 1)
    # a complete table: Shukla's estimator, whose mean is the pooled variance
    assert np.mean([v[0] for v in fit.values()]) == pytest.approx(rss / df)
