"""Racing seeds: a candidate gets another seed only while the data cannot yet place it.

SMAC3's intensification races a challenger against the incumbent over (instance, seed) pairs and
adds evaluations only while the challenger could still win. Here every candidate has a natural
paired control, the uniform model of the same seed (common random numbers: same data order and
init), so a seed gives one *paired delta* d = value - uniform. After each finished trial,
:func:`race` looks at a candidate's deltas and decides:

- ``separated``: its mean delta is further from the reference than the noise allows at
  ``confidence`` (a t interval over its seeds excludes 0): no more seeds;
- ``tied``: it reached ``max_seeds`` without separating: the data cannot tell it apart;
- ``stopped``: a seed was pruned or failed (the pruner judged it; more seeds buy nothing);
- ``done``: the incumbent (``against: best``) raced every seed;
- ``racing``: not yet decided: its next seed is due (``next_seed``) or in flight.

The noise is the seed-to-seed sd of paired deltas *pooled* over every candidate with two or more
seeds (df = sum of n_i - 1): one candidate's single seed says nothing about noise, the study's
other candidates do. Before any candidate has two seeds, ``prior_sd`` (if given) stands in with
a normal quantile; without it nothing separates on one seed.

The reference (``against``) is ``uniform`` (the delta itself) or ``best``: the difference to the
current incumbent on their common seeds (the candidate with the best mean delta among those with
the most seeds). The incumbent itself races every seed, as SMAC's does: it is what the others
are measured against.

Pure pandas (no ray, no optuna): a function of the trials table, so a resumed race continues
where the stored trials left it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tlmsearch.stats import paired_deltas, t_quantile

RACING, SEPARATED, TIED, STOPPED, DONE = "racing", "separated", "tied", "stopped", "done"


@dataclass(frozen=True)
class Noise:
    """The pooled seed-to-seed sd of paired deltas and its degrees of freedom (0: the prior)."""

    sd: float
    df: int

    def quantile(self, confidence: float) -> float:
        if self.df == 0:  # the prior: a normal quantile (t with infinite df)
            return t_quantile(1e9, confidence)
        return t_quantile(self.df, confidence)


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


def pooled_noise(deltas: pd.DataFrame, key: str, prior_sd: float | None) -> Noise | None:
    """Pooled within-candidate sd of the paired deltas; the prior (df 0) or None without one."""
    ss, df = 0.0, 0
    for _, g in deltas[~deltas["is_baseline"]].groupby(key, sort=True):
        d = g["delta"].to_numpy()
        if len(d) >= 2 and (d != 0).any():  # all zero: uniform's own model, not seed noise
            ss += float(((d - d.mean()) ** 2).sum())
            df += len(d) - 1
    if df > 0:
        return Noise(math.sqrt(ss / df), df)
    return Noise(float(prior_sd), 0) if prior_sd else None


def race(
    trials: pd.DataFrame,
    value: str,
    *,
    sense: str = "minimize",
    seeds: Sequence[int],
    max_seeds: int,
    confidence: float = 0.95,
    against: str = "uniform",
    prior_sd: float | None = None,
    queued: set[tuple[str, int]] | frozenset = frozenset(),
    key: str = "candidate",
) -> list[Lane]:
    """One :class:`Lane` per non-baseline candidate in ``trials`` (sorted by ``key``).

    ``trials``: the run's trials table (``key``, ``seed``, ``state``, ``is_baseline``, ``value``);
    ``seeds``: the seed pool in the order seeds are raced; ``queued``: (candidate, seed) pairs
    already waiting in the queue (they count as in flight).
    """
    if against not in ("uniform", "best"):
        raise ValueError(f"against must be 'uniform' or 'best', but got {against=}")
    if not 1 <= max_seeds <= len(seeds):
        raise ValueError(f"max_seeds must lie in 1..{len(seeds)}, but got {max_seeds=}")
    sign = 1.0 if sense == "minimize" else -1.0  # a better candidate has sign * delta < 0
    deltas = paired_deltas(trials, value, key=key)
    noise = pooled_noise(deltas, key, prior_sd)
    by_cand = {c: g.set_index("seed")["delta"] for c, g in deltas.groupby(key, sort=True)}
    incumbent = _incumbent(deltas, key, sign) if against == "best" else None
    base = trials[trials["is_baseline"].astype(bool)]
    base_done = set(base.loc[base["state"] == "COMPLETE", "seed"].dropna().astype(int))
    lanes = []
    cands = trials[~trials["is_baseline"].astype(bool)]
    for cand, g in cands.groupby(key, sort=True):
        states = g["state"].astype(str)
        in_flight = set(g.loc[states.isin(["RUNNING", "WAITING"]), "seed"].dropna().astype(int))
        in_flight |= {s for c, s in queued if c == cand}
        d = by_cand.get(cand, pd.Series(dtype="float64"))
        tried = set(g["seed"].dropna().astype(int)) | in_flight
        # a finished seed whose control has not finished yet cannot be judged: wait for it
        base_failed = set(base.loc[base["state"] == "FAIL", "seed"].dropna().astype(int))
        in_flight |= (set(g["seed"].dropna().astype(int)) - base_done) - base_failed
        lane = _decide(
            str(cand), d, states, in_flight, tried, seeds, max_seeds, confidence, noise,
            incumbent, by_cand, sign,
        )  # fmt: skip
        lanes.append(lane)
    return lanes


def _incumbent(deltas: pd.DataFrame, key: str, sign: float) -> str | None:
    """The candidate with the best mean delta among those with the most paired seeds."""
    d = deltas[~deltas["is_baseline"]]
    if d.empty:
        return None
    stats = d.groupby(key, sort=True)["delta"].agg(["count", "mean"])
    stats["score"] = sign * stats["mean"]
    top = stats[stats["count"] == stats["count"].max()]
    return str(top["score"].idxmin())


def _decide(
    cand: str,
    d: pd.Series,
    states: pd.Series,
    in_flight: set[int],
    tried: set[int],
    seeds: Sequence[int],
    max_seeds: int,
    confidence: float,
    noise: Noise | None,
    incumbent: str | None,
    by_cand: dict[Any, pd.Series],
    sign: float,
) -> Lane:
    def lane(status: str, reason: str, mean: float, half: float, nxt: int | None) -> Lane:
        return Lane(cand, status, reason, tuple(int(s) for s in d.index), mean, half, nxt)

    bad = sorted(set(states) & {"PRUNED", "FAIL"})
    if bad:
        return lane(STOPPED, f"{'/'.join(bad).lower()} on a seed", math.nan, math.nan, None)
    ref = "uniform"
    diffs = d
    if incumbent is not None and incumbent != cand:
        inc = by_cand[incumbent]
        common = d.index.intersection(inc.index)
        diffs, ref = d[common] - inc[common], incumbent
    n = len(diffs)
    mean = float(diffs.mean()) if n else math.nan
    half = math.nan
    if n and noise is not None:
        # against the incumbent: d_c - d_inc = v_c - v_inc on a seed (uniform cancels), whose
        # seed-to-seed spread is that of one candidate against another: the same noise scale
        half = noise.quantile(confidence) * noise.sd / math.sqrt(n)
    if in_flight:
        return lane(RACING, f"seed {min(in_flight)} in flight (or its control)", mean, half, None)
    if n and math.isfinite(half) and abs(mean) > half and (incumbent != cand):
        side = "better" if sign * mean < 0 else "worse"
        return lane(
            SEPARATED,
            f"{side} than {ref} at {confidence:.0%} after {n} seed(s): "
            f"{mean:+.4g} ± {half:.2g}",
            mean, half, None,
        )  # fmt: skip
    if len(tried) >= max_seeds:
        if incumbent == cand:
            return lane(DONE, f"the incumbent: raced all {max_seeds} seeds", mean, half, None)
        why = f"not separated from {ref} at {confidence:.0%}"
        return lane(TIED, f"{why} after {n} of {max_seeds} seeds", mean, half, None)
    nxt = next(s for s in seeds if s not in tried)
    why = "no noise estimate yet" if not math.isfinite(half) else f"within noise of {ref}"
    if incumbent == cand:
        why = "the incumbent races every seed"
    return lane(RACING, f"{why}: seed {nxt} next", mean, half, nxt)
