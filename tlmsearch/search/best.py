"""best.yaml: the best candidate (or the Pareto front), its widths at proxy and target scale,
its evidence against uniform, the verdict and the conclusions, from a run's trials table.

Every number comes from the study's :class:`tlmsearch.evidence.Evidence`; nothing here
re-derives a statistic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from tlmsearch.config import StudyConfig
from tlmsearch.config.summary import effective_lr_of, learning_rate
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import metric_column as _metric_col
from tlmsearch.widths.candidate import IDENTITY, Candidate
from tlmsearch.widths.heads import heads_schedule, is_heads_key
from tlmsearch.widths.space import settings_of


def evidences(trials: Any, cfg: StudyConfig, curves: Any = None) -> dict[str, Any]:
    """metric -> the study's :class:`tlmsearch.evidence.Evidence` for it, keyed by identity
    (one candidate, one key): its ranking (on the seeds the race planned) and its effects
    (:func:`tlmsearch.evidence.study_evidences`; ``curves``: the learning curves, for the first
    objective's checkpoint noise). Built once per report and passed to every reader here."""
    from tlmsearch.evidence import study_evidences

    return study_evidences(trials, cfg, curves=curves)


def first_evidence(cfg: StudyConfig, evs: Mapping[str, Any]) -> Any:
    """The first objective's of ``evs`` (:func:`evidences`: keyed by identity, named by the
    table's labels), for the conclusions, the verdict, tuned and the snr; None for an empty
    table."""
    return evs.get(cfg.objectives[0].metric)


def best_candidates(
    trials: Any, cfg: StudyConfig, evs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The best candidate (or, with several objectives, the Pareto front), never on missing seeds.

    Ranked by :func:`tlmsearch.stats.rank`: fully measured candidates (every seed of
    ``search.seeds`` complete) first, compared on the same seeds; a candidate pruned or failed
    on some seed is censored (one with a seed running or not run yet, pending) and wins only
    where no fully measured candidate exists, flagged. Each entry: candidate, params, n_seeds
    (completed), n_seeds_planned, n_of_k, censored, flag, ranked_seeds, values {metric: mean
    over ranked_seeds}, per_seed, delta_vs_uniform {metric: mean paired delta}, delta_ci95
    {metric: [lo, hi], simultaneous over the family whatever ``stats.family`` decides with, or
    None when the noise is unknown or has 1-2 df: then ``delta_note`` says so, and says which
    decides where the test and the interval disagree}, delta_df, delta_n_seeds, and from
    the study's :class:`tlmsearch.evidence.Evidence`: noise {metric: model (the block-design
    fit) | unknown}, delta_sd {metric: one paired delta's sd}, effect_noise {metric: delta /
    sd}, separated_from_uniform {metric: the one decision, over the study's family or by its
    race}, decided_by {metric: family | race}. ``evs``: :func:`evidences`, when the caller
    has them.
    """
    if trials.empty:
        return []
    evs = evs if evs is not None else evidences(trials, cfg)
    ranks = {m: ev.ranking.set_index(IDENTITY, drop=False) for m, ev in evs.items()}
    first = ranks[cfg.objectives[0].metric]
    # a candidate counts at its worst tier over the objectives (unmeasured in one: unranked)
    tier = first["tier"].copy()
    for r in ranks.values():
        tier = np.maximum(tier, r["tier"].reindex(tier.index).fillna(3).astype(int))
    tier = tier[tier < 3]
    if tier.empty:
        return []
    lowest, of = tier.min(), tier.to_dict()
    pool = [key for key in first.index if key in of and of[key] == lowest]
    effects = {m: ev.effects.set_index(IDENTITY) for m, ev in evs.items()}
    if len(cfg.objectives) == 1:
        return [_entry(pool[0], ranks, effects, trials)]  # `first` is sorted best first
    entries = [_entry(key, ranks, effects, trials) for key in pool]
    objs = [(o.metric, 1.0 if o.sense == "minimize" else -1.0) for o in cfg.objectives]
    return pareto_front(entries, objs)


def _entry(
    key: str, ranks: Mapping[str, Any], effects: Mapping[str, Any], trials: Any
) -> dict[str, Any]:
    first = next(iter(ranks.values())).loc[key]
    label = trials.loc[trials[IDENTITY] == key, "candidate"]
    entry: dict[str, Any] = {
        "candidate": str(label.iloc[0]) if len(label) else "",
        "params": Candidate.from_identity(key).as_dict(),
        "n_seeds": int(first["n"]),
        "n_seeds_planned": int(first["k"]),
        "n_of_k": first["n_of_k"],
        "censored": any(bool(r.loc[key, "censored"]) for r in ranks.values()),
        "flag": first["flag"],
        "ranked_seeds": [int(x) for x in first["ranked_seeds"]],
        "values": {},
        "per_seed": {},
        "delta_vs_uniform": {},
        "delta_ci95": {},
        "delta_n_seeds": {},
        "noise": {},
        "delta_sd": {},
        "separated_from_uniform": {},
        "decided_by": {},
        "effect_noise": {},
    }
    from tlmsearch import stats

    for metric, r in ranks.items():
        row = r.loc[key]
        entry["values"][metric] = float(row["score"])
        cells = stats.seed_outcomes(trials[trials[IDENTITY] == key], _metric_col(metric))
        done = cells[cells["outcome"] == "complete"]
        entry["per_seed"][metric] = {
            int(s): float(v) for s, v in zip(done["seed"], done["value"], strict=True)
        }
        if row["n_paired"] > 0 and key in effects[metric].index:
            e = effects[metric].loc[key]  # its own seeds' noise, or the pooled one with 1 seed
            entry["delta_vs_uniform"][metric] = float(e["mean_delta"])
            adj = float(e.get("shrunk", math.nan))
            if math.isfinite(adj):  # the ranked-first mean is biased by its selection
                entry.setdefault("delta_selection_adjusted", {})[metric] = adj
            entry["delta_n_seeds"][metric] = int(e["n"])
            ci, note = _best_interval(e)
            entry["delta_ci95"][metric] = ci
            if note:
                entry.setdefault("delta_note", {})[metric] = note
            entry["noise"][metric] = str(e["noise"])
            entry.setdefault("delta_df", {})[metric] = int(e["noise_df"])
            sep = e["separated"]
            entry["separated_from_uniform"][metric] = None if pd.isna(sep) else bool(sep)
            if bool(e.get("conditional", False)):  # a survivor of the pruner: never separated
                entry.setdefault("conditional_on_surviving_the_pruner", {})[metric] = True
            entry["decided_by"][metric] = str(e["decided_by"])
            entry["delta_sd"][metric] = None if math.isnan(e["noise_sd"]) else float(e["noise_sd"])
            en = float(e["effect_noise"])
            entry["effect_noise"][metric] = None if math.isnan(en) else en
    return entry


# below this many df of noise an interval bounds nothing a reader can use (t at 95% is 12.7 on
# 1 df, 4.3 on 2, and a family widens it further)
MIN_DF = 3


def _best_interval(e: Any) -> tuple[list[float] | None, str]:
    """(the best's 95% interval vs uniform, a note) from its effects row.

    The best is the one the data rank first, so its interval is the family's simultaneous one
    (``sim_lo``/``sim_hi``, the joint t over every comparison with uniform, whatever
    ``stats.family`` decides with; the race's own where the race decided): only that holds for
    it at 95%. On 1-2 df of noise, where it is not separated, there is no interval, only a note
    that it cannot be bounded yet. Where the decision and the interval disagree (Holm's
    step-down separates at a later step with a smaller critical value than the single-step
    interval's), the note says which decides."""
    df = int(e["noise_df"])
    exact = float(e.get("noise_sd", math.nan)) == 0.0  # measured without noise: its width is 0
    sep = e["separated"]
    if 1 <= df < MIN_DF and not exact and (pd.isna(sep) or not bool(sep)):
        return None, (
            f"cannot be bounded yet: its noise has {df} df; more seeds bound it "
            "(tlmsearch plan says how many)"
        )
    race = str(e.get("decided_by", "")) == "race"
    lo, hi = (e["lo"], e["hi"]) if race or "sim_lo" not in e else (e["sim_lo"], e["sim_hi"])
    if pd.isna(lo) or math.isnan(float(lo)):
        return None, ""
    ci = [float(lo), float(hi)]
    excludes = ci[0] > 0 or ci[1] < 0
    note = ""
    if not pd.isna(sep) and bool(sep) and not excludes:
        note = (
            "separated by the family's step-down test, which decides; the interval is the "
            "single-step simultaneous bound and still touches 0"
        )
    elif not pd.isna(sep) and not bool(sep) and excludes:
        note = (
            "not separated: the family's test decides; the interval excludes 0 only as "
            "the simultaneous bound, not at the test's level"
        )
    return ci, note


def censored_better(
    trials: Any, cfg: StudyConfig, evs: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Censored (or still running) candidates better than the best on the seeds both completed.

    They are not ranked above it (their missing seeds were pruned or failed, i.e. looked bad,
    or are still running), but a reader should see them: candidate, n_of_k, flag,
    delta_vs_best {first objective: mean paired difference}, n_seeds_shared. ``evs``:
    :func:`evidences`, when the caller has them.
    """
    if trials.empty:
        return []
    metric = cfg.objectives[0].metric
    r = (evs if evs is not None else evidences(trials, cfg))[metric].ranking
    out = []
    for row in r[r["better_than_best"]].itertuples():
        label = trials.loc[trials[IDENTITY] == getattr(row, IDENTITY), "candidate"]
        out.append(
            {
                "candidate": str(label.iloc[0]) if len(label) else "",
                "n_of_k": row.n_of_k,
                "flag": row.flag,
                "delta_vs_best": {metric: float(row.delta_best)},
                "n_seeds_shared": int(row.n_best),
            }
        )
    return out


def pareto_front(
    groups: list[dict[str, Any]], objs: list[tuple[str, float]]
) -> list[dict[str, Any]]:
    """Entries no other entry dominates (sign 1 minimises, -1 maximises)."""

    def vec(g: Mapping[str, Any]) -> list[float]:
        return [s * g["values"][m] for m, s in objs]

    front = []
    for g in groups:
        a = vec(g)
        dominated = any(
            all(x <= y for x, y in zip(vec(h), a, strict=True))
            and any(x < y for x, y in zip(vec(h), a, strict=True))
            for h in groups
            if h is not g
        )
        if not dominated:
            front.append(g)
    return front


def best_document(
    trials: Any,
    cfg: StudyConfig,
    curves: Any = None,
    evs: Mapping[str, Any] | None = None,
    chosen: list[str] | None = None,
) -> dict[str, Any]:
    """best.yaml: the best candidate's params, proxy widths, and its widths at target scale
    (with its attention heads per layer, and key/value heads with grouped-query attention, when
    the study schedules, fixes or groups heads).

    Each entry also says what trained (``realised``: first and last width over the mean width,
    and their difference), how many seeds it completed of those planned, and its mean
    paired delta vs uniform with a 95% interval; ``censored_better`` lists candidates that look
    better on fewer seeds (see :func:`censored_better`). ``signal_to_noise``: the study's
    :attr:`tlmsearch.evidence.Evidence.snr` (``curves``: the learning curves, for its
    checkpoint noise). ``evs``: :func:`evidences` (built with the curves), when the caller has
    them: every number here is theirs. ``chosen``: :func:`tlmsearch.search.confirm.chosen`.
    """
    from tlmsearch.evidence.confirm import confirm_evidences
    from tlmsearch.evidence.stages import confirm_stage, main_stage, stage_complete

    staged = confirm_stage(trials)  # search.confirm's trials: judged apart, below
    trials = main_stage(trials)
    evs = evs if evs is not None else evidences(trials, cfg, curves)
    best = best_candidates(trials, cfg, evs)
    stage_evs = confirm_evidences(staged, cfg)
    # the stage decides the best and the verdict once it has ended: a partial stage's first
    # trials are uniform's, and its evidence would name a best on part of its seeds
    ended = bool(stage_evs) and stage_complete(staged, cfg.search.confirm_seeds, chosen=chosen)
    confirmed = best_candidates(staged, cfg, stage_evs) if ended else []
    doc: dict[str, Any] = {
        "study": cfg.name,
        "objectives": [{"metric": o.metric, "direction": o.sense} for o in cfg.objectives],
        "best": [],
    }
    if baseline := _uniform_baseline(trials, cfg):
        doc["uniform_baseline"] = baseline
    if confirmed:  # the best and its separated flag: from the seeds no selection touched
        doc["main_stage_best"] = best  # conditional on surviving the pruner / the selection
        seeds = cfg.search.confirm_seeds
        best = [{**e, "confirmed_on_seeds": seeds} for e in confirmed]
    for entry in best:
        params = Candidate.of(entry["params"])
        item = dict(entry)
        item["proxy"] = _model_widths(cfg, cfg.model, params)
        start, end = item["proxy"]["realised"]
        item["realised"] = {"start": start, "end": end, "taper": round(start - end, 4)}
        if settings_of(params):  # the train section it trained with (train.lr, ...)
            trained = cfg.for_candidate(params)
            item["train"] = trained.train.model_dump(mode="json", exclude_none=True)
        # what the parametrization does to its layers against uniform (the LR confound)
        item["effective_lr"] = effective_lr_of(cfg, params).as_dict()
        target = cfg.target_for(params)  # with its model settings (model.rope_theta, ...)
        if target is not None:
            item["target"] = _model_widths(cfg, target, params)
            item["target"]["config"] = target.model_dump(mode="json", exclude_none=True)
        recipe = training_recipe(params, cfg.model, target)
        if recipe:
            item["training_recipe"] = recipe
        doc["best"].append(item)
    doc["censored_better"] = censored_better(trials, cfg, evs)
    doc["learning_rate"] = learning_rate(trials, cfg)  # the LR confound, said out loud
    ev = first_evidence(cfg, evs)
    if cfg.space.settings and ev is not None and ev.tuned is not None:
        # each schedule at its own best setting (train.lr): tlmsearch/evidence/tuned.py
        doc["tuned"] = {"metric": cfg.objectives[0].metric, **ev.tuned.as_dict()}
    if ev is not None and ev.contrasts is not None:  # the study's questions, each one's word
        from tlmsearch.evidence.contrasts import contrast_records
        from tlmsearch.evidence.factorial import two_by_two

        doc["contrasts"] = {
            "metric": cfg.objectives[0].metric,
            **contrast_records(ev.contrasts, cfg.stats.level),
        }
        reading = two_by_two(ev.contrasts, cfg.stats.two_by_two)
        if reading:
            doc["contrasts"]["two_by_two"] = reading
    doc["error_rates"] = error_rates(doc, cfg.stats.level)
    said = study_conclusions(trials, cfg, evidence=ev)
    if cfg.search.confirm is not None:
        doc["confirmation"] = confirmation_of(trials, staged, cfg, evs, stage_evs, chosen)
        if ended:  # the verdict too: from the stage's own evidence
            first = stage_evs[cfg.objectives[0].metric]
            said = study_conclusions(staged, cfg, evidence=first)
    if len(cfg.objectives) == 1 and said.top_group:
        doc["verdict"] = verdict(said.top_group)
    doc["conclusions"] = said._asdict()
    if ev is not None and ev.snr is not None:
        doc["signal_to_noise"] = ev.snr.as_dict()
    return doc


def _uniform_baseline(trials: Any, cfg: StudyConfig) -> dict[str, Any]:
    """best.yaml's ``uniform_baseline``: each objective's uniform mean, per setting where the
    space has settings (train.lr: each its own uniform); {} without a complete uniform."""
    base = trials[(trials["is_baseline"]) & (trials["state"] == "COMPLETE")]
    if base.empty:
        return {}
    if cfg.space.settings:
        return {
            o.metric: {
                str(s): float(g[_metric_col(o.metric)].mean())
                for s, g in base.groupby("setting", sort=False)
            }
            for o in cfg.objectives
        }
    return {o.metric: float(base[_metric_col(o.metric)].mean()) for o in cfg.objectives}


def confirmation_of(
    trials: Any,
    staged: Any,
    cfg: StudyConfig,
    evs: Mapping[str, Any],
    stage_evs: Mapping[str, Any],
    chosen: list[str] | None = None,
) -> dict[str, Any]:
    """best.yaml's ``confirmation`` (:func:`tlmsearch.evidence.confirm.study_confirmation`) of
    the first objective: ``trials`` the main stage's rows, ``staged`` the stage's, ``evs`` /
    ``stage_evs`` their evidences."""
    from tlmsearch.evidence.confirm import study_confirmation

    metric = cfg.objectives[0].metric
    return study_confirmation(trials, staged, cfg, evs.get(metric), stage_evs.get(metric), chosen)


def error_rates(doc: Mapping[str, Any], level: float) -> dict[str, Any]:
    """Which family each decision of best.yaml belongs to, and what they hold read together.

    Each family holds its own family-wise error at 1 - ``level``: the effects vs uniform
    (``best[].separated_from_uniform``), the tuned comparison (``tuned.schedules[].
    separated_from_uniform``), the shared-setting one (``...at_shared_setting``) and the
    contrasts' words. A reader who takes any of them together has at most the sum (Bonferroni).

    >>> r = error_rates({"best": [{}], "tuned": {"schedules": []}}, 0.95)
    >>> r["families"], r["combined"]
    (['effects vs uniform', 'tuned (each at its best setting)'], 0.1)
    """
    alpha = 1.0 - level
    fams = ["effects vs uniform"] if doc.get("best") else []
    tuned = doc.get("tuned")
    if tuned is not None:
        fams.append("tuned (each at its best setting)")
        judged = any(
            (r.get("at_shared_setting") or {}).get("separated_from_uniform") is not None
            for r in tuned.get("schedules", [])
        )
        if judged:
            fams.append("at uniform's best setting")
    if doc.get("contrasts"):
        fams.append("contrasts")
    if doc.get("main_stage_best"):  # search.confirm: the best's flag is the stage's family
        fams.append("confirmation (fresh seeds)")
    k = len(fams)
    return {
        "families": fams,
        "each": round(alpha, 6),
        "combined": round(min(1.0, k * alpha), 6),
        "note": (
            f"each family holds its own {alpha:.0%} family-wise error; read together, the "
            f"{k} families' claims are all right with chance at least "
            f"{max(0.0, 1.0 - k * alpha):.0%} (Bonferroni)"
            if k > 1
            else f"one family, at {alpha:.0%} family-wise error"
        ),
    }


def verdict(group: Mapping[str, Any]) -> str:
    """The best in one line, from multiple comparisons with the best (uniform included).

    >>> verdict({"best": "a", "selected": False, "tied_with": ["b", "uniform"],
    ...          "separated_from": ["c"], "beaten_by": [], "level": 0.95})
    'no single best at 95%: a ranks first, but a, b, uniform could each be the best; c is not'
    >>> verdict({"best": "a", "selected": True, "tied_with": [], "beaten_by": [],
    ...          "separated_from": ["b", "uniform"], "level": 0.95, "n_candidates": 3})
    'a is the best: better than each of the other 2 candidates (uniform included) at 95% jointly'
    """
    best, tied, level = group["best"], list(group["tied_with"]), float(group["level"])
    if group.get("beaten_by"):
        names = ", ".join(group["beaten_by"])
        return (
            f"no best yet: {best} ranks first on its seeds but is worse than {names} on their "
            f"common seeds at {level:.0%}; their other seeds decide"
        )
    out = list(group["separated_from"])
    if group.get("selected"):
        n = int(group.get("n_candidates") or len(out) + 1) - 1
        return (
            f"{best} is the best: better than each of the other {n} candidates "
            f"(uniform included) at {level:.0%} jointly"
        )
    text = f"no single best at {level:.0%}: {best} ranks first, but {', '.join([best, *tied])} "
    text += "could each be the best"
    return text + (f"; {', '.join(out)} {'is' if len(out) == 1 else 'are'} not" if out else "")


def study_conclusions(trials: Any, cfg: StudyConfig, evidence: Any = None) -> Any:
    """:func:`tlmsearch.evidence.conclusions.conclusions` of the run's evidence (first objective;
    ``evidence``: :func:`first_evidence`, when the caller has it already)."""
    from tlmsearch.evidence import study_evidence
    from tlmsearch.evidence.conclusions import Conclusions, conclusions

    if trials.empty:
        return Conclusions([], [])
    o = cfg.objectives[0]
    ev = evidence if evidence is not None else study_evidence(trials, cfg)
    return conclusions(trials, label=o.metric, evidence=ev)


def training_recipe(params: Candidate, proxy: Any, target: Any) -> dict[str, Any]:
    """best.yaml's ``training_recipe``: a candidate's depth profiles (``lr.*``, ``init.*``)
    planned over the proxy's and the target's layers, as the ``train`` fields that train them;
    ``{}`` without one. A profile is how the model trains, not what it is: the target config
    (and ``export --format hf``) holds the architecture only.

    >>> from tlmsearch.config import ModelConfig
    >>> from tlmsearch.widths.candidate import Candidate
    >>> m = ModelConfig(n_layer=2, d_model=32, n_head=2)
    >>> training_recipe(Candidate({"shape": "uniform", "lr.shape": "linear"}), m, None)["proxy"]
    {'lr_profile': [1.5, 0.5], 'lr_profile_part': 'mlp'}
    """
    proxy_train = proxy.plan(params).train_update
    if not proxy_train:
        return {}
    out: dict[str, Any] = {
        "note": "a training recipe, not an architecture: train the model with these train "
        "fields (per-layer multipliers of train.lr / the init std); the exported model "
        "holds none of them",
        "proxy": {
            k: [round(x, 6) for x in v] if isinstance(v, list) else v
            for k, v in proxy_train.items()
        },
    }
    if target is not None:
        try:
            planned = target.plan(params).train_update
        except ValueError as err:  # ScheduleError: a sampled candidate the target cannot take
            out["target"] = f"cannot be planned at the target: {err}"
            return out
        out["target"] = {
            k: [round(x, 6) for x in v] if isinstance(v, list) else v for k, v in planned.items()
        }
    return out


def _model_widths(cfg: StudyConfig, model: Any, params: Candidate) -> dict[str, Any]:
    plan = model.plan(params)
    out = {
        "n_layer": model.n_layer,
        "d_ff_uniform": model.d_ff_uniform,
        "multiple_of": model.multiple_of,
        "widths": list(plan.widths),
        "realised": [round(plan.realised_start, 4), round(plan.realised_end, 4)],
    }
    if _shows_heads(cfg, params):  # the attention beside the widths: query (and kv) heads
        out["heads"] = list(plan.heads)
        if model.n_kv_head is not None:
            out["kv_heads"] = [h // model.kv_group for h in plan.heads]
        if heads_schedule(params) is not None:
            out["heads_share"] = round(plan.heads_share, 4)
    return out


def _shows_heads(cfg: StudyConfig, params: Candidate) -> bool:
    """Whether best.yaml shows heads: the study schedules them (heads.* dimensions, or this
    candidate), fixes them per layer (layer_heads) or groups them (n_kv_head); a study
    without any of these keeps its best.yaml as it was."""
    models = [m for m in (cfg.model, cfg.target) if m is not None]
    return (
        heads_schedule(params) is not None
        or any(is_heads_key(name) for name in cfg.space.dimensions)
        or any(m.layer_heads is not None or m.n_kv_head is not None for m in models)
    )


def write_best(
    run_dir: str | Path, trials: Any, cfg: StudyConfig, evs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Write best.yaml (:func:`best_document`); ``evs``: the run tables' evidences
    (:func:`tlmsearch.run_dir.tables.write_run_tables`), when the caller has them."""
    from tlmsearch.run_dir.tables import atomic_write

    run = RunDir(run_dir)
    curves = None
    if evs is None:  # else the evidences carry the curves' checkpoint noise already
        path = run.table("curves")  # written beside trials by write_tables
        curves = pd.read_parquet(path) if path.is_file() else None
    from tlmsearch.search.confirm import chosen

    doc = best_document(trials, cfg, curves, evs, chosen(run_dir))
    text = yaml.safe_dump(doc, sort_keys=False)
    atomic_write(run.best, lambda tmp: Path(tmp).write_text(text))
    return doc
