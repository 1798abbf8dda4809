"""Error rates and power of every decision tlmsearch prints, on simulated studies.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/stats.py [--reps 300] [--race-reps 100]
[--seed 0] [--scenarios a,b,c3,c5,u2,u3,n3,n5,prior_half,prior_equal,prior_double,arrive,
prune_median,prune_paired,matrix60] [--sd-u 0.005] [--sd-e 0.005] [--no-race] [--json OUT]``
(it prints its settings first; ``--scenarios`` picks any of them, e.g. ``prior_half,arrive``).
``--gate REPS`` runs only uniform's variance gate across seeds (:func:`gate_grid`: REPS null
studies of 15 candidates per cell of 3/5/10/20 seeds x uniform's sd 1/1.25/1.5/2/3x, each cell
``ok`` or ``**FAILS**`` against 5% within 2 MC standard errors; ``--gate 100`` in about 2
minutes, ``--gate 1000`` in about 20 on one core; its full table: docs/statistics.md,
"Uniform's gate across seeds"). Measured (seed 0, 2 shared cores under a load of 5-6): the old
gate (pooled unless 4x is ruled out at 80%), 1000 studies a cell in 3,834 s, failed at 10 and
20 seeds with uniform's sd 1.25x / 1.5x (6.8 / 9.5% ± 0.9 at 10 seeds, 8.7 / 10.5% ± 1.0 at
20) and at 20 seeds 2x (6.8% ± 0.8), its rate growing with seeds; uniform on its own variance
whenever its estimate exceeds the pool (tlmsearch), the first 300 of the same studies in
1,998 s, stays within 2 MC standard errors of 5% in every cell (at 10 / 20 seeds: 5.0 / 4.0%
± 1.2 and 6.3 / 4.0% ± 1.3). At 3 seeds the two rules are one rule: 7.0% ± 1.5 (300) and
6.9% ± 0.8 (1000) at uniform 2x, the joint t's known excess with 2 df (docs/statistics.md).
``--gate-seeds 10,20 --gate-ratios 1.5,2`` restricts the grid (a cell's draws are the same in
any grid): tlmsearch's rule on 1000 studies a cell, uniform 1.5x / 2x, 4.3 / 4.4% ± 0.6 at 10
seeds and 4.2 / 4.7% ± 0.6 / 0.7 at 20.

``--tuned REPS`` runs only the tuned and shared-setting comparisons' rows (:func:`tuned_grid`:
null studies of uniform and 6 schedules at 4 LRs, each LR treating each seed its own way, the
best LR chosen on the first half of the seeds; 4 / 6 seeds, uniform's sd 1-3x, pruned with none
or 2 unpruned), ``--shrink REPS`` the best's selection-adjusted estimate's (:func:`shrink_grid`).
Measured (seed 0, 2 shared cores under a load of 8-10): the old rule (the engine at 1b104cb:
the pooled block fit, survivors' noise with none unpruned, survivors judged) on 100 studies a row
in 988 s claimed a false separation in 14-16% with uniform's sd 2-3x, 16% pruned with none
unpruned and 25% with 2 unpruned; tlmsearch (rows model, the study's pruned flag, survivors never
separated, 94f2fdb) on 300 in 2,013 s: 0.0-8.0%, within 2 MC standard errors of 5% in every row.
``--shrink 1000`` (1,627 s): the best of 15 equal candidates' raw mean lies -0.715 ± 0.015
noise sd from its truth at 3 seeds (-0.390 at 10), the adjusted one -0.097 ± 0.014 (-0.047);
with true effects spread 1 noise sd, -0.294 and +0.021. Tables: docs/statistics.md.

Each simulated study is a randomized block design drawn as a real one is (docs/contributing.md):
the final value of candidate c on seed s is

    y(c, s) = 2.0 + effect_c + u_s + e_cs     u_s ~ N(0, sd_u), e_cs ~ N(0, k_c sd_e)

with u_s shared by every candidate of seed s (uniform included) and uniform one of the
candidates (effect 0), so every paired delta of a seed carries the same -e_us. Effects are
given in *noise sds*: the sd of one paired delta with every row equally noisy (k_c = 1),
sqrt(2) sd_e. Scenarios (15 candidates):

- ``a``: every candidate equal to uniform, 3 seeds (the null);
- ``b``: uniform better than all 15 by 2 noise sds (each effect +2 sqrt(2) sd_e), 3 seeds;
- ``c3`` / ``c5``: one real winner at -2 noise sds, the other 14 equal to uniform, 3 / 5 seeds;
- ``u2`` / ``u3``: the null, 3 seeds, uniform's own residual sd 2x / 3x the
  candidates' (k_uniform = 2, 3): every comparison rests on its noise;
- ``n3`` / ``n5``: the null, one candidate's (c00) residual sd 3x the others', 3 / 5 seeds.

The races and the pruner (the slow part) run on ``--race-reps`` of the studies of a, b, c3, c5
and u3; every other rule on all ``--reps``. The run-and-read rows change how a study is run or
read, not how it is drawn; each runs on ``--race-reps`` studies of its base scenario(s):

- ``prior_half`` / ``prior_equal`` / ``prior_double``: the race against uniform (rows) with
  ``racing.prior_sd`` half / equal to / twice the true sd of one paired delta (sqrt(2) sd_e),
  on studies of ``a`` and ``c3`` (the three priors race the same studies). Two rules: *the
  prior steers* (tlmsearch: a lane the prior would separate is held, its reason starting with
  ``racing.PAUSED``, and judged again on measured noise) and *prior final*,
  emulated by recording a held lane as the separation its reason names (the driver recorded a
  decision on the prior for good). FWER at the end and at any look (a "separated" printed at
  some look), power (``c3``), lanes held on the prior per race.
- ``arrive``: that race (no prior) fed by a sampler: 2 candidates arrive per look, each
  starting on seed 0 (c00 first: in ``c3`` the winner arrives first), the family fixed before
  the data (``search.n_trials: 15``, ``racing.race_family_size``) or counted as candidates
  arrive (``family_size`` 0).
- ``prune_median`` / ``prune_paired``: the null ``a`` (and, for median, ``c3z``: c3 with its
  winner queued last, so that it is not unpruned) run one training at a time, seed-major
  with uniform first on each seed (a grid's queue), each reporting 4 evals: the final value
  plus a learning curve shared by all plus noise of sd sd_e (1 - t / 4), gone at the last eval
  (an early value is the final one blurred: a prune selects on it); ``search.pruner`` median
  (Optuna's MedianPruner with tlmsearch's defaults, n_startup_trials 2) or paired
  (search/sampling/paired_pruner.py), built by search/sampling/samplers.PRUNER_BUILDERS, judges
  evals 1 to 3 (search/sampling/pruning.py: never the last eval, never uniform, never the first
  ``search.unpruned_candidates`` of the queue: c00 and c01 by default); a pruned trial's row is
  PRUNED. The two pruners prune the same curves, each once with 2 candidates unpruned and once
  with none. Read with five noise models: the rows model with every row the pruner could
  stop left out of the fit once it stopped anything, 2 unpruned (``Evidence.build``:
  tlmsearch); the same with none unpruned (``unpruned_candidates: 0``: unknown once anything is
  pruned); the rows model on the rows never pruned, survivors included (survivors in
  the fit); the pooled block fit of the complete cells (``stats.block_noise(unselected=False)``:
  the pooled model); and the same studies unpruned. Each estimate
  over the truth (sqrt(2) sd_e): the study's noise (``Evidence.noise``) and a typical
  candidate's noise vs uniform (the median over the candidates of ``model.pair(c, uniform)``),
  as sd and variance ratios (an unbiased variance averages 1); and the FWER of the conclusions
  (holm) on the pruned study: a false "separated" in the effects table, and a false claim in
  the conclusions' words (which refuse "beats uniform" to a candidate pruned on some seed).
- ``matrix60``: the null with 60 candidates, 3 seeds: the report's "can these be told apart"
  matrix (report/effects.py ``separation()``: the top 5 by the ranking, and uniform), decided
  by ``Evidence.pairs`` (Holm over every pair of the 61 measured: tlmsearch), by Holm over the
  15 shown pairs on the rows noise, and over the shown pairs on one pooled noise
  (``stats.pairwise``, ``family_size=0``). A false cell: any separated pair.

Every decision goes through the code a run uses, with no statistic re-derived here:

- *conclusions* (no racing): ``Evidence.build`` without a config, four rules on the same
  studies (:data:`RULES`): ``holm``, what tlmsearch does (each comparison on its rows' noise,
  ``variance`` rows: :func:`tlmsearch.stats.row_noise`; Holm's step-down at the comparisons'
  joint t, tlmsearch/stats/maxt.py; the interval over the family); ``holm-rows-bonferroni``
  (the same noise, Holm's Bonferroni steps: what the joint t buys); ``holm-pooled``, the
  pooled rule (one block-design noise for every comparison, the interval printed per
  comparison); ``none`` (no correction, the contrast). A candidate is
  separated from uniform when its effects row says ``separated``. A false separation: a
  candidate with true effect 0 separated, or one with a real effect separated the wrong way.
  Per-candidate rate: over the candidates with effect 0; family-wise error (FWER): studies
  with at least one false separation; power: real effects separated the right way. "best's
  interval excludes 0": studies whose best-ranked candidate (best.yaml's) is not uniform and
  has an interval vs uniform, as printed, that excludes 0 (in a null scenario, a false claim).
- *the verdict*: ``conclusions(...).top_group`` (Hsu's MCB, uniform included). A wrong winner:
  ``selected`` True for a candidate that is not the true best (in ``a`` every selection; in
  ``b`` anything but uniform). Also how often uniform ranks first / is selected, and (``c``)
  how often the true winner is selected (power).
- *racing*, as it runs live (against uniform and the best on the rows model, and against
  uniform on the pooled one): every candidate and uniform start on seed 0,
  then ``racing.race`` (settings from ``race_settings`` of a study config) runs on the trials
  revealed so far and every lane with a ``next_seed`` gets it (and uniform that seed), until no
  lane has one; each candidate's final lane is its decision. Against ``uniform`` the errors
  are as for the conclusions. Against ``best`` a ``separated`` lane says "worse than <the
  incumbent>" (or, out of seeds, "better than" it): a false claim is a candidate as good as the
  true best declared worse, or a "better than R" that is not true; per-candidate over the
  candidates as good as the best; power: candidates truly worse than the best declared worse.
  "strict" counts every claim against its named reference that the truth contradicts (also
  "worse than" an incumbent no better than it: the family the race's Tukey level bounds).
  "trainings": cells trained over (candidates + uniform) x seeds; "undone": lanes separated at
  some look but not at the end (a later look, with a new noise estimate, reopened them).

Monte-Carlo standard errors are sqrt(p (1 - p) / N), N the simulated studies: exact for the
rates per study (FWER, the verdict) and an upper bound for the per-candidate rates (a rate
averaged within a study varies less between studies than a single 0/1 outcome).

Goals: per-candidate false separation <= 5%, FWER
<= 5% and (null scenarios) the best's interval excluding 0 in <= 5% of studies, within 2 MC
standard errors (the ``goal`` column; family none is shown for contrast, it claims no
family-wise baseline); the verdict never selects a candidate in ``b`` (uniform measures
better); power in ``c`` at 3 and 5 seeds is reported, not judged. The run-and-read rows: the
FWER and the FWER at any look <= 5% within 2 MC standard errors wherever a family-wise claim
is made (every rule shown, old ones too); on pruned studies, "variances unbiased": the mean
variance ratio within 2 MC standard errors of 1 (shown, not a 5% goal).

Measured (the defaults: ``--reps 300 --race-reps 100``, seed 0, the engine at commit 979bc46;
697 s on one of 2 shared cores with other jobs beside it; the full tables with every MC
standard error are what the script prints). The conclusions, old rule (``holm-pooled``) -> the
rule tlmsearch uses (``holm``), rate over 300 studies:

    scen                          FWER            best's interval excl. 0   power
    a   15 equal, 3 seeds         0.020 -> 0.030  0.177 -> 0.003            -
    u2  uniform's sd 2x           0.127 -> 0.030  0.230 -> 0.013            -
    u3  uniform's sd 3x           0.230 -> 0.037  0.263 -> 0.017            -
    n3  one candidate's sd 3x     0.130 -> 0.043  0.267 -> 0.027            -
    n5  the same, 5 seeds         0.123 -> 0.037  0.193 -> 0.007            -
    b   uniform better by 2 sds   0.000 -> 0.000  0.000 -> 0.000            0.768 -> 0.519
    c3  one winner at -2 sds      0.040 -> 0.027  -                         0.657 -> 0.497
    c5  the same, 5 seeds         0.030 -> 0.033  -                         0.940 -> 0.857

(MC standard error <= 0.012 on the rates near 5%, <= 0.029 on the powers.) The verdict (MCB):
a wrong winner in at most 0.3% of the studies of any scenario (pooled: up to 2.7%, in u3);
the true winner selected 0.210 -> 0.050 (c3), 0.717 -> 0.370 (c5): MCB must beat every other
candidate, and with 15 of them about half the studies have one whose own seeds look noisy.
The race against uniform (100 studies), pooled -> rows: FWER 0.010 -> 0.010 (a), 0.170 ->
0.040 (u3), power 0.50 -> 0.36 (c3), 0.83 -> 0.70 (c5); against the best, every FWER <= 0.04.
The paired pruner (its own pooled noise, search/sampling/paired_pruner.py): a best candidate
pruned in at most 1 of 100 studies.

The run-and-read rows, the alternative rule -> tlmsearch, 100 studies per base (MC se ~0.02-0.03):

    row                               FWER (= at any look), a / c3     power (c3)
    prior_sd half the truth           0.610 -> 0.030 / 0.440 -> 0.020  0.710 -> 0.380
    prior_sd equal to it              0.030 -> 0.020 / 0.030 -> 0.010  0.450 -> 0.400
    prior_sd twice it                 0.020 -> 0.020 / 0.010 -> 0.010  0.390 -> 0.390
    arriving 2 a look, family counted -> planned
                                      0.010 -> 0.010 / 0.030 -> 0.010  0.260 -> 0.110
    matrix of the top 5 of 60: shown pairs, pooled -> every pair (Evidence.pairs): 0.100 -> 0.000
    (shown pairs on the rows noise: 0.060)

A prior half the truth holds 1.4 (a) / 1.8 (c3) lanes per race on the prior, which "prior final"
records as separated (61% of null races claim a false winner); an equal prior holds 0.01 /
0.15, a double one none. The arriving race decides its first candidates early, on the few
rows present (and a decision stands): with the planned family the winner, arriving first, is
found in 11% of studies (the grid race: 36%), with the family counted as they arrive in 26%.

The median pruner (tlmsearch's defaults) prunes 82% of a null study's candidate cells; only
8-11% of the studies keep a candidate it could stop on every seed. The pooled fit of the
pruner's survivors read the noise's variance at 0.77x the truth (0.67x in an
earlier 100), a false "separated" in 4-8% of the studies. Leaving only pruned
rows out and said "unknown" wherever the rest left no residual df: in 89% of pruned studies.
The pruner's survivors are selected (they looked good at every eval), so every
candidate the pruner could stop is left out once it stopped anything, and the noise is
measured on uniform and the first ``search.unpruned_candidates`` (2) of the queue, never
pruned (300 studies, engine at 7ea50d1 + the SNR column, prune rows only, 327 s; ``--scenarios
prune_median,prune_paired --race-reps 300``):

    median, 79% of cells pruned    noise in  noise var      SNR spread     FWER effects/words
    rows, 2 unpruned (tlmsearch)        1.00      1.001 +-0.040  1.010 +-0.028  0.053 / 0.013
    rows, none unpruned                 0.00      -              -              0.000 / 0.000
    survivors in the fit (1st step)   0.11      0.962 +-0.123  -              -
    pooled                            0.66      0.770 +-0.068  -              0.043 / 0.013
    no pruner (the same studies)      1.00      0.980 +-0.015  1.006 +-0.012  -

("noise in": the share of studies with a noise; "noise var": its variance over the truth; "SNR
spread": the spread of the candidates' means the SNR reads, over what noise alone gives at the
true noise, 1 where no pruner selected the means.) The typical candidate's pair variance vs
uniform reads 1.25x with 2 unpruned against 1.18x in the complete studies: the rows model's
uniform gate, conservative by design (with every row equally noisy uniform takes its own
variance where its seeds cannot rule out twice the others' sd), judges uniform against 2 rows
instead of 15. The effects table's 5.3% counts a censored candidate's flattering complete
seeds, which the conclusions' words refuse (1.3%). The paired pruner prunes a cell in 7% of
these studies: with 2 unpruned every study keeps a noise (0.977x the variance), with none 93%;
FWER 0.043 in both (complete null studies: 0.030, scenario a). What sparing costs, on c3 with
its winner queued last (``c3z``, 300 studies, 158 s for both bases, engine at 9432a78): the
winner is separated in 32.7% +- 2.7 of the median-pruned studies with 2 unpruned (noise variance
0.94x +- 0.04, FWER 6.3% +- 1.4 in the effects table, 3.0% in words), in 0% with none unpruned,
in 21.7% on the pooled fit of the survivors, and in 45.3% of the same studies unpruned (FWER
2.7%): a pruned study's noise has 4 df.

The new rule holds the stated 5% in every row, within 2 MC standard errors (holm: <= 4.3% in
the drawn scenarios, 5.3-5.7% at uniform's sd 1.5-3x on 1000 studies without races in
benchmarks/power_frontier.py; a median-pruned study's effects table 5.3% +- 1.3%, its
conclusions 1.3%; the old rule: 12-23% with unequal rows, the best's per-comparison interval
excluding 0 in 18-27% of null studies, 61% with a prior half the truth, 10% in the matrix).
What it costs: equal-variance power at 2 noise sds falls from 66% to 50% at 3 seeds and from
94% to 86% at 5 (b: 77% -> 52%). A heavily pruned study's noise is unbiased on its 2 unpruned
candidates and uniform (variance 1.001x the truth, in every study), where it was unknown in 89%
of such studies and read off the survivors in the rest (0.96x +- 0.12: selected by
construction, a bias this size cannot show).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch.config import PartialStudy
from tlmsearch.evidence import Evidence
from tlmsearch.evidence.conclusions import conclusions
from tlmsearch.evidence.racing import (
    FINAL,
    PAUSED,
    SEPARATED,
    Lane,
    decision,
    race,
    race_settings,
)
from tlmsearch.stats import VARIANCES, decide, t_quantile
from tlmsearch.stats import effects as stats_effects

VALUE = "val_bpb"
UNIFORM = "uniform"
GOAL = 0.05  # the stated error rate of every decision (level 0.95)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    seeds: int
    effects: tuple[float, ...]  # per candidate (uniform excluded), in noise sds
    sd_uniform: float = 1.0  # uniform's own residual sd, in units of sd_e
    sd_first: float = 1.0  # the first candidate's (c00) own residual sd, in units of sd_e


def scenarios(m: int = 15) -> dict[str, Scenario]:
    """The scenarios of the module docstring with ``m`` candidates."""
    one = (-2.0,) + (0.0,) * (m - 1)
    null = (0.0,) * m
    return {
        "a": Scenario("a", f"{m} equal to uniform", 3, null),
        "b": Scenario("b", "uniform better by 2 sds", 3, (2.0,) * m),
        "c3": Scenario("c3", "one winner at -2 sds", 3, one),
        "c5": Scenario("c5", "one winner at -2 sds", 5, one),
        # the rows are not equally noisy (every candidate still equal to uniform)
        "u2": Scenario("u2", f"{m} equal, uniform's sd 2x", 3, null, sd_uniform=2.0),
        "u3": Scenario("u3", f"{m} equal, uniform's sd 3x", 3, null, sd_uniform=3.0),
        "n3": Scenario("n3", f"{m} equal, one candidate's sd 3x", 3, null, sd_first=3.0),
        "n5": Scenario("n5", f"{m} equal, one candidate's sd 3x", 5, null, sd_first=3.0),
    }


DRAWN = ("a", "b", "c3", "c5", "u2", "u3", "n3", "n5")
# the run-and-read rows (extras(): how a study is run or read), on --race-reps studies each
EXTRAS = (
    "prior_half",
    "prior_equal",
    "prior_double",
    "arrive",
    "prune_median",
    "prune_paired",
    "matrix60",
)
DEFAULT = DRAWN + EXTRAS
NULLS = ("a", "u2", "u3", "n3", "n5")  # every candidate equal to uniform
RACED = ("a", "b", "c3", "c5", "u3")  # the races and the pruner (the slow part) run on these


def names(sc: Scenario) -> list[str]:
    return [f"c{i:02d}" for i in range(len(sc.effects))]


def truth(sc: Scenario) -> dict[str, float]:
    """Every candidate's true effect in noise sds, uniform 0."""
    return {UNIFORM: 0.0, **dict(zip(names(sc), sc.effects, strict=True))}


def draw(
    sc: Scenario, rng: np.random.Generator, sd_u: float = 0.005, sd_e: float = 0.005
) -> pd.DataFrame:
    """One complete study: a trials table with every (candidate, seed) cell, rows ordered
    candidate-major (uniform first) so that row ``i * seeds + s`` is candidate i on seed s."""
    eff = truth(sc)
    cands = list(eff)
    u = rng.normal(0.0, sd_u, size=sc.seeds)  # the seed's level, shared by every candidate
    e = rng.normal(0.0, sd_e, size=(len(cands), sc.seeds))
    e[0] *= sc.sd_uniform  # uniform is row 0, c00 row 1
    e[1] *= sc.sd_first
    noise = math.sqrt(2.0) * sd_e  # one paired delta's sd (with every row equally noisy)
    y = 2.0 + np.array([eff[c] * noise for c in cands])[:, None] + u[None, :] + e
    return pd.DataFrame(
        {
            "candidate": np.repeat(cands, sc.seeds),
            "seed": np.tile(np.arange(sc.seeds), len(cands)),
            "state": "COMPLETE",
            "is_baseline": np.repeat([c == UNIFORM for c in cands], sc.seeds),
            VALUE: y.ravel(),
        }
    )


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _claims_vs_uniform(eff: dict[str, float], claims: dict[str, int]) -> dict[str, int]:
    """Counts of one study's decisions vs uniform; ``claims``: candidate -> direction of its
    separation (-1 better, +1 worse, 0 not separated)."""
    null = [c for c in claims if eff[c] == 0]
    real = [c for c in claims if eff[c] != 0]
    false = [c for c, d in claims.items() if d and d != _sign(eff[c])]
    return {
        "null": len(null),
        "null_sep": sum(bool(claims[c]) for c in null),
        "any_false": int(bool(false)),
        "real": len(real),
        "power": sum(claims[c] == _sign(eff[c]) for c in real),
    }


RULES = {  # rule -> (family, variance model, interval printed for the best, joint t)
    "holm": ("holm", "rows", "family", True),  # what tlmsearch does
    # the same rows, Holm's Bonferroni steps and intervals: what the joint t buys
    "holm-rows-bonferroni": ("holm", "rows", "family", False),
    "holm-pooled": ("holm", "pooled", "each", False),  # one noise, per comparison
    "none": ("none", "rows", "family", True),  # no correction: the contrast
}


RACES = {  # race rule -> (against, variance model)
    "uniform": ("uniform", "rows"),
    "best": ("best", "rows"),
    "uniform-pooled": ("uniform", "pooled"),  # one pooled noise
}


def _best_excludes_zero(ev: Evidence, how: str) -> int | None:
    """Whether the interval vs uniform printed for the best-ranked candidate (best.yaml's
    ``delta_ci95``) excludes zero; None when uniform ranks first or it has no interval.
    ``how``: family (the effects row's ``lo``/``hi``) or each (the per-comparison interval
    at ``level``: the pooled rule's interval)."""
    first = ev.ranking.iloc[0]
    if bool(first["is_baseline"]):
        return None
    row = ev.effects.set_index(ev.key).loc[first[ev.key]]
    if not row["noise_df"] >= 1:
        return None
    lo, hi = float(row["lo"]), float(row["hi"])
    if how == "each":  # the per-comparison interval on the same noise
        half = t_quantile(int(row["noise_df"]), ev.level) * row["noise_sd"] / math.sqrt(row["n"])
        lo, hi = row["mean_delta"] - half, row["mean_delta"] + half
    return int(lo > 0 or hi < 0)


def judge_conclusions(
    trials: pd.DataFrame, sc: Scenario, built: dict[str, Evidence] | None = None
) -> dict[str, dict[str, Any]]:
    """Evidence.build without racing, once per variance model: for each rule of :data:`RULES`
    its effects' decisions, the best's interval, and (holm) the verdict. A rule's family other
    than holm re-decides the same effects (``stats.decide``, as Evidence.build would).
    ``built``: the Evidence of ``trials`` per variance model, where the caller has it."""
    eff = truth(sc)
    built = dict(built or {})
    for v in VARIANCES:
        if v not in built:
            built[v] = Evidence.build(trials, VALUE, "minimize", variance=v)
    out: dict[str, dict[str, Any]] = {}
    for rule, (family, variance, interval, joint) in RULES.items():
        ev = built[variance]
        if not joint:  # Holm's Bonferroni steps: no joint distribution
            ev = replace(
                ev, effects=decide(ev.effects.assign(noise_shared=math.nan), family, ev.level)
            )
        elif family != ev.family:
            ev = replace(ev, family=family, effects=decide(ev.effects, family, ev.level))
        e = ev.effects
        claims = {
            str(c): _sign(d) if bool(s) else 0
            for c, d, s in zip(
                e["candidate"], e["mean_delta"], e["separated"].fillna(False), strict=True
            )
        }
        counts: dict[str, Any] = _claims_vs_uniform(eff, claims)
        excl = _best_excludes_zero(ev, interval)
        counts.update(best_first=int(excl is not None), best_excludes=excl or 0)
        if family == "holm":
            counts.update(_verdict(trials, ev, eff))
        out[rule] = counts
    return out


_SAID = re.compile(r"^(\S+) (beats|loses to) uniform on ")


def _verdict(trials: pd.DataFrame, ev: Evidence, eff: dict[str, float]) -> dict[str, int]:
    """The verdict's counts (``conclusions(...).top_group``: Hsu's MCB, uniform included), and
    ``said_false`` / ``said_null_sep``: the claims vs uniform the conclusions support in words
    ("X beats / loses to uniform"), false as for the effects. They differ from the effects'
    ``separated`` for a candidate pruned on some seed that looks better: not a conclusion."""
    said = conclusions(trials, VALUE, evidence=ev)
    top = said.top_group or {}
    best_effect = min(eff.values())
    true_best = [c for c, x in eff.items() if x == best_effect]
    sel = bool(top.get("selected"))
    claims = dict.fromkeys((c for c in eff if c != UNIFORM), 0)
    for text in said.supported:
        m = _SAID.match(text)
        if m and m.group(1) in claims:
            claims[m.group(1)] = -1 if m.group(2) == "beats" else 1
    words = _claims_vs_uniform(eff, claims)
    return {
        "selected": int(sel),
        "wrong_winner": int(sel and (len(true_best) > 1 or top["best"] not in true_best)),
        "uniform_first": int(top.get("best") == UNIFORM),
        "uniform_selected": int(sel and top["best"] == UNIFORM),
        "winner_selected": int(sel and len(true_best) == 1 and top["best"] == true_best[0]),
        "said_false": words["any_false"],
        "said_null_sep": words["null_sep"],
    }


class Raced(NamedTuple):
    """A race as :func:`drive_race` ran it."""

    lanes: list[Lane]  # the final lanes (a recorded decision as it was recorded)
    cells: int  # cells trained (candidates + uniform)
    seen: list[Lane]  # every lane ``separated`` at some look, the final ones included
    held: set[str]  # candidates held on the prior at some look (racing.PAUSED)


def drive_race(
    trials: pd.DataFrame,
    sc: Scenario,
    against: str,
    variance: str = "rows",
    *,
    racing: dict[str, Any] | None = None,
    n_trials: int | None = None,
    family_size: int | None = None,
    arrive: int = 0,
    prior_final: bool = False,
) -> Raced:
    """A race as it runs live on a complete simulated study.

    ``racing``: more ``search.racing`` settings (``prior_sd``); ``n_trials``: the sampler's
    declared ``search.n_trials`` (the race's planned family, ``racing.race_family_size``);
    ``family_size``: that family set outright (0: the race counts the candidates in its
    table: the pooled rule); ``arrive``: candidates
    that arrive per look (0: all on seed 0 at the start, as a grid), each on seed 0;
    ``prior_final``: the alternative rule, a lane separated on the prior recorded for good
    (emulated: a lane the race holds on the prior, its reason starting with
    ``racing.PAUSED``, is recorded as the separation it would have been).
    """
    search: dict[str, Any] = {
        "seeds": list(range(sc.seeds)),
        "racing": {
            "max_seeds": sc.seeds,
            "confidence": 0.95,
            "against": against,
            **(racing or {}),
        },
    }
    if n_trials is not None:
        search["n_trials"] = n_trials
    study = PartialStudy.model_validate({"search": search, "objectives": [{"metric": VALUE}]})
    settings = race_settings(study)
    assert settings is not None
    if family_size is not None:
        settings["family_size"] = family_size
    cands = list(truth(sc))  # uniform first: row 0
    row = {c: i for i, c in enumerate(cands)}
    n_cands = len(cands) - 1
    arrived = n_cands if arrive <= 0 else min(arrive, n_cands)
    shown = np.zeros((len(cands), sc.seeds), dtype=bool)
    shown[: arrived + 1, 0] = True
    seen: list[Lane] = []
    held: set[str] = set()
    recorded: dict[str, str] = {}  # what the driver records once a lane is decided
    # each look reveals at least one cell or one arriving candidate, so this bounds it
    for _ in range(shown.size + len(cands)):
        view = trials[shown.ravel()].copy()
        view["race_decision"] = [recorded.get(c, "") for c in view["candidate"]]
        lanes = race(view, VALUE, sense="minimize", variance=variance, **settings)
        on_prior = {ln.candidate for ln in lanes if ln.reason.startswith(PAUSED)}
        held |= on_prior
        if prior_final:  # a separation on the prior is recorded for good
            lanes = [_prior_separation(ln) if ln.candidate in on_prior else ln for ln in lanes]
        seen += [ln for ln in lanes if ln.status == SEPARATED]
        for ln in lanes:  # as search/sampling/race.py advance does: a decision stands from now on
            if ln.status in FINAL and ln.candidate not in recorded:
                recorded[ln.candidate] = json.dumps(decision(ln))
        due = [(ln.candidate, ln.next_seed) for ln in lanes if ln.next_seed is not None]
        if not due and arrived >= n_cands:
            break
        for cand, seed in due:
            shown[row[cand], seed] = shown[row[UNIFORM], seed] = True
        if arrived < n_cands:  # the sampler's next candidates start on seed 0
            shown[arrived + 1 : arrived + 1 + arrive, 0] = True
            arrived = min(n_cands, arrived + arrive)
    else:
        raise AssertionError("the race kept asking for seeds")
    return Raced(lanes, int(shown.sum()), seen, held)


def _prior_separation(ln: Lane) -> Lane:
    """The separation a lane held on the prior stands for: its reason is ``f"{PAUSED}:
    {the separation's reason}; {why it is held}"`` (racing._provisional, _unpause)."""
    inner = ln.reason[len(PAUSED) :].lstrip(": ").rsplit("; ", 1)[0]
    return replace(ln, status=SEPARATED, reason=inner, next_seed=None)


_CLAIM = re.compile(r"^(better|worse) than (\S+) ")


def _claim(ln: Lane) -> tuple[str, str, str]:
    """(candidate, better | worse, reference) of a separated lane, from its reason."""
    m = _CLAIM.match(ln.reason)
    assert m, ln.reason
    return ln.candidate, m.group(1), m.group(2)


def _race_counts(
    eff: dict[str, float], cands: list[str], claims: set[tuple[str, str, str]], against: str
) -> dict[str, int]:
    """One race's counts (see :func:`judge_race`) from its claims (candidate, side, ref)."""
    if against == "uniform":
        side = {c: -1 if s == "better" else 1 for c, s, _ in claims}
        return {**_claims_vs_uniform(eff, {c: side.get(c, 0) for c in cands}), "strict": 0}
    best = min(eff[c] for c in cands)  # the race compares candidates only, not uniform
    top = [c for c in cands if eff[c] == best]
    worse = [c for c in cands if eff[c] > best]
    dropped = {c for c, s, _ in claims if s == "worse"}
    # a false claim: one as good as the best dropped, or a "better than" that is not true;
    # strict: any claim its named reference's truth contradicts
    false = [c for c, s, r in claims if (eff[c] >= eff[r] if s == "better" else eff[c] == best)]
    strict = [c for c, s, r in claims if (eff[c] >= eff[r] if s == "better" else eff[c] <= eff[r])]
    return {
        "null": len(top),
        "null_sep": len(dropped & set(top)),
        "any_false": int(bool(false)),
        "strict": int(bool(strict)),
        "real": len(worse),
        "power": len(dropped & set(worse)),
    }


def judge_race(
    trials: pd.DataFrame, sc: Scenario, against: str, variance: str = "rows", **how: Any
) -> dict[str, Any]:
    """One race's decisions against the truth: its final lanes' (the race's decisions as
    the run reports them), and ``ever_false`` / ``ever_strict``: a false claim at any look
    (what Bonferroni over the looks bounds; a later look may reopen a separated lane).
    ``how``: :func:`drive_race`'s keywords (a prior, arriving candidates, ...)."""
    eff = truth(sc)
    lanes, cells, seen, held = drive_race(trials, sc, against, variance, **how)
    cands = [ln.candidate for ln in lanes]
    final = {_claim(ln) for ln in lanes if ln.status == SEPARATED}
    ever = {_claim(ln) for ln in seen}
    out: dict[str, Any] = _race_counts(eff, cands, final, against)
    at_any = _race_counts(eff, cands, ever, against)
    out.update(
        trainings=cells / trials.shape[0],
        undone=len({c for c, _, _ in ever} - {c for c, _, _ in final}),
        ever_false=at_any["any_false"],
        ever_strict=at_any["strict"],
        held=len(held),
    )
    if against == "best":
        top = [c for c in cands if eff[c] == min(eff[x] for x in cands)]
        status = {ln.candidate: ln.status for ln in lanes}
        out["winner_incumbent"] = int(len(top) == 1 and status[top[0]] == "done")
    else:
        del out["strict"], out["ever_strict"]
    return out


EVALS = 4  # evals per simulated training curve (the pruner judges at each)


class _Trial:
    """The little of an Optuna FrozenTrial the paired pruner reads."""

    def __init__(self, number: int, cand: str, seed: int) -> None:
        from optuna.trial import TrialState

        from tlmsearch.search.attrs import BASELINE, CANDIDATE, SEED

        self.number, self.state = number, TrialState.RUNNING
        self.user_attrs = {
            SEED: seed,
            CANDIDATE: cand,
            **({BASELINE: True} if cand == UNIFORM else {}),
        }
        self.intermediate_values: dict[int, float] = {}

    @property
    def last_step(self) -> int | None:  # Optuna's percentile (median) pruner reads it
        return max(self.intermediate_values) if self.intermediate_values else None


class _Study:
    def __init__(self, trials: list[_Trial]) -> None:
        from optuna.study import StudyDirection

        self.direction, self._trials = StudyDirection.MINIMIZE, trials

    def get_trials(self, deepcopy: bool = False, states: Sequence[Any] | None = None):
        return [t for t in self._trials if states is None or t.state in states]


def judge_pruner(
    trials: pd.DataFrame, sc: Scenario, rng: np.random.Generator, sd_e: float = 0.005
) -> dict[str, Any]:
    """The paired pruner (search.pruner: paired, its defaults) on the study's curves, as a
    run sees them: every training reports EVALS evals in lockstep, each eval its final value
    plus a learning curve shared by all (it cancels in a delta) plus its own jitter (sd
    sd_e / 2); after each eval the pruner judges every candidate trial still running, and a
    pruned one reports no more. A false prune: a trial of a candidate as good as the best
    candidate (the incumbent a prune measures against); power: trials of worse ones pruned."""
    from optuna.trial import TrialState

    from tlmsearch.search.sampling.paired_pruner import PairedPruner

    eff = truth(sc)
    cands = [c for c in eff if c != UNIFORM]
    best = min(eff[c] for c in cands)
    pruner = PairedPruner(grace_tokens=0)
    objs = [
        _Trial(i, str(c), int(s))
        for i, (c, s) in enumerate(zip(trials["candidate"], trials["seed"], strict=True))
    ]
    final = trials[VALUE].to_numpy()
    jitter = rng.normal(0.0, sd_e / 2.0, size=(len(objs), EVALS))
    study = _Study(objs)
    for t in range(EVALS):
        curve = 0.5 * (EVALS - 1 - t) / EVALS  # the shared learning curve: gone at the end
        for i, tr in enumerate(objs):
            if tr.state == TrialState.RUNNING:
                tr.intermediate_values[t + 1] = final[i] + curve + jitter[i, t]
        for tr in objs:
            if tr.state == TrialState.RUNNING and pruner.prune(study, tr):
                tr.state = TrialState.PRUNED
        if t == EVALS - 1:
            for tr in objs:
                if tr.state == TrialState.RUNNING:
                    tr.state = TrialState.COMPLETE
    pruned = [tr.user_attrs["candidate"] for tr in objs if tr.state == TrialState.PRUNED]
    null = [
        tr
        for tr in objs
        if tr.user_attrs["candidate"] in cands and eff[tr.user_attrs["candidate"]] == best
    ]
    worse = [
        tr
        for tr in objs
        if tr.user_attrs["candidate"] in cands and eff[tr.user_attrs["candidate"]] > best
    ]
    false = [c for c in pruned if eff[c] == best]
    return {
        "null": len(null),
        "null_sep": len(false),
        "any_false": int(bool(false)),
        "real": len(worse),
        "power": sum(eff[c] > best for c in pruned),
        "trainings": 1.0 - len(pruned) / max(1, len(cands) * sc.seeds),
    }


# -- the run-and-read rows: a prior, arriving candidates, pruned studies, the matrix ----------

GRACE = 1  # the first eval prunable: a quarter of the run (search/sampling/samplers.grace_tokens)
# search.unpruned_candidates' default: the first 2 candidates of the queue run on every seed
UNPRUNED = 2


def prune_study(
    trials: pd.DataFrame, pruner: str, blur: np.ndarray, unpruned: int = UNPRUNED
) -> pd.DataFrame:
    """The trials table a run with ``search.pruner`` (``median``: Optuna's MedianPruner with
    tlmsearch's defaults; ``paired``: search/sampling/paired_pruner.py) and
    ``search.unpruned_candidates: unpruned`` leaves of a complete study.

    One training at a time, seed-major with uniform first on each seed (a grid's queue,
    search/sampling/samplers.initial_queue), each reporting EVALS evals; the pruner (built by
    search/sampling/samplers.PRUNER_BUILDERS) judges each candidate eval from GRACE on but the last
    (search/sampling/pruning.py: not in the grace period, not at the last eval, never the baseline,
    never one of the first ``unpruned`` candidates of the queue, marked ``unpruned``). Eval t's
    value: the final value, plus a learning curve shared by all, plus ``blur[i, t - 1]`` (noise of
    sd sd_e (1 - t / EVALS), gone at the last eval: an early value is the final one blurred, so a
    prune selects on the final value). A pruned trial's row: PRUNED, its value the last eval it
    reported.
    """
    from optuna.trial import TrialState

    from tlmsearch.config.search import PRUNER_SPECS
    from tlmsearch.search.sampling.samplers import PRUNER_BUILDERS

    judge = PRUNER_BUILDERS[pruner](None, GRACE, dict(PRUNER_SPECS[pruner].defaults))
    steps = np.arange(1, EVALS + 1)
    curve = 0.5 * (EVALS - steps) / EVALS  # shared by every training: cancels at a step
    final = trials[VALUE].to_numpy(dtype="float64")
    objs = [
        _Trial(i, str(c), int(s))
        for i, (c, s) in enumerate(zip(trials["candidate"], trials["seed"], strict=True))
    ]
    order = sorted(range(len(objs)), key=lambda j: (objs[j].user_attrs["seed"], j))
    queue = [objs[i].user_attrs["candidate"] for i in order]
    first = list(dict.fromkeys(c for c in queue if c != UNIFORM))[:unpruned]
    study = _Study([])
    values = final.copy()
    for i in order:
        tr = objs[i]
        study._trials.append(tr)
        exempt = tr.user_attrs["candidate"] in (UNIFORM, *first)
        for t in steps:
            tr.intermediate_values[int(t)] = values[i] = final[i] + curve[t - 1] + blur[i, t - 1]
            if GRACE <= t < EVALS and not exempt and judge.prune(study, tr):
                tr.state = TrialState.PRUNED
                break
        else:
            tr.state, values[i] = TrialState.COMPLETE, final[i]
    return trials.assign(
        state=[tr.state.name for tr in objs],
        **{VALUE: values},
        unpruned=trials["candidate"].isin(first).to_numpy(),
    )


def _noise_ratios(model: Any, trials: pd.DataFrame, truth_sd: float) -> dict[str, float]:
    """A noise model's estimates over the truth: the sd of one paired delta (its pooled part,
    ``Evidence.noise``) and the noise of a typical candidate's paired delta vs uniform (the
    median over the candidates with a complete cell of ``model.pair(c, uniform)``), as sd and
    variance ratios (an unbiased variance estimate has a variance ratio of 1 on average)."""
    if model is None:
        nan = math.nan
        return {
            "noise_sd_ratio": nan,
            "noise_var_ratio": nan,
            "pair_sd_ratio": nan,
            "pair_var_ratio": nan,
        }
    done = trials[(trials["state"] == "COMPLETE") & ~trials["is_baseline"]]
    pairs = [model.pair(c, UNIFORM) for c in done["candidate"].unique()]
    pair = float(np.median([p.sd for p in pairs if p is not None and p.df >= 1] or [math.nan]))
    sd = float(model.sd) / truth_sd
    return {
        "noise_sd_ratio": sd,
        "noise_var_ratio": sd * sd,
        "pair_sd_ratio": pair / truth_sd,
        "pair_var_ratio": (pair / truth_sd) ** 2,
    }


def _spread_ratio(snr: Any, truth_sd: float) -> float:
    """The SNR's spread of means over its null expectation at the true noise (NaN: no SNR)."""
    if snr is None or not snr.null_snr or not math.isfinite(snr.dispersion):
        return math.nan
    return float(snr.dispersion / (snr.null_snr * truth_sd))


PRUNE_RULES = {  # rule -> (what it is, unpruned candidates, the conclusions rule it shows)
    "rows": (
        f"rows, the pruner's selected rows out of the fit, {UNPRUNED} unpruned "
        f"(search.unpruned_candidates: {UNPRUNED}): tlmsearch",
        UNPRUNED,
        "holm",
    ),
    "rows-0": ("the same, unpruned_candidates: 0 (unknown once anything is pruned)", 0, "holm"),
    "survivors": ("rows, survivors in the fit: stats.row_noise of the rows never pruned", 0, None),
    "pooled": (
        "pooled block fit of the complete cells: stats.block_noise(unselected=False)",
        0,
        "holm-pooled",
    ),
    "unpruned": ("no pruner: the same studies complete (stats.row_noise)", 0, "holm"),
}


def judge_prune(
    trials: pd.DataFrame, sc: Scenario, pruner: str, rng: np.random.Generator, sd_e: float = 0.005
) -> dict[str, dict[str, Any]]:
    """A null study pruned as a run would (:func:`prune_study`), with and without unpruned
    candidates (the same curves), read with each noise model of :data:`PRUNE_RULES`: its
    estimates over the truth (sqrt(2) sd_e for one paired delta), and the conclusions'
    decisions (:func:`judge_conclusions`) where the model is one Evidence uses. ``pruned``: the
    share of candidate cells pruned; ``never_pruned``: a candidate the pruner could stop kept
    on every seed. ``rng`` draws a fixed amount, whatever the pruner does."""
    from tlmsearch import stats

    blur = rng.normal(0.0, sd_e, size=(len(trials), EVALS))
    blur *= 1.0 - np.arange(1, EVALS + 1) / EVALS
    counts = {unpruned for _, unpruned, _ in PRUNE_RULES.values()}
    studies = {n: prune_study(trials, pruner, blur, n) for n in counts}
    built: dict[int, dict[str, Evidence]] = {}
    concl: dict[int | str, dict[str, dict[str, Any]]] = {}
    out: dict[str, dict[str, Any]] = {}
    for rule, (_, unpruned, decided) in PRUNE_RULES.items():
        pruned = studies[unpruned]
        snr = None
        if rule == "unpruned":
            whole = {v: Evidence.build(trials, VALUE, "minimize", variance=v) for v in VARIANCES}
            model, table, snr = whole["rows"].model, trials, whole["rows"].snr
            concl["whole"] = judge_conclusions(trials, sc, whole)
        elif rule == "survivors":
            cut = pruned.groupby("candidate")["state"].transform(lambda s: (s == "PRUNED").any())
            table = pruned[~cut].drop(columns="unpruned")
            model = stats.row_noise(table, VALUE)
        else:
            if unpruned not in built:
                built[unpruned] = {
                    v: Evidence.build(pruned, VALUE, "minimize", variance=v) for v in VARIANCES
                }
                concl[unpruned] = judge_conclusions(pruned, sc, built[unpruned])
            ev = built[unpruned]["pooled" if rule == "pooled" else "rows"]
            model, table, snr = ev.model, pruned, ev.snr
        cands = pruned[~pruned["is_baseline"] & ~pruned["unpruned"]]
        cut = cands["state"].eq("PRUNED")
        counts = {
            "pruned": float(cut.mean()),
            "never_pruned": int((~cut.groupby(cands["candidate"]).any()).any()),
            **_noise_ratios(model, table, math.sqrt(2.0) * sd_e),
            # the SNR's spread of the candidates' means over what noise alone gives at the true
            # noise (null_snr sds of one paired delta): 1 on average in a null study whose
            # means no pruner selected (the SNR is this over the noise's ratio)
            "spread_ratio": _spread_ratio(snr, math.sqrt(2.0) * sd_e),
        }
        if decided:
            at = "whole" if rule == "unpruned" else unpruned
            counts.update(
                {
                    k: concl[at][decided][k]
                    for k in ("null", "null_sep", "any_false", "real", "power", "said_false")
                }
            )
        out[rule] = counts
    return out


def _run_table(trials: pd.DataFrame) -> pd.DataFrame:
    """A simulated table with the columns the report's collect functions read of a run's
    (tlmsearch/report/collect.py: trial ids, the schedule's shape and ratios)."""
    out = trials.assign(
        trial_id=[f"{c}-{s}" for c, s in zip(trials["candidate"], trials["seed"], strict=True)],
        shape=trials["candidate"],
    )
    for col in ("r_start", "r_end", "realised_start", "realised_end", "realised_taper"):
        out[col] = math.nan
    return out


MATRIX_RULES = {  # rule -> what it is
    "every-pair": "Evidence.pairs: Holm over every pair of the measured candidates",
    "shown-rows": "Holm over the shown pairs only, each pair on its rows' noise",
    "shown-pooled": "Holm over the shown pairs only, one pooled noise",
}


def judge_matrix(
    trials: pd.DataFrame, sc: Scenario, k: int, rng: Any = None, sd_e: float = 0.005
) -> dict[str, dict[str, Any]]:
    """The report's "can these be told apart" matrix (report/effects.py separation(): the top
    ``k`` candidates by the ranking, and uniform) of a null study, decided per
    :data:`MATRIX_RULES`: a false cell is any separated pair (every candidate equals uniform).
    Per pair: over the shown unordered pairs."""
    from tlmsearch import stats
    from tlmsearch.report.effects import separation

    table = _run_table(trials)
    # the matrix reads the ranking, the pairs' noise, the level and the family (holm), which
    # the effects' family does not change; built with family none, the 60 effects skip
    # Holm's joint step-down (1.5 s a study), and read with holm: the same matrix
    ev = replace(Evidence.build(table, VALUE, "minimize", family="none"), family="holm")
    shown = separation(table, VALUE, "minimize", k=k, evidence=ev)
    cells = {"every-pair": shown.cells}
    for rule, noise in (
        ("shown-rows", ev.pair_noise or ev.noise),
        ("shown-pooled", stats.block_noise(table, VALUE)),
    ):
        cells[rule] = stats.pairwise(
            table,
            VALUE,
            shown.names,
            "minimize",
            level=ev.level,
            noise=noise,
            family=ev.family,
            family_size=0,
        )
    where = {c: i for i, c in enumerate(shown.names)}
    out: dict[str, dict[str, Any]] = {}
    for rule, c in cells.items():
        once = c[[where[a] < where[b] for a, b in zip(c["a"], c["b"], strict=True)]]
        sep = once["separated"].fillna(False).astype(bool)
        out[rule] = {
            "null": len(once),
            "null_sep": int(sep.sum()),
            "any_false": int(sep.any()),
            "real": 0,
            "power": 0,
        }
    return out


PRIOR_RULES = {
    "steers": "the prior steers",
    "final": "prior final",
}


def judge_prior(
    trials: pd.DataFrame, sc: Scenario, factor: float, rng: Any = None, sd_e: float = 0.005
) -> dict[str, dict[str, Any]]:
    """A race against uniform (rows) with ``racing.prior_sd`` = ``factor`` x the true sd of
    one paired delta (sqrt(2) sd_e), per :data:`PRIOR_RULES`."""
    prior = {"prior_sd": factor * math.sqrt(2.0) * sd_e}
    return {
        rule: judge_race(trials, sc, "uniform", racing=prior, prior_final=rule == "final")
        for rule in PRIOR_RULES
    }


ARRIVE_RULES = {
    "planned": "family fixed to the planned n_trials (racing.race_family_size)",
    "counted": "family counted as candidates arrive (family_size 0)",
}


def judge_arrive(
    trials: pd.DataFrame, sc: Scenario, per_look: int, rng: Any = None, sd_e: float = 0.005
) -> dict[str, dict[str, Any]]:
    """A race against uniform (rows) whose sampler adds ``per_look`` candidates per look, its
    family per :data:`ARRIVE_RULES`."""
    planned = {"planned": {"n_trials": len(sc.effects)}, "counted": {"family_size": 0}}
    return {
        rule: judge_race(trials, sc, "uniform", arrive=per_look, **planned[rule])
        for rule in ARRIVE_RULES
    }


@dataclass(frozen=True)
class Extra:
    """A run-and-read row: one that changes how a study is run or read, not how it is
    drawn: ``kind`` (a key of :data:`JUDGES`) with its ``arg``, on studies of ``bases``."""

    name: str
    title: str
    kind: str
    arg: Any
    bases: tuple[str, ...]


JUDGES = {
    "prior": judge_prior,
    "arrive": judge_arrive,
    "prune": judge_prune,
    "matrix": judge_matrix,
}


def extras() -> dict[str, Extra]:
    """The run-and-read scenarios, beyond unequal variances (the module docstring)."""
    both = ("a", "c3")
    return {
        x.name: x
        for x in (
            Extra("prior_half", "racing.prior_sd half the true noise sd", "prior", 0.5, both),
            Extra("prior_equal", "racing.prior_sd the true noise sd", "prior", 1.0, both),
            Extra("prior_double", "racing.prior_sd twice the true noise sd", "prior", 2.0, both),
            Extra("arrive", "2 candidates arrive per look (a sampler)", "arrive", 2, both),
            Extra("prune_median", "the default median pruner", "prune", "median", ("a", "c3z")),
            Extra("prune_paired", "the paired pruner", "prune", "paired", ("a",)),
            Extra("matrix60", "the matrix of the top 5 and uniform", "matrix", 5, ("a60",)),
        )
    }


def base_scenario(name: str) -> Scenario:
    """An extra's studies: a scenario of :func:`scenarios`, or ``a60`` (the null, 60
    candidates)."""
    if name == "a60":
        return replace(scenarios(60)["a"], name="a60")
    if name == "c3z":  # the winner queued last: a pruner can stop it (it is not unpruned)
        c3 = scenarios()["c3"]
        return replace(
            c3, name="c3z", title=c3.title + ", queued last", effects=tuple(reversed(c3.effects))
        )
    return scenarios()[name]


def simulate_extra(
    ex: Extra, reps: int, seed: int = 0, sd_u: float = 0.005, sd_e: float = 0.005
) -> dict[str, list[dict[str, Any]]]:
    """Per ``base/rule``, one dict of counts per simulated study. The draws depend on
    (``seed``, the extra's kind, the base) only: the three priors race the same studies, the
    two pruners prune the same ones."""
    out: dict[str, list[dict[str, Any]]] = {}
    for base in ex.bases:
        sc = base_scenario(base)
        rng = np.random.default_rng([seed, *f"{ex.kind}/{base}".encode()])
        for _ in range(reps):
            trials = draw(sc, rng, sd_u, sd_e)
            for rule, counts in JUDGES[ex.kind](trials, sc, ex.arg, rng, sd_e).items():
                out.setdefault(f"{base}/{rule}", []).append(counts)
    return out


def simulate(
    sc: Scenario,
    reps: int,
    seed: int = 0,
    sd_u: float = 0.005,
    sd_e: float = 0.005,
    races: bool | int = True,
) -> dict[str, list[dict[str, Any]]]:
    """Per rule, one dict of counts per simulated study. Every rule sees the same studies;
    the draws depend on (``seed``, the scenario's name) only. ``races``: race (and prune) the
    first ``races`` studies (True: all of them, False: none)."""
    rng = np.random.default_rng([seed, *sc.name.encode()])
    rules: dict[str, list[dict[str, Any]]] = {}
    raced = reps if races is True else int(races)
    for i in range(reps):
        trials = draw(sc, rng, sd_u, sd_e)
        for rule, counts in judge_conclusions(trials, sc).items():
            rules.setdefault(f"conclusions/{rule}", []).append(counts)
        if i < raced:
            for name, (against, variance) in RACES.items():
                rules.setdefault(f"race/{name}", []).append(
                    judge_race(trials, sc, against, variance)
                )
            rules.setdefault("pruner/paired", []).append(judge_pruner(trials, sc, rng, sd_e))
    return rules


def _rate(hits: float, total: float, studies: int) -> dict[str, Any]:
    """A rate with its Monte-Carlo standard error sqrt(p (1 - p) / studies); None when
    ``total`` is 0 (nothing to count)."""
    if total == 0:
        return {"rate": None, "se": None, "n": 0}
    p = hits / total
    return {"rate": p, "se": math.sqrt(p * (1.0 - p) / studies), "n": int(total)}


MEANS = (
    "noise_sd_ratio",
    "noise_var_ratio",
    "pair_sd_ratio",
    "pair_var_ratio",
    "pruned",
    "spread_ratio",
)


def _mean(values: list[float]) -> dict[str, Any]:
    """A mean over the studies with its MC standard error (NaN values left out: a study
    without the estimate); None when there is none."""
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype="float64")
    if not len(x):
        return {"mean": None, "se": None, "n": 0}
    se = float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
    return {"mean": float(x.mean()), "se": se, "n": len(x)}


def summarise(per_study: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates over the studies of one rule (keys: those of its per-study dicts)."""
    n = len(per_study)

    def total(k: str) -> float:
        return float(sum(s.get(k, 0) for s in per_study))

    decides = bool(per_study) and "any_false" in per_study[0]  # else: estimates only
    out = {
        "studies": n,
        "false_per_candidate": _rate(total("null_sep"), total("null") * decides, n),
        "fwer": _rate(total("any_false"), n * decides, n),
        "power": _rate(total("power"), total("real") * decides, n),
    }
    if per_study and "best_excludes" in per_study[0]:
        # of all studies: the best-ranked is a candidate and its printed interval excludes 0
        out["best_excludes"] = _rate(total("best_excludes"), n, n)
    for k in (
        "selected",
        "wrong_winner",
        "uniform_first",
        "uniform_selected",
        "winner_selected",
        "strict",
        "ever_false",
        "ever_strict",
        "winner_incumbent",
        "never_pruned",
        "said_false",
    ):
        if per_study and k in per_study[0]:
            out[k] = _rate(total(k), n, n)
    for k in MEANS:
        if per_study and k in per_study[0]:
            out[k] = _mean([s[k] for s in per_study])
    for k in ("trainings", "undone", "held"):
        if per_study and k in per_study[0]:
            out[k] = total(k) / n
    return out


def within_goal(r: dict[str, Any] | None, goal: float = GOAL) -> bool | None:
    """rate <= goal within 2 MC standard errors (None: nothing measured)."""
    if not r or r["rate"] is None:
        return None
    return r["rate"] - 2.0 * r["se"] <= goal


def fmt(r: dict[str, Any] | None) -> str:
    """A rate (or a mean) ± its MC standard error."""
    x = None if not r else r.get("rate", r.get("mean"))
    if x is None:
        return "—"
    return f"{x:.3f} ± {r['se']:.3f}"


def unbiased(r: dict[str, Any] | None, target: float = 1.0) -> bool | None:
    """A mean within 2 MC standard errors of ``target`` (None: nothing measured)."""
    if not r or r.get("mean") is None or not math.isfinite(r["se"]):
        return None
    return abs(r["mean"] - target) <= 2.0 * r["se"]


def _not_below(r: dict[str, Any] | None, ref: dict[str, Any] | None) -> bool | None:
    """A mean not below a reference mean by more than 2 MC standard errors of the difference
    (None: either not measured)."""
    if not r or not ref or r.get("mean") is None or ref.get("mean") is None:
        return None
    se = math.hypot(r["se"] or 0.0, ref["se"] or 0.0)
    return r["mean"] + 2.0 * se >= ref["mean"]


def _ok(*flags: bool | None) -> str:
    known = [f for f in flags if f is not None]
    if not known:
        return "—"
    return "ok" if all(known) else "**FAILS**"


def _study(base: str) -> str:
    sc = base_scenario(base)
    return f"{base}: {sc.title}, {sc.seeds} seeds"


def extra_tables(results: dict[str, dict[str, Any]]) -> str:
    """The tables of the run-and-read rows (:func:`extras`) among :func:`run`'s results."""
    ex = {k: x for k, x in extras().items() if k in results}
    of = {kind: [k for k, x in ex.items() if x.kind == kind] for kind in JUDGES}
    lines: list[str] = []
    if of["prior"]:
        lines += [
            "### Racing with a prior (racing.prior_sd; against uniform, rows, confidence "
            "0.95, max_seeds 3)",
            "",
            "The prior stands in for the noise until the fit has residual df: "
            "a lane the prior would separate is held and judged again on measured noise; "
            "prior final: that separation recorded for good (racing.PAUSED lanes "
            'recorded as separated). FWER: a false "separated" '
            "at the end; any look: one printed at some look.",
            "",
            "| study | prior_sd / true sd | rule | false sep. / candidate | FWER | "
            "FWER, any look | power | lanes held on the prior / race | trainings / all | "
            "goal (<= 5% within 2 se) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        bases = dict.fromkeys(b for k in of["prior"] for b in ex[k].bases)
        for base in bases:
            for k in of["prior"]:
                for rule, words in PRIOR_RULES.items():
                    r = results[k].get(f"{base}/{rule}")
                    if r is None:
                        continue
                    ok = _ok(within_goal(r["fwer"]), within_goal(r["ever_false"]))
                    lines.append(
                        f"| {_study(base)} | {ex[k].arg:g} | {words} | "
                        f"{fmt(r['false_per_candidate'])} | {fmt(r['fwer'])} | "
                        f"{fmt(r['ever_false'])} | {fmt(r['power'])} | "
                        f"{r['held']:.2f} | {r['trainings']:.2f} | {ok} |"
                    )
    for k in of["arrive"]:
        lines += [
            "",
            f"### Arriving candidates: {ex[k].arg} per look, each on seed 0 (a "
            "race against uniform, rows, fed by a sampler)",
            "",
            "| study | family | false sep. / candidate | FWER | FWER, any look | power "
            "| trainings / all | goal (<= 5% within 2 se) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for base in ex[k].bases:
            for rule, words in ARRIVE_RULES.items():
                r = results[k][f"{base}/{rule}"]
                ok = _ok(within_goal(r["fwer"]), within_goal(r["ever_false"]))
                lines.append(
                    f"| {_study(base)} | {words} | {fmt(r['false_per_candidate'])} | "
                    f"{fmt(r['fwer'])} | {fmt(r['ever_false'])} | "
                    f"{fmt(r['power'])} | {r['trainings']:.2f} | {ok} |"
                )
    if of["prune"]:
        lines += [
            "",
            f"### Pruners on a null study ({EVALS} evals per training, one training "
            f"at a time, seed-major; prunable from eval {GRACE} to the last but one)",
            "",
            "Estimates over the truth (one paired delta's sd, sqrt(2) sd_e): the study's "
            "noise (Evidence.noise: the pooled part) and a typical candidate's noise vs "
            "uniform (the median over the candidates of model.pair(c, uniform)); an "
            "unbiased variance has a variance ratio of 1. The pair's is conservative by "
            "design even in the complete study (uniform's gate, stats/row_variances.py): "
            '"unbiased" asks the noise\'s variance ratio within 2 se of 1 and the '
            "pair's not below the complete study's (2 se; the pooled fit's pair is its "
            "noise: within 2 se of 1). FWER: the conclusions (holm) "
            "on the pruned study, where the model is one Evidence uses: a false "
            '"separated" in the effects table, or a false claim in the conclusions\' '
            'words (which refuse "beats uniform" to a candidate pruned on some '
            "seed). Power (c3z: the winner queued last, so the pruner may stop it): the "
            "winner separated in the effects table.",
            "",
            "| pruner | study | noise model | cells pruned | a candidate never pruned | "
            "studies with a noise | noise sd ratio | noise var ratio | pair sd ratio | "
            "pair var ratio | unbiased | SNR spread / noise alone's | FWER, effects "
            "separated | "
            "FWER, claims in words | power | goal (<= 5% within 2 se) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for k in of["prune"]:
            for base in ex[k].bases:
                whole = results[k][f"{base}/unpruned"]["pair_var_ratio"]
                for rule, (words, _, _) in PRUNE_RULES.items():
                    r = results[k][f"{base}/{rule}"]
                    pair = (
                        unbiased(r["pair_var_ratio"])
                        if rule == "pooled"  # its one noise
                        else _not_below(r["pair_var_ratio"], whole)
                    )
                    fair = _ok(unbiased(r["noise_var_ratio"]), pair)
                    measured = r["noise_sd_ratio"]["n"] / max(1, r["studies"])
                    lines.append(
                        f"| {ex[k].arg} | {base} | {words} | {r['pruned']['mean']:.2f} | "
                        f"{fmt(r['never_pruned'])} | {measured:.2f} | "
                        f"{fmt(r['noise_sd_ratio'])} | "
                        f"{fmt(r['noise_var_ratio'])} | {fmt(r['pair_sd_ratio'])} | "
                        f"{fmt(r['pair_var_ratio'])} | {fair} | "
                        f"{fmt(r.get('spread_ratio'))} | {fmt(r['fwer'])} | "
                        f"{fmt(r.get('said_false'))} | {fmt(r.get('power'))} | "
                        f"{_ok(within_goal(r['fwer']), within_goal(r.get('said_false')))}"
                        " |"
                    )
    for k in of["matrix"]:
        base = ex[k].bases[0]
        lines += [
            "",
            f"### The separation matrix: the top {ex[k].arg} by the data and uniform "
            f"(report/effects.py separation()), {_study(base)}",
            "",
            "| rule | false sep. / shown pair | studies with a false cell (FWER) | goal "
            "(<= 5% within 2 se) |",
            "|---|---|---|---|",
        ]
        for rule, words in MATRIX_RULES.items():
            r = results[k][f"{base}/{rule}"]
            lines.append(
                f"| {words} | {fmt(r['false_per_candidate'])} | {fmt(r['fwer'])} | "
                f"{_ok(within_goal(r['fwer']))} |"
            )
    return "\n".join(lines).strip("\n")


def tables(results: dict[str, dict[str, Any]], specs: dict[str, Scenario]) -> str:
    """The markdown tables of :func:`run`'s results: conclusions, verdict, racing and the
    paired pruner for the scenarios of ``specs``, then :func:`extra_tables`."""
    drawn = {k: v for k, v in results.items() if k in specs}
    if not drawn:
        return extra_tables(results)

    def label(k: str) -> str:
        sc = specs[k]
        return f"{k}: {sc.title}, {sc.seeds} seeds"

    lines = [
        "### Conclusions vs uniform (no racing; Evidence.build, level 0.95)",
        "",
        "holm: each comparison on its rows' own noise (uniform's always, a candidate's "
        "where its seeds show it noisier), Holm's step-down and the intervals at "
        "the comparisons' joint t critical value; holm-rows-bonferroni: the same noise, "
        "Holm's Bonferroni steps; holm-pooled: one block-design noise for every "
        "comparison, the best's interval per comparison; none: no "
        "correction (the contrast).",
        "",
        "| scenario | rule | false sep. / candidate | FWER | power | best's interval "
        "excludes 0 | goal (<= 5% within 2 se) |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, res in drawn.items():
        for rule in RULES:
            r = res[f"conclusions/{rule}"]
            best = r.get("best_excludes")
            ok = _ok(
                within_goal(r["false_per_candidate"]),
                within_goal(r["fwer"]),
                within_goal(best) if k in NULLS else None,
            )
            if rule == "none" and ok != "—":
                ok += " (no family claim)"
            lines.append(
                f"| {label(k)} | {rule} | {fmt(r['false_per_candidate'])} | "
                f"{fmt(r['fwer'])} | {fmt(r['power'])} | {fmt(best)} | {ok} |"
            )
    lines += [
        "",
        "### The verdict (top_group: Hsu's MCB, uniform included)",
        "",
        "| scenario | noise | selected any | wrong winner | uniform ranked first | "
        "uniform selected | true winner selected (power) | goal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, res in drawn.items():
        for rule in ("holm", "holm-pooled"):
            r = res[f"conclusions/{rule}"]
            goal = "—"
            if k == "b":  # never a candidate named best when uniform measures better
                goal = "ok" if r["wrong_winner"]["rate"] == 0 else "**FAILS** (not never)"
            elif k in NULLS:
                goal = _ok(within_goal(r["wrong_winner"]))
            winner = fmt(r["winner_selected"]) if k.startswith("c") else "—"
            lines.append(
                f"| {label(k)} | {RULES[rule][1]} | {fmt(r['selected'])} | "
                f"{fmt(r['wrong_winner'])} | {fmt(r['uniform_first'])} | "
                f"{fmt(r['uniform_selected'])} | {winner} | {goal} |"
            )
    lines += [
        "",
        "### Racing, as it runs live (confidence 0.95, max_seeds = the seeds)",
        "",
        "| scenario | against, noise | false sep. / candidate | FWER | FWER, any look | "
        "strict FWER, any look | power | winner ends incumbent | trainings / all | "
        "undone / race | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, res in drawn.items():
        for name, (against, variance) in RACES.items():
            r = res.get(f"race/{name}")
            if r is None:
                continue
            best = against == "best"
            strict = fmt(r["ever_strict"]) if best else "—"
            inc = fmt(r["winner_incumbent"]) if best and k.startswith("c") else "—"
            ok = _ok(
                within_goal(r["false_per_candidate"]),
                within_goal(r["fwer"]),
                within_goal(r["ever_false"]),
                within_goal(r["ever_strict"]) if best else None,
            )
            lines.append(
                f"| {label(k)} | {against}, {variance} | "
                f"{fmt(r['false_per_candidate'])} | "
                f"{fmt(r['fwer'])} | {fmt(r['ever_false'])} | {strict} | "
                f"{fmt(r['power'])} | {inc} | {r['trainings']:.2f} | "
                f"{r['undone']:.3f} | {ok} |"
            )
    lines += [
        "",
        f"### The paired pruner (its defaults: margin 2.5 noise sds, patience 2; "
        f"{EVALS} evals per curve)",
        "",
        "| scenario | best pruned / trial | studies with a best pruned | worse pruned / "
        "trial (power) | trainings kept |",
        "|---|---|---|---|---|",
    ]
    for k, res in drawn.items():
        r = res.get("pruner/paired")
        if r is not None:
            lines.append(
                f"| {label(k)} | {fmt(r['false_per_candidate'])} | {fmt(r['fwer'])} "
                f"| {fmt(r['power'])} | {r['trainings']:.2f} |"
            )
    more = extra_tables(results)
    return "\n".join(lines) + ("\n\n" + more if more else "")


def run(
    *,
    reps: int = 300,
    seed: int = 0,
    which: Sequence[str] = DEFAULT,
    sd_u: float = 0.005,
    sd_e: float = 0.005,
    races: bool | int = True,
    m: int = 15,
    extra_reps: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Scenario -> rule -> :func:`summarise`'s rates, for ``reps`` studies of each scenario of
    :func:`scenarios` and ``extra_reps`` (None: ``reps``) of each of :func:`extras` (rules
    ``base/rule``). ``races``: how many of them to race and prune (True: all, False: none), on
    the scenarios in :data:`RACED` only.

    >>> r = run(reps=2, which=["a"], races=False)
    >>> [k.split("/")[1] for k in sorted(r["a"])]
    ['holm', 'holm-pooled', 'holm-rows-bonferroni', 'none']
    """
    specs, more = scenarios(m), extras()
    unknown = [k for k in which if k not in specs and k not in more]
    if unknown:
        raise ValueError(
            f"scenarios must be among {', '.join([*specs, *more])}, but got {unknown}"
        )
    out: dict[str, dict[str, Any]] = {}
    for k in which:
        if k in specs:
            studies = simulate(specs[k], reps, seed, sd_u, sd_e, races if k in RACED else False)
        else:
            studies = simulate_extra(
                more[k], reps if extra_reps is None else extra_reps, seed, sd_u, sd_e
            )
        out[k] = {rule: summarise(s) for rule, s in studies.items()}
    return out


# -------------------------------------------------------------------------------------------------
# Uniform's variance gate across seeds (``--gate``)

GATE_SEEDS = (3, 5, 10, 20)
GATE_RATIOS = (1.0, 1.25, 1.5, 2.0, 3.0)  # uniform's residual sd over the candidates'


def judge_gate(trials: pd.DataFrame) -> int:
    """1 when the study's effects vs uniform (the rows model, Holm at the joint t: what
    ``Evidence.build`` decides without racing) separate any candidate: every candidate equals
    uniform, so any separation is false."""
    eff = stats_effects(trials, VALUE, "minimize")
    return int(bool(eff["separated"].fillna(False).any()))


def gate_grid(
    reps: int = 100,
    seed: int = 0,
    seeds: Sequence[int] = GATE_SEEDS,
    ratios: Sequence[float] = GATE_RATIOS,
    m: int = 15,
    sd_u: float = 0.005,
    sd_e: float = 0.005,
) -> dict[str, dict[str, Any]]:
    """``"seeds/ratio"`` -> the family-wise rate of a false "separated" (:func:`_rate`) over
    ``reps`` null studies of ``m`` candidates equal to uniform, uniform's residual sd ``ratio``
    times the candidates'. The draws depend on (``seed``, seeds, ratio) only.

    >>> g = gate_grid(reps=2, seeds=(3,), ratios=(2.0,), m=3)
    >>> sorted(g), g["3/2"]["studies"]
    (['3/2'], 2)
    """
    out = {}
    for s in seeds:
        for k in ratios:
            sc = Scenario(
                f"gate{s}x{k:g}", f"{m} equal, uniform's sd {k:g}x", s, (0.0,) * m, sd_uniform=k
            )
            rng = np.random.default_rng([seed, s, round(k * 100)])
            hits = sum(judge_gate(draw(sc, rng, sd_u, sd_e)) for _ in range(reps))
            out[f"{s}/{k:g}"] = {"studies": reps, "fwer": _rate(hits, reps, reps)}
    return out


def gate_table(grid: dict[str, dict[str, Any]]) -> str:
    """:func:`gate_grid`'s rates as a seeds x ratio table, each cell ``ok`` or ``**FAILS**``
    against 5% within 2 MC standard errors."""
    seeds = sorted({int(k.split("/")[0]) for k in grid})
    ratios = sorted({float(k.split("/")[1]) for k in grid})
    lines = [
        '### Uniform\'s variance gate: family-wise false "separated" (null studies, Holm)',
        "",
        "| seeds | " + " | ".join(f"uniform's sd {k:g}x" for k in ratios) + " |",
        "|---|" + "---|" * len(ratios),
    ]
    for s in seeds:
        cells = []
        for k in ratios:
            r = grid[f"{s}/{k:g}"]["fwer"]
            cells.append(f"{fmt(r)} {_ok(within_goal(r))}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------
# The tuned and shared-setting comparisons of a study with settings (``--tuned``)

TUNED_SCHEDULES = 6  # besides uniform
TUNED_LRS = (1, 2, 4, 8)  # setting values (train.lr): only their labels matter here
# (name, seeds, uniform's sd over the candidates', pruned: None | unpruned schedules)
TUNED_ROWS = (
    ("4 seeds, equal rows", 4, 1.0, None),
    ("4 seeds, uniform's sd 2x", 4, 2.0, None),
    ("6 seeds, uniform's sd 2x", 6, 2.0, None),
    ("6 seeds, uniform's sd 3x", 6, 3.0, None),
    ("6 seeds, pruned, none unpruned", 6, 1.0, 0),
    ("6 seeds, pruned, 2 unpruned", 6, 1.0, 2),
)


def draw_tuned(
    rng: np.random.Generator,
    seeds: int,
    sd_uniform: float = 1.0,
    unpruned: int | None = None,
    sd_u: float = 0.005,
    sd_e: float = 0.005,
    sd_g: float = 0.005,
) -> pd.DataFrame:
    """A null study with a ``train.lr`` dimension: uniform and TUNED_SCHEDULES schedules at
    every LR of TUNED_LRS on every seed, all equal at every LR (an LR level shared by all),

        y = 2 + lr_level + u_seed + g_(lr, seed) + e     e ~ N(0, k sd_e), k = ``sd_uniform``
                                                         for uniform, 1 for the rest

    (g: how an LR treats a seed, shared by every schedule at that LR and seed). ``unpruned``:
    None, unpruned; else a pruner as the median pruner acts at a quarter of the run (a
    candidate cell whose early value, its final one blurred by N(0, sd_e), is worse than the
    median of its (LR, seed)'s early values is PRUNED, keeping that early value), with the
    first ``unpruned`` schedules marked ``unpruned`` (search.unpruned_candidates) at every LR."""
    scheds = ["uniform"] + [f"s{i}" for i in range(TUNED_SCHEDULES)]
    lr_level = rng.normal(0.0, 0.02, len(TUNED_LRS))
    u = rng.normal(0.0, sd_u, seeds)
    g = rng.normal(0.0, sd_g, (len(TUNED_LRS), seeds))
    e = rng.normal(0.0, sd_e, (len(scheds), len(TUNED_LRS), seeds))
    e[0] *= sd_uniform
    blur = rng.normal(0.0, sd_e, e.shape)
    y = 2.0 + lr_level[None, :, None] + u[None, None, :] + g[None] + e
    rows = []
    for i, sch in enumerate(scheds):
        for j, lr in enumerate(TUNED_LRS):
            for s in range(seeds):
                rows.append((sch, lr, s, y[i, j, s], y[i, j, s] + blur[i, j, s]))
    t = pd.DataFrame(rows, columns=["schedule", "lr", "seed", VALUE, "early"])
    t["setting"] = [f"lr={lr}" for lr in t["lr"]]
    t["candidate"] = t["schedule"] + " @ " + t["setting"]
    t["params_json"] = [
        json.dumps({"shape": s, "train.lr": lr})
        for s, lr in zip(t["schedule"], t["lr"], strict=True)
    ]
    t["is_baseline"] = t["schedule"] == "uniform"
    t["state"] = "COMPLETE"
    if unpruned is not None:
        keep = set(scheds[1 : 1 + unpruned])
        med = t.groupby(["lr", "seed"])["early"].transform("median")
        at_risk = ~t["is_baseline"] & ~t["schedule"].isin(keep)
        cut = at_risk & (t["early"] > med)
        t.loc[cut, "state"] = "PRUNED"
        t.loc[cut, VALUE] = t.loc[cut, "early"]
        t["unpruned"] = t["schedule"].isin(keep)
    return t.drop(columns=["early", "lr"])


def judge_tuned(trials: pd.DataFrame) -> dict[str, int]:
    """1 where the tuned comparison (each schedule at its own best LR vs uniform at its) or the
    shared-setting one (each at uniform's best LR) prints any "separated_from_uniform: true",
    as best.yaml's ``tuned`` says it: every schedule equals uniform, so any is false."""
    from tlmsearch.evidence.tuned import tuned

    tu = tuned(trials, VALUE, "minimize")
    rows = tu.as_dict()["schedules"] if tu is not None else []
    own = any(r.get("separated_from_uniform") for r in rows)
    shared = any((r.get("at_shared_setting") or {}).get("separated_from_uniform") for r in rows)
    return {"tuned": int(own), "shared": int(shared), "either": int(own or shared)}


def tuned_grid(
    reps: int = 100, seed: int = 0, rows: Sequence[tuple] = TUNED_ROWS
) -> dict[str, dict[str, Any]]:
    """row name -> the family-wise rates of a false "separated" over ``reps`` null studies
    (:func:`draw_tuned`, :func:`judge_tuned`); each row's draws depend on (``seed``, its
    index) only, so two engines judge the same studies.

    >>> g = tuned_grid(reps=2, rows=TUNED_ROWS[:1])
    >>> g["4 seeds, equal rows"]["tuned"]["n"]
    2
    """
    out = {}
    for k, (name, seeds, ratio, unpruned) in enumerate(rows):
        rng = np.random.default_rng([seed, 44, k])
        hits = {"tuned": 0, "shared": 0, "either": 0}
        for _ in range(reps):
            for key, v in judge_tuned(draw_tuned(rng, seeds, ratio, unpruned)).items():
                hits[key] += v
        out[name] = {key: _rate(v, reps, reps) for key, v in hits.items()}
    return out


def tuned_table(grid: dict[str, dict[str, Any]]) -> str:
    """:func:`tuned_grid` as a table, each rate ``ok`` or ``**FAILS**`` against 5% within 2
    MC standard errors."""
    lines = [
        '### The tuned and shared-LR comparisons: family-wise false "separated" (null '
        "studies, uniform and 6 schedules at 4 LRs, held-out seeds)",
        "",
        "| study | tuned (each at its best LR) | at uniform's best LR | either |",
        "|---|---|---|---|",
    ]
    for name, r in grid.items():
        cells = [f"{fmt(r[k])} {_ok(within_goal(r[k]))}" for k in ("tuned", "shared", "either")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------
# The best's selection-adjusted estimate (``--shrink``)

SHRINK_ROWS = (  # (name, seeds, sd of the candidates' true effects in noise sds)
    ("15 equal to uniform, 3 seeds", 3, 0.0),
    ("15 equal to uniform, 10 seeds", 10, 0.0),
    ("true effects spread 1 noise sd, 3 seeds", 3, 1.0),
)


def shrink_grid(
    reps: int = 300, seed: int = 0, m: int = 15, sd_u: float = 0.005, sd_e: float = 0.005
) -> dict[str, dict[str, Any]]:
    """row -> the mean error (in noise sds: one paired delta's sd, sqrt(2) sd_e) of the
    best-ranked candidate's raw mean delta and of its selection-adjusted one
    (:func:`tlmsearch.stats.shrunk` of :func:`tlmsearch.stats.effects`, what best.yaml prints),
    against its true effect, with their MC standard errors, and the mean absolute errors.

    >>> g = shrink_grid(reps=3, m=4)
    >>> sorted(g["15 equal to uniform, 3 seeds"])
    ['abs_adjusted', 'abs_raw', 'adjusted', 'raw']
    """
    from tlmsearch.stats import shrunk

    out = {}
    unit = math.sqrt(2.0) * sd_e
    for k, (name, seeds, spread) in enumerate(SHRINK_ROWS):
        rng = np.random.default_rng([seed, 8, k])
        raw, adj = [], []
        for _ in range(reps):
            effects = tuple(rng.normal(0.0, spread, m)) if spread else (0.0,) * m
            sc = Scenario(f"shrink{k}", name, seeds, effects)
            trials = draw(sc, rng, sd_u, sd_e)
            eff = stats_effects(trials, VALUE, "minimize")
            eff = eff.assign(shrunk=shrunk(eff)).set_index("candidate")
            best = eff["mean_delta"].idxmin()
            true = truth(sc)[best]
            raw.append(eff.at[best, "mean_delta"] / unit - true)
            adj.append(eff.at[best, "shrunk"] / unit - true)
        out[name] = {
            "raw": _mean(raw),
            "adjusted": _mean(adj),
            "abs_raw": _mean([abs(x) for x in raw]),
            "abs_adjusted": _mean([abs(x) for x in adj]),
        }
    return out


def shrink_table(grid: dict[str, dict[str, Any]]) -> str:
    lines = [
        "### The best's estimate: mean error vs its true effect, in noise sds (± MC se)",
        "",
        "| study | raw mean (bias) | selection-adjusted (bias) | raw, mean abs error | "
        "adjusted, mean abs error |",
        "|---|---|---|---|---|",
    ]
    for name, r in grid.items():
        cells = [
            f"{r[k]['mean']:+.3f} ± {r[k]['se']:.3f}"
            for k in ("raw", "adjusted", "abs_raw", "abs_adjusted")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


CONFIRM_ROWS = (  # (name, k candidates, fresh seeds, uniform's sd over theirs, first's effect)
    ("null: 3 candidates, 3 fresh seeds", 3, 3, 1.0, 0.0),
    ("null: 3 candidates, 5 fresh seeds", 3, 5, 1.0, 0.0),
    ("null: 5 candidates, 3 fresh seeds", 5, 3, 1.0, 0.0),
    ("null, uniform 2x noisier: 3 candidates, 3 fresh seeds", 3, 3, 2.0, 0.0),
    ("null, uniform 2x noisier: 3 candidates, 5 fresh seeds", 3, 5, 2.0, 0.0),
    ("power: the first of 3 better by 2 noise sds, 3 fresh seeds", 3, 3, 1.0, -2.0),
    ("power: the first of 3 better by 2 noise sds, 5 fresh seeds", 3, 5, 1.0, -2.0),
)


def confirm_grid(
    reps: int = 300,
    seed: int = 0,
    sd_u: float = 0.005,
    sd_e: float = 0.005,
    rows: Sequence[tuple[str, int, int, float, float]] = CONFIRM_ROWS,
) -> dict[str, dict[str, Any]]:
    """row -> how often a confirmation stage (``search.confirm``: k candidates and uniform on
    fresh, unpruned seeds, one family of k) calls a candidate **confirmed** (better than uniform,
    separated) when it is not (``false``: any of the k, the family-wise rate; its goal is 5%
    at most, one-sided half of the family's two-sided 5%), and how often it confirms the one
    that is better (``power``), with MC standard errors. Each stage is judged as best.yaml judges
    it: :class:`~tlmsearch.evidence.Evidence` on the stage's trials alone and
    :func:`tlmsearch.evidence.confirm.confirmation`.

    >>> g = confirm_grid(reps=2)
    >>> sorted(g["null: 3 candidates, 3 fresh seeds"])
    ['false', 'power']
    """
    from tlmsearch.evidence import Evidence
    from tlmsearch.evidence.confirm import CONFIRMED, confirmation

    out = {}
    unit = math.sqrt(2.0) * sd_e
    for r, (name, k, n, u_ratio, first) in enumerate(rows):
        rng = np.random.default_rng([seed, 9, r])
        false, power = [], []
        for _ in range(reps):
            rows = []
            for s in range(n):
                level = rng.normal(0.0, sd_u)
                v = 2.0 + level + rng.normal(0.0, sd_e * u_ratio)
                rows.append({"candidate": "uniform", "is_baseline": True, "seed": s, VALUE: v})
                for c in range(k):
                    effect = first * unit if c == 0 else 0.0
                    v = 2.0 + level + effect + rng.normal(0.0, sd_e)
                    rows.append({"candidate": f"c{c}", "is_baseline": False, "seed": s, VALUE: v})
            trials = pd.DataFrame(rows).assign(state="COMPLETE")
            ev = Evidence.build(trials, VALUE, "minimize", seeds=list(range(n)))
            doc = confirmation([f"c{c}" for c in range(k)], None, ev, list(range(n)))
            words = {x["candidate"]: x["word"] for x in doc["candidates"]}
            wrong = [c for c, w in words.items() if w == CONFIRMED and (c != "c0" or not first)]
            false.append(float(bool(wrong)))
            power.append(float(words.get("c0") == CONFIRMED) if first else math.nan)
        out[name] = {"false": _mean(false), "power": _mean(power)}
    return out


def confirm_table(grid: dict[str, dict[str, Any]]) -> str:
    lines = [
        "### The confirmation stage: a false 'confirmed' (any of k) and power, in % (± MC se)",
        "",
        "| stage | false confirmed | power |",
        "|---|---|---|",
    ]
    for name, r in grid.items():
        cells = [
            "-" if r[k]["mean"] is None else f"{100 * r[k]['mean']:.1f} ± {100 * r[k]['se']:.1f}"
            for k in ("false", "power")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=300, help="simulated studies per scenario")
    p.add_argument(
        "--race-reps",
        type=int,
        default=100,
        help=f"of them, how many to race and prune (on {', '.join(RACED)}); "
        f"also the studies of each of {', '.join(EXTRAS)}",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--scenarios",
        default=",".join(DEFAULT),
        help="comma-separated, among the default's (the module docstring)",
    )
    p.add_argument("--sd-u", type=float, default=0.005, help="sd of the shared seed level")
    p.add_argument("--sd-e", type=float, default=0.005, help="sd of a cell's own error")
    p.add_argument(
        "--no-race",
        action="store_true",
        help=f"skip the races and the pruner of {', '.join(RACED)} (the slow part; "
        "the run-and-read rows run when named)",
    )
    p.add_argument("--json", help="write the numbers here")
    p.add_argument(
        "--gate",
        type=int,
        default=0,
        metavar="REPS",
        help="only the uniform variance gate's grid (seeds x uniform's sd), REPS "
        "null studies per cell",
    )
    p.add_argument(
        "--gate-seeds",
        default=",".join(str(s) for s in GATE_SEEDS),
        help="--gate's seeds per study, comma-separated (e.g. 10,20)",
    )
    p.add_argument(
        "--gate-ratios",
        default=",".join(f"{k:g}" for k in GATE_RATIOS),
        help="--gate's uniform sd over the candidates', comma-separated (e.g. 1.5,2)",
    )
    p.add_argument(
        "--tuned",
        type=int,
        default=0,
        metavar="REPS",
        help="only the tuned and shared-setting comparisons' rows (null studies "
        "with 4 LRs), REPS studies per row",
    )
    p.add_argument(
        "--shrink",
        type=int,
        default=0,
        metavar="REPS",
        help="only the best's selection-adjusted estimate's rows, REPS studies each",
    )
    p.add_argument(
        "--confirm",
        type=int,
        default=0,
        metavar="REPS",
        help="only the confirmation stage's rows (search.confirm), REPS stages per row",
    )
    a = p.parse_args(argv)
    for reps, name, grid_of, table in (
        (a.confirm, "confirm", lambda: confirm_grid(a.confirm, a.seed), confirm_table),
        (a.shrink, "shrink", lambda: shrink_grid(a.shrink, a.seed), shrink_table),
        (a.tuned, "tuned", lambda: tuned_grid(a.tuned, a.seed), tuned_table),
        (
            a.gate,
            "gate",
            lambda: gate_grid(
                a.gate,
                a.seed,
                [int(x) for x in a.gate_seeds.split(",")],
                [float(x) for x in a.gate_ratios.split(",")],
                sd_u=a.sd_u,
                sd_e=a.sd_e,
            ),
            gate_table,
        ),
    ):
        if reps:  # one study kind alone: its rows, its wall time, its JSON
            t0 = time.perf_counter()
            grid = grid_of()
            print(table(grid))
            print(f"\n{time.perf_counter() - t0:.0f} s")
            if a.json:
                with open(a.json, "w") as f:
                    json.dump({"settings": {name: reps, "seed": a.seed}, name: grid}, f, indent=1)
            return
    which = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    t0 = time.perf_counter()
    races = False if a.no_race else min(a.reps, a.race_reps)
    extra_reps = min(a.reps, a.race_reps)
    print(
        f"## Simulated studies: {a.reps} per scenario ({races or 'none'} of them raced, on "
        f"{', '.join(k for k in which if k in RACED) or 'none'}; {extra_reps} per base study "
        f"of {', '.join(k for k in which if k in EXTRAS) or 'none'}), seed {a.seed}, "
        f"sd_u {a.sd_u}, sd_e {a.sd_e} (a noise sd = sqrt(2) sd_e); "
        f"{len(scenarios()['a'].effects)} candidates; scenarios {', '.join(which)}; rate ± one "
        f"MC standard error\n",
        flush=True,
    )
    results = run(
        reps=a.reps,
        seed=a.seed,
        which=which,
        sd_u=a.sd_u,
        sd_e=a.sd_e,
        races=races,
        extra_reps=extra_reps,
    )
    wall = time.perf_counter() - t0
    print(tables(results, scenarios()))
    print(f"\n{wall:.0f} s")
    if a.json:
        settings = {
            "reps": a.reps,
            "seed": a.seed,
            "sd_u": a.sd_u,
            "sd_e": a.sd_e,
            "scenarios": which,
            "races": races,
            "extra_reps": extra_reps,
            "seconds": wall,
        }
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "results": results}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
