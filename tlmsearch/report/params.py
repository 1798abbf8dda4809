"""Collect functions for the search parameters: parallel coordinates of every trial and
Optuna's PED-ANOVA parameter importances (arXiv 2304.10255). Pure functions of the trials table and
the study's space (no plotting); :mod:`.figures` draws them."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from tlmsearch.report.collect import finished, sense_of
from tlmsearch.widths.candidate import IDENTITY, Candidate

if TYPE_CHECKING:
    from tlmsearch.widths.space import SearchSpace


def _params_table(trials: pd.DataFrame) -> pd.DataFrame:
    rows = [Candidate.from_identity(p) for p in trials[IDENTITY]]
    return pd.DataFrame(rows, index=trials.index)


class Parallel(NamedTuple):
    metric: str
    # one column per searched parameter (categoricals as codes) + the metric as "value"
    table: pd.DataFrame
    categories: dict[str, list[str]]  # parameter -> labels of codes 0..n-1


def parallel_coords(
    trials: pd.DataFrame, metric: str = "val_bpb", params: Sequence[str] | None = None
) -> Parallel:
    """Search parameters of finished trials, categoricals encoded, coloured by the metric.

    ``params``: the study's dimensions (default: every key of the candidates that varies).
    """
    done = finished(trials, metric)
    done = done[~done["is_baseline"]]  # uniform lies outside the searched space
    table = _params_table(done)
    names = list(params) if params is not None else list(table.columns)
    names = [n for n in names if n in table and table[n].nunique(dropna=False) > 1]
    out = pd.DataFrame(index=done.index)
    cats: dict[str, list[str]] = {}
    for name in names:
        col = table[name]
        num = pd.to_numeric(col, errors="coerce")
        if num.notna().all():
            out[name] = num.astype(float)
        else:  # categorical or conditional: codes in order of first appearance
            text = col.map(lambda v: "-" if _missing(v) else str(v))
            labels = sorted(set(text))
            cats[name] = labels
            out[name] = text.map({lab: i for i, lab in enumerate(labels)}).astype(float)
    out["value"] = done["value"]
    return Parallel(metric, out.reset_index(drop=True), cats)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


class Importances(NamedTuple):
    metric: str
    values: pd.DataFrame  # param, importance (sums to 1), most important first
    note: str  # why there are none, or which evaluator


def _distributions(params: pd.DataFrame, space: SearchSpace | None) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    dims = space.dimensions if space is not None else {}
    out: dict[str, Any] = {}
    for name in params.columns:
        seen = [v for v in params[name] if not _missing(v)]
        dim = dims.get(name)
        kind = dim.type if dim is not None else None
        if kind == "fixed" or len({json.dumps(v) for v in seen}) < 2:
            continue  # a constant explains nothing
        if kind == "categorical" or any(isinstance(v, (str, bool)) for v in seen):
            # Values are passed as strings below, so the choices must be strings too
            # (blocks.yaml's boundaries are numeric categorical choices).
            given = dim.choices if dim is not None else None
            choices = list(dict.fromkeys(str(c) for c in given or sorted({str(v) for v in seen})))
            out[name] = CategoricalDistribution(choices)
        elif dim is not None and dim.type == "int":
            assert dim.low is not None and dim.high is not None  # Dimension checks an int's range
            out[name] = IntDistribution(int(dim.low), int(dim.high), step=int(dim.step or 1))
        else:
            lo, hi = float(min(seen)), float(max(seen))
            if dim is not None and dim.type == "float":
                assert dim.low is not None and dim.high is not None
                lo, hi = min(lo, dim.low), max(hi, dim.high)
            out[name] = FloatDistribution(lo, hi, log=bool(dim is not None and dim.log) and lo > 0)
    return out


def param_importances(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    space: SearchSpace | None = None,
) -> Importances:
    """Optuna's PED-ANOVA importances, from an in-memory study rebuilt from the trials table.

    So the report needs only the run dir (not the Optuna storage). Empty, with a note, when
    fewer than 3 finished trials or no parameter varies.
    """
    empty = pd.DataFrame({"param": pd.Series(dtype=object), "importance": pd.Series(dtype=float)})
    done = finished(trials, metric)
    done = done[~done["is_baseline"]]  # the baseline lies outside the searched space
    if len(done) < 3:
        return Importances(metric, empty, f"needs 3 or more finished trials (has {len(done)})")
    params = _params_table(done)
    dists = _distributions(params, space)
    if not dists:
        return Importances(metric, empty, "no search parameter varies across finished trials")
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction=sense or sense_of(metric))
        rebuilt = []
        for p, v in zip(params.to_dict("records"), done["value"], strict=True):
            kept = {}
            for name, dist in dists.items():
                val = p.get(name)
                if _missing(val):
                    continue
                val = (
                    str(val)
                    if isinstance(dist, optuna.distributions.CategoricalDistribution)
                    else val
                )
                if dist._contains(dist.to_internal_repr(val)):
                    kept[name] = val
            used = {n: dists[n] for n in kept}
            rebuilt.append(optuna.trial.create_trial(params=kept, distributions=used, value=v))
        study.add_trials(rebuilt)
        imp = optuna.importance.get_param_importances(study, evaluator=_evaluator())
    except Exception as err:  # importance needs variety: report why there is none
        return Importances(metric, empty, f"not computable: {type(err).__name__}: {err}")
    values = pd.DataFrame({"param": list(imp), "importance": [float(v) for v in imp.values()]})
    return Importances(metric, values, NOTE)


# PED-ANOVA (arXiv 2304.10255): how much each parameter's density among the top 10% of trials
# departs from its density over all of them. Optuna's default evaluator (fANOVA needs
# scikit-learn, which tlmsearch does not install); its cost stays small at thousands of trials,
# where a fANOVA forest's grows (Optuna's docs recommend it for large studies).
NOTE = "Optuna PED-ANOVA importance (arXiv 2304.10255): the top 10% of trials against all"


def _evaluator() -> Any:
    import warnings

    import optuna

    with warnings.catch_warnings():  # experimental in Optuna
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.importance.PedAnovaImportanceEvaluator()
