"""What a study supports, in words: effects vs uniform in units of seed noise, each decided once
over a stated family, and which candidate is the best (multiple comparisons with the best).

Every number and decision comes from one :class:`tlmsearch.evidence.Evidence`; this module only
words it, and every sentence that decides says how (the family, or the race). Used by the
report, ``best.yaml``, the trials table and ``tlmsearch status``; pure pandas (no torch, ray or
plotting).

>>> import pandas as pd
>>> t = pd.DataFrame({
...     "candidate": ["uniform"] * 3 + ["cosine 1.5->0.5"] * 3,
...     "is_baseline": [True] * 3 + [False] * 3,
...     "seed": [0, 1, 2] * 2, "state": ["COMPLETE"] * 6,
...     "val_bpb": [2.000, 2.010, 1.990, 1.988, 1.999, 1.976],
... })
>>> c = conclusions(t, "val_bpb")
>>> print(c.supported[0])  # doctest: +NORMALIZE_WHITESPACE
cosine 1.5->0.5 beats uniform on 3/3 seeds: -0.0123 ± 0.0038 val_bpb (95% CI), 8.1 noise
units; adjusted p 0.0051 (Holm over 1 comparison with uniform)
>>> print(c.supported[1])  # doctest: +NORMALIZE_WHITESPACE
cosine 1.5->0.5 is the best: better than the other candidate, uniform, jointly at 95%
(multiple comparisons with the best, Hsu, over 2 candidates with uniform)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import pandas as pd

from tlmsearch import stats
from tlmsearch.config import StudyConfig
from tlmsearch.constants import FAMILY, LEVEL
from tlmsearch.evidence import RACE, Evidence
from tlmsearch.stats.row_variances import NO_DF


class Conclusions(NamedTuple):
    """Sentences: what the study supports, and what it does not (yet).

    ``top_group``: the verdict about the best (multiple comparisons with the best, uniform
    included): ``best`` (ranked first), ``selected`` (it is the best at ``level``),
    ``tied_with`` (the others that could be the best), ``separated_from`` (shown not the best),
    ``beaten_by`` (those the first-ranked is shown worse than, on their common seeds); None
    with fewer than two ranked candidates.
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
    level: float = LEVEL,
    family: str = FAMILY,
    config: StudyConfig | None = None,
    evidence: Evidence | None = None,
) -> Conclusions:
    """Every candidate's effect vs uniform, then the best, in words.

    ``value``: the trials column; ``label``: its name in the sentences (default ``value``);
    ``seeds``: the study's seeds; ``config``: the study (its race decides, where it races
    against uniform); ``evidence``: one already built (then the rest is ignored).
    Candidates come in rank order. A candidate separated from uniform is a conclusion, unless
    it looks better but was pruned or failed on some seed (a pruned seed looked worse).
    """
    label = label or value
    ev = evidence or Evidence.build(
        trials, value, sense, level=level, family=family, seeds=seeds, config=config
    )
    ranked = ev.ranking
    if ranked.empty:
        return Conclusions([], [])
    # each row as a dict: a Series a row (``.loc``) took ~1 s at 5,000 candidates
    eff = ev.effects.set_index(ev.key).to_dict("index")
    order = [c for c in ranked[ev.key] if c in eff]
    yes: list[str] = []
    no: list[str] = []
    unpaired = [c for c in order if eff[c]["n"] == 0]
    how = ev.decision_words()
    for cand in order:
        row = eff[cand]
        if row["n"] > 0:
            d = _Diff.of(row, censored_a=_censored(row))
            ok, text = _versus(
                ev.name(cand),
                "uniform",
                d,
                label,
                ev.sense,
                ev.level,
                how=how,
                unknown=ev.noise_why or NO_DF,
            )
            (yes if ok else no).append(text)
    if unpaired:
        if not ranked["is_baseline"].astype(bool).any():
            no.append("no uniform baseline in the study: no effect vs uniform is measured")
        else:
            no.append(
                f"{len(unpaired)} candidate(s) have no seed paired with a finished uniform "
                f"(pruned, failed or running): no effect measured "
                f"({_names([ev.name(c) for c in unpaired])})"
            )
    top_yes, top_no, group = _top(ev)
    return Conclusions(yes + top_yes, no + top_no, group)


class _Diff(NamedTuple):
    """A paired difference (a candidate vs uniform) as the sentences need it."""

    n: int
    n_better: int  # seeds on which a beat b
    mean: float  # of a - b
    half: float
    noise: str
    effect_noise: float
    p_adj: float
    decided_by: str  # race | family
    separated: Any  # True | False | None or <NA> (not judged)
    censored_a: str  # "pruned on seed 1" when a is censored, else ""
    over: str = ""  # what the interval holds over: "" (per comparison), ", simultaneous over 15"
    df: int = 0  # the noise's df (1-2: the interval bounds nothing; the sentence says so)
    conditional: bool = False  # a survivor of the pruner (Evidence's ``conditional``)

    @classmethod
    def of(cls, row: Any, censored_a: str = "") -> _Diff:
        """From an :attr:`Evidence.effects <tlmsearch.evidence.Evidence.effects>` row."""
        return cls(
            int(row["n"]),
            int(row["n_better"]),
            float(row["mean_delta"]),
            float(row["half_width"]),
            str(row["noise"]),
            float(row["effect_noise"]),
            float(row["p_adj"]),
            str(row.get("decided_by", "family")),
            row["separated"],
            censored_a,
            _over(row),
            int(row.get("noise_df", 0) or 0),
            bool(row.get("conditional", False)),
        )


def _over(row: Any) -> str:
    """What an effects row's interval holds over, in words (stats.ci_level): nothing to say per
    comparison; holm: simultaneous over the family; bh: false-coverage adjusted over it."""
    m, family = int(row.get("family_size", 0) or 0), str(row.get("family", ""))
    if m <= 1 or family not in ("holm", "bh"):
        return ""
    if family == "bh":
        return f", false-coverage adjusted over {m} comparisons"
    return f", simultaneous over {m} comparisons"


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
    """'-0.0123 ± 0.0038 val_bpb (95% CI), 8.1 noise units' (the race's interval said so; one
    over a family says so: '(95% CI, simultaneous over 15 comparisons)')."""
    k = decimals(d.half, d.mean)
    ci = "the race's interval" if d.decided_by == RACE else f"{level:.0%} CI{d.over}"
    text = f"{d.mean:+.{k}f} ± {d.half:.{k}f} {label} ({ci})"
    # t on 1 df is 12.7 sds at 95%: an interval that decides nothing bounds nothing either
    undecided = pd.isna(d.separated) or not bool(d.separated)
    if 1 <= d.df < 3 and d.half > 0 and d.decided_by != RACE and undecided:
        k = decimals(math.nan, d.mean)
        text = (
            f"{d.mean:+.{k}f} {label}, cannot be bounded yet (its noise has {d.df} df; "
            "tlmsearch plan says the seeds it needs)"
        )
    if math.isfinite(d.effect_noise):
        return f"{text}, {abs(d.effect_noise):.1f} noise units"
    return f"{text}, no seed-to-seed spread"


def _seeds(n: int) -> str:
    return f"{n} seed{'s' if n != 1 else ''}"


def _how(d: _Diff, how: str) -> str:
    """'; adjusted p 0.012 (Holm over 15 comparisons with uniform)', or the race's words."""
    if d.decided_by == RACE:
        prior = d.noise == stats.UNKNOWN
        return f"; {how}" + (" under racing.prior_sd (no measured noise yet)" if prior else "")
    return f"; adjusted p {d.p_adj:.2g} ({how})"


def _versus(
    a: str,
    b: str,
    d: _Diff,
    label: str,
    sense: str,
    level: float,
    *,
    how: str,
    unknown: str = NO_DF,
) -> tuple[bool, str]:
    """(supported, sentence) for a vs b: a beats / loses to b, or they cannot be told apart;
    ``unknown``: why the noise is unknown, where it is (:func:`tlmsearch.stats.unknown_why`).

    The numbers are always a - b. A win of a candidate pruned or failed on some seed is no
    conclusion: it won on the seeds it finished. A row the race decides says the race's words;
    one it has not decided (still racing, or stopped by a prune) is no conclusion yet.
    """
    raced = d.decided_by == RACE
    if raced and pd.isna(d.separated):
        nums = f"{d.mean:+.4g} {label} on {_seeds(d.n)}"
        return False, f"{a} vs {b}: {nums}: the race has not decided"
    if d.noise == stats.UNKNOWN and not (raced and bool(d.separated)):
        k = decimals(d.half, d.mean)
        return False, (
            f"{a} vs {b}: {d.mean:+.{k}f} {label} on {_seeds(d.n)}, noise unknown ({unknown}): "
            "not separated"
        )
    nums = _numbers(d, label, level)
    if d.conditional and not raced:
        return False, (
            f"{a} vs {b}: {nums} on {_seeds(d.n)}, conditional on surviving the pruner (it could "
            "have stopped it and did not: its mean is selected for looking good): not a "
            "conclusion until confirmed on seeds no pruner selected"
        )
    if pd.isna(d.separated) or not bool(d.separated):
        return False, f"{a} vs {b}: within noise on {_seeds(d.n)} ({nums}{_how(d, how)}): " + (
            "not separated (a tie of the race)" if raced else "not separated"
        )
    a_wins = (1.0 if sense == "minimize" else -1.0) * d.mean < 0
    won = d.n_better if a_wins else d.n - d.n_better
    seeds = f"{won}/{_seeds(d.n)}"
    verb = "beats" if a_wins else "loses to"
    if a_wins and d.censored_a:
        return False, (
            f"{a} {verb} {b} on {seeds} ({nums}), but it was {d.censored_a}: not a "
            "conclusion, the seeds it did not finish may be worse"
        )
    text = f"{a} {verb} {b} on {seeds}: {nums}{_how(d, how)}"
    if d.censored_a:
        text += f"; {a} was also {d.censored_a}"
    return True, text


def _top(ev: Evidence) -> tuple[list[str], list[str], dict[str, Any] | None]:
    """(supported, unsupported, top group): multiple comparisons with the best (Hsu's MCB) over
    every ranked candidate, uniform included.

    The first-ranked is called the best only when it is better than every other one at
    ``level`` jointly; otherwise the sentence names every candidate that could be the best.
    Uniform is one of them: when it ranks first the verdict says so. A first-ranked candidate
    pruned or failed on some seed is never called the best (its missing seeds looked worse).
    """
    best = ev.best.set_index("candidate")  # stats.mcb names its key column "candidate"
    keys = list(ev.best["candidate"])
    if len(keys) < 2:
        return [], [], None
    ranked = ev.ranking.set_index(ev.key)
    first = keys[0]
    level, k = ev.level, len(keys)
    gone = [bool(x) for x in ev.best["eliminated"]]  # by row, in keys' order (a .loc a key
    # cost 0.1 s at 5,000 candidates)
    contenders = [c for c, x in zip(keys, gone, strict=True) if not x]
    eliminated = [c for c, x in zip(keys, gone, strict=True) if x]
    beaten_by = [ev.name(best.loc[first, "by"])] if bool(best.loc[first, "eliminated"]) else []
    censored = bool(ranked.loc[first, "censored"])
    method = f"multiple comparisons with the best, Hsu, over {k} candidates with uniform"
    # the first-ranked is the best only when MCB selects it (best.yaml's and the report's best
    # is the first-ranked too: one answer); never a censored one: its missing seeds looked worse
    selected = bool(best.loc[first, "selected"]) and not censored
    name = ev.name(first)
    yes: list[str] = []
    no: list[str] = []
    if ev.noise is None:
        no.append(
            f"no best: {name} ranks first, but the noise is unknown ({method}; "
            f"{ev.noise_why or NO_DF})"
        )
    elif selected:
        others = (
            f"the other candidate, {next(ev.name(c) for c in keys if c != first)},"
            if k == 2
            else f"each of the other {k - 1} candidates, uniform included,"
        )
        yes.append(f"{name} is the best: better than {others} jointly at {level:.0%} ({method})")
    elif beaten_by:
        no.append(
            f"no best yet: {name} ranks first on its seeds but is worse than {beaten_by[0]} "
            f"on their common seeds at {level:.0%} ({method}); their other seeds decide"
        )
    else:
        why = f", but it was {_censored(ranked.loc[first])}" if censored else ""
        no.append(
            f"no single best at {level:.0%}: {name} ranks first{why}, but "
            f"{_names([ev.name(c) for c in contenders], and_=True)} could each be the best "
            f"({method})"
        )
    group = {
        "best": name,
        "selected": selected,
        "n_candidates": k,
        "tied_with": [ev.name(x) for x in contenders if x != first],
        "separated_from": [ev.name(x) for x in eliminated if x != first],
        "beaten_by": beaten_by,
        "level": level,
        "method": "mcb",
        "not_compared": 0,
    }
    return yes, no, group


def not_compared_clause(below: int) -> str:
    """What a comparison of the best leaves out ("" when it compared every candidate)."""
    if below <= 0:
        return ""
    return f"; {below} lower-ranked candidate(s) were not compared with it"


def _names(names: Sequence[Any], limit: int = 5, and_: bool = False) -> str:
    names = [str(n) for n in names]
    if len(names) > limit:
        return ", ".join(names[:limit]) + f" and {len(names) - limit} more"
    if and_ and len(names) >= 2:
        return ", ".join(names[:-1]) + f" and {names[-1]}"
    return ", ".join(names)
