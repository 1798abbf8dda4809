"""The report's effects section shows the study's contrasts (report/effects.py, html.py)."""

from __future__ import annotations

from tlmsearch.report import effects as E
from tlmsearch.report.html import contrasts_html
from tlmsearch.run_dir.tables import trials_frame


def _rows():
    out = []
    for seed in range(3):
        for shape, params, v in [("u", {"shape": "uniform"}, 2.0),
                                 ("c", {"shape": "cosine", "r_start": 1.5}, 1.9),
                                 ("l", {"shape": "linear", "r_start": 1.5}, 1.95)]:
            for lr in (0.001, 0.003):
                out.append({"trial_id": f"{shape}{lr}{seed}", "seed": seed,
                            "params": {**params, "train.lr": lr}, "state": "COMPLETE",
                            "val_bpb": v + 0.01 * seed + 0.003 * ((seed * 7 + len(shape)) % 3)
                            + (0.05 if lr == 0.003 else 0.0)})  # fmt: skip
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
