"""The per-layer diagnostics figure: lines per candidate from a synthetic analysis.parquet, the
attention row when the table has attention measures."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_run import make_run

from tlmsearch.report.html import build, render
from tlmsearch.report.layers import ATTENTION, DIAGNOSTICS, layer_diagnostics
from tlmsearch.run_dir.tables import analysis_frame, atomic_write, load_run

CANDIDATES = [
    (0, "uniform", 0),
    (1, "cosine 1.5->0.5", 0),
    (2, "uniform", 1),
    (3, "cosine 1.5->0.5", 1),
]


def synthetic(levels: int = 1, layers: int = 4) -> list[dict]:
    """Rows as ``tlmsearch analyze`` writes them; every value encodes where it comes from."""
    rows = []
    for number, cand, seed in CANDIDATES:
        for layer in range(layers):
            for level in range(levels):
                rows.append(
                    {
                        "trial_id": f"t{number}",
                        "number": number,
                        "seed": seed,
                        "candidate": cand,
                        "shape": cand.split()[0],
                        "is_baseline": cand == "uniform",
                        "layer": layer,
                        "level": level,
                        "width": 64 if cand == "uniform" else 96 - 16 * layer,
                        "cosine": 0.1 * layer + 0.01 * seed,
                        "rel_norm": 0.5 + level + seed,
                        "ablation_nats": (0.2 if cand == "uniform" else 0.3) / (layer + 1),
                        "val_loss": 3.0,
                        "val_tokens": 2048,
                    }
                )
    return rows


def with_attention(rows: list[dict]) -> list[dict]:
    """The rows with attention measures on each layer's level 0, as ``tlmsearch analyze``
    writes them: 4 heads (2 key/value) for uniform, 2 (1) for the other candidate."""
    out = []
    for r in rows:
        if r["level"] == 0:
            uniform, layer, seed = r["is_baseline"], r["layer"], r["seed"]
            entropy = 2.0 - 0.25 * layer + 0.1 * seed
            r = {
                **r,
                "heads": 4 if uniform else 2,
                "kv_heads": 2 if uniform else 1,
                "attn_entropy_nats": entropy,
                "attn_entropy_min_nats": entropy - 0.5,
                "attn_entropy_max_nats": entropy + 0.25,
                "attn_ablation_nats": 0.01 * (layer + 1) * (2 if uniform else 1),
            }
        out.append(r)
    return out


def with_analysis(path: Path, rows: list[dict]) -> Path:
    run = make_run(path, seeds=(0, 1), shapes=("cosine",))
    df = analysis_frame(rows)
    atomic_write(run / "analysis.parquet", lambda p: df.to_parquet(p, index=False))
    return run


def test_one_line_per_candidate_mean_over_seeds_uniform_first() -> None:
    d = layer_diagnostics(analysis_frame(synthetic()))
    assert d.levels == 1 and d.val_tokens == 2048
    assert d.lines["legend"].unique().tolist() == [
        "uniform (reference), mean of seeds 0, 1",
        "cosine 1.5->0.5, mean of seeds 0, 1",
    ]
    cos = d.lines[~d.lines["is_baseline"]]
    assert cos["depth"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert cos["cosine"].round(6).tolist() == [0.005, 0.105, 0.205, 0.305]  # seeds 0, 1 averaged
    assert cos["rel_norm"].tolist() == [1.0] * 4
    assert cos["width"].tolist() == [96, 80, 64, 48]
    assert cos["ablation_nats"].round(6).tolist() == [0.3, 0.15, 0.1, 0.075]


def test_hope_levels_sit_between_layers() -> None:
    d = layer_diagnostics(analysis_frame(synthetic(levels=2, layers=2)))
    assert d.levels == 2
    u = d.lines[d.lines["is_baseline"]]
    assert u["depth"].tolist() == [0.0, 0.5, 1.0, 1.5]
    assert u["rel_norm"].tolist() == [1.0, 2.0, 1.0, 2.0]
    assert "layer 1, level 1: d_ff 64" in u["hover"].iloc[-1]


def test_report_draws_the_figure_only_with_an_analysis(tmp_path: Path) -> None:
    plain = make_run(tmp_path / "plain", seeds=(0,), shapes=("cosine",))
    assert "fig-layers" not in [f.id for f in build(load_run(plain)).figures]

    run = with_analysis(tmp_path / "run", synthetic())
    rep = build(load_run(run))
    fig = next(f for f in rep.figures if f.id == "fig-layers")
    assert fig.section == "Per-layer diagnostics" and rep.figures[-1] is fig
    traces = fig.fig.data
    assert len(traces) == 2 * len(DIAGNOSTICS)  # two candidates, one trace per panel each
    assert [t.name for t in traces if t.showlegend] == [
        "uniform (reference), mean of seeds 0, 1",
        "cosine 1.5->0.5, mean of seeds 0, 1",
    ]
    uniform = [t for t in traces if t.name.startswith("uniform")]
    assert {t.line.dash for t in uniform} == {"dash"}
    assert {t.line.dash for t in traces if t not in uniform} == {None}
    ablation = traces[2 * len(DIAGNOSTICS) - 1]  # the candidate's last panel
    assert list(ablation.y) == pytest.approx([0.3, 0.15, 0.1, 0.075])
    assert "2,048 validation tokens" in fig.fig.layout.title.text
    page = render(rep, "t")
    assert "id='per-layer-diagnostics'" in page and 'id="fig-layers"' in page


def test_empty_analysis_draws_a_note() -> None:
    from tlmsearch.report.figures import layer_diagnostics as figure

    fig = figure(layer_diagnostics(analysis_frame([])))
    assert not fig.data and "tlmsearch analyze" in fig.layout.annotations[0].text


def test_attention_lines_sit_on_each_layer() -> None:
    d = layer_diagnostics(analysis_frame(with_attention(synthetic(levels=2, layers=2))))
    assert d.attention and d.levels == 2
    cos = d.lines[~d.lines["is_baseline"]]
    attn = cos[cos["attn_entropy_nats"].notna()]
    assert attn["depth"].tolist() == [0.0, 1.0]  # level 0 only: one attention per layer
    assert attn["attn_entropy_nats"].round(6).tolist() == [2.05, 1.8]  # seeds 0, 1 averaged
    assert attn["attn_entropy_min_nats"].round(6).tolist() == [1.55, 1.3]
    assert attn["heads"].tolist() == [2, 2] and attn["kv_heads"].tolist() == [1, 1]
    assert attn["attn_ablation_nats"].round(6).tolist() == [0.01, 0.02]
    assert (
        "attention: 2 heads (1 key/value), entropy 2.050 nats (1.550-2.300)"
        in (attn["hover"].iloc[0])
    )
    assert "attention" not in cos["hover"].iloc[1]  # level 1: the MLP alone
    assert not layer_diagnostics(analysis_frame(synthetic())).attention


def test_report_draws_the_attention_row(tmp_path: Path) -> None:
    run = with_analysis(tmp_path / "run", with_attention(synthetic()))
    fig = next(f for f in build(load_run(run)).figures if f.id == "fig-layers").fig
    per_candidate = len(DIAGNOSTICS) + len(ATTENTION)
    assert len(fig.data) == 2 * per_candidate
    entropy, ablation = fig.data[len(DIAGNOSTICS) : per_candidate]  # uniform's attention row
    assert entropy.name.startswith("uniform") and entropy.yaxis == "y4"
    assert list(entropy.y) == pytest.approx([2.05, 1.8, 1.55, 1.3])
    assert list(entropy.error_y.arrayminus) == pytest.approx([0.5] * 4)
    assert list(entropy.error_y.array) == pytest.approx([0.25] * 4)
    assert list(ablation.y) == pytest.approx([0.02, 0.04, 0.06, 0.08])
    assert fig.layout.yaxis4.title.text == ATTENTION["attn_entropy_nats"]
    assert "per attention layer (second row)" in fig.layout.title.text
