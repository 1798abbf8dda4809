"""benchmarks/lr_confound.py: the per-LR effects, best LRs and tuned effects, on known numbers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lr_confound():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import lr_confound

    return lr_confound


def _rows() -> list[dict]:
    """Uniform is best at 1x; wider_early is best at 2x (the grid's edge) under standard and
    at 1x under mup; seed 1 is 0.1 worse than seed 0 everywhere (cancels in paired deltas)."""
    bpb = {
        ("uniform", "standard"): {0.5: 3.10, 1.0: 3.00, 2.0: 3.05},
        ("wider_early", "standard"): {0.5: 3.12, 1.0: 3.02, 2.0: 2.98},
        ("wider_early", "mup"): {0.5: 3.08, 1.0: 2.99, 2.0: 3.01},
    }
    rows = []
    for (name, par), by_f in bpb.items():
        for f, v in by_f.items():
            for seed in (0, 1):
                noise = 0.004 * seed if name == "wider_early" else 0.0
                rows.append(
                    {
                        "candidate": name,
                        "parametrization": par,
                        "lr_factor": f,
                        "seed": seed,
                        "val_bpb": v + 0.1 * seed + noise,
                    }
                )
    return rows


def test_effects_best_lrs_and_the_tuned_effect() -> None:
    lc = _lr_confound()
    s = lc.summarise(_rows())
    assert s["factors"] == [0.5, 1.0, 2.0] and s["seeds"] == [0, 1]
    std, mup = s["standard"], s["mup"]
    assert std["uniform"]["best"] == 1.0 and not std["uniform"]["edge"]
    assert std["wider_early"]["best"] == 2.0 and std["wider_early"]["edge"]
    assert mup["wider_early"]["best"] == 1.0 and not mup["wider_early"]["edge"]
    # at one LR: paired deltas 0.02 and 0.024 at 1x under standard
    assert std["wider_early"]["effect"][1.0] == pytest.approx(0.022)
    assert std["wider_early"]["effect_sd"][1.0] == pytest.approx(0.004 / 2**0.5)
    # tuned: each at its own best LR (2x against uniform's 1x): -0.02 + 0.002
    assert std["wider_early"]["tuned_effect"] == pytest.approx(-0.018)
    assert mup["wider_early"]["tuned_effect"] == pytest.approx(-0.008)
    # uniform's runs serve both parametrizations
    assert mup["uniform"]["mean"] == std["uniform"]["mean"]
    assert std["uniform"]["tuned_effect"] == 0


def test_the_report_prints_every_lr_and_flags_the_edge() -> None:
    lc = _lr_confound()
    text = lc.report(lc.summarise(_rows()), lr=0.0025)
    assert "[standard]" in text and "[mup]" in text
    assert "2x (edge of grid)" in text and "0.5x=0.00125" in text
    assert "-0.0180" in text  # the tuned effect under standard


def test_uniform_trains_once_per_seed_and_lr() -> None:
    lc = _lr_confound()
    jobs = lc.jobs_for("s.yaml", [], 1000, [0, 1], [0.5, 1.0, 2.0])
    assert len(jobs) == 2 * 3 * (1 + 2 * 2)
    uniform = [j for j in jobs if j[3] == "uniform"]
    assert {j[4] for j in uniform} == {"standard"} and len(uniform) == 6


def test_a_run_cut_short_is_summarised_on_whole_seeds(tmp_path: Path) -> None:
    lc = _lr_confound()
    rows = _rows()
    cut = [r for r in rows if not (r["seed"] == 1 and r["lr_factor"] == 2.0)]
    kept, dropped = lc.complete_seeds(cut)
    assert dropped == [1] and {r["seed"] for r in kept} == {0} and len(kept) == 9
    log = tmp_path / "out.log"
    header = json.dumps({"study": "x", "train": {"lr": 0.0025}})
    log.write_text("\n".join([header, *(json.dumps(r) for r in cut), "[standard] table"]))
    read, lr = lc.read_rows(log)
    assert lr == 0.0025 and read == cut
