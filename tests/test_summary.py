"""``tlmsearch validate``'s tables (tlmsearch/config/summary.py) with a heads schedule.

The candidates table without heads is checked against the budget in tests/test_budget.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from search_helpers import tiny_config

from tlmsearch.config import StudyConfig
from tlmsearch.config.summary import candidates_table, same_widths_notes
from tlmsearch.widths.budget import count_params, flops_per_token

MODEL = {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 128, "multiple_of": 16}
TAPER = {"shape": "uniform", "heads.shape": "linear", "heads.r_start": 0.5}  # heads 2 3 5 6
MOVED = {"shape": "uniform", "heads.share": 0.5}  # capacity from attention to the MLPs


def _rows(cfg: StudyConfig) -> tuple[dict[str, list[str]], str]:
    """(candidate label -> its cells, the whole text) of the proxy's table, never wrapped."""
    console = Console(width=400, record=True)
    console.print(candidates_table(cfg, cfg.model, title="proxy"))
    text = console.export_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.replace("┃", "│").split("│")[1:-1]]  # header: ┃
        if cells and cells[0]:
            rows[cells[0]] = cells
    return rows, " ".join(text.split())


@pytest.mark.parametrize("hold", ["params", "flops"])
def test_each_candidate_is_counted_as_its_heads_build_it(tmp_path: Path, hold: str) -> None:
    model = {**MODEL, "attention": {"hold": hold}}
    cfg = tiny_config(tmp_path, model=model, search={"candidates": [TAPER, MOVED]})
    rows, text = _rows(cfg)
    header = rows["candidate"]
    vocab, seq = cfg.vocab_size, cfg.data.seq_len
    for cand in ({"shape": "uniform"}, TAPER, MOVED):
        cells = dict(zip(header, rows[_label(cand)], strict=True))
        plan, headed = cfg.model.plan(cand), cfg.model.built_for(cand)
        assert cells["heads"] == " ".join(map(str, plan.heads))
        assert cells["share"] == f"{plan.heads_share:.3f}"
        assert cells["total"] == f"{count_params(headed, plan.widths, vocab).total:,}"
        flops = flops_per_token(headed, plan.widths, vocab, seq).training
        assert cells["FLOPs/tok"] == f"{flops:,}"
    taper = dict(zip(header, rows[_label(TAPER)], strict=True))
    assert taper["heads"] == "2 3 5 6" and taper["vs uniform"] == "equal"  # share 1: both equal
    moved = dict(zip(header, rows[_label(MOVED)], strict=True))
    if hold == "params":  # the parameters stay, attention's FLOPs move with its heads
        assert "FLOPs -" in moved["vs uniform"] and "total" not in moved["vs uniform"]
        assert "so FLOPs/tok differ between candidates" in text
    else:
        assert "FLOPs" not in moved["vs uniform"] and "total +" in moved["vs uniform"]
        assert "so parameters differ between candidates" in text
    assert "heads 4 4 4 4" in text  # uniform's, in the title


def test_a_study_without_heads_shows_no_heads_columns(tmp_path: Path) -> None:
    rows, text = _rows(tiny_config(tmp_path, model=MODEL))
    assert "heads" not in rows["candidate"] and "heads" not in text


def test_widths_shared_with_other_heads_are_two_models(tmp_path: Path) -> None:
    # uniform MLPs for both: the same proxy widths, but other heads per layer
    same = {"shape": "uniform", "heads.shape": "linear", "heads.r_start": 0.5, "heads.r_end": 1.5}
    cfg = tiny_config(tmp_path, model=MODEL, search={"candidates": [TAPER, same]})
    assert len(cfg.trainings()) == 2  # uniform; the taper, which `same` is (r_end's default)
    assert same_widths_notes(cfg) == [
        "same proxy widths [128, 128, 128, 128] and heads [2, 3, 5, 6]: uniform | heads linear "
        "0.5->1.5 trains once per seed and stands for uniform | heads linear 0.5->1.5"
    ]


def _label(cand: dict) -> str:
    from tlmsearch.widths.space import describe

    return describe(cand)
