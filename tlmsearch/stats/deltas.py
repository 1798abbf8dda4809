"""Seeds and paired deltas: what each candidate did on each seed, and its value minus the
uniform baseline's on the same seed.

Within a seed every candidate sees the same data order and initial weights (common random
numbers), so a candidate's effect is its *paired delta*: its value minus the uniform baseline's
on the same seed, with a Student t interval over seeds. With pruning, a candidate's seed ends in
one of four ways:

- complete: a COMPLETE trial with a finite value (several such trials: their mean);
- censored: PRUNED, or FAIL of its own (diverged, a non-finite objective, an exception), or
  COMPLETE without a value. A pruned seed is informative (the pruner stopped it because it
  looked bad), so it is never dropped: its candidate is *censored* and shown as "n of k seeds";
- missing: FAIL that the system lost (a worker or node, memory; tlmsearch/reasons.py): the
  seed says nothing about the candidate's numbers, as the race judges it too;
- pending: RUNNING or WAITING, or not run yet: every candidate is planned on every seed of the
  study (``seeds``; by default every seed any trial ran on), so a seed it has no trial on is
  still to come.

Pure pandas / numpy / scipy (no torch, ray or plotting). Input is a trials table
(docs/run_dir.md): columns ``seed``, ``state``, ``is_baseline``, a key naming the candidate
(``candidate`` by default) and a value column. A trial without a seed counts as seed -1
(unknown): it takes part in ranking but is never paired with the baseline.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch.reasons import is_lost

UNKNOWN_SEED = -1
PENDING_STATES = ("RUNNING", "WAITING")


class Cell(NamedTuple):
    """One candidate on one seed."""

    is_baseline: bool
    outcome: str  # complete | censored | pending | missing
    value: float  # mean of the complete trials' values; NaN otherwise
    states: str  # its trials' states, sorted and joined: "COMPLETE" or "FAIL,PRUNED"
    # the candidate's setting (``lr=0.003``; ``""`` without setting dimensions): it is paired
    # with the uniform of its own setting and seed (tlmsearch/widths/settings.py)
    setting: str = ""
    # the pruner could not stop this candidate (``unpruned``: search.unpruned_candidates)
    unpruned: bool = False


Seeds = Sequence[int] | Mapping[Any, Sequence[int]] | None


# (id of a trials table, value, key, seeds) -> (the table, its cells), while cells_once is
# active: every statistic of a study reads the same cells, and they are computed once
_MEMO: contextvars.ContextVar[dict[tuple, tuple[pd.DataFrame, dict]] | None] = (
    contextvars.ContextVar("tlmsearch_cells_memo", default=None)
)


@contextlib.contextmanager
def cells_once() -> Iterator[None]:
    """Within it, :func:`trial_cells` of one trials table (the same object, value, key and seeds)
    is computed once: for a caller that reads one unchanging table through many statistics
    (:meth:`tlmsearch.evidence.Evidence.build`). A table changed in place inside it would be
    read stale: the tables are values here, each statistic works on its own copy or subset."""
    if _MEMO.get() is not None:  # nested: the outer one holds the memo
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _seeds_key(seeds: Seeds) -> Any:
    if seeds is None:
        return None
    if isinstance(seeds, Mapping):
        return ("map", tuple((c, tuple(int(x) for x in v)) for c, v in seeds.items()))
    return tuple(int(x) for x in seeds)


def trial_cells(
    trials: pd.DataFrame, value: str, key: str, seeds: Seeds = None
) -> dict[tuple[Any, int], Cell]:
    """(candidate, seed) -> Cell, in sorted order (so row order never matters).

    With ``seeds`` (the study's seeds; None: every known seed in ``trials``; a mapping:
    each candidate's own planned seeds, e.g. the ones a race gave it), a candidate without a
    trial on one of them gets a pending cell there (states ``""``: not run yet).
    """
    return dict(once("cells", trials, (value, key, _seeds_key(seeds)), _cells_of, seeds))


def once(what: str, trials: pd.DataFrame, args: tuple, compute: Any, *more: Any) -> Any:
    """``compute(trials, *args[:2], *more)`` (``args``: hashable, naming the call with
    ``what``), computed once per trials table inside :func:`cells_once` (else every call).
    The caller copies what it hands on."""
    memo = _MEMO.get()
    if memo is None:
        return compute(trials, *args[:2], *more)
    mk = (what, id(trials), args)
    hit = memo.get(mk)
    if hit is None or hit[0] is not trials:
        # the memo holds the table, so its id is not reused while the memo lives
        hit = memo[mk] = (trials, compute(trials, *args[:2], *more))
    return hit[1]


# Each column as numpy, as the pandas conversions in the comments give it: directly for the
# dtypes a trials table has (the conversions cost more than the cells on a small table)


def _floats(col: pd.Series) -> np.ndarray:
    # pd.to_numeric(col, errors="coerce").astype("float64").to_numpy()
    if col.dtype == np.float64:
        return col.to_numpy()
    return pd.to_numeric(col, errors="coerce").astype("float64").to_numpy()


def _ints(col: pd.Series, fill: int) -> np.ndarray:
    # pd.to_numeric(col, errors="coerce").fillna(fill).astype("int64").to_numpy()
    if col.dtype == np.int64 or (isinstance(col.dtype, pd.Int64Dtype) and not col.hasnans):
        return col.to_numpy(dtype="int64")
    return pd.to_numeric(col, errors="coerce").fillna(fill).astype("int64").to_numpy()


def _texts(col: pd.Series) -> np.ndarray:
    # col.fillna("").astype(str).to_numpy()
    raw = col.to_numpy()
    if all(type(x) is str for x in raw):
        return raw
    return col.fillna("").astype(str).to_numpy()


def _bools(col: pd.Series) -> np.ndarray:
    # col.astype(bool).to_numpy()
    return col.to_numpy() if col.dtype == np.bool_ else col.astype(bool).to_numpy()


def _upper(col: pd.Series) -> np.ndarray:
    # col.astype(str).str.upper().to_numpy()
    raw = col.to_numpy()
    if all(type(x) is str and x.isascii() for x in raw):
        return np.array([x.upper() for x in raw], dtype=object)
    return col.astype(str).str.upper().to_numpy()


def _cells_of(
    trials: pd.DataFrame, value: str, key: str, seeds: Seeds = None
) -> dict[tuple[Any, int], Cell]:
    """:func:`trial_cells`, computed."""
    if trials.empty:
        return {}
    values = _floats(trials[value]) if value in trials else np.full(len(trials), np.nan)
    seed_of = _ints(trials["seed"], UNKNOWN_SEED)
    reasons = _texts(trials["reason"]) if "reason" in trials else np.full(len(trials), "")
    setting_of = (
        dict(zip(trials[key].to_numpy(), _texts(trials["setting"]), strict=True))
        if "setting" in trials
        else {}
    )
    # a candidate the pruner could stop on none of its trials (a run resumed under another
    # search.unpruned_candidates may have left it at risk on some)
    names = trials[key].to_numpy()
    unpruned: set[Any] = set()
    if "unpruned" in trials:
        col = trials["unpruned"]
        kept = (
            col.to_numpy() if col.dtype == np.bool_ else col.fillna(False).astype(bool).to_numpy()
        )
        unpruned = set(names[kept]) - set(names[~kept])
    acc: dict[tuple[Any, int], list] = {}
    for cand, seed, base, state, v, why in zip(
        names,
        seed_of,
        _bools(trials["is_baseline"]),
        _upper(trials["state"]),
        values,
        reasons,
        strict=True,
    ):
        cell = acc.setdefault((cand, int(seed)), [False, [], set()])
        cell[0] = cell[0] or bool(base)
        if state == "COMPLETE" and math.isfinite(v):
            cell[1].append(float(v))
        # a seed the system lost says nothing about the candidate (as the race judges it):
        # missing, not censored (tlmsearch/reasons.py)
        cell[2].add("FAIL:lost" if state == "FAIL" and is_lost(why) else state)
    if isinstance(seeds, Mapping):
        planned_of = {c: {int(x) for x in v} for c, v in seeds.items()}
        for cand in {c for c, _ in acc}:
            for seed in planned_of.get(cand, ()):
                acc.setdefault((cand, seed), [False, [], set()])
    else:
        planned = {int(x) for x in (seeds if seeds is not None else _seeds_all(acc))}
        for cand in {c for c, _ in acc}:
            for seed in planned:
                acc.setdefault((cand, seed), [False, [], set()])
    baseline = {c for (c, _), cell in acc.items() if cell[0]}
    for (cand, _), cell in acc.items():  # a not-run cell belongs to the baseline too
        cell[0] = cand in baseline
    out = {}
    for k in sorted(acc, key=lambda c: (str(c[0]), c[1])):
        base, done, states = acc[k]
        if done:
            outcome = "complete"
        elif not states or states & set(PENDING_STATES):
            outcome = "pending"
        elif states == {"FAIL:lost"}:
            outcome = "missing"  # the system lost it: it says nothing of the candidate
        else:
            outcome = "censored"
        # one trial (nearly always): np.mean's own sum, 0.0 + v, without its overhead
        mean = (done[0] + 0.0 if len(done) == 1 else float(np.mean(done))) if done else math.nan
        states = {"FAIL" if x == "FAIL:lost" else x for x in states}
        out[k] = Cell(
            base,
            outcome,
            mean,
            ",".join(sorted(states)),
            setting_of.get(k[0], ""),
            k[0] in unpruned,
        )
    return out


def as_dtypes(frame: pd.DataFrame, dtypes: Mapping[str, Any]) -> pd.DataFrame:
    """``frame.astype(dtypes)``, converting only the columns not of their dtype yet (the same
    frame; ``DataFrame.astype`` with a mapping rebuilds every column, ~10 ms a table).

    >>> as_dtypes(pd.DataFrame({"a": [1, 2], "b": [0.5, 1.0]}), {"a": "float64"}).dtypes.tolist()
    [dtype('float64'), dtype('float64')]
    """
    out = frame.copy(deep=False)
    for col, dtype in dtypes.items():
        if col not in out:
            raise KeyError(col)
        if out[col].dtype != pd.api.types.pandas_dtype(dtype):
            out[col] = out[col].astype(dtype)
    return out


def any_pruned(trials: pd.DataFrame) -> bool:
    """Whether a pruner stopped any candidate trial of ``trials`` (uniform is never pruned).

    A study's pruner judges every trial against the whole study (Optuna's median compares
    across settings too), so a table judged one setting at a time passes this, taken on the
    whole study, as ``pruned`` to :func:`pruner_selected` and the noise fits.
    """
    if trials.empty or "state" not in trials:
        return False
    cut = trials["state"].astype(str).str.upper().eq("PRUNED")
    return bool((cut & ~trials["is_baseline"].astype(bool)).any())


def pruned_in(cells: Mapping[tuple[Any, int], Cell]) -> bool:
    """Whether a pruner stopped any candidate cell of ``cells`` (:func:`any_pruned` of cells)."""
    return any("PRUNED" in c.states.split(",") for c in cells.values() if not c.is_baseline)


def pruner_selected(cells: Mapping[tuple[Any, int], Cell], pruned: bool | None = None) -> set[Any]:
    """The candidates whose complete cells a pruner selected, so that their scatter and their
    means flatter them: those censored on some seed (pruned, or failed of their own: they kept
    only the seeds they did well on) and, once the pruner stopped any candidate cell (in these
    cells, or ``pruned``: in the whole study, :func:`any_pruned`), every candidate it could
    have stopped. A pruner keeps a trial because it looks good: the complete
    cells of a median-pruned null study read its noise's variance at 0.77x the truth
    (benchmarks/stats.py). Never uniform, nor an ``unpruned`` candidate (the pruner could not
    stop it: ``search.unpruned_candidates``).

    >>> c = {("u", 0): Cell(True, "complete", 2.0, "COMPLETE"),
    ...      ("a", 0): Cell(False, "complete", 2.1, "COMPLETE", unpruned=True),
    ...      ("b", 0): Cell(False, "complete", 1.9, "COMPLETE"),
    ...      ("d", 0): Cell(False, "censored", math.nan, "PRUNED")}
    >>> sorted(pruner_selected(c))  # d was pruned, so b's survival was selected too
    ['b', 'd']
    """
    censored = {
        c for (c, _), cell in cells.items() if cell.outcome == "censored" and not cell.is_baseline
    }
    if not (pruned_in(cells) if pruned is None else pruned):
        return censored
    return censored | {
        c for (c, _), cell in cells.items() if not (cell.is_baseline or cell.unpruned)
    }


def _seeds_all(cells: Any) -> set[int]:
    """Every known seed among (candidate, seed) keys: the study's seeds as far as they ran."""
    return {int(s) for _, s in cells if s != UNKNOWN_SEED}


def seed_outcomes(
    trials: pd.DataFrame,
    value: str,
    *,
    key: str = "candidate",
    seeds: Seeds = None,
) -> pd.DataFrame:
    """One row per (candidate, seed): ``outcome`` complete | censored | pending, and the value.

    Columns: key, seed, is_baseline, outcome, value (mean of the complete trials; NaN
    otherwise), states (the seed's trial states, e.g. ``"PRUNED"``; ``""``: not run yet).
    Sorted by key then seed. ``seeds``: the study's seeds (see the module docstring).
    """
    cells = trial_cells(trials, value, key, seeds)
    rows = [
        (c, s, cell.is_baseline, cell.outcome, cell.value, cell.states)
        for (c, s), cell in cells.items()
    ]
    cols = [key, "seed", "is_baseline", "outcome", "value", "states"]
    return as_dtypes(pd.DataFrame(rows, columns=cols), {"value": "float64"})


def baseline_means(cells: dict[tuple[Any, int], Cell]) -> dict[tuple[str, int], float]:
    """(setting, seed) -> the mean of that seed's COMPLETE uniform trials at that setting."""
    acc: dict[tuple[str, int], list[float]] = {}
    for (_, seed), cell in cells.items():
        if cell.is_baseline and cell.outcome == "complete" and seed != UNKNOWN_SEED:
            acc.setdefault((cell.setting, seed), []).append(cell.value)
    return {block: float(np.mean(v)) for block, v in acc.items()}


def baseline_by_seed(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.Series:
    """seed -> mean value of that seed's COMPLETE baseline (uniform) trials; known seeds only.

    For one setting: a study with setting dimensions has a uniform per setting, so pass the
    trials of one setting (``trials[trials["setting"] == s]``).
    """
    ref = baseline_means(trial_cells(trials, value, key))
    if len({setting for setting, _ in ref}) > 1:
        raise ValueError("trials of several settings: select one setting's rows first")
    return pd.Series(
        list(ref.values()), index=pd.Index([s for _, s in ref], dtype="int64"), dtype="float64"
    )


def paired_deltas(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.DataFrame:
    """Per (candidate, seed) both completed: value minus the same seed's uniform baseline.

    Columns: key, seed, is_baseline, value, baseline, delta (the baseline's own rows are 0).

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 3 + ["PRUNED"],
    ...                   "v": [2.0, 2.2, 1.9, 1.5]})
    >>> d = paired_deltas(t, "v")
    >>> [(int(r.seed), round(r.delta, 3)) for r in d[~d["is_baseline"]].itertuples()]
    [(0, -0.1)]
    """
    cells = trial_cells(trials, value, key)
    rows = [
        (c, s, cell.is_baseline, cell.value, b, cell.value - b)
        for (c, s), b, cell in paired_cells(cells)
    ]
    cols = [key, "seed", "is_baseline", "value", "baseline", "delta"]
    return as_dtypes(
        pd.DataFrame(rows, columns=cols),
        {
            "seed": "int64",
            "is_baseline": bool,
            "value": "float64",
            "baseline": "float64",
            "delta": "float64",
        },
    )


def paired_cells(cells: dict[tuple[Any, int], Cell]) -> list[tuple[tuple[Any, int], float, Cell]]:
    """Every complete (candidate, seed) cell with its seed's uniform mean at its setting:
    ``((candidate, seed), uniform's value, cell)``, the pairs every paired delta is made of."""
    ref = baseline_means(cells)
    return [
        (k, ref[c.setting, k[1]], c)
        for k, c in cells.items()
        if c.outcome == "complete" and (c.setting, k[1]) in ref
    ]
