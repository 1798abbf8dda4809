"""The report's effects section shows the study's contrasts (report/effects.py, html.py)."""

from __future__ import annotations

from tlmsearch.report import effects as E
from tlmsearch.report.html import contrasts_html
from tlmsearch.run_dir.tables import trials_frame


def _rows():
    out = []
    for seed in range(3):
        for shape, params, v in [
            ("u", {"shape": "uniform"}, 2.0),
            ("c", {"shape": "cosine", "r_start": 1.5}, 1.9),
            ("l", {"shape": "linear", "r_start": 1.5}, 1.95),
        ]:
            for lr in (0.001, 0.003):
                out.append(
                    {
                        "trial_id": f"{shape}{lr}{seed}",
                        "seed": seed,
                        "params": {**params, "train.lr": lr},
                        "state": "COMPLETE",
                        "val_bpb": v
                        + 0.01 * seed
                        + 0.003 * ((seed * 7 + len(shape)) % 3)
                        + (0.05 if lr == 0.003 else 0.0),
                    }
                )
    return out


def test_the_effects_section_has_a_contrasts_table_with_each_questions_answer():
    t = trials_frame(_rows())
    e = E.effects(t, "val_bpb")
    assert e.contrasts is not None and len(e.contrasts) > 0
    html = contrasts_html(e)
    assert "<h3>Contrasts</h3>" in html and "Holm over" in html
    for name, word in zip(e.contrasts["name"], e.contrasts["word"], strict=True):
        assert name.replace(">", "&gt;") in html and word in html


def test_no_contrasts_table_without_contrasts():
    t = trials_frame(_rows())
    e = E.effects(t, "val_bpb")._replace(contrasts=None)
    assert contrasts_html(e) == ""


def _interaction(margin=0.02):
    from tlmsearch.evidence import Evidence

    t = trials_frame(_rows())
    ev = Evidence.build(t, "val_bpb", margin=margin)
    return t, E.effects(t, "val_bpb", evidence=ev)


def test_the_interaction_plot_has_a_line_per_schedule_and_family_and_the_band():
    import plotly.graph_objects as go

    from tlmsearch.report import figures as F

    t, e = _interaction()
    ix = E.interaction(t, e)
    assert ix.axis == "train.lr" and ix.margin == 0.02
    lines = ix.lines.set_index(["line", "x"])
    c = e.contrasts[e.contrasts["kind"] == "setting"].set_index("name")
    # each schedule's point is its per-setting contrast, with the interval its word used
    row = c.loc["cosine 1.5->0.5 vs uniform at lr=0.001"]
    got = lines.loc[("cosine 1.5->0.5", 0.001)]
    assert (got["estimate"], got["lo"], got["hi"], got["word"]) == (
        row["estimate"],
        row["lo"],
        row["hi"],
        row["word"],
    )
    # the early-heavy family (cosine and linear 1.5->0.5): the mean of its schedules
    fam = lines.loc[("early-heavy", 0.003), "estimate"]
    both = [
        c.loc[f"{s} vs uniform at lr=0.003", "estimate"]
        for s in ("cosine 1.5->0.5", "linear 1.5->0.5")
    ]
    assert abs(fam - sum(both) / 2) < 1e-12
    fig = F.interaction(ix)
    by = {tr.name: tr for tr in fig.data}
    assert set(by) == {"cosine 1.5->0.5", "linear 1.5->0.5", "early-heavy"}
    assert list(by["cosine 1.5->0.5"].x) == [0.001, 0.003]
    assert by["cosine 1.5->0.5"].error_y.array is not None
    assert by["early-heavy"].error_y.array is None
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(bands) == 1 and (bands[0].y0, bands[0].y1) == (-0.02, 0.02)
    assert isinstance(fig, go.Figure)
    # without a margin: no band
    t, e = _interaction(margin=None)
    assert not [s for s in F.interaction(E.interaction(t, e)).layout.shapes if s.type == "rect"]


def test_no_interaction_plot_without_settings(tmp_path):
    from fixtures_run import make_run, study_dict

    from tlmsearch.report.html import build
    from tlmsearch.run_dir.tables import load_run

    rows = [r for r in _rows() if r["params"]["train.lr"] == 0.001]
    for r in rows:
        r["params"] = {k: v for k, v in r["params"].items() if k != "train.lr"}
    t = trials_frame(rows)
    assert E.interaction(t, E.effects(t, "val_bpb")) is None
    run = load_run(make_run(tmp_path / "run", study_dict(shapes=("cosine",))))
    assert "fig-interaction" not in [f.id for f in build(run).figures]


def test_a_settings_report_has_the_interaction_plot(tmp_path):
    from fixtures_run import make_run, study_dict
    from test_settings import VALUES
    from test_settings import _rows as lr_rows

    from tlmsearch.report.html import build, render
    from tlmsearch.run_dir.tables import load_run

    study = study_dict(shapes=("cosine",))
    study["space"]["dimensions"] = {
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "categorical", "choices": [1.5]},
        "train.lr": {"type": "categorical", "choices": [0.001, 0.003]},
    }
    run = load_run(make_run(tmp_path / "run", study, trials=lr_rows(VALUES)))
    rep = build(run)
    fig = next(f for f in rep.figures if f.id == "fig-interaction")
    assert [tr.name for tr in fig.fig.data] == ["cosine 1.5->0.5"]
    assert 'id="fig-interaction"' in render(rep, "t")
