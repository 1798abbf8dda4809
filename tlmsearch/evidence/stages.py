"""A trials table's two stages: the main one and the confirmation stage (``search.confirm``).

A leaf: the Evidence (which judges the main stage), the confirmation's evidence
(:mod:`tlmsearch.evidence.confirm`), the race, status and best.yaml all split a table here.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from tlmsearch.constants import CONFIRM_STAGE
from tlmsearch.widths.candidate import IDENTITY

STAGE = "stage"  # the trials table's column: "confirm" on a confirmation-stage trial


def is_confirm(trials: pd.DataFrame) -> pd.Series:
    """Which rows of ``trials`` ran in the confirmation stage (all False without the column)."""
    if STAGE not in trials:
        return pd.Series(False, index=trials.index)
    return trials[STAGE].astype(str) == CONFIRM_STAGE


def main_stage(trials: pd.DataFrame) -> pd.DataFrame:
    """``trials`` less the confirmation stage's rows: what the main stage's evidence judges."""
    at = is_confirm(trials)
    return trials if not at.any() else trials[~at]


def confirm_stage(trials: pd.DataFrame) -> pd.DataFrame:
    """The confirmation stage's rows of ``trials`` (empty when it has not run)."""
    return trials[is_confirm(trials)]


FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def stage_complete(
    staged: pd.DataFrame,
    seeds: Sequence[int],
    key: str = IDENTITY,
    chosen: Sequence[str] | None = None,
) -> bool:
    """Whether the confirmation stage has ended: it has rows, none of them still queued or
    running, and every candidate of it, and every ``chosen`` one (the stage's record,
    :func:`tlmsearch.search.confirm.chosen`: a candidate whose trials are all still
    queued has no row), on every fresh seed. Until then its evidence is partial (uniform's
    trials come first on each seed), and the main stage's best stands.

    >>> s = pd.DataFrame({IDENTITY: ["u", "a", "u", "a"], "seed": [5, 5, 6, 6],
    ...                   "state": ["COMPLETE", "COMPLETE", "COMPLETE", "RUNNING"]})
    >>> stage_complete(s, [5, 6]), stage_complete(s.iloc[:2], [5])
    (False, True)
    >>> stage_complete(s.iloc[:2], [5], chosen=["a", "b"])  # b's trials all queued
    False
    """
    if staged.empty or not staged["state"].astype(str).isin(FINISHED).all():
        return False
    want = {int(s) for s in seeds}
    have = staged.groupby(key)["seed"].agg(lambda x: {int(s) for s in x})
    if any(k not in have.index for k in chosen or ()):
        return False
    if "is_baseline" in staged:  # every fresh seed's uniform too (a delta's reference)
        base = staged.loc[staged["is_baseline"].astype(bool), "seed"]
        if not want <= {int(s) for s in base}:
            return False
    return all(want <= s for s in have)
