"""A study's contrasts in words and as plain data: the lines ``tlmsearch status`` prints and
best.yaml's ``contrasts``, both read from :attr:`tlmsearch.evidence.Evidence.contrasts` (nothing
here re-derives a number).

>>> import pandas as pd
>>> from tlmsearch import stats
>>> t = pd.DataFrame({"candidate": ["uniform"] * 4 + ["cosine"] * 4,
...                   "is_baseline": [True] * 4 + [False] * 4, "seed": [0, 1, 2, 3] * 2,
...                   "state": "COMPLETE",
...                   "v": [2.0, 2.1, 1.9, 2.05, 1.9, 2.0, 1.81, 1.96]})
>>> table = stats.contrast_table(t, "v", models={"": stats.row_noise(t, "v")}, margin=0.02)
>>> for line in contrast_lines(table, "val_bpb", 0.95):
...     print(line)  # doctest: +NORMALIZE_WHITESPACE
contrasts (Holm over 1 contrast, family-wise error 5%; each asks "differs from 0?" and
"within +-0.02?" (TOST), counted once (Shaffer)):
cosine vs uniform: better: -0.0950 val_bpb, 95% interval [-0.1042, -0.0858] (3 df)
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from tlmsearch import stats
from tlmsearch.stats.questions import MAIN, SETTING
from tlmsearch.stats.words import BETTER, EQUIVALENT, MOST_SEEDS, WORSE


def _ci(lo: float, hi: float, level: float) -> str:
    return f"{_pct(level)} interval [{lo:+.4f}, {hi:+.4f}]"


def _pct(level: float) -> str:
    """95% or 99.17%: as many digits as the level needs (at most two decimals)."""
    text = f"{100 * level:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def contrast_line(row: Any, label: str) -> str:
    """One contrast in words: its name, its word, the estimate and the interval its word was
    decided at (``cannot be bounded yet`` where its noise has 1-2 df)."""
    est = f"{row['estimate']:+.4f} {label}" if math.isfinite(row["estimate"]) else "no estimate"
    df = int(row["df"])
    margin = row["margin"]
    if row["word"] in (BETTER, WORSE):
        return (
            f"{row['name']}: {row['word']}: {est}, "
            f"{_ci(row['lo'], row['hi'], row['ci_level'])} ({df} df)"
        )
    if row["word"] == EQUIVALENT:
        return (
            f"{row['name']}: equivalent within +-{margin:g}: {est}, "
            f"{_ci(row['eq_lo'], row['eq_hi'], row['eq_level'])} inside it ({df} df)"
        )
    why = row["why"] or ""
    seeds = int(row.get("seeds", 0) or 0)
    word = f"inconclusive ({seeds} seed{'s' * (seeds != 1)})" if seeds else "inconclusive"
    if why.startswith("cannot be bounded") or not df >= 1:
        return f"{row['name']}: {word}: {est}; {why}"
    said = (
        f"neither separated from 0 nor inside +-{margin:g}"
        if math.isfinite(margin)
        else "not separated from 0; no equivalence margin (stats.equivalence or "
        "objectives[0].min_effect)"
    )
    tail = f"; {why}" if why else ""
    decide = row.get("seeds_to_decide", math.nan)
    decide = math.nan if decide is None else float(decide)
    if math.isfinite(decide):
        tail += f"; about {int(decide)} seeds would decide it at this estimate and noise"
    elif decide == math.inf:
        tail += f"; more than {MOST_SEEDS:,} seeds would at this estimate and noise"
    return (
        f"{row['name']}: {word}: {est}, "
        f"{_ci(row['lo'], row['hi'], row['ci_level'])} ({df} df): {said}{tail}"
    )


def contrast_lines(
    table: pd.DataFrame | None,
    label: str,
    level: float,
    per_setting: bool = False,
    limit: int | None = None,
) -> list[str]:
    """The family's rule, then one line per contrast (the per-setting ones only with
    ``per_setting``: status leaves them to best.yaml); [] without contrasts. ``limit``: at most
    that many of the schedule-vs-uniform ones (a sampler's study has one per candidate:
    thousands), kept in this order: the decided, the largest |t|, then the largest |estimate|
    where no t exists; the families', the interactions' and the study's named ones are always
    shown."""
    if table is None or table.empty:
        return []
    lines = [f"contrasts ({stats.contrasts_rule(table, level)}):"]
    shown = table if per_setting else table[table["kind"] != SETTING]
    main = shown["kind"] == MAIN
    if limit is not None and main.sum() > limit:
        # which to keep (printed in the table's order): the decided, then the largest |t|,
        # then, where no t exists (one seed, or the noise unknown), the largest |estimate|
        rank = pd.DataFrame(
            {
                "undecided": ~shown["word"].isin((BETTER, WORSE, EQUIVALENT)),
                "t": -(shown["estimate"] / shown["se"]).abs(),
                "estimate": -shown["estimate"].abs(),
            }
        )[main]
        order = rank.sort_values(["undecided", "t", "estimate"], na_position="last").index
        shown = shown[~main | shown.index.isin(set(order[:limit]))]
    lines += [contrast_line(row, label) for _, row in shown.iterrows()]
    hidden = int((table["kind"] == SETTING).sum()) if not per_setting else 0
    if hidden:
        lines.append(
            f"({hidden} per-setting contrast{'s' * (hidden != 1)} of the same family in best.yaml)"
        )
    cut = len(table) - len(shown) - hidden
    if cut:
        lines.append(
            f"({cut} more schedule-vs-uniform contrast{'s' * (cut != 1)}, undecided and "
            "smaller, of the same family: best.yaml has every contrast)"
        )
    return lines


def _seeds(x: Any) -> int | str | None:
    x = float(x)
    if math.isfinite(x):
        return int(x)
    return f">{MOST_SEEDS}" if x == math.inf else None


def _num(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def contrast_records(table: pd.DataFrame | None, level: float) -> dict[str, Any] | None:
    """best.yaml's ``contrasts``: the rule, the margin, and per contrast its word, estimate,
    se, df and the intervals its word was decided at; None without contrasts."""
    if table is None or table.empty:
        return None
    rows = []
    for _, r in table.iterrows():
        rows.append(
            {
                "name": r["name"],
                "kind": r["kind"],
                "members": list(r["members"]),
                "settings": int(r["settings"]),
                "word": r["word"],
                "estimate": _num(r["estimate"]),
                "se": _num(r["se"]),
                "df": int(r["df"]),
                "ci": ([_num(r["lo"]), _num(r["hi"])] if _num(r["lo"]) is not None else None),
                "ci_level": _num(r["ci_level"]),
                "equivalence_ci": (
                    [_num(r["eq_lo"]), _num(r["eq_hi"])] if _num(r["eq_lo"]) is not None else None
                ),
                "equivalence_level": _num(r["eq_level"]),
                "p_adjusted": _num(r["p_adj"]),
                "p_equivalence_adjusted": _num(r["p_equiv_adj"]),
                "why": r["why"] or None,
                "seeds": int(r["seeds"]) if "seeds" in r else None,
                # more than MOST_SEEDS: the string ">1000"; nothing to say: None
                "seeds_to_decide": _seeds(r.get("seeds_to_decide", math.nan)),
            }
        )
    margin = _num(table["margin"].iloc[0])
    return {"rule": stats.contrasts_rule(table, level), "margin": margin, "contrasts": rows}
