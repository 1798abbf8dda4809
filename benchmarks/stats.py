"""Error rates and power of every decision tlmsearch prints, on simulated studies (issues 20, 31).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/stats.py [--reps 300] [--race-reps 100]
[--seed 0] [--scenarios a,b,c3,c5,u2,u3,n3,n5] [--sd-u 0.005] [--sd-e 0.005] [--no-race]
[--uniform-rule RATIO,CONFIDENCE] [--json OUT]`` (it prints its settings first).

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
- ``u2`` / ``u3`` (issue 31): the null, 3 seeds, uniform's own residual sd 2x / 3x the
  candidates' (k_uniform = 2, 3): every comparison rests on its noise;
- ``n3`` / ``n5``: the null, one candidate's (c00) residual sd 3x the others', 3 / 5 seeds.

The races and the pruner (the slow part) run on ``--race-reps`` of the studies of a, b, c3, c5
and u3; every other rule on all ``--reps``.

Every decision goes through the code a run uses, with no statistic re-derived here:

- *conclusions* (no racing): ``Evidence.build`` without a config, three rules on the same
  studies (:data:`RULES`): ``holm``, what tlmsearch does (each comparison on its rows' noise,
  ``variance`` rows: :func:`tlmsearch.stats.row_noise`; the interval over the family);
  ``holm-pooled``, the rule before issue 31 (one block-design noise for every comparison, the
  interval printed per comparison); ``none`` (no correction, the contrast). A candidate is
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
  uniform on the pooled one, as before issue 31): every candidate and uniform start on seed 0,
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

Goals (issue 20, "How we will know"; issue 31): per-candidate false separation <= 5%, FWER
<= 5% and (null scenarios) the best's interval excluding 0 in <= 5% of studies, within 2 MC
standard errors (the ``goal`` column; family none is shown for contrast, it claims no
family-wise control); the verdict never selects a candidate in ``b`` (uniform measures
better); power in ``c`` at 3 and 5 seeds is reported, not judged.

Measured (the defaults: ``--reps 300 --race-reps 100``, seed 0; 366 s on one of 2 shared
cores, ~0.07 s per study for the three conclusions rules, ~0.5 s per raced study; the full
tables with every MC standard error are what the script prints). The conclusions, old rule
(``holm-pooled``) -> the rule tlmsearch uses (``holm``), rate over 300 studies:

    scen                          FWER            best's interval excl. 0   power
    a   15 equal, 3 seeds         0.020 -> 0.017  0.177 -> 0.003            -
    u2  uniform's sd 2x           0.127 -> 0.023  0.230 -> 0.010            -
    u3  uniform's sd 3x           0.230 -> 0.027  0.263 -> 0.013            -
    n3  one candidate's sd 3x     0.130 -> 0.040  0.267 -> 0.023            -
    n5  the same, 5 seeds         0.123 -> 0.027  0.193 -> 0.003            -
    b   uniform better by 2 sds   0.000 -> 0.000  0.000 -> 0.000            0.768 -> 0.471
    c3  one winner at -2 sds      0.040 -> 0.017  -                         0.657 -> 0.443
    c5  the same, 5 seeds         0.030 -> 0.027  -                         0.940 -> 0.797

(MC standard error <= 0.013 on the rates near 5%, <= 0.029 on the powers.) The verdict (MCB):
a wrong winner in at most 0.3% of the studies of any scenario (pooled: up to 2.7%, in u3);
the true winner selected 0.207 -> 0.050 (c3), 0.710 -> 0.353 (c5): MCB must beat every other
candidate, and with 15 of them about half the studies have one whose own seeds look noisy.
The race against uniform: u3 FWER 0.170 (pooled) -> 0.040 (rows), power 0.50 -> 0.36 (c3),
0.83 -> 0.70 (c5); against the best, every FWER <= 0.04. The paired pruner (its own pooled
noise, search/paired_pruner.py): a best candidate pruned in at most 1 of 100 studies.

Every rule now holds its stated 5% in every scenario, within 2 MC standard errors and in fact
(the old rule: 12-23% with unequal rows, and the best's per-comparison interval excluded 0 in
18-27% of null studies); family none is the contrast (5% per comparison, a false claim in
13-29% of studies). What it costs: equal-variance power at 2 noise sds falls from 66% to 44%
at 3 seeds and from 94% to 80% at 5 (on the same no-race studies, ``--no-race``: 62% -> 40%,
91% -> 76%), because uniform's own variance (n - 1 df) decides whenever its seeds cannot rule
out twice the candidates' sd (38% of equal-variance studies at 3 seeds, 19% at 5) and a
candidate's own in 4.5%. ``--uniform-rule`` measures the alternatives (docs/statistics.md).
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
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.conclusions import conclusions
from tlmsearch.evidence import Evidence
from tlmsearch.racing import FINAL, SEPARATED, Lane, decision, race, race_settings
from tlmsearch.stats import VARIANCES, decide, t_quantile

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
    """The scenarios of issues 20 and 31 with ``m`` candidates."""
    one = (-2.0,) + (0.0,) * (m - 1)
    null = (0.0,) * m
    return {
        "a": Scenario("a", f"{m} equal to uniform", 3, null),
        "b": Scenario("b", "uniform better by 2 sds", 3, (2.0,) * m),
        "c3": Scenario("c3", "one winner at -2 sds", 3, one),
        "c5": Scenario("c5", "one winner at -2 sds", 5, one),
        # issue 31: the rows are not equally noisy (every candidate still equal to uniform)
        "u2": Scenario("u2", f"{m} equal, uniform's sd 2x", 3, null, sd_uniform=2.0),
        "u3": Scenario("u3", f"{m} equal, uniform's sd 3x", 3, null, sd_uniform=3.0),
        "n3": Scenario("n3", f"{m} equal, one candidate's sd 3x", 3, null, sd_first=3.0),
        "n5": Scenario("n5", f"{m} equal, one candidate's sd 3x", 5, null, sd_first=3.0),
    }


DEFAULT = ("a", "b", "c3", "c5", "u2", "u3", "n3", "n5")
NULLS = ("a", "u2", "u3", "n3", "n5")  # every candidate equal to uniform
RACED = ("a", "b", "c3", "c5", "u3")  # the races and the pruner (the slow part) run on these


def names(sc: Scenario) -> list[str]:
    return [f"c{i:02d}" for i in range(len(sc.effects))]


def truth(sc: Scenario) -> dict[str, float]:
    """Every candidate's true effect in noise sds, uniform 0."""
    return {UNIFORM: 0.0, **dict(zip(names(sc), sc.effects, strict=True))}


def draw(sc: Scenario, rng: np.random.Generator, sd_u: float = 0.005,
         sd_e: float = 0.005) -> pd.DataFrame:  # fmt: skip
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
    return pd.DataFrame({
        "candidate": np.repeat(cands, sc.seeds),
        "seed": np.tile(np.arange(sc.seeds), len(cands)),
        "state": "COMPLETE",
        "is_baseline": np.repeat([c == UNIFORM for c in cands], sc.seeds),
        VALUE: y.ravel(),
    })  # fmt: skip


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
    "holm": ("holm", "rows", "family", True),  # what tlmsearch does (issue 31)
    # the same rows, Holm's Bonferroni steps and intervals: what the joint t buys
    "holm-rows-bonferroni": ("holm", "rows", "family", False),
    "holm-pooled": ("holm", "pooled", "each", False),  # before issue 31: one noise, per comparison
    "none": ("none", "rows", "family", True),  # no correction: the contrast
}


RACES = {  # race rule -> (against, variance model)
    "uniform": ("uniform", "rows"),
    "best": ("best", "rows"),
    "uniform-pooled": ("uniform", "pooled"),  # before issue 31
}


def _best_excludes_zero(ev: Evidence, how: str) -> int | None:
    """Whether the interval vs uniform printed for the best-ranked candidate (best.yaml's
    ``delta_ci95``) excludes zero; None when uniform ranks first or it has no interval.
    ``how``: family (the effects row's ``lo``/``hi``) or each (the per-comparison interval
    at ``level``, what was printed before issue 31)."""
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


def judge_conclusions(trials: pd.DataFrame, sc: Scenario) -> dict[str, dict[str, Any]]:
    """Evidence.build without racing, once per variance model: for each rule of :data:`RULES`
    its effects' decisions, the best's interval, and (holm) the verdict. A rule's family other
    than holm re-decides the same effects (``stats.decide``, as Evidence.build would)."""
    eff = truth(sc)
    built = {v: Evidence.build(trials, VALUE, "minimize", variance=v) for v in VARIANCES}
    out: dict[str, dict[str, Any]] = {}
    for rule, (family, variance, interval, joint) in RULES.items():
        ev = built[variance]
        if not joint:  # Holm's Bonferroni steps: no joint distribution
            ev = replace(ev, effects=decide(ev.effects.assign(noise_shared=math.nan), family,
                                            ev.level))  # fmt: skip
        elif family != ev.family:
            ev = replace(ev, family=family, effects=decide(ev.effects, family, ev.level))
        e = ev.effects
        claims = {str(c): _sign(d) if bool(s) else 0
                  for c, d, s in zip(e["candidate"], e["mean_delta"],
                                     e["separated"].fillna(False), strict=True)}  # fmt: skip
        counts: dict[str, Any] = _claims_vs_uniform(eff, claims)
        excl = _best_excludes_zero(ev, interval)
        counts.update(best_first=int(excl is not None), best_excludes=excl or 0)
        if family == "holm":
            counts.update(_verdict(trials, ev, eff))
        out[rule] = counts
    return out


def _verdict(trials: pd.DataFrame, ev: Evidence, eff: dict[str, float]) -> dict[str, int]:
    """The verdict's counts (``conclusions(...).top_group``: Hsu's MCB, uniform included)."""
    top = conclusions(trials, VALUE, evidence=ev).top_group or {}
    best_effect = min(eff.values())
    true_best = [c for c, x in eff.items() if x == best_effect]
    sel = bool(top.get("selected"))
    return {
        "selected": int(sel),
        "wrong_winner": int(sel and (len(true_best) > 1 or top["best"] not in true_best)),
        "uniform_first": int(top.get("best") == UNIFORM),
        "uniform_selected": int(sel and top["best"] == UNIFORM),
        "winner_selected": int(sel and len(true_best) == 1 and top["best"] == true_best[0]),
    }


def drive_race(
    trials: pd.DataFrame, sc: Scenario, against: str, variance: str = "rows"
) -> tuple[list[Lane], int, list[Lane]]:
    """A race as it runs live on a complete simulated study: (the final lanes, cells trained,
    every lane that was ``separated`` at some look, the final ones included)."""
    config = {
        "search": {"seeds": list(range(sc.seeds)),
                   "racing": {"max_seeds": sc.seeds, "confidence": 0.95, "against": against}},
        "objectives": [{"metric": VALUE}],
    }  # fmt: skip
    settings = race_settings(config)
    assert settings is not None
    cands = list(truth(sc))
    row = {c: i for i, c in enumerate(cands)}
    shown = np.zeros((len(cands), sc.seeds), dtype=bool)
    shown[:, 0] = True
    seen: list[Lane] = []
    recorded: dict[str, str] = {}  # what the driver records once a lane is decided
    for _ in range(shown.size):  # each look reveals at least one cell, so this bounds it
        view = trials[shown.ravel()].copy()
        view["race_decision"] = [recorded.get(c, "") for c in view["candidate"]]
        lanes = race(view, VALUE, sense="minimize", variance=variance, **settings)
        seen += [ln for ln in lanes if ln.status == SEPARATED]
        for ln in lanes:  # as search/race.py advance does: a decision stands from now on
            if ln.status in FINAL and ln.candidate not in recorded:
                recorded[ln.candidate] = json.dumps(decision(ln))
        due = [(ln.candidate, ln.next_seed) for ln in lanes if ln.next_seed is not None]
        if not due:
            break
        for cand, seed in due:
            shown[row[cand], seed] = shown[row[UNIFORM], seed] = True
    else:
        raise AssertionError("the race kept asking for seeds")
    return lanes, int(shown.sum()), seen


_CLAIM = re.compile(r"^(better|worse) than (\S+) ")


def _claim(ln: Lane) -> tuple[str, str, str]:
    """(candidate, better | worse, reference) of a separated lane, from its reason."""
    m = _CLAIM.match(ln.reason)
    assert m, ln.reason
    return ln.candidate, m.group(1), m.group(2)


def _race_counts(eff: dict[str, float], cands: list[str], claims: set[tuple[str, str, str]],
                 against: str) -> dict[str, int]:  # fmt: skip
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


def judge_race(trials: pd.DataFrame, sc: Scenario, against: str,
               variance: str = "rows") -> dict[str, Any]:  # fmt: skip
    """One race's decisions against the truth: its final lanes' (the race's decisions as
    the run reports them), and ``ever_false`` / ``ever_strict``: a false claim at any look
    (what Bonferroni over the looks bounds; a later look may reopen a separated lane)."""
    eff = truth(sc)
    lanes, cells, seen = drive_race(trials, sc, against, variance)
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

        from tlmsearch.search.attrs import CANDIDATE, CONTROL, SEED

        self.number, self.state = number, TrialState.RUNNING
        self.user_attrs = {SEED: seed, CANDIDATE: cand, **({CONTROL: True} if cand == UNIFORM
                                                           else {})}  # fmt: skip
        self.intermediate_values: dict[int, float] = {}


class _Study:
    def __init__(self, trials: list[_Trial]) -> None:
        from optuna.study import StudyDirection

        self.direction, self._trials = StudyDirection.MINIMIZE, trials

    def get_trials(self, deepcopy: bool = False, states: Sequence[Any] | None = None):
        return [t for t in self._trials if states is None or t.state in states]


def judge_pruner(trials: pd.DataFrame, sc: Scenario, rng: np.random.Generator,
                 sd_e: float = 0.005) -> dict[str, Any]:  # fmt: skip
    """The paired pruner (search.pruner: paired, its defaults) on the study's curves, as a
    run sees them: every training reports EVALS evals in lockstep, each eval its final value
    plus a learning curve shared by all (it cancels in a delta) plus its own jitter (sd
    sd_e / 2); after each eval the pruner judges every candidate trial still running, and a
    pruned one reports no more. A false prune: a trial of a candidate as good as the best
    candidate (the incumbent a prune measures against); power: trials of worse ones pruned."""
    from optuna.trial import TrialState

    from tlmsearch.search.paired_pruner import PairedPruner

    eff = truth(sc)
    cands = [c for c in eff if c != UNIFORM]
    best = min(eff[c] for c in cands)
    pruner = PairedPruner(grace_tokens=0)
    objs = [_Trial(i, str(c), int(s)) for i, (c, s) in
            enumerate(zip(trials["candidate"], trials["seed"], strict=True))]  # fmt: skip
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
    null = [tr for tr in objs if tr.user_attrs["candidate"] in cands
            and eff[tr.user_attrs["candidate"]] == best]  # fmt: skip
    worse = [tr for tr in objs if tr.user_attrs["candidate"] in cands
             and eff[tr.user_attrs["candidate"]] > best]  # fmt: skip
    false = [c for c in pruned if eff[c] == best]
    return {"null": len(null), "null_sep": len(false), "any_false": int(bool(false)),
            "real": len(worse), "power": sum(eff[c] > best for c in pruned),
            "trainings": 1.0 - len(pruned) / max(1, len(cands) * sc.seeds)}  # fmt: skip


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
                    judge_race(trials, sc, against, variance))
            rules.setdefault("pruner/paired", []).append(judge_pruner(trials, sc, rng, sd_e))
    return rules


def _rate(hits: float, total: float, studies: int) -> dict[str, Any]:
    """A rate with its Monte-Carlo standard error sqrt(p (1 - p) / studies); None when
    ``total`` is 0 (nothing to count)."""
    if total == 0:
        return {"rate": None, "se": None, "n": 0}
    p = hits / total
    return {"rate": p, "se": math.sqrt(p * (1.0 - p) / studies), "n": int(total)}


def summarise(per_study: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates over the studies of one rule (keys: those of its per-study dicts)."""
    n = len(per_study)

    def total(k: str) -> float:
        return float(sum(s.get(k, 0) for s in per_study))

    out = {
        "studies": n,
        "false_per_candidate": _rate(total("null_sep"), total("null"), n),
        "fwer": _rate(total("any_false"), n, n),
        "power": _rate(total("power"), total("real"), n),
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
    ):
        if per_study and k in per_study[0]:
            out[k] = _rate(total(k), n, n)
    if per_study and "trainings" in per_study[0]:
        out["trainings"] = total("trainings") / n
        out["undone"] = total("undone") / n
    return out


def within_goal(r: dict[str, Any] | None, goal: float = GOAL) -> bool | None:
    """rate <= goal within 2 MC standard errors (None: nothing measured)."""
    if not r or r["rate"] is None:
        return None
    return r["rate"] - 2.0 * r["se"] <= goal


def fmt(r: dict[str, Any] | None) -> str:
    if not r or r["rate"] is None:
        return "—"
    return f"{r['rate']:.3f} ± {r['se']:.3f}"


def _ok(*flags: bool | None) -> str:
    known = [f for f in flags if f is not None]
    if not known:
        return "—"
    return "ok" if all(known) else "**FAILS**"


def tables(results: dict[str, dict[str, Any]], specs: dict[str, Scenario]) -> str:
    """The three markdown tables (conclusions, verdict, racing) of :func:`run`'s results."""

    def label(k: str) -> str:
        sc = specs[k]
        return f"{k}: {sc.title}, {sc.seeds} seeds"

    lines = ["### Conclusions vs uniform (no racing; Evidence.build, level 0.95)", "",
             "holm: each comparison on its rows' own noise (uniform's always, a candidate's "
             "where its seeds show it noisier; issue 31), Holm's step-down and the intervals at "
             "the comparisons' joint t critical value; holm-rows-bonferroni: the same noise, "
             "Holm's Bonferroni steps; holm-pooled: one block-design noise for every "
             "comparison, the best's interval per comparison (before issue 31); none: no "
             "correction (the contrast).", "",
             "| scenario | rule | false sep. / candidate | FWER | power | best's interval "
             "excludes 0 | goal (<= 5% within 2 se) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for k, res in results.items():
        for rule in RULES:
            r = res[f"conclusions/{rule}"]
            best = r.get("best_excludes")
            ok = _ok(within_goal(r["false_per_candidate"]), within_goal(r["fwer"]),
                     within_goal(best) if k in NULLS else None)  # fmt: skip
            if rule == "none" and ok != "—":
                ok += " (no family claim)"
            lines.append(f"| {label(k)} | {rule} | {fmt(r['false_per_candidate'])} | "
                         f"{fmt(r['fwer'])} | {fmt(r['power'])} | {fmt(best)} | {ok} |")
    lines += ["", "### The verdict (top_group: Hsu's MCB, uniform included)", "",
              "| scenario | noise | selected any | wrong winner | uniform ranked first | "
              "uniform selected | true winner selected (power) | goal |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for k, res in results.items():
        for rule in ("holm", "holm-pooled"):
            r = res[f"conclusions/{rule}"]
            goal = "—"
            if k == "b":  # never a candidate named best when uniform measures better
                goal = "ok" if r["wrong_winner"]["rate"] == 0 else "**FAILS** (not never)"
            elif k in NULLS:
                goal = _ok(within_goal(r["wrong_winner"]))
            winner = fmt(r["winner_selected"]) if k.startswith("c") else "—"
            lines.append(f"| {label(k)} | {RULES[rule][1]} | {fmt(r['selected'])} | "
                         f"{fmt(r['wrong_winner'])} | {fmt(r['uniform_first'])} | "
                         f"{fmt(r['uniform_selected'])} | {winner} | {goal} |")  # fmt: skip
    lines += [
        "",
        "### Racing, as it runs live (confidence 0.95, max_seeds = the seeds)",
        "",
        "| scenario | against, noise | false sep. / candidate | FWER | FWER, any look | "
        "strict FWER, any look | power | winner ends incumbent | trainings / all | "
        "undone / race | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for k, res in results.items():
        for name, (against, variance) in RACES.items():
            r = res.get(f"race/{name}")
            if r is None:
                continue
            best = against == "best"
            strict = fmt(r["ever_strict"]) if best else "—"
            inc = fmt(r["winner_incumbent"]) if best and k.startswith("c") else "—"
            ok = _ok(within_goal(r["false_per_candidate"]), within_goal(r["fwer"]),
                     within_goal(r["ever_false"]),
                     within_goal(r["ever_strict"]) if best else None)  # fmt: skip
            lines.append(f"| {label(k)} | {against}, {variance} | "
                         f"{fmt(r['false_per_candidate'])} | "
                         f"{fmt(r['fwer'])} | {fmt(r['ever_false'])} | {strict} | "
                         f"{fmt(r['power'])} | {inc} | {r['trainings']:.2f} | "
                         f"{r['undone']:.3f} | {ok} |")  # fmt: skip
    lines += ["", f"### The paired pruner (its defaults: margin 2.5 noise sds, patience 2; "
              f"{EVALS} evals per curve)", "",
              "| scenario | best pruned / trial | studies with a best pruned | worse pruned / "
              "trial (power) | trainings kept |", "|---|---|---|---|---|"]  # fmt: skip
    for k, res in results.items():
        r = res.get("pruner/paired")
        if r is not None:
            lines.append(f"| {label(k)} | {fmt(r['false_per_candidate'])} | {fmt(r['fwer'])} "
                         f"| {fmt(r['power'])} | {r['trainings']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def run(*, reps: int = 300, seed: int = 0, which: Sequence[str] = DEFAULT,
        sd_u: float = 0.005, sd_e: float = 0.005, races: bool | int = True,
        m: int = 15) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Scenario -> rule -> :func:`summarise`'s rates, for ``reps`` studies of each scenario.
    ``races``: how many of them to race and prune (True: all, False: none), on the scenarios
    in :data:`RACED` only.

    >>> r = run(reps=2, which=["a"], races=False)
    >>> [k.split("/")[1] for k in sorted(r["a"])]
    ['holm', 'holm-pooled', 'holm-rows-bonferroni', 'none']
    """
    specs = scenarios(m)
    unknown = [k for k in which if k not in specs]
    if unknown:
        raise ValueError(f"scenarios must be among {', '.join(specs)}, but got {unknown}")
    return {
        k: {rule: summarise(studies)
            for rule, studies in simulate(specs[k], reps, seed, sd_u, sd_e,
                                          races if k in RACED else False).items()}
        for k in which
    }  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=300, help="simulated studies per scenario")
    p.add_argument("--race-reps", type=int, default=100,
                   help=f"of them, how many to race and prune (on {', '.join(RACED)})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenarios", default=",".join(DEFAULT))
    p.add_argument("--sd-u", type=float, default=0.005, help="sd of the shared seed level")
    p.add_argument("--sd-e", type=float, default=0.005, help="sd of a cell's own error")
    p.add_argument("--no-race", action="store_true", help="skip the races (the slow part)")
    p.add_argument("--json", help="write the numbers here")
    a = p.parse_args(argv)
    which = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    t0 = time.perf_counter()
    races = False if a.no_race else min(a.reps, a.race_reps)
    print(
        f"## Simulated studies: {a.reps} per scenario ({races or 'none'} of them raced, on "
        f"{', '.join(k for k in which if k in RACED) or 'none'}), seed {a.seed}, sd_u {a.sd_u}, "
        f"sd_e {a.sd_e} (a noise sd = sqrt(2) sd_e); {len(scenarios()['a'].effects)} "
        f"candidates; scenarios {', '.join(which)}; rate ± one MC standard error\n",
        flush=True,
    )
    results = run(reps=a.reps, seed=a.seed, which=which, sd_u=a.sd_u, sd_e=a.sd_e,
                  races=races)  # fmt: skip
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
            "seconds": wall,
        }
        with open(a.json, "w") as f:
            json.dump({"settings": settings, "results": results}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
