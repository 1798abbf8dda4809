"""A 2 x 2 study read in one sentence: which of two factors carries an effect, and whether they
add up, from the words of three of its contrasts (:mod:`tlmsearch.stats.words`).

The step-or-capacity study (``studies/step_vs_capacity.yaml``) crosses MLP widths (uniform or
the taper) with per-layer step sizes (flat or the taper's): ``steps`` = B - A (uniform widths
stepped as the taper), ``capacity`` = D - A (the taper's widths at uniform's steps) and their
``interaction`` = (C - B) - (D - A). ``stats.two_by_two`` names the three contrasts; status
and best.yaml then say which reading holds, each word already decided over the study's family
of contrasts (so the sentence holds the family's error rate):

- the first factor's contrast separated and the second's equivalent, with no interaction: the
  first factor reproduces the effect, the second adds less than the margin;
- the reverse: an effect of the second independent of the first;
- both separated and the interaction equivalent to 0: additive;
- the interaction separated: each factor's effect depends on the other;
- otherwise inconclusive, naming the contrasts still open and how to size the seeds for them.

>>> words = {"steps (B - A)": "equivalent", "capacity (D - A)": "better",
...          "interaction": "equivalent"}
>>> print(reading(words, "steps (B - A)", "capacity (D - A)", "interaction", margin=0.01))
capacity (D - A) has an effect of its own (better) while steps (B - A) is equivalent to 0 within +-0.01 and the interaction too: the effect is capacity (D - A)'s, independent of steps (B - A)
"""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tlmsearch.stats.words import BETTER, EQUIVALENT, WORSE

SEPARATED = (BETTER, WORSE)


def reading(
    words: Mapping[str, str], first: str, second: str, interaction: str, margin: float | None
) -> str:
    """The sentence for contrasts ``first`` and ``second`` (each factor's effect alone, against
    the baseline) and their ``interaction``, from ``words`` (contrast name -> word)."""
    a, b, i = (words.get(n, "inconclusive") for n in (first, second, interaction))
    if margin is None and i not in SEPARATED:
        return (
            "no equivalence margin (stats.equivalence or objectives[0].min_effect): "
            "without one no contrast can be called equivalent, so no reading but an "
            "interaction can be stated"
        )
    within = f"within +-{margin:g}"
    if i in SEPARATED:
        return (
            f"{interaction} is {i}: the effect of {second} depends on {first} (and the "
            f"reverse); report each factor's effect at each level of the other"
        )
    if i == EQUIVALENT and a in SEPARATED and b == EQUIVALENT:
        return (
            f"{first} has an effect of its own ({a}) while {second} is equivalent to 0 "
            f"{within} and the interaction too: the effect is {first}'s; {second} adds "
            f"less than {within.removeprefix('within ')}"
        )
    if i == EQUIVALENT and b in SEPARATED and a == EQUIVALENT:
        return (
            f"{second} has an effect of its own ({b}) while {first} is equivalent to 0 "
            f"{within} and the interaction too: the effect is {second}'s, independent "
            f"of {first}"
        )
    if i == EQUIVALENT and a in SEPARATED and b in SEPARATED:
        return (
            f"both have effects ({first}: {a}, {second}: {b}) and the interaction is "
            f"equivalent to 0 {within}: additive"
        )
    if a == b == i == EQUIVALENT:
        return f"neither factor nor their interaction moves the metric: all equivalent {within}"
    open_ = [
        n
        for n, w in ((first, a), (second, b), (interaction, i))
        if w not in (*SEPARATED, EQUIVALENT)
    ]
    return (
        f"inconclusive: {', '.join(open_)} neither separated nor equivalent {within}; "
        "`tlmsearch plan STUDY --from RUN` sizes the seeds that would decide them"
    )


def two_by_two(table: Any, spec: Any) -> str | None:
    """:func:`reading` of a contrasts table (``Evidence.contrasts``, its margin) for ``spec``
    (the study's ``stats.two_by_two``); None without either."""
    if table is None or spec is None or len(table) == 0:
        return None
    words = dict(zip(table["name"], table["word"], strict=True))
    margin = float(table["margin"].iloc[0])
    return reading(
        words, spec.first, spec.second, spec.interaction, margin if math.isfinite(margin) else None
    )
