"""One self-contained HTML report from a run dir: opens offline, needs neither torch nor Ray.

plotly.js is embedded once (the first figure carries it; the others reuse it), so the file works
from a copy of the run dir with no network. A small inline script records, into the page itself,
whether every figure rendered and any JavaScript error; the browser test reads it back.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import yaml

from tlmsearch import stats
from tlmsearch.evidence.conclusions import decimals
from tlmsearch.evidence.confirm import confirm_evidences, study_confirmation
from tlmsearch.evidence.stages import confirm_stage, main_stage
from tlmsearch.report import collect as C
from tlmsearch.report import effects as E
from tlmsearch.report import figures as F
from tlmsearch.report import layers as L
from tlmsearch.report import params as P
from tlmsearch.report import summary as S
from tlmsearch.report import tuned as T
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import RunData, atomic_write, load_run

FRONT_METRICS = ("val_ppl", "val_bpb")
TUNED = "Tuned comparison"
CURVE_METRICS = ("val_bpb", "val_loss", "val_ppl", "train_loss")


@dataclass(frozen=True)
class Figure:
    id: str  # the plot div's id
    section: str  # heading it sits under
    fig: go.Figure
    note: str = ""  # HTML shown above the plot: what it shows, or why it stands where it does


@dataclass(frozen=True)
class Report:
    figures: list[Figure]
    summary: dict[str, Any]
    failed: Any  # DataFrame: trial_id, candidate, reason
    effects: E.Effects | None = None  # every candidate's effect vs uniform, and in words
    race: E.Race | None = None  # racing studies: seeds per candidate and why racing stopped
    fidelity: dict[str, Any] | None = None  # a ladder run: tlmsearch.evidence.fidelity's document
    sweep: T.SettingSweep | None = None  # a study with setting dimensions (train.lr)
    # search.confirm: each candidate of the confirmation stage, confirmed or not on fresh seeds
    # (tlmsearch.evidence.confirm.study_confirmation); None: the study has no such stage
    confirmation: dict[str, Any] | None = None


def build(run: RunData, *, top_k: int = 5, x: str = "r_start") -> Report:
    """Every figure of the report, in page order (fronts and Pareto first)."""
    staged, t = confirm_stage(run.trials), main_stage(run.trials)  # search.confirm: apart
    objectives = run.objectives
    metric, sense = objectives[0]
    space = run.study.space  # None: study.yaml has none this version reads
    dims = list(space.dimensions) if space is not None else None
    figs: list[Figure] = []

    # the study's one Evidence per objective: every ranking, effect and race below reads it
    evidence = {m: C.evidence_of(t, m, s, run.study, run.curves) for m, s in objectives}
    ev = evidence[metric]
    seeds = ev.plan  # the seeds each candidate is planned on (a metric it does not judge)
    fronts = {
        m: C.ratio_front(
            t,
            m,
            x=x,
            sense=C.sense_of(m, objectives),
            seeds=seeds,
            ranking=evidence[m].ranking if m in evidence else None,
        )
        for m in FRONT_METRICS
    }
    if fronts["val_ppl"].points.empty and not fronts["val_bpb"].points.empty:
        fronts = {"val_bpb": fronts["val_bpb"], "val_ppl": fronts["val_ppl"]}
    figs.append(Figure("fig-ratio-front", "Ratio vs perplexity", F.ratio_front(fronts)))

    for i, objs in enumerate(C.pareto_sets(objectives)):
        figs.append(Figure(f"fig-pareto-{i}", "Pareto fronts", F.pareto(C.pareto(t, objs))))
    deltas = Figure(
        "fig-deltas",
        "Paired deltas vs uniform",
        F.paired_deltas(C.paired_deltas(t, metric, sense, evidence=ev)),
    )
    if len(objectives) == 1:  # no front to draw: the effects are the second headline
        figs.append(replace(deltas, note=one_objective_note(metric)))

    figs.append(
        Figure(
            "fig-widths",
            "Width profiles",
            F.width_profiles(C.width_profiles(t, metric, sense, top_k, ranking=ev.ranking)),
        )
    )
    curve_metric = metric if metric in CURVE_METRICS else "val_bpb"
    ranking = evidence[curve_metric].ranking if curve_metric in evidence else None
    curves = C.learning_curves(
        t, run.curves, curve_metric, C.sense_of(curve_metric, objectives), seeds, ranking=ranking
    )
    figs.append(Figure("fig-curves", "Learning curves", F.learning_curves(curves)))
    figs.append(
        Figure(
            "fig-parallel",
            "Search parameters",
            F.parallel_coords(P.parallel_coords(t, metric, dims)),
        )
    )
    imp = P.param_importances(t, metric, sense, space)
    figs.append(Figure("fig-importances", "Search parameters", F.importances(imp)))
    if len(objectives) > 1:
        figs.append(deltas)
    figs.append(
        Figure(
            "fig-separation",
            "Effects in units of noise",
            F.separation(E.separation(t, metric, sense, k=top_k, evidence=ev)),
        )
    )
    effects = E.effects(t, metric, sense, config=run.study, evidence=ev)
    ix = E.interaction(t, effects)
    if ix is not None:  # a study with setting dimensions: does the effect depend on them?
        figs.append(Figure("fig-interaction", "Effects in units of noise", F.interaction(ix)))
    sweep = T.setting_sweep(t, metric, sense, evidence=ev)
    if sweep is not None:  # a study with setting dimensions (train.lr): the tuned comparison
        figs.append(Figure("fig-settings", TUNED, F.setting_sweep(sweep)))
    if not run.analysis.empty:  # written by `tlmsearch analyze` from kept weights
        lines = L.layer_diagnostics(run.analysis)
        figs.append(Figure("fig-layers", "Per-layer diagnostics", F.layer_diagnostics(lines)))
    return Report(
        figs,
        S.run_summary(
            run.study, t, run.status, evidence=ev, written=run.config, run_dir=str(run.path)
        ),
        curves.failed,
        effects,
        E.race(t, run.study, metric, sense, evidence=ev),
        sweep=sweep,
        confirmation=_confirmation(t, staged, run.study, ev, run.path),
    )


def _confirmation(t: Any, staged: Any, study: Any, ev: Any, path: Any) -> dict[str, Any] | None:
    """The confirmation stage's words (None without ``search.confirm``: a hand-edited
    study.yaml's partial study has none either)."""
    if getattr(getattr(study, "search", None), "confirm", None) is None:
        return None
    stage = confirm_evidences(staged, study, [study.objectives[0].metric])
    from tlmsearch.search.confirm import chosen as recorded

    chosen = recorded(path) if path is not None else None
    return study_confirmation(t, staged, study, ev, stage.get(study.objectives[0].metric), chosen)


def one_objective_note(metric: str) -> str:
    """Why a one-objective study's report shows effects where a Pareto front would stand."""
    return (
        f"<p class='note' id='no-pareto'>This study has one objective ({_e(C.label(metric))}), "
        "so there is no Pareto front to draw. Every candidate trains at exactly the uniform "
        "model's parameters and FLOPs per token, so a front of the metric against tokens/s "
        "would rank throughput differences that, at equal FLOPs, are the machine's noise. "
        "What a reader can use instead: each candidate's paired difference from uniform on "
        "the same seeds, with its 95% interval (grey: within noise). A study with two or "
        "more objectives gets its Pareto fronts here.</p>"
    )


# -------------------------------------------------------------------------------------------------
# HTML

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 18px 40px;color:#222}
h1{margin:18px 0 4px;font-size:1.6em} h2{margin:28px 0 6px;border-bottom:1px solid #ddd}
.sub{color:#666;margin:0 0 10px} nav a{margin-right:14px}
table{border-collapse:collapse;margin:8px 0;font-size:.92em}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f5} code,pre{font-size:.88em} .plot{min-height:260px}
.counts span{display:inline-block;margin-right:12px}
.scroll{max-height:320px;overflow:auto;display:inline-block}
.note{color:#444;max-width:900px}
"""


def _e(v: Any) -> str:
    return html.escape(str(v))


def _table(rows: Sequence[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _fmt_s(s: float) -> str:
    return f"{s:,.0f} s ({s / 3600:.2f} h)" if s >= 60 else f"{s:.1f} s"


def summary_html(s: dict[str, Any]) -> str:
    """The summary section: study, counts by state, best candidate, spend, versions."""
    counts = ", ".join(f"{k.lower()} {v}" for k, v in sorted(s["counts"].items())) or "none yet"
    planned = s.get("n_trials_planned")
    objs = ", ".join(f"{m} ({d})" for m, d in s["objectives"])
    rows: list[tuple[str, Any]] = [
        ("study", f"<b>{_e(s['name'])}</b> {_e(s['description'])}"),
        (
            "status",
            _e(s["status"])
            + (
                f" (started {_e(s['started'])}, updated {_e(s['updated'])})"
                if s["started"]
                else ""
            ),
        ),
        ("objectives", _e(objs)),
        (
            "trials",
            f"{s['n_trials']}" + (f" of {planned} planned" if planned else "") + f": {_e(counts)}",
        ),
    ]
    b = s.get("best")
    if b:
        rows += [
            ("best candidate", best_html(b)),
            ("its widths (proxy d_ff per layer)", f"<code>{_e(b['widths'])}</code>"),
            ("its parameters (requested)", f"<code>{_e(b['params'])}</code>"),
        ]
        if b.get("heads"):  # a heads schedule: attention capacity moves too
            share = b.get("heads_share")
            rows.append(
                (
                    "its attention heads (proxy, per layer)",
                    f"<code>{_e(b['heads'])}</code>"
                    + ("" if share is None else f" (heads share {share:.3f})"),
                )
            )
        if b.get("target_widths"):
            rows.append(("its widths at target scale", f"<code>{_e(b['target_widths'])}</code>"))
        if b.get("target_heads"):
            rows.append(("its heads at target scale", f"<code>{_e(b['target_heads'])}</code>"))
        for c in s.get("censored_better") or []:
            rows.append(
                (
                    "not ranked above it",
                    f"{_e(c['candidate'])} ({_e(c['flag'])}): {c['delta_best']:+.4g} vs the "
                    f"best on the {c['n_best']} seed(s) both completed; its missing seeds "
                    "were pruned, failed or are still running, so this flatters it",
                )
            )
    else:
        rows.append(("best candidate", "no finished trial yet"))
    rows += [
        ("tokens trained (all trials)", f"{s['tokens_total']:,}"),
        ("trial wall time (sum)", _fmt_s(s["wall_s_total"])),
    ]
    model = s.get("proxy_model") or {}
    if model:
        rows.append(("proxy model", _e(", ".join(f"{k} {v}" for k, v in model.items()))))
    vers = ", ".join(f"{k} {v}" for k, v in sorted(s["versions"].items()))
    rows.append(
        (
            "versions",
            _e(vers or "not recorded") + (f"; git {_e(s['git_sha'])}" if s["git_sha"] else ""),
        )
    )
    return _table(rows)


def best_html(b: dict[str, Any]) -> str:
    """'cosine 1.25->0.75 [trained 1.25->0.75]: val_bpb 1.91 (mean of seeds 0, 1; 2 of 2
    seeds completed); -0.1 vs uniform (95% CI -0.2..0.0, 2 seeds)', censoring said first."""
    realised = b.get("realised") or [None, None]
    trained = f" [trained {realised[0]:.3g}->{realised[1]:.3g}]" if None not in realised else ""
    seeds = ", ".join(str(x) for x in b["ranked_seeds"])
    text = (
        f"<b>{_e(b['candidate'])}</b>{_e(trained)}: {_e(b['metric'])} {b['value']:.4g} "
        f"(mean of seed(s) {seeds}; {_e(b['n_of_k'])} completed; trials {_e(b['trials'])})"
    )
    delta = b.get("delta_vs_uniform")
    if delta is not None:
        ci = b.get("delta_ci95")
        if ci:
            seeds = f"{b['delta_n_seeds']} seed{'s' if b['delta_n_seeds'] != 1 else ''}"
            noise = f"95% CI {ci[0]:+.3g}..{ci[1]:+.3g} over {seeds}"
            units = b.get("effect_noise")
            if units is not None and math.isfinite(units):
                noise += f"; {abs(units):.1f} noise units"
        else:
            noise = "1 seed: noise unknown" if b.get("delta_n_seeds") == 1 else "noise unknown"
        text += f"; {delta:+.4g} vs uniform ({noise})"
    if b.get("flag"):
        text = f"<b>{_e(b['flag'])}</b>: " + text
    return text


def conclusions_html(report: Report) -> str:
    """What the study supports and what it does not, in words (above the matrix)."""
    e = report.effects
    if e is None or (not e.conclusions.supported and not e.conclusions.unsupported):
        return "<p class='sub'>No candidate has a finished seed paired with uniform yet.</p>"
    noise = (
        f"sd {e.noise.sd:.2g} over {e.noise.df} df"
        if e.noise is not None
        else f"unknown ({e.noise_why or stats.NO_DF}), so nothing is judged"
    )
    source = (
        "one fit per setting value (train.lr, ...) as a block design (value ~ candidate + "
        "seed on that value's cells: every delta of a seed shares its uniform; the table's "
        "noise column), as their noise differs; pooled over settings it is "
        f"{noise}. Which is best and the matrix below take the widest of them"
        if e.per_setting
        else "one fit of the whole study as a block design (value ~ candidate + seed: every delta "
        f"of a seed shares its uniform): {noise}"
    )
    parts = [
        "<p class='sub'>Each effect is a paired difference on the same seeds (same data order "
        f"and initial weights). The noise of one paired delta comes from {_e(source)}. "
        "Intervals are 95% per comparison; whether a candidate is "
        f"separated from uniform is one decision, {_e(e.how)}; the best is judged by multiple "
        "comparisons with the best (Hsu), uniform included.</p>"
    ]
    parts.append(snr_html(e.snr))
    for head, lines in (
        ("Supported", e.conclusions.supported),
        ("Not supported (yet)", e.conclusions.unsupported),
    ):
        if not lines:
            continue
        items = "".join(f"<li>{_e(x)}</li>" for x in lines[:40])
        more = (
            f"<li>... and {len(lines) - 40} more (see the table)</li>" if len(lines) > 40 else ""
        )
        parts.append(f"<h3>{head}</h3><ul class='said'>{items}{more}</ul>")
    return "".join(parts)


def snr_html(snr: stats.SignalToNoise | None) -> str:
    """The study's signal-to-noise (arXiv 2508.13144) in a short paragraph and a table."""
    if snr is None:
        return ""
    d = snr.as_dict()
    seed, ck = d["seed_noise"], d["checkpoint_noise"]
    if d["signal"] is None:
        return f"<p class='sub'>Signal-to-noise: n/a ({_e(d['signal_why'])}).</p>"

    def cell(v: float | None, why: str | None, fmt: str) -> str:
        return _e(format(v, fmt) if v is not None else f"n/a ({why})")

    rows = [
        (
            "seeds: sd of one paired delta",
            cell(seed["sd"], seed["why"], ".3g"),
            cell(seed["snr"], seed["why"], ".1f")
            + (f" (all candidates equal: ~{seed['snr_if_all_equal']:.1f})" if seed["snr"] else ""),
        ),
        (
            f"checkpoints: sd over the last evals of {ck['trials']} trials, detrended",
            cell(ck["sd"], ck["why"], ".3g"),
            cell(ck["snr"], ck["why"], ".1f"),
        ),
    ]
    body = "".join(f"<tr><td>{_e(a)}</td><td>{b}</td><td>{c}</td></tr>" for a, b, c in rows)
    return (
        "<h3>Signal-to-noise</h3><p class='sub'>As in Signal and Noise (Heineman et al. 2025, "
        "arXiv 2508.13144): the signal is the spread of the candidates' means (max difference "
        f"{d['dispersion']:.4g} over {d['candidates']} candidates, uniform included, "
        f"{d['signal']:.3g} of their mean), the SNR that over a noise relative to the mean. "
        "The seed SNR is the spread in sds of one paired delta; a spread near what equal "
        "candidates give says the study cannot tell them apart (docs/signal_to_noise.md).</p>"
        f"<table><tr><th>noise</th><th>sd</th><th>SNR</th></tr>{body}</table>"
    )


def _effect_cells(r: Any) -> list[str]:
    if r.n == 0:
        return ["", "no seed paired with uniform", "", "", "", "", ""]
    if r.noise == stats.UNKNOWN:
        return [f"{r.mean_delta:+.4g}", "", "unknown (one seed)", "", "", "not judged", ""]
    k = decimals(r.half_width, r.mean_delta)
    ratio = f"{r.effect_noise:+.1f}" if math.isfinite(r.effect_noise) else "no spread"
    if pd.isna(r.separated):  # a race's lane with no decision (Evidence._race_decides)
        verdict = "not decided (racing, or stopped by a prune)"
    else:
        verdict = "<b>separated</b>" if r.separated else "within noise"
    how = "the race" if r.decided_by == "race" else f"adjusted p {r.p_adj:.2g}"
    return [
        f"{r.mean_delta:+.{k}f} ± {r.half_width:.{k}f}",
        f"{r.lo:+.{k}f} .. {r.hi:+.{k}f}",
        f"sd {r.noise_sd:.2g} ({r.noise_df} df)",
        ratio,
        f"{r.n_better}/{r.n}",
        verdict,
        how,
    ]


def effects_html(report: Report) -> str:
    """Every candidate's effect vs uniform (a table), then the race of a racing study."""
    e = report.effects
    parts = []
    if e is not None and len(e.table):
        head = (
            "rank (uniform counts)",
            "candidate",
            "seeds",
            f"{e.metric} vs uniform (mean ± 95%)",
            "95% CI",
            "noise (sd of a delta)",
            "effect / noise",
            "better on",
            "verdict",
            "decided by",
        )
        rows = []
        for r in e.table.itertuples():
            rank = "" if pd.isna(r.rank) else str(r.rank)
            seeds = f"{r.n} paired: {', '.join(str(x) for x in r.seeds)}" if r.n else "none"
            if r.flag:
                seeds += f" ({r.flag})"
            cells = [rank, _e(r.candidate), _e(seeds), *_effect_cells(r)]
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        th = "".join(f"<th>{_e(h)}</th>" for h in head)
        parts.append(
            f"<h3>Effects vs uniform</h3><div class='scroll'><table><tr>{th}</tr>"
            f"{''.join(rows)}</table></div>"
        )
        parts.append(learning_rate_html(e.learning_rate))
    parts.append(confirmation_html(report.confirmation))
    if e is not None:
        parts.append(contrasts_html(e))
    parts.append(race_html(report.race))
    return "".join(parts)


def confirmation_html(doc: dict[str, Any] | None) -> str:
    """The confirmation stage (search.confirm): each candidate's main-stage delta (conditional
    where the pruner could have stopped it) and its delta and word on the fresh seeds."""
    if not doc:
        return ""
    level = doc.get("level")
    at = f" ({level:.0%}, simultaneous)" if level else ""
    head = ("candidate", "main stage", f"on the fresh seeds{at}", "word")
    rows = []
    for r in doc["candidates"]:
        main = f"{r['main_delta']:+.4f}" if "main_delta" in r else ""
        if r.get("main_conditional"):
            main += " (conditional on surviving the pruner)"
        fresh = f"{r['delta']:+.4f}" if "delta" in r else ""
        if r.get("ci95"):
            fresh += f" [{r['ci95'][0]:+.4f}, {r['ci95'][1]:+.4f}]"
        cells = [_e(r["candidate"]), _e(main), _e(fresh), f"<b>{_e(r['word'])}</b>"]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    seeds = ", ".join(str(s) for s in doc["seeds"])
    return (
        f"<h3 id='confirmation'>Confirmed on fresh seeds ({_e(seeds)})</h3>"
        f"<p>{_e(doc['family'])}; never pruned. best.yaml's best comes from these seeds.</p>"
        f"<div class='scroll'><table><tr>{th}</tr>{''.join(rows)}</table></div>"
    )


def contrasts_html(e: E.Effects) -> str:
    """The study's contrasts: one row per question, its word, estimate and the interval its
    word was decided at (evidence/contrasts.py says each in words; nothing re-derived)."""
    from tlmsearch.evidence.contrasts import contrast_line

    table = e.contrasts
    if table is None or table.empty:
        return ""
    head = ("contrast", "kind", "answer", f"{e.metric}", "interval (its level)", "df", "in words")
    rows = []
    for _, r in table.iterrows():
        eq = r["word"] == "equivalent"
        lo, hi, lev = (
            (r["eq_lo"], r["eq_hi"], r["eq_level"]) if eq else (r["lo"], r["hi"], r["ci_level"])
        )
        iv = (
            ""
            if not (math.isfinite(lo) and math.isfinite(hi)) or int(r["df"]) < 3
            else f"[{lo:+.4g}, {hi:+.4g}] ({100 * lev:.4g}%)"
        )
        est = f"{r['estimate']:+.4g}" if math.isfinite(r["estimate"]) else ""
        word = f"equivalent within ±{r['margin']:g}" if eq else str(r["word"])
        line = contrast_line(r, e.metric).partition(": ")[2]
        cells = (r["name"], r["kind"], word, est, iv, str(int(r["df"])), line)
        cls = " class='sep'" if r["word"] in ("better", "worse", "equivalent") else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    return (
        f"<h3>Contrasts</h3><p class='sub'>{_e(e.contrasts_rule[:1].upper())}"
        f"{_e(e.contrasts_rule[1:])}. Each question is a "
        "contrast from one fit of every cell of the study; its answer is better, worse, "
        "equivalent within the margin, or inconclusive (docs/statistics.md).</p>"
        f"<div class='scroll'><table><tr>{th}</tr>{''.join(rows)}</table></div>"
    )


def learning_rate_html(lr: dict[str, Any] | None) -> str:
    """Beside the effects: whether they were measured at one learning rate (then they may be an
    LR effect), and what the parametrization does to each schedule's layers against uniform."""
    if not lr:
        return ""
    head = (
        "<p id='lr-note'><b>At one learning rate:</b> these effects "
        f"{_e(lr['compared'].removeprefix('at one learning rate: '))}.</p>"
        if lr.get("at_one_lr")
        else "<p class='sub' id='lr-note'>Each effect is within one learning rate (a schedule "
        "against uniform at the same train.lr); each schedule at its own best LR: see "
        f"{_e(TUNED)}.</p>"
    )
    items = "".join(f"<li>{_e(k)}: {_e(v)}</li>" for k, v in lr["effective_lr"].items())
    if not items:
        return head
    return (
        head + "<details><summary>Effective learning rate per layer, against uniform"
        f"</summary><ul class='said'>{items}</ul></details>"
    )


def race_html(race: E.Race | None) -> str:
    """Seeds per candidate and why racing stopped (empty for a study that does not race)."""
    if race is None:
        return ""
    text = f"<h3>Race</h3><p class='sub'>Racing seeds: {_e(race.settings)}. "
    if race.note:
        return text + f"{_e(race.note)}.</p>"
    counts = ", ".join(f"{n} {k}" for k, n in race.counts.items()) or "no candidate yet"
    state = "decided: no candidate races on" if race.decided else "still racing"
    seeds = ", ".join(str(x) for x in race.uniform_seeds) or "none yet"
    text += (
        f"Uniform (the baseline) completed seeds {_e(seeds)}. Candidates: {_e(counts)}; "
        f"{state}. A candidate gets its next seed only while its paired delta is not separated "
        "from the reference; it stops when separated, when a seed is pruned or failed, or at "
        "the seed limit (a tie).</p>"
    )
    head = ("candidate", "status", "seeds", "mean delta ± half-width", "why")
    rows = []
    for r in race.lanes.itertuples():
        seeds = ", ".join(str(x) for x in r.seeds) or "-"
        delta = "" if math.isnan(r.mean_delta) else f"{r.mean_delta:+.4g}"
        if delta and not math.isnan(r.half_width):
            delta += f" ± {r.half_width:.2g}"
        cells = (r.candidate, r.status, f"{r.n_seeds}: {seeds}", delta, r.reason)
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    return text + f"<div class='scroll'><table><tr>{th}</tr>{''.join(rows)}</table></div>"


def tuned_html(sw: T.SettingSweep) -> str:
    """Each schedule at its own best setting vs uniform at its own, the caveat and edge flags."""
    how = (
        "chosen on the first half of the seeds and measured on the rest (held out)"
        if sw.selection == "held-out seeds"
        else "chosen and measured on the same seeds"
    )
    parts = [
        f"<p class='sub'>Each schedule at its own best setting (best mean {_e(sw.metric)} over "
        f"seeds), uniform at its own, paired by seed; best settings {how}.</p>"
    ]
    if sw.caveat:
        parts.append(f"<p><b>Optimistic:</b> {_e(sw.caveat)}.</p>")
    parts.append(
        "<p class='sub'>Beside it, each schedule at uniform's best setting (the one learning "
        "rate a study tuned on its baseline would share), on the same measuring seeds: an effect "
        "that shrinks or flips once each side is tuned was partly a learning-rate effect.</p>"
    )
    head = (
        "schedule",
        "best setting",
        f"mean {sw.metric}",
        "seeds",
        "vs uniform, each at its best (95% CI)",
        "verdict",
        "vs uniform at uniform's best (95% CI)",
        "verdict",
        "best at the edge of the grid",
    )
    rows = []
    for r in sw.table.itertuples():
        delta, verdict = _tuned_delta(
            r.is_baseline, r.mean_delta, r.lo, r.hi, r.separated, r.censored
        )
        shared, shared_verdict = _tuned_delta(
            r.is_baseline,
            r.shared_delta,
            r.shared_lo,
            r.shared_hi,
            r.shared_separated,
            r.shared_censored,
        )
        edge = f"<b>{_e(r.edge)}</b>" if r.edge else ""
        seeds = str(r.n) if r.fully_measured else f"{r.n} (no setting completed every seed)"
        if not r.is_baseline and not pd.isna(r.censored) and bool(r.censored):
            seeds += f"; pruned or failed on {', '.join(str(x) for x in r.censored_seeds)}"
        cells = [
            _e(r.schedule),
            _e(r.setting),
            f"{r.mean:.4g}",
            _e(seeds),
            delta,
            verdict,
            shared,
            shared_verdict,
            edge,
        ]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    parts.append(
        "<table><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )
    return "".join(parts)


def _tuned_delta(
    baseline: bool, mean: Any, lo: Any, hi: Any, separated: Any, censored: Any
) -> tuple[str, str]:
    """A tuned-table effect and its verdict ("" for uniform or without a paired seed)."""
    if baseline or pd.isna(mean):
        return "", ""
    ci = "" if pd.isna(lo) else f" ({lo:+.3g} .. {hi:+.3g})"
    censored = not pd.isna(censored) and bool(censored)
    verdict = (
        "censored: not judged"
        if censored
        else "not judged"
        if pd.isna(separated)
        else "<b>separated</b>"
        if separated
        else "within noise"
    )
    return f"{mean:+.4g}{ci}", verdict


def fidelity_html(doc: dict[str, Any]) -> str:
    """A ladder's fidelity: how far to trust it, then the tables ``tlmsearch fidelity`` prints
    (:mod:`tlmsearch.evidence.fidelity_tables`): rungs, rank agreement, lines, crossings,
    signal-to-noise, decision accuracy."""
    from tlmsearch.evidence.fidelity_tables import crossings, fidelity_tables, lines

    parts = []
    for t in fidelity_tables(doc):
        parts.append(t.html())
        if t.title == lines(doc).title and crossings(doc) is None:  # where that table would be
            parts.append("<p>No two candidates' lines cross at or above the smallest rung.</p>")
    return f"<p><b>{_e(doc['trust'])}</b></p>{''.join(parts)}"


def failed_html(failed: Any) -> str:
    if failed is None or len(failed) == 0:
        return "<p class='sub'>No failed trials.</p>"
    rows = "".join(
        f"<tr><td>{_e(r.trial_id)}</td><td>{_e(r.candidate)}</td><td>{_e(r.reason)}</td></tr>"
        for r in failed.itertuples()
    )
    head = "<tr><th>failed trial</th><th>candidate</th><th>reason</th></tr>"
    # A scroll box keeps hundreds of failures from pushing the figures off the page.
    return f"<div class='scroll'><table>{head}{rows}</table></div>"


def header_html(s: dict[str, Any]) -> str:
    """The line under the title: description, status, counts by state, time generated."""
    counts = "".join(
        f"<span>{_e(k.lower())}: <b>{v}</b></span>" for k, v in sorted(s["counts"].items())
    )
    return (
        f"{_e(s['description'])} · status <b>{_e(s['status'])}</b> · "
        + (f"<b class='warn'>{_e(s['driver'])}</b> · " if s.get("driver") else "")
        + f"<span class='counts'>{counts}</span> · generated "
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}"
    )


def render(
    report: Report,
    title: str,
    *,
    embed_plotlyjs: bool = True,
    head_extra: str = "",
    tail_extra: str = "",
) -> str:
    """The whole page. ``embed_plotlyjs=False``: the caller loads plotly.js in ``head_extra``."""
    s = report.summary
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style>{head_extra}</head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='sub' id='header'>{header_html(s)}</p>",
    ]
    sections: list[str] = []
    for f in report.figures:
        if f.section not in sections:
            sections.append(f.section)
    nav = [*sections[:2], "Summary", *sections[2:], "Study config"]
    parts.append("<nav>" + "".join(f"<a href='#{_anchor(n)}'>{_e(n)}</a>" for n in nav) + "</nav>")
    first = embed_plotlyjs
    done: set[str] = set()
    for f in report.figures:
        if f.section not in done:
            if len(done) == 2:  # the summary follows the two headline figures
                parts.append(
                    f"<h2 id='summary'>Summary</h2><div id='summary-box'>{summary_html(s)}</div>"
                )
            done.add(f.section)
            parts.append(f"<h2 id='{_anchor(f.section)}'>{_e(f.section)}</h2>")
        parts += _boxes(report, f.id, "before")
        parts.append(f.note)
        parts.append("<div class='plot'>")
        parts.append(
            f.fig.to_html(
                full_html=False,
                include_plotlyjs=first,
                div_id=f.id,
                config={"responsive": True, "displaylogo": False},
            )
        )
        parts.append("</div>")
        first = False
        parts += _boxes(report, f.id, "after")
    cfg = yaml.safe_dump(s.get("config") or {}, sort_keys=False)
    parts.append(
        f"<h2 id='study-config'>Study config</h2><details><summary>study.yaml</summary>"
        f"<pre>{_e(cfg)}</pre></details>"
    )
    parts.append(tail_extra)
    parts.append("</body></html>")
    return "\n".join(parts)


# The text boxes that go with a figure, in page order: (figure id, before or after its plot,
# the box's element id (the live dashboard replaces its content by id), its HTML from the report;
# None: no box). Every section the page has beside its figures is listed here.
BOXES: tuple[tuple[str, str, str, Any], ...] = (
    ("fig-separation", "before", "conclusions-box", lambda r: conclusions_html(r)),
    ("fig-curves", "after", "failed-box", lambda r: failed_html(r.failed)),
    ("fig-separation", "after", "effects-box", lambda r: effects_html(r)),
    ("fig-settings", "after", "tuned-box", lambda r: tuned_html(r.sweep) if r.sweep else None),
    (
        "fig-fidelity",
        "after",
        "fidelity-box",
        lambda r: fidelity_html(r.fidelity) if r.fidelity else None,
    ),
)


def _boxes(report: Report, figure: str, where: str) -> list[str]:
    out = []
    for fig_id, at, box_id, html_of in BOXES:
        if fig_id == figure and at == where and (inner := html_of(report)) is not None:
            out.append(f"<div id='{box_id}'>{inner}</div>")
    return out


def _anchor(name: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower())


def save_report(report: Report, run: RunData, out: str | Path | None = None) -> Path:
    """Write a built report (default ``RUN/report.html``) atomically; return its path."""
    path = Path(out) if out is not None else RunDir(run.path).report
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render(report, f"tlmsearch report: {run.name}")
    # a unique temp file: the run's own report and a user's `tlmsearch report` may overlap
    atomic_write(path, lambda p: Path(p).write_text(text, encoding="utf-8"))
    return path


def write_report(
    run_dir: str | Path, out: str | Path | None = None, *, top_k: int = 5, x: str = "r_start"
) -> Path:
    """Build the report of a run dir and write it (default ``RUN/report.html``); return the path.

    Example: ``write_report("runs/quickstart")`` -> ``Path("runs/quickstart/report.html")``.
    """
    rep, run = build_run(run_dir, top_k=top_k, x=x)
    return save_report(rep, run, out)


def build_run(
    run_dir: str | Path, *, top_k: int = 5, x: str = "r_start"
) -> tuple[Report, RunData]:
    """The report of a run dir. A ladder run (search/ladder.py): its top rung's report, with a
    "Fidelity across scales" section, to be saved in the ladder's own dir."""
    from dataclasses import replace

    from tlmsearch.search.ladder import is_ladder_run, ladder_fidelity, rung_dirs

    if not is_ladder_run(run_dir):
        run = load_run(run_dir)
        return build(run, top_k=top_k, x=x), run
    top = load_run(rung_dirs(Path(run_dir))[-1])
    doc = ladder_fidelity(run_dir)
    rep = build(top, top_k=top_k, x=x)
    fig = Figure("fig-fidelity", "Fidelity across scales", F.fidelity(doc))
    rep = replace(rep, figures=[*rep.figures, fig], fidelity=doc)
    name = f"{Path(run_dir).name} (ladder; figures of its top rung, {top.path.name})"
    return rep, replace(top, path=Path(run_dir), study=top.study.model_copy(update={"name": name}))


def figures_dict(report: Report) -> dict[str, Any]:
    """The figures as plain JSON data (id -> plotly figure), for the live dashboard."""
    return {f.id: json.loads(f.fig.to_json()) for f in report.figures}
