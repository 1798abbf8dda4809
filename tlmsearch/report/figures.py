"""Thin plotly functions: one collect result (:mod:`.collect`) in, one figure out.

Hover everywhere shows the trial id, parameters and widths. Many trials stay cheap: each figure
draws a handful of traces (learning curves are one trace per candidate, its trials joined with
gaps between them, and one for all the others), never one trace per trial.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tlmsearch.report.collect import (
    OTHERS,
    Curves,
    Deltas,
    Pareto,
    Profiles,
    RatioFront,
    label,
)
from tlmsearch.report.effects import Interaction, Separation
from tlmsearch.report.layers import ATTENTION, DIAGNOSTICS, LayerLines
from tlmsearch.report.params import Importances, Parallel
from tlmsearch.report.tuned import SettingSweep

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
UNIFORM_COLOR = "#555555"
FADED = "rgba(150,150,150,0.35)"
HOVER = "%{text}<extra></extra>"


def _layout(fig: go.Figure, title: str, **kw: object) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.01},
        template="plotly_white",
        height=kw.pop("height", 460),
        margin={"l": 70, "r": 30, "t": 70, "b": 60},
        legend={"orientation": "v"},
        hoverlabel={"align": "left"},
        **kw,
    )
    return fig


def _note(fig: go.Figure, text: str) -> go.Figure:
    """An empty figure still renders (axes and a message), so the page layout never jumps."""
    fig.add_annotation(
        text=text, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False, font={"size": 15}
    )
    return fig


def _shape_colors(shapes: Sequence[str]) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(sorted(set(shapes)))}


# -------------------------------------------------------------------------------------------------


def _uniform_band_info(rf: RatioFront) -> tuple[list[float], float, float, str] | None:
    """(x span, mean, sd, hover) of uniform's band across a front's x range (None: no uniform)."""
    xs = np.asarray(rf.points["x"], dtype=float) if len(rf.points) else np.array([])
    lo, hi = (float(xs.min()), float(xs.max())) if len(xs) else (1.0, 1.0)
    pad = max(0.05, 0.05 * (hi - lo))
    if rf.baseline is None:
        return None
    b = rf.baseline
    sd = b.sd if b.n > 1 else 0.0
    seeds = f"{b.n} of {b.k} seeds" if b.k > b.n else f"{b.n} seed(s)"
    text = f"uniform: {b.mean:.4g} (mean of {seeds}; sd {sd:.3g}; {b.lo:.4g}..{b.hi:.4g})"
    return [lo - pad, hi + pad], b.mean, sd, text


def _uniform_traces(rf: RatioFront, visible: bool) -> list[go.Scatter]:
    """Uniform as a band (mean ± sd) and a dashed mean line; none without a baseline."""
    info = _uniform_band_info(rf)
    if info is None:
        return []
    bx, mean, sd, text = info
    band = go.Scatter(
        x=bx + bx[::-1],
        y=[mean + sd] * 2 + [mean - sd] * 2,
        fill="toself",
        mode="lines",
        fillcolor="rgba(85,85,85,0.15)",
        line={"width": 0},
        name="uniform ± sd",
        hoverinfo="skip",
        visible=visible,
        legendgroup="uniform",
    )
    line = go.Scatter(
        x=bx,
        y=[mean] * 2,
        mode="lines",
        name="uniform (mean)",
        line={"color": UNIFORM_COLOR, "dash": "dash"},
        text=[text] * 2,
        hovertemplate=HOVER,
        visible=visible,
        legendgroup="uniform",
    )
    return [band, line]


def _shape_traces(rf: RatioFront, colors: Mapping[str, str], visible: bool) -> list[go.Scatter]:
    """Per schedule shape: its candidates (fully measured, then censored: open markers) and
    its front line."""
    traces = []
    for shape in sorted(set(rf.points["shape"])) if len(rf.points) else []:
        pts = rf.points[rf.points["shape"] == shape]
        front = rf.front[rf.front["shape"] == shape]
        for censored, symbol in ((False, "circle"), (True, "circle-open")):
            sub = pts[(pts["tier"] > 0) == censored]
            if sub.empty:
                continue
            traces.append(
                go.Scatter(
                    x=sub["x"],
                    y=sub["value"],
                    mode="markers",
                    name=f"{shape} ({'censored: n of k seeds' if censored else 'all'})",
                    marker={
                        "color": colors[shape],
                        "opacity": 0.8 if censored else 0.3,
                        "size": 9 if censored else 7,
                        "symbol": symbol,
                    },
                    text=sub["hover"],
                    hovertemplate=HOVER,
                    visible=visible,
                    legendgroup=shape,
                    showlegend=False,
                )
            )
        traces.append(
            go.Scatter(
                x=front["x"],
                y=front["value"],
                mode="lines+markers",
                name=shape,
                line={"color": colors[shape], "width": 2.5},
                marker={"size": 9},
                text=front["hover"],
                hovertemplate=HOVER,
                visible=visible,
                legendgroup=shape,
            )
        )
    return traces


def _metric_buttons(metrics: Sequence[str], groups: Sequence[Sequence[int]], n: int) -> dict:
    """The update menu that shows one metric's traces (``groups[i]``, of ``n``) at a time."""
    buttons = []
    for i, metric in enumerate(metrics):
        vis = [j in groups[i] for j in range(n)]
        buttons.append(
            {
                "label": label(metric),
                "method": "update",
                "args": [{"visible": vis}, {"yaxis.title.text": label(metric)}],
            }
        )
    return {
        "type": "buttons",
        "direction": "right",
        "buttons": buttons,
        "x": 1.0,
        "xanchor": "right",
        "y": 1.12,
        "yanchor": "bottom",
    }


def _ratio_front_info(fronts: Mapping[str, RatioFront]) -> tuple[str, str, str]:
    """(title, x axis title, y axis title) of :func:`ratio_front`: the first metric's."""
    metrics = list(fronts)
    first = fronts[metrics[0]] if metrics else None
    xlab = label(first.x) if first else label("realised_start")
    what = "taper" if first is not None and first.x == "realised_taper" else "start ratio"
    title = f"Ratio vs perplexity: best candidate per realised {what}, one line per schedule shape"
    unplaced = max((f.unplaced for f in fronts.values()), default=0)
    if unplaced:
        title += f" ({unplaced} candidate(s) without widths not shown)"
    return title, xlab, label(metrics[0]) if metrics else ""


def ratio_front(fronts: Mapping[str, RatioFront]) -> go.Figure:
    """Fronts per schedule shape vs the realised start ratio, uniform as a band; metric buttons.

    Candidates censored on some seed (pruned or failed) are open markers, "n of k seeds" in the
    hover; they are on a front line only where no fully measured candidate shares their x.
    """
    fig = go.Figure()
    metrics = list(fronts)
    groups: list[list[int]] = []
    shapes = [s for f in fronts.values() for s in f.points.get("shape", [])]
    colors = _shape_colors(shapes)
    for i, metric in enumerate(metrics):
        rf = fronts[metric]
        start = len(fig.data)
        for trace in _uniform_traces(rf, i == 0) + _shape_traces(rf, colors, i == 0):
            fig.add_trace(trace)
        groups.append(list(range(start, len(fig.data))))
    if len(metrics) > 1:
        fig.update_layout(updatemenus=[_metric_buttons(metrics, groups, len(fig.data))])
    title, xlab, ylab = _ratio_front_info(fronts)
    _layout(fig, title, xaxis_title=xlab, yaxis_title=ylab)
    first = fronts[metrics[0]] if metrics else None
    if first is None or (first.points.empty and first.baseline is None):
        _note(fig, "no finished trials yet")
    return fig


def pareto(p: Pareto) -> go.Figure:
    """Trials in objective space: the front highlighted, dominated and infeasible faded."""
    df = p.points
    three = len(p.metrics) == 3
    scatter = go.Scatter3d if three else go.Scatter
    fig = go.Figure()
    groups = [
        ("infeasible (pruned / failed / running)", ~df["feasible"], FADED, "x", 5),
        ("dominated", df["feasible"] & ~df["on_front"], "rgba(31,119,180,0.35)", "circle", 7),
        ("Pareto front", df["on_front"], "#d62728", "diamond", 10),
    ]
    for name, mask, color, symbol, size in groups:
        sub = df[mask]
        coords = {a: sub[m] for a, m in zip("xyz", p.metrics, strict=False)}
        mode = "lines+markers" if name == "Pareto front" and not three else "markers"
        # The attainment staircase: horizontal first when x is minimised, vertical first if not.
        step = "hv" if p.senses[0] == "minimize" else "vh"
        fig.add_trace(
            scatter(
                **coords,
                mode=mode,
                name=f"{name} ({len(sub)})",
                text=sub["hover"],
                hovertemplate=HOVER,
                marker={"color": color, "symbol": symbol, "size": size},
                **({} if three else {"line": {"color": color, "shape": step}}),
            )
        )
    arrows = [
        f"{label(m)} ({'↓' if s == 'minimize' else '↑'} better)"
        for m, s in zip(p.metrics, p.senses, strict=True)
    ]
    title = "Pareto front: " + " vs ".join(label(m) for m in p.metrics)
    if p.hidden:
        title += f" ({p.hidden} trial(s) without values not shown)"
    if three:
        _layout(
            fig,
            title,
            height=600,
            scene={f"{a}axis_title": t for a, t in zip("xyz", arrows, strict=True)},
        )
    else:
        _layout(fig, title, xaxis_title=arrows[0], yaxis_title=arrows[1])
    if df.empty:
        _note(fig, "no trial has values for these objectives yet")
    return fig


def width_profiles(pr: Profiles) -> go.Figure:
    """d_ff per layer of the top-k candidates, against uniform."""
    fig = go.Figure()
    if pr.uniform:
        fig.add_trace(
            go.Scatter(
                x=list(range(len(pr.uniform))),
                y=pr.uniform,
                mode="lines",
                name="uniform",
                line={"color": UNIFORM_COLOR, "dash": "dash", "width": 3},
                text=[f"uniform<br>layer {i}: {w}" for i, w in enumerate(pr.uniform)],
                hovertemplate=HOVER,
            )
        )
    profiled = False  # an LR profile: its multipliers on a second axis, dotted
    for cand, sub in pr.profiles.groupby("rank", sort=True):
        color = PALETTE[(int(cand) - 1) % len(PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=sub["layer"],
                y=sub["width"],
                mode="lines+markers",
                name=sub["legend"].iloc[0],
                text=sub["hover"],
                hovertemplate=HOVER,
                line={"color": color},
            )
        )
        if "lr" in sub and sub["lr"].notna().any():
            profiled = True
            fig.add_trace(
                go.Scatter(
                    x=sub["layer"],
                    y=sub["lr"],
                    mode="lines",
                    name=f"{sub['legend'].iloc[0]}: LR x",
                    yaxis="y2",
                    text=sub["hover"],
                    hovertemplate=HOVER,
                    line={"color": color, "dash": "dot"},
                )
            )
    _layout(
        fig,
        f"Width profiles: d_ff per layer of the best candidates by {label(pr.metric)}"
        + (" (dotted: their LR profiles)" if profiled else ""),
        xaxis={"title": {"text": "layer"}, "dtick": 1},
        yaxis_title="d_ff (MLP hidden width)",
    )
    if profiled:
        axis = {"overlaying": "y", "side": "right", "rangemode": "tozero"}
        fig.update_layout(yaxis2={"title": {"text": "LR multiplier (x train.lr)"}, **axis})
    if pr.profiles.empty:
        _note(fig, "no finished candidate yet")
    return fig


def _gapped(df, x: str, y: str, by: str) -> tuple[list, list, list]:
    """One trace for many lines: concatenate each group's points with a gap (None) between."""
    xs: list = []
    ys: list = []
    texts: list = []
    for _, g in df.groupby(by, sort=False):
        xs += [*g[x].tolist(), None]
        ys += [*g[y].tolist(), None]
        texts += [*g["hover"].tolist(), None]
    return xs, ys, texts


# Distinct colours for the learning curves' candidates (plotly's D3 palette without its grey,
# which is uniform's); a candidate keeps its colour across seeds.
CURVE_COLORS = (*PALETTE[:5], "#8c564b", "#e377c2", "#bcbd22", "#17becf")
OTHERS_COLOR = "rgba(120,120,120,0.45)"


def curve_colors(groups: Sequence[str]) -> dict[str, str]:
    """Legend group -> line colour: uniform dark grey, OTHERS light grey, the rest in order."""
    colors, i = {}, 0
    for g in groups:
        if g == "uniform":
            colors[g] = UNIFORM_COLOR
        elif g == OTHERS:
            colors[g] = OTHERS_COLOR
        else:
            colors[g], i = CURVE_COLORS[i % len(CURVE_COLORS)], i + 1
    return colors


# A curves trace with more points than this is drawn by WebGL (go.Scattergl): SVG draws each
# point as a DOM path segment, so thousands of trials' curves (a sampler study) slow the page.
GL_POINTS = 5000


def _lines_trace(n_points: int) -> type:
    """go.Scatter, or go.Scattergl past :data:`GL_POINTS` points (the same arguments)."""
    return go.Scattergl if n_points > GL_POINTS else go.Scatter


def learning_curves(c: Curves) -> go.Figure:
    """Metric vs tokens, one colour and legend entry per candidate (its seeds share them);
    pruned trials faded, the pruning points marked in their candidate's colour."""
    fig = go.Figure()
    colors = curve_colors(c.groups)
    kept = c.lines[c.lines["state"] != "PRUNED"]
    for group in c.groups:
        sub = kept[kept["group"] == group]
        if sub.empty:
            continue
        xs, ys, texts = _gapped(sub, "tokens", "value", "trial_id")
        running = int((sub.drop_duplicates("trial_id")["state"] == "RUNNING").sum())
        name = group + (f" ({running} running)" if running else "")
        fig.add_trace(
            _lines_trace(len(xs))(
                x=xs,
                y=ys,
                mode="lines",
                name=name,
                legendgroup=group,
                text=texts,
                hovertemplate=HOVER,
                connectgaps=False,
                line={
                    "color": colors[group],
                    "width": 2.5 if group == "uniform" else 1.8,
                    "dash": "dash" if group == "uniform" else "solid",
                },
            )
        )
    pruned = c.lines[c.lines["state"] == "PRUNED"]
    if len(pruned):
        xs, ys, texts = _gapped(pruned, "tokens", "value", "trial_id")
        fig.add_trace(
            _lines_trace(len(xs))(
                x=xs,
                y=ys,
                mode="lines",
                name=f"pruned ({pruned['trial_id'].nunique()})",
                text=texts,
                hovertemplate=HOVER,
                connectgaps=False,
                line={"color": FADED, "width": 1.5},
            )
        )
    if len(c.pruned_at):
        fig.add_trace(
            _lines_trace(len(c.pruned_at))(
                x=c.pruned_at["tokens"],
                y=c.pruned_at["value"],
                mode="markers",
                name=f"pruned here ({len(c.pruned_at)})",
                text=c.pruned_at["hover"],
                hovertemplate=HOVER,
                marker={
                    "symbol": "x",
                    "size": 9,
                    "color": [colors.get(g, "#444") for g in c.pruned_at["group"]],
                },
            )
        )
    title = f"Learning curves: {label(c.metric)} vs tokens, one colour per candidate"
    if len(c.failed):
        title += f" ({len(c.failed)} failed trial(s) listed below)"
    _layout(fig, title, xaxis_title="tokens trained", yaxis_title=label(c.metric))
    if c.lines.empty:
        _note(fig, "no evaluations recorded yet")
    return fig


def parallel_coords(par: Parallel) -> go.Figure:
    """Search parameters of finished trials, one line each, coloured by the metric."""
    t = par.table
    dims = []
    for name in t.columns:
        if name == "value":
            continue
        dim: dict = {"label": name, "values": t[name]}
        if name in par.categories:
            labels = par.categories[name]
            dim.update(tickvals=list(range(len(labels))), ticktext=labels)
        dims.append(dim)
    values = t.get("value", [])
    dims.append({"label": label(par.metric), "values": values})
    fig = go.Figure(
        go.Parcoords(
            dimensions=dims,
            line={
                "color": values,
                "colorscale": "Viridis_r",
                "showscale": True,
                "colorbar": {"title": {"text": par.metric}},
            },
        )
    )
    _layout(fig, f"Parallel coordinates of the search parameters, coloured by {label(par.metric)}")
    if t.empty:
        _note(fig, "no finished trial yet")
    return fig


def importances(imp: Importances) -> go.Figure:
    """Optuna's parameter importances as horizontal bars."""
    v = imp.values.iloc[::-1]
    fig = go.Figure(
        go.Bar(
            x=v["importance"],
            y=v["param"],
            orientation="h",
            marker={"color": PALETTE[0]},
            text=[f"{x:.2f}" for x in v["importance"]],
            textposition="auto",
        )
    )
    _layout(
        fig,
        f"Parameter importances for {label(imp.metric)}: {imp.note}",
        xaxis_title="importance (sums to 1)",
        height=max(260, 90 + 45 * len(v)),
    )
    if v.empty:  # the reason alone: empty axes would read as importances of 0
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        _note(fig, f"no importances: {imp.note}")
    return fig


def paired_deltas(d: Deltas, limit: int = 40) -> go.Figure:
    """Each candidate's delta vs uniform per seed, the mean with a 95% interval, noise marked.

    Censored candidates (pruned or failed on some seed) come after the fully measured ones,
    labelled "[n of k seeds]": the mean over their completed seeds flatters them. Only the
    ``limit`` best candidates are drawn, so a large study keeps a readable figure.
    """
    fig = go.Figure()
    s = d.summary.head(limit)
    order = list(s["label"])
    per_seed = d.per_seed[d.per_seed["label"].isin(order)]
    better = "lower" if d.sense == "minimize" else "higher"
    measured = s["tier"] == 0
    for kind, name, color in (
        (False, "clear difference", "#1f77b4"),
        (True, "within noise (95% CI contains 0)", "#aaaaaa"),
        (None, "no residual df in the design yet: noise unknown", "#ff7f0e"),
        ("censored", "censored: pruned / failed / running on some seed", "#d62728"),
    ):
        if kind == "censored":
            sub = s[~measured]
        elif kind is None:
            sub = s[measured & s["within_noise"].isna()]
        else:
            sub = s[measured & (s["within_noise"] == kind)]
        if sub.empty:
            continue
        err = [0.0 if math.isnan(h) else h for h in sub["half_width"]]
        text = [
            f"{r.candidate}<br>mean delta {r.mean:+.4g} over {r.n} seed(s) ({r.n_of_k} completed)"
            + ("" if math.isnan(r.half_width) else f"<br>95% CI ±{r.half_width:.3g}")
            + (
                ""
                if not math.isfinite(r.effect_noise)
                else f", {abs(r.effect_noise):.1f} noise units"
            )
            + f"<br>{r.flag or name}"
            for r in sub.itertuples()
        ]
        fig.add_trace(
            go.Scatter(
                x=sub["mean"],
                y=sub["label"],
                mode="markers",
                name=name,
                text=text,
                hovertemplate=HOVER,
                error_x={"type": "data", "array": err, "visible": True},
                marker={"color": color, "size": 12, "symbol": "diamond"},
            )
        )
    if len(per_seed):
        fig.add_trace(
            go.Scatter(
                x=per_seed["delta"],
                y=per_seed["label"],
                mode="markers",
                name="per seed",
                text=per_seed["hover"],
                hovertemplate=HOVER,
                marker={"color": "rgba(0,0,0,0.45)", "size": 6},
            )
        )
    fig.add_vline(x=0, line={"color": UNIFORM_COLOR, "dash": "dash"})
    title = f"Paired deltas vs uniform (same seed): {label(d.metric)}, {better} is better"
    if len(d.summary) > limit:
        title += f" (best {limit} of {len(d.summary)} candidates)"
    _layout(
        fig,
        title,
        xaxis_title=f"delta {label(d.metric)} vs uniform",
        yaxis={"categoryorder": "array", "categoryarray": order[::-1], "automargin": True},
        height=max(320, 120 + 28 * len(order)),
    )
    if s.empty:
        _note(fig, "no candidate shares a seed with a finished uniform baseline yet")
    return fig


# row better / not separated / row worse (the cell's ``better``: 1, 0, -1)
SEPARATION_COLORS = ((0.0, "#d6604d"), (0.5, "#eeeeee"), (1.0, "#4393c3"))


def separation(m: Separation) -> go.Figure:
    """The "can these be told apart" matrix: row minus column on their common seeds, 95% CI.

    Bold and coloured where the interval excludes 0 (blue: the row is better, red: worse);
    grey where it does not; blank without a common seed or a noise estimate. A dagger marks a
    cell judged on one common seed with the study's block-design noise.
    """
    fig = go.Figure()
    names = m.names
    if len(names) >= 2 and len(m.cells):
        cell = m.cells.set_index(["a", "b"])
        z, text, hover = [], [], []
        for a in names:
            zr, tr, hr = [], [], []
            for b in names:
                if a == b:
                    zr.append(None)
                    tr.append("")
                    hr.append(a)
                    continue
                c = cell.loc[(a, b)]
                zr.append(None if math.isnan(c["better"]) else float(c["better"]))
                tr.append(c["text"])
                hr.append(c["hover"])
            z.append(zr)
            text.append(tr)
            hover.append(hr)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=names,
                y=names,
                zmin=-1,
                zmax=1,
                colorscale=[list(c) for c in SEPARATION_COLORS],
                showscale=False,
                text=text,
                texttemplate="%{text}",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                xgap=2,
                ygap=2,
            )
        )
    better = "lower" if m.sense == "minimize" else "higher"
    _layout(
        fig,
        f"Can these be told apart? Row minus column, {label(m.metric)} ({better} is better), "
        "on common seeds with 95% CI<br><sub>bold, blue: row better; bold, red: row worse "
        "(the interval excludes 0); grey: within noise; † one common seed, pooled seed "
        "noise</sub>",
        xaxis={"side": "top", "automargin": True, "title": "minus column"},
        yaxis={"autorange": "reversed", "automargin": True, "title": "row"},
        height=max(320, 160 + 70 * len(names)),
    )
    fig.update_layout(margin={"t": 150, "b": 40})  # room for the column names on top
    if len(names) < 2:
        _note(fig, "fewer than two measured candidates: nothing to tell apart")
    return fig


def fidelity(doc: Mapping[str, object]) -> go.Figure:
    """A ladder's paired effect vs compute per candidate (points) with its fitted line, dashed
    beyond the largest rung up to the farthest crossing shown (a prediction, not a measure)."""
    fig = go.Figure()
    fits = list(doc.get("fits") or [])  # type: ignore[call-overload]
    metric = str(doc.get("metric", "metric"))
    xs = [
        float(r["log10_compute"])
        for r in doc.get("rungs") or []  # type: ignore[attr-defined]
        if r["log10_compute"] is not None
    ]
    if not fits or len(xs) < 2:
        return _note(_layout(fig, "Effect vs compute"), "fewer than two rungs with compute")
    ahead = [
        float(c["log10_compute"])
        for c in doc.get("crossings") or []  # type: ignore[attr-defined]
        if c["log10_compute"] is not None
    ]
    lo, hi = min(xs), max(xs)
    far = min(max([hi, *ahead]), hi + 2.0)  # at most two decades past the largest rung
    for i, f in enumerate(fits):
        color = UNIFORM_COLOR if f["candidate"] == "uniform" else PALETTE[i % len(PALETTE)]
        pts = f["points"]
        fig.add_trace(
            go.Scatter(
                x=[10 ** p["log10_compute"] for p in pts],
                y=[p["effect"] for p in pts],
                mode="markers",
                marker={"color": color, "size": 9},
                name=f["candidate"],
                legendgroup=f["candidate"],
                text=[
                    f"{f['candidate']}: {p['effect']:+.4f} at {p['compute']:.3g} FLOPs"
                    for p in pts
                ],
                hovertemplate=HOVER,
            )
        )
        if f["slope"] is None or f["intercept"] is None:
            continue
        for a, b, dash in ((lo, hi, "solid"), (hi, far, "dot")):
            if b <= a:
                continue
            line_x = np.linspace(a, b, 20)
            fig.add_trace(
                go.Scatter(
                    x=10**line_x,
                    y=f["intercept"] + f["slope"] * line_x,
                    mode="lines",
                    line={"color": color, "dash": dash},
                    name=f"{f['candidate']} ({f['kind']})",
                    legendgroup=f["candidate"],
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
    return _layout(
        fig,
        f"Paired effect on {metric} vs uniform, against training compute per model "
        "(dotted: extrapolated)",
        xaxis={"title": "training FLOPs (log)", "type": "log"},
        yaxis={"title": f"{metric} minus uniform (same seed)", "zeroline": True},
    )


def layer_diagnostics(d: LayerLines) -> go.Figure:
    """Cosine, relative norm and ablation of every MLP across depth, and with attention
    measures a second row: each attention layer's entropy (bars: its least and most spread
    head) and ablation. One line per candidate, uniform dashed as the reference, a dotted zero
    line where the sign matters."""
    panels = [(1, col, metric) for col, metric in enumerate(DIAGNOSTICS, start=1)]
    if d.attention:
        panels += [(2, col, metric) for col, metric in enumerate(ATTENTION, start=1)]
        fig = make_subplots(
            rows=2,
            cols=len(DIAGNOSTICS),
            specs=[[{}] * len(DIAGNOSTICS), [{}] * len(ATTENTION) + [None]],
            horizontal_spacing=0.08,
            vertical_spacing=0.14,
        )
    else:
        fig = make_subplots(rows=1, cols=len(DIAGNOSTICS), horizontal_spacing=0.08)
    others = 0
    for (cand, baseline), sub in d.lines.groupby(["candidate", "is_baseline"], sort=False):
        if baseline:
            line = {"color": UNIFORM_COLOR, "dash": "dash", "width": 3}
        else:
            line = {"color": PALETTE[others % len(PALETTE)]}
            others += 1
        for row, col, metric in panels:
            pts = sub[sub[metric].notna()]  # hope's levels > 0 have no attention
            if pts.empty:
                continue
            bars = None
            if metric == "attn_entropy_nats":
                bars = {
                    "type": "data",
                    "symmetric": False,
                    "array": pts["attn_entropy_max_nats"] - pts[metric],
                    "arrayminus": pts[metric] - pts["attn_entropy_min_nats"],
                    "thickness": 1,
                }
            fig.add_trace(
                go.Scatter(
                    x=pts["depth"],
                    y=pts[metric],
                    error_y=bars,
                    mode="lines+markers",
                    name=sub["legend"].iloc[0],
                    legendgroup=str(cand),
                    showlegend=(row, col) == (1, 1),
                    line=line,
                    text=pts["hover"],
                    hovertemplate=HOVER,
                ),
                row=row,
                col=col,
            )
    titles = {**DIAGNOSTICS, **ATTENTION}
    for row, col, metric in panels:
        fig.update_yaxes(title_text=titles[metric], row=row, col=col)
        fig.update_xaxes(title_text="layer", dtick=1, row=row, col=col)
        if metric in ("cosine", "ablation_nats", "attn_ablation_nats"):
            zero = {"color": "#999999", "dash": "dot", "width": 1}
            fig.add_hline(y=0, line=zero, row=row, col=col)
    levels = f"; level i of {d.levels} at layer + i/{d.levels}" if d.levels > 1 else ""
    attention = (
        "<br>per attention layer (second row): its heads' attention entropy (bars: the least "
        "and most spread head) and the loss increase when it is removed"
        if d.attention
        else ""
    )
    _layout(
        fig,
        "Per-layer diagnostics of the kept weights on "
        f"{d.val_tokens:,} validation tokens<br><sub>per MLP: cosine with and norm relative to "
        "the residual stream it is added to, and the loss increase when it is removed; "
        f"uniform dashed{levels}{attention}</sub>",
        height=860 if d.attention else 480,
    )
    fig.update_layout(
        margin={"t": 120 if d.attention else 100},
        legend={"orientation": "h", "y": -0.1 if d.attention else -0.2},
    )
    if d.lines.empty:
        _note(fig, "no analysis: run tlmsearch analyze RUN on a run that kept weights")
    return fig


def setting_sweep(sw: SettingSweep) -> go.Figure:
    """The metric against a setting (train.lr), one line per schedule (uniform dashed), each
    schedule's best setting a star: do the schedules want different learning rates?"""
    fig = go.Figure()
    colors = _shape_colors([s for s in sw.lines["schedule"] if s != "uniform"])
    for schedule, sub in sw.lines.groupby("schedule", sort=False):
        base = bool(sub["is_baseline"].iloc[0])
        color = UNIFORM_COLOR if base else colors[schedule]
        fig.add_trace(
            go.Scatter(
                x=sub["x"],
                y=sub["mean"],
                error_y={"type": "data", "array": sub["sd"].fillna(0.0), "visible": True},
                mode="lines+markers",
                name=str(schedule),
                text=sub["hover"],
                hovertemplate=HOVER,
                marker={
                    "symbol": ["star" if b else "circle" for b in sub["best"]],
                    "size": [15 if b else 7 for b in sub["best"]],
                },
                line={"color": color, "dash": "dash" if base else "solid"},
            )
        )
    xs = sw.lines["x"].dropna()
    log = bool(len(xs) and xs.min() > 0 and xs.max() / xs.min() >= 4)
    title = f"{label(sw.metric)} against {sw.axis}, one line per schedule (star: its best)"
    _layout(
        fig,
        title,
        xaxis={"title": {"text": sw.axis}, "type": "log" if log else "linear"},
        yaxis_title=f"{label(sw.metric)} (mean ± sd over seeds)",
    )
    if sw.lines.empty:
        _note(fig, "no finished trial yet")
    return fig


_DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")


def interaction(ix: Interaction) -> go.Figure:
    """Each schedule's effect vs uniform against a setting (x), one line per schedule (its
    interval the one its word was decided at) and per schedule family (thick, no interval),
    one dash per value of the other setting dimensions, the equivalence band +-d shaded: does
    the effect depend on the setting?"""
    fig = go.Figure()
    lines = ix.lines
    colors = _shape_colors(list(lines["group"]))
    dashes = {o: _DASHES[i % len(_DASHES)] for i, o in enumerate(sorted(set(lines["other"])))}
    for name, sub in lines.groupby("line", sort=False):
        fam = sub["kind"].iloc[0] == "family"
        err = (
            None
            if fam
            else {
                "type": "data",
                "array": (sub["hi"] - sub["estimate"]).tolist(),
                "arrayminus": (sub["estimate"] - sub["lo"]).tolist(),
                "visible": True,
            }
        )
        fig.add_trace(
            go.Scatter(
                x=sub["x"],
                y=sub["estimate"],
                error_y=err,
                mode="lines+markers",
                name=str(name),
                text=sub["hover"],
                hovertemplate=HOVER,
                line={
                    "color": colors[sub["group"].iloc[0]],
                    "width": 4 if fam else 2,
                    "dash": dashes[sub["other"].iloc[0]],
                },
            )
        )
    if ix.margin is not None:
        fig.add_hrect(y0=-ix.margin, y1=ix.margin, fillcolor="#2ca02c", opacity=0.12, line_width=0)
    fig.add_hline(y=0.0, line={"color": UNIFORM_COLOR, "dash": "dash", "width": 1})
    xs = pd.to_numeric(lines["x"], errors="coerce").dropna()
    log = bool(len(xs) == len(lines) and xs.min() > 0 and xs.max() / xs.min() >= 4)
    band = (
        f"; shaded: equivalent within +-{ix.margin:g}"
        if ix.margin is not None
        else "; no equivalence margin"
    )
    title = (
        f"{label(ix.metric)} vs uniform against {ix.axis}: does the effect depend on it?"
        "<br><sub>one line per schedule (bars: the interval its word was decided at) and "
        f"per schedule family (thick: the mean of its schedules){band}"
        f"<br>{ix.rule.partition(';')[0] or 'the contrasts family'}</sub>"
    )
    _layout(
        fig,
        title,
        height=520,
        xaxis={"title": {"text": ix.axis}, "type": "log" if log else "-"},
        yaxis_title=f"{label(ix.metric)} minus uniform's, same setting and seeds",
    )
    fig.update_layout(margin={"t": 120})
    return fig
