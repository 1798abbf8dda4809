"""Collect function for "Per-layer diagnostics": analysis.parquet (``tlmsearch analyze``) in, one
line per candidate across depth out, uniform as the reference.

A candidate analysed on several seeds gets the mean over them at each MLP (the seeds are named
in its legend and hover). hope_attention has several MLPs per layer (its CMS levels): level i of
L sits at depth ``layer + i / L``, so the x axis stays "layer" and the levels fall in between.
A layer's attention measures (:data:`ATTENTION`) sit on its level-0 row, at depth ``layer``;
``attention`` is False when no row has them (hf and plugin models, an analysis written before
they were measured), and the figure then draws the MLP panels alone.

>>> from tlmsearch.run_dir.tables import analysis_frame
>>> a = analysis_frame([
...     {"number": n, "seed": 0, "candidate": c, "is_baseline": c == "uniform", "layer": l,
...      "level": 0, "width": 64, "cosine": 0.1 * l, "rel_norm": 0.5, "ablation_nats": 0.2}
...     for n, c in enumerate(["uniform", "cosine 1.5->0.5"]) for l in range(2)])
>>> d = layer_diagnostics(a)
>>> d.lines[["legend", "depth", "cosine"]].values.tolist()
[['uniform (reference), seed 0', 0.0, 0.0], ['uniform (reference), seed 0', 1.0, 0.1], \
['cosine 1.5->0.5, seed 0', 0.0, 0.0], ['cosine 1.5->0.5, seed 0', 1.0, 0.1]]
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

# analysis column -> axis title
DIAGNOSTICS = {
    "cosine": "cos(MLP output, residual stream)",
    "rel_norm": "||MLP output|| / ||residual||",
    "ablation_nats": "loss increase without the MLP (nats/token)",
}
# attention column -> axis title; the entropy's bars are the layer's extreme heads
ATTENTION = {
    "attn_entropy_nats": "attention entropy (nats), mean over heads",
    "attn_ablation_nats": "loss increase without the attention (nats/token)",
}
_SPREAD = ["attn_entropy_min_nats", "attn_entropy_max_nats"]


class LayerLines(NamedTuple):
    # candidate, is_baseline, depth, layer, level, width, heads, kv_heads, the DIAGNOSTICS,
    # ATTENTION and min/max entropy columns (means over seeds; NaN where a row has no MLP or no
    # attention), legend, hover; the baseline first, then candidates by label, each by depth
    lines: pd.DataFrame
    levels: int  # MLPs per layer (hope_attention's CMS levels, else 1)
    val_tokens: int  # validation positions each diagnostic was measured on (0: no analysis)
    attention: bool = False  # whether any row has attention measures


def _seeds(seeds: pd.Series) -> str:
    found = sorted({int(s) for s in seeds.dropna()})
    if not found:
        return "seed unknown"
    return ("seed " if len(found) == 1 else "mean of seeds ") + ", ".join(map(str, found))


def layer_diagnostics(analysis: pd.DataFrame) -> LayerLines:
    """The lines of the per-layer figure from the analysis table (:func:`analysis_frame`)."""
    measures = [*DIAGNOSTICS, *ATTENTION, *_SPREAD]
    cols = ["candidate", "is_baseline", "depth", "layer", "level", "width", "heads", "kv_heads"]
    cols += measures
    if analysis.empty:
        return LayerLines(pd.DataFrame(columns=[*cols, "legend", "hover"]), 1, 0)
    a = analysis.copy()
    levels = int(a["level"].max()) + 1
    a["depth"] = a["layer"].astype(float) + a["level"].astype(float) / levels
    keys = ["candidate", "is_baseline", "depth", "layer", "level"]
    lines = a.groupby(keys, as_index=False, sort=False).agg(
        width=("width", "first"),
        heads=("heads", "first"),
        kv_heads=("kv_heads", "first"),
        **{m: (m, "mean") for m in measures},
    )
    seeds = a.groupby("candidate")["seed"].apply(_seeds)
    name = lines["candidate"].where(~lines["is_baseline"], lines["candidate"] + " (reference)")
    lines["legend"] = name + ", " + lines["candidate"].map(seeds)

    def hover(r: pd.Series) -> str:
        where = f"layer {r['layer']}" + (f", level {r['level']}" if levels > 1 else "")
        text = f"{r['legend']}<br>{where}"
        if pd.notna(r["width"]):
            text += (
                f": d_ff {r['width']}<br>cosine {r['cosine']:.3f}, rel_norm "
                f"{r['rel_norm']:.3g}<br>ablation {r['ablation_nats']:+.4f} nats/token"
            )
        if pd.notna(r["attn_entropy_nats"]):
            text += (
                f"<br>attention: {r['heads']} heads ({r['kv_heads']} key/value), entropy "
                f"{r['attn_entropy_nats']:.3f} nats ({r['attn_entropy_min_nats']:.3f}-"
                f"{r['attn_entropy_max_nats']:.3f}), ablation "
                f"{r['attn_ablation_nats']:+.4f} nats/token"
            )
        return text

    lines["hover"] = lines.apply(hover, axis=1)
    lines = lines.sort_values(
        ["is_baseline", "candidate", "depth"], ascending=[False, True, True], kind="stable"
    ).reset_index(drop=True)
    tokens = pd.to_numeric(a["val_tokens"], errors="coerce").astype("float64").max()
    attention = bool(lines["attn_entropy_nats"].notna().any())
    return LayerLines(
        lines[[*cols, "legend", "hover"]], levels, int(tokens) if tokens > 0 else 0, attention
    )
