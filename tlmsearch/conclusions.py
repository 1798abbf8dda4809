"""What a study supports, in words: effects vs uniform in units of seed noise, and whether the
top candidates can be told apart.

The numbers come from :mod:`tlmsearch.stats` (:func:`~tlmsearch.stats.effects`,
:func:`~tlmsearch.stats.pairwise`, :func:`~tlmsearch.stats.rank`); the noise a one-seed candidate
is judged with is the study's pooled seed noise of paired deltas
(:func:`tlmsearch.racing.pooled_noise`, the estimate racing decides with), and every sentence
that uses it says so. Used by the report, ``best.yaml``, the trials table and
``tlmsearch status``; pure pandas (no torch, ray or plotting).

>>> import pandas as pd
>>> t = pd.DataFrame({
...     "candidate": ["uniform"] * 3 + ["cosine 1.5->0.5"] * 3,
...     "is_baseline": [True] * 3 + [False] * 3,
...     "seed": [0, 1, 2] * 2, "state": ["COMPLETE"] * 6,
...     "val_bpb": [2.000, 2.010, 1.990, 1.988, 1.999, 1.976],
... })
>>> c = conclusions(t, "val_bpb")
>>> c.supported[0]
'cosine 1.5->0.5 beats uniform on 3/3 seeds: -0.0123 ± 0.0038 val_bpb (95% CI), 8.1 noise units'
>>> c.unsupported
[]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import pandas as pd

from tlmsearch import stats
from tlmsearch.racing import Noise, pooled_noise


def study_noise(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> Noise | None:
    """The study's seed noise of paired deltas, pooled over candidates with 2+ paired seeds.

    None while no candidate has two (no prior: an assumed noise is no measurement).
    """
    # a replayed twin (same_as) repeats another trial's numbers: not another draw of the noise
    fresh = trials[trials["same_as"].isna()] if "same_as" in trials else trials
    return pooled_noise(stats.paired_deltas(fresh, value, key=key), key, None)


def study_effects(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = 0.95,
) -> pd.DataFrame:
    """:func:`tlmsearch.stats.effects` with :func:`study_noise` for one-seed candidates."""
    noise = study_noise(trials, value, key=key)
    return stats.effects(trials, value, sense, key=key, level=level, noise=noise)


class Conclusions(NamedTuple):
    """Sentences: what the study supports, and what it does not (yet).

    ``top_group``: the rank-1 candidate and, among the next ranked ones, those it cannot be
    told apart from at ``level`` (``tied_with``: with them it is a tie of the top group, not a
    winner) and those it is separated from; None with fewer than two ranked candidates.
    """

    supported: list[str]
    unsupported: list[str]
    top_group: dict[str, Any] | None = None


def conclusions(
    trials: pd.DataFrame,
    value: str = "val_bpb",
    sense: str = "minimize",
    *,
    label: str | None = None,
    seeds: Sequence[int] | None = None,
    level: float = 0.95,
    top: int = 5,
) -> Conclusions:
    """Every candidate's effect vs uniform, then the best against the next ``top - 1``, in words.

    ``value``: the trials column; ``label``: its name in the sentences (default ``value``);
    ``seeds``: the study's seeds (for the ranking, see :func:`tlmsearch.stats.rank`).
    Candidates come in rank order. A candidate separated from uniform is a conclusion, unless
    it looks better but was pruned or failed on some seed (a pruned seed looked worse); one
    within noise, or with no noise estimate, is not.
    """
    label = label or value
    ranked = stats.rank(trials, value, sense, seeds=seeds, level=level)
    if ranked.empty:
        return Conclusions([], [])
    noise = study_noise(trials, value)
    eff = stats.effects(trials, value, sense, level=level, noise=noise).set_index("candidate")
    order = [c for c in ranked["candidate"] if c in eff.index]
    yes: list[str] = []
    no: list[str] = []
    unpaired = [c for c in order if eff.loc[c, "n"] == 0]
    for cand in order:
        row = eff.loc[cand]
        if row["n"] > 0:
            d = _Diff.of(row, censored_a=_censored(row))
            ok, text = _versus(str(cand), "uniform", d, label, sense, level, noise=noise)
            (yes if ok else no).append(text)
    if unpaired:
        if not ranked["is_baseline"].astype(bool).any():
            no.append("no uniform baseline in the study: no effect vs uniform is measured")
        else:
            no.append(
                f"{len(unpaired)} candidate(s) have no seed paired with a finished uniform "
                f"(pruned, failed or running): no effect measured ({_names(unpaired)})"
            )
    top_yes, top_no, group = _top(ranked, trials, value, sense, label, level, top, noise)
    yes += top_yes
    no += top_no
    return Conclusions(yes, no, group)


class _Diff(NamedTuple):
    """A paired difference (a candidate vs uniform, or a vs b) as the sentences need it."""

    n: int
    n_better: int  # seeds on which a beat b
    mean: float  # of a - b
    half: float
    noise: str
    noise_sd: float
    noise_df: int
    effect_noise: float
    separated: Any  # True | False | <NA>
    censored_a: str  # "pruned on seed 1" when a is censored, else ""
    censored_b: str
    pooled_half: float  # the interval's half-width with the pooled noise (NaN without it)
    pooled_separated: Any

    @classmethod
    def of(cls, row: Any, censored_a: str = "", censored_b: str = "") -> _Diff:
        """From a :func:`stats.effects` row or a :func:`stats.pairwise` row."""
        mean = row["mean_delta"] if "mean_delta" in row else row["mean"]
        return cls(
            int(row["n"]), int(row["n_better"]), float(mean), float(row["half_width"]),
            str(row["noise"]), float(row["noise_sd"]), int(row["noise_df"]),
            float(row["effect_noise"]), row["separated"], censored_a, censored_b,
            float(row["pooled_half_width"]), row["pooled_separated"],
        )  # fmt: skip


def _censored(row: Any) -> str:
    if row is None or "censored" not in row or not bool(row["censored"]):
        return ""
    states = (row["censored_states"] or "censored").lower().replace(",", "/")
    seeds = ", ".join(str(s) for s in row["censored_seeds"])
    return f"{states} on seed {seeds}"


def decimals(half: float, mean: float) -> int:
    """Decimals that show two significant digits of a half-width (of the mean without one).

    >>> decimals(0.0043, -0.012), decimals(float("nan"), 0.3)
    (4, 2)
    """
    ref = half if math.isfinite(half) and half > 0 else abs(mean)
    if not math.isfinite(ref) or ref == 0:
        return 4
    return min(8, max(1, 1 - math.floor(math.log10(ref))))


def _numbers(d: _Diff, label: str, level: float) -> str:
    """'-0.0123 ± 0.0038 val_bpb (95% CI), 8.1 noise units' (the noise's source said)."""
    k = decimals(d.half, d.mean)
    ci = f"{level:.0%} CI"
    if d.noise == stats.POOLED:
        ci += f" from the pooled seed noise, sd {d.noise_sd:.2g} over {d.noise_df} df"
    text = f"{d.mean:+.{k}f} ± {d.half:.{k}f} {label} ({ci})"
    if math.isfinite(d.effect_noise):
        return f"{text}, {abs(d.effect_noise):.1f} noise units"
    return f"{text}, no seed-to-seed spread"


def _seeds(n: int, common: bool) -> str:
    return f"{n} {'common ' if common else ''}seed{'s' if n != 1 else ''}"


def _pooled_note(d: _Diff, noise: Noise | None) -> str:
    """Where a verdict on its own seeds and one with the pooled noise differ, say so."""
    if d.noise != stats.OWN or noise is None or pd.isna(d.pooled_separated):
        return ""
    if bool(d.pooled_separated) == bool(d.separated):
        return ""
    k = decimals(d.pooled_half, d.mean)
    verdict = "separated" if d.pooled_separated else "not separated"
    return (
        f"; with the pooled seed noise (sd {noise.sd:.2g} over {noise.df} df, at 95% per look; "
        f"racing tests each look stricter) it would be ± {d.pooled_half:.{k}f}: {verdict}"
    )


def _versus(
    a: str,
    b: str,
    d: _Diff,
    label: str,
    sense: str,
    level: float,
    common: bool = False,
    noise: Noise | None = None,
) -> tuple[bool, str]:
    """(supported, sentence) for a vs b: a beats / loses to b, or they cannot be told apart.

    The numbers are always a - b. A win of a candidate pruned or failed on some seed is no
    conclusion: it won on the seeds it finished.
    """
    nums = _numbers(d, label, level)
    if d.noise == stats.UNKNOWN:
        k = decimals(d.half, d.mean)
        return False, (
            f"{a} vs {b}: {d.mean:+.{k}f} {label} on {_seeds(d.n, common)}, noise unknown (no "
            "candidate has two paired seeds yet): not separated"
        )
    note = _pooled_note(d, noise)
    if not bool(d.separated):
        text = f"{a} vs {b}: within noise on {_seeds(d.n, common)} ({nums}): not separated"
        own = f" on {'their' if common else 'its'} own seeds{note}" if note else ""
        return False, text + own
    a_wins = (1.0 if sense == "minimize" else -1.0) * d.mean < 0
    won = d.n_better if a_wins else d.n - d.n_better
    seeds = f"{won}/{_seeds(d.n, common)}"
    verb = "beats" if a_wins else "loses to"
    winner, censored = ("it", d.censored_a) if a_wins else (b, d.censored_b)
    if censored:
        return False, (
            f"{a} {verb} {b} on {seeds} ({nums}), but {winner} was {censored}: not a "
            "conclusion, the seeds it did not finish may be worse"
        )
    text = f"{a} {verb} {b} on {seeds}: {nums}"
    loser_censored = d.censored_b if a_wins else d.censored_a
    if loser_censored:
        text += f"; {b if a_wins else a} was also {loser_censored}"
    return True, text + note


def _top(
    ranked: pd.DataFrame,
    trials: pd.DataFrame,
    value: str,
    sense: str,
    label: str,
    level: float,
    top: int,
    noise: Noise | None,
) -> tuple[list[str], list[str], dict[str, Any] | None]:
    """(supported, unsupported, top group): the best (rank 1) against the next ``top - 1``.

    A lower-ranked candidate (on fewer seeds) separated as *better* on the common seeds is
    ``beaten_by``: then rank 1 is no best yet, whatever the others say.
    """
    cands = ranked[~ranked["is_baseline"].astype(bool) & (ranked["tier"] < 3)]
    names = list(cands["candidate"].head(top))
    if len(names) < 2:
        return [], [], None
    best, others = names[0], names[1:]
    pairs = stats.pairwise(trials, value, names, sense, level=level, noise=noise)
    pairs = pairs[pairs["a"] == best].set_index("b")
    info = cands.set_index("candidate")
    yes, no, tied, beaten_by = [], [], [], []
    sign = 1.0 if sense == "minimize" else -1.0
    for other in others:
        p = pairs.loc[other]
        if p["n"] == 0:
            no.append(f"{best} vs {other}: no common seed: not compared")
            tied.append(other)
            continue
        d = _Diff.of(p, _censored(info.loc[best]), _censored(info.loc[other]))
        ok, text = _versus(best, other, d, label, sense, level, common=True, noise=noise)
        (yes if ok else no).append(text)
        if not pd.isna(d.separated) and bool(d.separated) and sign * d.mean > 0:
            beaten_by.append(other)  # ranked below it (fewer seeds), better where both ran
        elif not ok:
            tied.append(other)
    below = len(cands) - len(names)
    unseen = not_compared_clause(below)
    if beaten_by:
        no.append(
            f"{best} ranks first but loses to {_names(beaten_by)} on their common seeds "
            f"at {level:.0%}: no best yet, their other seeds decide"
        )
    elif tied:
        no.append(
            f"{best} ranks first but cannot be told apart from {_names(tied)} at {level:.0%}: "
            f"a tie of the top group{unseen}"
        )
    else:
        yes.append(
            f"{best} ranks first and is separated at {level:.0%} from each of the next "
            f"{len(others)} ranked candidate(s){unseen}"
        )
    group = {
        "best": str(best),
        "tied_with": [str(x) for x in tied],
        "separated_from": [str(x) for x in others if x not in tied and x not in beaten_by],
        "beaten_by": [str(x) for x in beaten_by],
        "level": level,
        # ranked below the compared ones, each pair on its own noise: a noisy one may tie too
        "not_compared": below,
    }
    return yes, no, group


def not_compared_clause(below: int) -> str:
    """What the top group's comparisons leave out: the best is compared with the next few
    ranked only, and a lower-ranked candidate on noisier seeds may not be separated from it."""
    if below <= 0:
        return ""
    return f"; {below} lower-ranked candidate(s) were not compared with it"


def _names(names: Sequence[Any], limit: int = 5) -> str:
    shown = ", ".join(str(n) for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
