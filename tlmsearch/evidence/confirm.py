"""The confirmation stage's evidence: the main stage's best candidates again on fresh seeds.

A pruned study's survivors looked good on their early evals, so their means are conditional on
surviving the pruner (:func:`tlmsearch.evidence._conditional`: never "separated"); a sampler's
best is the one the data ranked first. With ``search.confirm`` the driver runs, after the main
stage, its ``top`` best ranked candidates (fully measured ones: survivors and unpruned, never
uniform nor a censored one) and uniform on ``confirm.seeds`` seeds the study never used, none
of them prunable (tlmsearch/search/confirm.py). Nothing selected those trials, so their paired
deltas are unbiased: one :class:`~tlmsearch.evidence.Evidence` on them alone (a family of the
``top`` comparisons with uniform, at ``stats.level``) says which are **confirmed** (better than
uniform, separated) and gives best.yaml's best. The main stage's evidence leaves these trials
out (:func:`main_stage`) and keeps its numbers, marked conditional.

Pure pandas (no ray, no optuna): a function of the trials table and the study.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from tlmsearch.config import StudyConfig
from tlmsearch.evidence import Evidence
from tlmsearch.evidence.stages import confirm_stage, stage_complete
from tlmsearch.widths.candidate import IDENTITY, Candidate

CONFIRMED, NOT_CONFIRMED, PENDING = "confirmed", "not confirmed", "pending"


def choose(ranking: pd.DataFrame, key: str, k: int) -> list[Any]:
    """The ``k`` best of a ranking (:attr:`Evidence.ranking`, best first) that the stage
    confirms: fully measured candidates (tier 0: every seed complete, so survivors of the pruner
    and unpruned ones), never uniform. Fewer when fewer are fully measured.

    >>> r = pd.DataFrame({"k": ['{"shape": "uniform"}', '{"shape": "a"}', '{"shape": "b"}',
    ...                         '{"shape": "c"}'], "tier": [0, 2, 0, 0]})
    >>> choose(r, "k", 2)
    ['{"shape": "b"}', '{"shape": "c"}']
    """
    out = []
    for cand, tier in zip(ranking[key], ranking["tier"], strict=True):
        if len(out) == k:
            break
        if int(tier) != 0 or _is_baseline(cand):
            continue
        out.append(cand)
    return out


def _label(key: Any) -> str:
    try:
        return Candidate.from_identity(str(key)).label
    except (TypeError, ValueError):
        return str(key)  # a table keyed by labels


def _is_baseline(key: Any) -> bool:
    try:
        return Candidate.from_identity(str(key)).is_baseline
    except (TypeError, ValueError):
        return str(key) == "uniform"  # a table keyed by labels


def confirm_evidences(
    trials: pd.DataFrame, config: StudyConfig, metrics: Sequence[str] | None = None
) -> dict[str, Any]:
    """metric -> the :class:`~tlmsearch.evidence.Evidence` of the confirmation stage's trials
    alone, keyed by identity: its family is the stage's candidates vs uniform (``top``
    comparisons, ``stats.family`` at ``stats.level``), ranked on its fresh seeds; ``{}``
    before any of its trials is in the table."""
    from tlmsearch.config import METRICS
    from tlmsearch.metrics import metric_column, objectives_of

    rows = confirm_stage(trials)
    if rows.empty or config.search.confirm is None:
        return {}
    senses = dict(objectives_of(config))
    out = {}
    for metric in metrics if metrics is not None else list(senses):
        col = metric_column(metric)
        if col not in rows:
            continue
        out[metric] = Evidence.build(
            rows,
            col,
            senses.get(metric) or METRICS.get(metric, "minimize"),
            key=IDENTITY,
            level=config.stats.level,
            family=config.stats.family,
            seeds=config.search.confirm_seeds,
        )
    return out


def confirmation(
    chosen: Sequence[Any],
    main: Any,
    confirmed: Any,
    seeds: Sequence[int],
    labels: Mapping[Any, str] | None = None,
    ended: bool = False,
) -> dict[str, Any]:
    """best.yaml's and ``tlmsearch status``'s ``confirmation``: per chosen candidate (keys, in
    the main stage's rank order) its main-stage delta (conditional on surviving the pruner
    where the pruner could have stopped it) and its delta on the fresh seeds with the stage's
    interval and word: confirmed (separated from uniform, better), not confirmed (not
    separated, or separated worse) or pending (its fresh seeds not all measured yet; once the
    stage has ``ended``, a candidate short of a seed that failed is not confirmed).
    ``main`` / ``confirmed``: the two stages' evidences of the first objective (``confirmed``
    None before the stage has data)."""
    labels = dict(labels or {})
    rows = []
    main_eff = main.effects.set_index(main.key) if main is not None else None
    stage_eff = confirmed.effects.set_index(confirmed.key) if confirmed is not None else None
    ev = main if main is not None else confirmed
    sign = -1.0 if ev is not None and ev.sense == "minimize" else 1.0  # better is this way
    for key in chosen:
        row: dict[str, Any] = {"candidate": labels.get(key) or _label(key)}
        if main_eff is not None and key in main_eff.index:
            m = main_eff.loc[key]
            row["main_delta"] = _num(m["mean_delta"])
            row["main_conditional"] = bool(m.get("conditional", False))
        word, e = PENDING, None
        if stage_eff is not None and key in stage_eff.index:
            e = stage_eff.loc[key]
            row["delta"] = _num(e["mean_delta"])
            lo, hi = e.get("sim_lo", e["lo"]), e.get("sim_hi", e["hi"])
            row["ci95"] = None if pd.isna(lo) else [float(lo), float(hi)]
            row["n_seeds"] = int(e["n"])
            sep = e["separated"]
            row["separated"] = None if pd.isna(sep) else bool(sep)
            if int(e["n"]) < len(seeds) and ended:
                word = NOT_CONFIRMED
                row["why"] = f"measured on {int(e['n'])} of {len(seeds)} fresh seeds"
            elif int(e["n"]) >= len(seeds):
                better = math.isfinite(row["delta"]) and sign * row["delta"] > 0
                word = CONFIRMED if row["separated"] and better else NOT_CONFIRMED
        row["word"] = word
        rows.append(row)
    return {
        "seeds": [int(s) for s in seeds],
        # the level of each candidate's ci95 (simultaneous over the stage's family)
        "level": float(confirmed.level) if confirmed is not None else None,
        "family": (
            f"{confirmed.family} over the {len(chosen)} comparison(s) with uniform on the fresh "
            f"seeds, at {confirmed.level:.0%}"
            if confirmed is not None
            else "pending: the stage has no finished trial yet"
        ),
        "candidates": rows,
    }


def study_confirmation(
    trials: pd.DataFrame,
    staged: pd.DataFrame,
    config: StudyConfig,
    main: Any,
    stage: Any,
    recorded: Sequence[str] | None = None,
) -> dict[str, Any]:
    """:func:`confirmation` of a run: the stage's candidates (the non-uniform keys of its rows
    ``staged``, in the main stage's rank order), named by the trials table's labels;
    ``trials``: the main stage's rows; ``main`` / ``stage``: the two stages' evidences of the
    first objective (None where a stage has none; ``main`` keyed by identity or by label, as
    the report's is); ``recorded``: the stage's chosen candidates as the run dir records
    them, when known (:func:`~tlmsearch.evidence.stages.stage_complete`)."""
    if main is not None and main.key != IDENTITY:  # the stage's candidates are identities
        to_id = dict(zip(trials[main.key], trials[IDENTITY], strict=True))
        main = dataclasses.replace(
            main,
            key=IDENTITY,
            effects=main.effects.assign(**{IDENTITY: main.effects[main.key].map(to_id)}),
            ranking=main.ranking.assign(**{IDENTITY: main.ranking[main.key].map(to_id)}),
        )
    order = list(main.ranking[main.key]) if main is not None else []
    keys = {k for k, b in zip(staged[IDENTITY], staged["is_baseline"], strict=True) if not b}
    keys |= set(recorded or ())  # a chosen candidate with every trial queued has no row yet
    chosen = sorted(keys, key=lambda k: (order.index(k) if k in order else len(order), k))
    labels = dict(zip(trials[IDENTITY], trials["candidate"], strict=True))
    labels.update(zip(staged[IDENTITY], staged["candidate"], strict=True))
    seeds = config.search.confirm_seeds
    # ended: every candidate on every fresh seed, finished (a pair never started is pending)
    ended = stage_complete(staged, seeds, chosen=recorded)
    out = confirmation(chosen, main, stage, seeds, labels, ended=ended)
    return {"metric": config.objectives[0].metric, **out}


def lines(doc: Mapping[str, Any]) -> list[str]:
    """``confirmation`` (:func:`confirmation`) in words, one line per candidate.

    >>> lines({"seeds": [3, 4], "family": "holm", "candidates": [{"candidate": "a",
    ...     "delta": -0.05, "ci95": [-0.08, -0.02], "word": "confirmed"}]})[1]
    '  a: confirmed: -0.0500 [-0.0800, -0.0200] on the fresh seeds'
    """
    out = [f"confirmation on fresh seeds {list(doc['seeds'])} ({doc['family']}):"]
    for r in doc["candidates"]:
        text = f"  {r['candidate']}: {r['word']}"
        if "delta" in r:
            ci = r.get("ci95")
            interval = f" [{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else ""
            text += f": {r['delta']:+.4f}{interval} on the fresh seeds"
        if "main_delta" in r:
            cond = ", conditional on surviving the pruner" if r.get("main_conditional") else ""
            text += f" (main stage {r['main_delta']:+.4f}{cond})"
        out.append(text)
    return out


def _num(x: Any) -> float:
    return math.nan if x is None or pd.isna(x) else float(x)
