"""The tuned comparison in the report: collect (pure), figure, HTML (no Ray, no training)."""

from __future__ import annotations

from fixtures_run import make_run, study_dict
from test_settings import VALUES, _rows

from tlmsearch.report import figures as F
from tlmsearch.report.html import build, render, tuned_html
from tlmsearch.report.tuned import setting_sweep
from tlmsearch.run_dir.tables import load_run, trials_frame


def test_sweep_has_one_line_per_schedule_with_its_best_marked():
    sw = setting_sweep(trials_frame(_rows(VALUES)), "val_bpb", "minimize")
    assert sw.axis == "lr" and sw.selection == "same seeds" and "optimistic" in sw.caveat
    best = sw.lines[sw.lines["best"]].set_index("schedule")["x"].to_dict()
    assert best == {"uniform": 0.003, "cosine 1.5->0.5": 0.001}
    assert sorted(sw.lines["x"].unique()) == [0.001, 0.003]
    row = sw.table.set_index("schedule").loc["cosine 1.5->0.5"]
    assert round(float(row["mean_delta"]), 6) == -0.09 and "low end" in row["edge"]
    fig = F.setting_sweep(sw)
    assert len(fig.data) == 2 and {t.name for t in fig.data} == {"uniform", "cosine 1.5->0.5"}
    html = tuned_html(sw)
    assert "Optimistic" in html and "low end of the values tried" in html
    # beside it, the effect at uniform's best LR (0.003), the one a one-LR study would share
    assert round(float(row["shared_delta"]), 6) == -0.06
    assert "vs uniform at uniform&#x27;s best (95% CI)" in html and "-0.06 (" in html


def test_no_sweep_without_settings():
    rows = [
        {
            "trial_id": f"u{s}",
            "seed": s,
            "params": {"shape": "uniform"},
            "state": "COMPLETE",
            "val_bpb": 2.0,
        }
        for s in (0, 1)
    ]
    assert setting_sweep(trials_frame(rows), "val_bpb", "minimize") is None


def test_report_of_an_lr_study_has_the_tuned_section(tmp_path):
    study = study_dict(shapes=("cosine",))
    study["space"]["dimensions"] = {
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "categorical", "choices": [1.5]},
        "train.lr": {"type": "categorical", "choices": [0.001, 0.003]},
    }
    run = load_run(make_run(tmp_path / "run", study, trials=_rows(VALUES)))
    rep = build(run)
    assert "fig-settings" in [f.id for f in rep.figures]
    page = render(rep, "t")
    assert "tuned-box" in page and "uniform @ lr=0.003" in page
    assert "Each effect is within one learning rate" in page
    assert "At one learning rate:" not in page
    assert "comes from one fit per setting value" in page  # each LR's own noise


def test_report_of_a_one_lr_study_says_its_effects_may_be_an_lr_effect(tmp_path):
    run = load_run(make_run(tmp_path / "run", study_dict(shapes=("cosine",))))
    page = render(build(run), "t")
    assert "<b>At one learning rate:</b> these effects may be an LR effect; see tuned" in page
    assert "comes from one fit of the whole study" in page
    assert "Effective learning rate per layer, against uniform" in page
    assert "cosine 1.5-&gt;0.5 (standard): standard: LR and init x1 everywhere" in page
