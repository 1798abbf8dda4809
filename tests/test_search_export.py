"""best.yaml and Pareto fronts from a trials table (no Ray, no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import tiny_config

from tlmsearch.run_dir.tables import add_deltas, trials_frame
from tlmsearch.search.best import best_candidates, best_document, pareto_front


def _dominates(a, b, objs):
    va = [s * a["values"][m] for m, s in objs]
    vb = [s * b["values"][m] for m, s in objs]
    return all(x <= y for x, y in zip(va, vb, strict=True)) and va != vb


@settings(max_examples=60, deadline=None)
@given(
    points=st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.floats(0, 10, allow_nan=False)),
        min_size=1,
        max_size=12,
    ),
    signs=st.tuples(st.sampled_from([1.0, -1.0]), st.sampled_from([1.0, -1.0])),
)
def test_pareto_front_is_exactly_the_non_dominated_set(points, signs):
    objs = [("a", signs[0]), ("b", signs[1])]
    groups = [{"values": {"a": x, "b": y}} for x, y in points]
    front = pareto_front(groups, objs)
    assert front  # a finite set always has a non-dominated member
    for g in front:
        assert not any(_dominates(h, g, objs) for h in groups)
    for g in groups:
        if not any(g is f for f in front):
            assert any(_dominates(f, g, objs) for f in front)


def _rows():
    rows = []
    for seed, noise in ((0, 0.0), (1, 0.02)):
        for params, v in (
            ({"shape": "uniform"}, 2.00),
            ({"shape": "cosine", "r_start": 1.25}, 1.90),
            ({"shape": "linear", "r_start": 1.5}, 2.10),
        ):
            rows.append(
                {
                    "trial_id": f"{params['shape']}{seed}",
                    "seed": seed,
                    "params": params,
                    "state": "COMPLETE",
                    "val_bpb": v + noise,
                    "n_params": 1000,
                }
            )
    rows.append(
        {
            "trial_id": "pruned",
            "seed": 0,
            "params": {"shape": "cosine", "r_start": 1.5},
            "state": "PRUNED",
            "val_bpb": 0.5,  # a pruned trial's partial value never wins
        }
    )
    return rows


@pytest.fixture
def cfg(tmp_path: Path):
    target = {"n_layer": 8, "d_model": 64, "n_head": 2, "d_ff": 256, "multiple_of": 16}
    return tiny_config(tmp_path, target=target)


def test_best_is_the_seed_mean_of_complete_trials_with_delta(cfg):
    frame = add_deltas(trials_frame(_rows()), ["val_bpb"])
    (best,) = best_candidates(frame, cfg)
    assert best["candidate"] == "cosine 1.25->0.75"
    assert best["n_seeds"] == 2
    assert best["values"]["val_bpb"] == pytest.approx(1.91)
    assert best["per_seed"]["val_bpb"] == {0: pytest.approx(1.90), 1: pytest.approx(1.92)}
    assert best["delta_vs_uniform"]["val_bpb"] == pytest.approx(-0.10)


def test_best_document_transfers_the_schedule_to_the_target(cfg):
    doc = best_document(add_deltas(trials_frame(_rows()), ["val_bpb"]), cfg)
    (best,) = doc["best"]
    proxy, target = best["proxy"], best["target"]
    assert sum(proxy["widths"]) == 2 * 64 and len(proxy["widths"]) == 2
    assert sum(target["widths"]) == 8 * 256 and len(target["widths"]) == 8
    assert all(w % 16 == 0 for w in target["widths"])
    assert target["widths"] == sorted(target["widths"], reverse=True)  # a taper
    assert target["config"]["n_layer"] == 8
    assert doc["uniform_baseline"]["val_bpb"] == pytest.approx(2.01)


def test_best_yaml_shows_heads_only_for_studies_with_heads_schedules_or_gqa(cfg, tmp_path):
    """A heads schedule's per-layer heads (and key/value heads with grouped-query attention)
    sit beside the widths, at proxy and target scale; a study without heads keeps its best.yaml
    (no heads keys)."""
    plain = best_document(add_deltas(trials_frame(_rows()), ["val_bpb"]), cfg)["best"][0]
    assert not {"heads", "kv_heads", "heads_share"} & (set(plain["proxy"]) | set(plain["target"]))
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "categorical", "choices": [1.5]},
            "heads.shape": {"type": "fixed", "value": "linear"},
            "heads.r_start": {"type": "categorical", "choices": [0.5]},
        }
    }
    model = {"n_layer": 3, "d_model": 32, "n_head": 4, "n_kv_head": 2, "d_ff": 64}
    target = {**model, "n_layer": 6, "d_model": 64}
    headed = tiny_config(tmp_path, model=model, target=target, space=space)
    heads = {"shape": "cosine", "r_start": 1.5, "heads.shape": "linear", "heads.r_start": 0.5}
    rows = [
        {
            "trial_id": f"{i}/{seed}",
            "seed": seed,
            "params": p,
            "state": "COMPLETE",
            "val_bpb": v + 0.01 * seed,
        }
        for seed in (0, 1)
        for i, (p, v) in enumerate((({"shape": "uniform"}, 2.0), (heads, 1.9)))
    ]
    (best,) = best_document(add_deltas(trials_frame(rows), ["val_bpb"]), headed)["best"]
    proxy, at_target = best["proxy"], best["target"]
    assert proxy["heads"] == list(headed.model.plan(heads).heads) == [2, 4, 6]
    assert proxy["kv_heads"] == [1, 2, 3] and proxy["heads_share"] == 1.0
    assert at_target["heads"] == list(headed.target_for(heads).heads)
    assert sum(at_target["heads"]) == 6 * 4 and at_target["heads"] == sorted(at_target["heads"])
    assert at_target["kv_heads"] == [h // 2 for h in at_target["heads"]]
    assert at_target["config"]["layer_heads"] == at_target["heads"]


def test_multi_objective_best_is_the_front(tmp_path):
    cfg = tiny_config(
        tmp_path,
        objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}],
        search={"pruner": "none", "sampler": "grid"},
    )
    rows = _rows()[:3]
    for r, tps in zip(rows, (100.0, 50.0, 200.0), strict=True):
        r["tokens_per_s"] = tps
    front = best_candidates(trials_frame(rows), cfg)
    # uniform (2.0, 100) is dominated by neither: cosine is better in bpb, linear in speed.
    assert {g["candidate"] for g in front} == {"uniform", "cosine 1.25->0.75", "linear 1.5->0.5"}
    rows[0]["tokens_per_s"] = 40.0  # now cosine dominates uniform
    front = best_candidates(trials_frame(rows), cfg)
    assert {g["candidate"] for g in front} == {"cosine 1.25->0.75", "linear 1.5->0.5"}


def test_no_complete_trial_means_no_best(cfg):
    rows = [dict(r, state="FAIL") for r in _rows()]
    assert best_candidates(trials_frame(rows), cfg) == []


def test_status_resume_export_on_a_non_run_dir_exit_2(tmp_path):
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    runner = CliRunner()
    for args in (["status", str(tmp_path)], ["resume", str(tmp_path)], ["export", str(tmp_path)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "not a run dir" in res.output


def test_a_bad_run_name_exits_2(tmp_path):
    import yaml
    from search_helpers import tiny_study
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_study(tmp_path)))
    res = CliRunner().invoke(app, ["run", str(path), "--name", "../escape"])
    assert res.exit_code == 2 and "--name" in res.output
    assert not (tmp_path / "escape").exists()


def test_a_grid_trial_records_the_candidates_with_its_widths(tmp_path):
    # At 2 layers linear and cosine 1.25 -> 0.75 are the same two widths: one training per seed
    # stands for both, and its row says so.
    import json

    import optuna

    from tlmsearch.search.records import trial_records
    from tlmsearch.search.sampling.samplers import (
        DefineByRunSpace,
        planned_trials,
        write_initial_queue,
    )

    cfg = tiny_config(tmp_path, search={"seeds": [0, 1]})
    assert len(cfg.candidates()) == 5 and planned_trials(cfg) == 3 * 2
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    for _ in range(planned_trials(cfg)):
        trial = study.ask()
        fn(trial)
        study.tell(trial, 1.0)
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    rows, _ = trial_records(study)
    frame = trials_frame(rows)
    per_seed = frame.groupby("seed")["candidate"].apply(list).to_dict()
    assert per_seed[0] == per_seed[1] == ["uniform", "cosine 1.25->0.75", "cosine 1.5->0.5"]
    stands = dict(zip(frame["candidate"], frame["stands_for"], strict=False))
    assert json.loads(stands["cosine 1.25->0.75"]) == ["linear 1.25->0.75"]
    assert json.loads(stands["cosine 1.5->0.5"]) == ["linear 1.5->0.5"]
    assert stands["uniform"] == ""


def test_a_sampled_twin_of_a_finished_model_replays_its_curve(tmp_path, monkeypatch):
    # At 2 layers linear 1.25 -> 0.75 is cosine 1.25 -> 0.75's model: on one seed it is not
    # trained again; its trial reports the twin's curve and says which trial it repeats.
    from types import SimpleNamespace

    import optuna
    from ray import tune

    from tlmsearch.search.attrs import REPLAY, SAME_AS
    from tlmsearch.search.execution.trainable import run_trial
    from tlmsearch.search.sampling.samplers import DefineByRunSpace, make_sampler

    cfg = tiny_config(tmp_path, search={"sampler": "random", "n_trials": 3, "baseline": False})
    study = optuna.create_study(sampler=make_sampler(cfg))
    fn = DefineByRunSpace(cfg)
    curve = [{"tokens": 4096, "val_bpb": 2.5}, {"tokens": 8192, "val_bpb": 2.25}]

    def ask(params):
        study.enqueue_trial(params)
        trial = study.ask()
        return trial, fn(trial)

    first, conf = ask({"shape": "cosine", "r_start": 1.25})
    assert REPLAY not in conf
    first.set_user_attr("widths", list(cfg.model.plan(conf["candidate"]).widths))
    first.set_user_attr("curve", curve)
    study.tell(first, 2.25)
    twin, conf = ask({"shape": "linear", "r_start": 1.25})
    assert conf[REPLAY] == {"number": first.number, "curve": curve}
    assert twin.user_attrs[SAME_AS] == first.number
    other, conf = ask({"shape": "linear", "r_start": 1.5})  # other widths: trains
    assert REPLAY not in conf and SAME_AS not in other.user_attrs

    reports = []
    monkeypatch.setattr(tune, "report", lambda metrics, **kw: reports.append(metrics))
    replay = {
        "candidate": {"shape": "linear", "r_start": 1.25},
        "seed": 0,
        REPLAY: {"number": first.number, "curve": curve},
    }
    run_trial(replay, study=cfg.to_dict(), data=SimpleNamespace(vocab_size=256))
    assert [r["val_bpb"] for r in reports] == [2.5, 2.25, 2.25]
    assert [r["final"] for r in reports] == [False, False, True]
    assert reports[-1]["status"] == "completed" and "not trained again" in reports[-1]["reason"]


# -------------------------------------------------------------------------------------------------
# censored seeds: a candidate is never best on the seeds its pruned ones left


A = {"shape": "linear", "r_start": 2.0, "r_end": 1.5}  # pruned (bad) on seed 1, good on seed 0
# middling on both seeds; unpruned (search.unpruned_candidates): with uniform it measures the noise
B = {"shape": "linear", "r_start": 1.5}
CENSORED_ROWS = [
    (0, {"shape": "uniform"}, "COMPLETE", 2.00),
    (1, {"shape": "uniform"}, "COMPLETE", 2.20),
    (0, A, "COMPLETE", 1.70),
    (1, A, "PRUNED", 2.60),
    (0, B, "COMPLETE", 1.90),
    (1, B, "COMPLETE", 2.10),
]


def _censored_frame():
    rows = [
        {
            "trial_id": f"t{i}",
            "seed": s,
            "params": p,
            "state": st,
            "val_bpb": v,
            **({"unpruned": True} if p is B else {}),
        }
        for i, (s, p, st, v) in enumerate(CENSORED_ROWS)
    ]
    return add_deltas(trials_frame(rows), ["val_bpb"])


def test_a_pruned_bad_seed_never_makes_a_candidate_best(cfg):
    (best,) = best_candidates(_censored_frame(), cfg)
    assert best["candidate"] == "linear 1.5->0.5"  # not A, whose one complete seed is better
    assert best["n_seeds"] == best["n_seeds_planned"] == 2 and not best["censored"]
    assert best["n_of_k"] == "2 of 2 seeds" and best["flag"] == ""
    assert best["values"]["val_bpb"] == pytest.approx(2.0) and best["ranked_seeds"] == [0, 1]
    assert best["delta_vs_uniform"]["val_bpb"] == pytest.approx(-0.1)
    assert best["delta_n_seeds"]["val_bpb"] == 2
    lo, hi = best["delta_ci95"]["val_bpb"]  # deltas -0.1, -0.1: sd 0, a zero-width interval
    assert lo == pytest.approx(-0.1) and hi == pytest.approx(-0.1)


def test_best_yaml_gives_the_effect_in_units_of_noise_and_the_conclusions(cfg):
    doc = best_document(_censored_frame(), cfg)
    (best,) = doc["best"]
    assert best["noise"] == {"val_bpb": "model"}  # the study's block-design noise
    assert best["separated_from_uniform"] == {"val_bpb": True}
    assert best["decided_by"] == {"val_bpb": "family"}
    yes, no = doc["conclusions"]["supported"], doc["conclusions"]["unsupported"]
    assert yes[0].startswith("linear 1.5->0.5 beats uniform on 2/2 seeds: -0.10 ± 0.00 val_bpb")
    assert any(s.startswith("linear 2->1.5 beats uniform") and "pruned on seed 1" in s for s in no)
    snr = doc["signal_to_noise"]  # uniform (2.1) and linear 1.5->0.5 (2.0); the pruned one out
    assert snr["candidates"] == 2 and snr["dispersion"] == pytest.approx(0.1)
    assert snr["signal"] == pytest.approx(0.1 / 2.05)
    assert snr["seed_noise"]["snr"] is None  # both deltas -0.1: the fit leaves no noise
    assert snr["seed_noise"]["why"] == "the seed noise is exactly 0"
    assert snr["checkpoint_noise"]["why"] == "no learning curves given"
    assert "arXiv 2508.13144" in snr["definition"]


def test_a_one_seed_best_is_judged_with_the_pooled_noise(tmp_path):
    # Seed 2 has not run for anyone: every candidate is pending, compared on seed 0, where the
    # one-seed A is best. Its interval uses B's seed noise (sd of -0.10, -0.08; 1 df), said so.
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1, 2]})
    rows = [
        (0, {"shape": "uniform"}, 2.0),
        (1, {"shape": "uniform"}, 2.2),
        (0, A, 1.7),
        (0, B, 1.9),
        (1, B, 2.12),
    ]
    frame = trials_frame(
        [
            {"trial_id": f"t{i}", "seed": s, "params": p, "state": "COMPLETE", "val_bpb": v}
            for i, (s, p, v) in enumerate(rows)
        ]
    )
    (best,) = best_candidates(frame, cfg)
    assert best["candidate"] == "linear 2->1.5" and best["delta_n_seeds"]["val_bpb"] == 1
    sd, half = 0.02 / 2**0.5, 12.706204736174698 * 0.02 / 2**0.5
    assert best["noise"]["val_bpb"] == "model"  # one seed: the study's noise, its df
    # 1 df of noise: a +-12.7 sd interval bounds nothing; it says so instead (and no interval)
    assert best["delta_df"]["val_bpb"] == 1 and best["delta_ci95"]["val_bpb"] is None and half
    assert best["delta_note"]["val_bpb"].startswith("cannot be bounded yet: its noise has 1 df")
    assert best["effect_noise"]["val_bpb"] == pytest.approx(-0.3 / sd)
    from tlmsearch.search.cli import best_line

    line = best_line(best)
    assert "95% CI" not in line and "[cannot be bounded yet: its noise has 1 df" in line


def test_best_yaml_says_what_trained_and_names_the_censored_candidate(cfg):
    doc = best_document(_censored_frame(), cfg)
    (best,) = doc["best"]
    start, end = best["proxy"]["realised"]
    assert best["realised"] == {"start": start, "end": end, "taper": pytest.approx(start - end)}
    (cens,) = doc["censored_better"]
    assert cens["candidate"] == "linear 2->1.5" and cens["n_of_k"] == "1 of 2 seeds"
    assert cens["flag"] == "censored: 1 of 2 seeds (pruned on seed 1)"
    assert cens["delta_vs_best"]["val_bpb"] == pytest.approx(-0.2)
    assert cens["n_seeds_shared"] == 1


def test_with_only_censored_candidates_the_best_is_flagged(cfg):
    rows = [r for r in CENSORED_ROWS if r[1] is A or r[1]["shape"] == "uniform"]
    rows = [
        (s, p, "PRUNED" if p["shape"] == "uniform" and s == 1 else st, v) for s, p, st, v in rows
    ]
    frame = trials_frame(
        [
            {"trial_id": f"t{i}", "seed": s, "params": p, "state": st, "val_bpb": v}
            for i, (s, p, st, v) in enumerate(rows)
        ]
    )
    (best,) = best_candidates(frame, cfg)
    assert best["censored"] and best["n_of_k"] == "1 of 2 seeds"
    assert best["flag"].startswith("censored: 1 of 2 seeds")


@pytest.mark.parametrize("state", ["finished", "running"])
def test_status_prints_n_of_k_and_the_censored_candidate(tmp_path, state):
    import json

    import optuna
    from typer.testing import CliRunner

    from tlmsearch.cli import app
    from tlmsearch.search.attrs import CANDIDATE, SEED, UNPRUNED

    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    cfg = tiny_config(tmp_path)
    (run / "study.yaml").write_text(cfg.to_yaml())
    (run / "run.json").write_text(json.dumps({"status": state, "n_trials_planned": 6}))
    study = optuna.create_study(study_name="tiny", storage=f"sqlite:///{run / 'optuna.db'}")
    for seed, params, trial_state, value in CENSORED_ROWS:
        attrs = {
            CANDIDATE: json.dumps(params),
            SEED: seed,
            "metrics": {"val_bpb": value},
            **({UNPRUNED: True} if params is B else {}),
        }
        study.add_trial(
            optuna.trial.create_trial(
                state=getattr(optuna.trial.TrialState, trial_state),
                value=value if trial_state == "COMPLETE" else None,
                user_attrs=attrs,
            )
        )
    res = CliRunner().invoke(app, ["status", str(run)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())  # the console wraps long lines
    assert "best: linear 1.5->0.5 (val_bpb 2.0000; mean of seed(s) 0, 1; 2 of 2 seeds)" in out
    assert "vs uniform val_bpb -0.1000" in out
    assert "not ranked above it: linear 2->1.5 (censored: 1 of 2 seeds (pruned on seed 1))" in out
    # mid-run every conclusion is provisional: it says so, line by line
    tag = "provisionally " if state == "running" else ""
    assert ("provisional (the run is still going)" in out) == (state == "running")
    assert f"{tag}supported: linear 1.5->0.5 beats uniform on 2/2 seeds: -0.10" in out
    assert f"{tag}not supported: linear 2->1.5 beats uniform on 1/1 seed" in out
    assert (
        "signal-to-noise (arXiv 2508.13144): n/a over seeds (the seed noise is exactly 0); "
        "n/a over checkpoints (no complete trial has 4 evals with this metric); spread of "
        "2 candidates' means 0.1"
    ) in out


def _running_run(tmp_path, reported_at: float):
    """A run dir whose Optuna storage holds what a running study writes (no Ray): one trial
    complete, one RUNNING with two evals, one RUNNING without an eval; 4 planned, 2 at once."""
    import json

    import optuna

    from tlmsearch.search.attrs import CANDIDATE, SEED

    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    train = {"tokens": 2_000_000, "eval_every_tokens": 400_000}
    (run / "study.yaml").write_text(tiny_config(tmp_path, train=train).to_yaml())
    info = {"status": "running", "n_trials_planned": 4, "trial_slots": 2}
    (run / "run.json").write_text(json.dumps(info))
    study = optuna.create_study(study_name="tiny", storage=f"sqlite:///{run / 'optuna.db'}")
    curve = [
        {"tokens": 400_000, "wall_s": 100.0, "val_bpb": 2.6},
        {"tokens": 800_000, "wall_s": 200.0, "val_bpb": 2.3456},  # 4,000 tok/s
    ]
    trials = [
        ("COMPLETE", {"shape": "uniform"}, {"metrics": {"val_bpb": 2.0}, "curve": curve}),
        (
            "RUNNING",
            {"shape": "cosine", "r_start": 1.5},
            {"metrics": curve[-1], "curve": curve, "reported_at": reported_at},
        ),
        ("RUNNING", {"shape": "linear", "r_start": 1.5}, {}),
    ]
    for state, params, extra in trials:
        study.add_trial(
            optuna.trial.create_trial(
                state=getattr(optuna.trial.TrialState, state),
                value=2.0 if state == "COMPLETE" else None,
                user_attrs={CANDIDATE: json.dumps(params), SEED: 0, **extra},
            )
        )
    return run


def test_status_report_gives_running_trials_progress_and_the_run_eta(tmp_path):
    from tlmsearch.search.status import status_report

    now = 1_000_000.0
    rep = status_report(_running_run(tmp_path, reported_at=now - 10), now=now)
    prog = rep["running"]
    cos, lin = prog["trials"]
    assert (cos["label"], cos["seed"], cos["tokens"], cos["total"]) == (
        "cosine 1.5->0.5",
        0,
        800_000,
        2_000_000,
    )
    assert (cos["metric"], cos["value"], cos["rate"]) == ("val_bpb", 2.3456, 4000.0)
    assert cos["age_s"] == pytest.approx(10.0)
    assert cos["eta_s"] == pytest.approx(1_200_000 / 4000 - 10)  # 290 s
    assert lin["label"] == "linear 1.5->0.5" and lin["age_s"] is None and lin["tokens"] == 0
    # 2 slots: cosine ends at 290 s, linear (no eval: at 4,000 tok/s) at 500 s; the queued
    # fourth trial takes cosine's slot at 290 s and ends at 790 s.
    assert prog["queued"] == 1 and prog["slots"] == 2
    assert prog["eta_s"] == pytest.approx(790.0)
    assert prog["tokens_left"] == 1_200_000 + 2 * 2_000_000
    assert prog["rate"] == 4000.0


def test_status_prints_running_trials_with_tokens_metric_and_eta(tmp_path):
    import re
    import time

    from typer.testing import CliRunner

    from tlmsearch.cli import app

    run = _running_run(tmp_path, reported_at=time.time() - 10)
    res = CliRunner().invoke(app, ["status", str(run)])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())  # the console wraps long lines
    assert "2 running, 0 queued" in out  # Optuna's counts (the fourth is not asked yet)
    trial = re.search(
        r"running: #1 cosine 1\.5->0\.5 \(seed 0\): 800,000/2,000,000 tokens \(40%\), "
        r"val_bpb 2\.3456, 4,000 tok/s, ETA 4m(\d\d)s \(last eval (\d+)s ago\)",
        out,
    )
    assert trial, out
    eta_s, age = 240 + int(trial[1]), int(trial[2])
    assert 10 <= age <= 20 and eta_s == 300 - age  # a slow machine may take a few seconds
    assert "running: #2 linear 1.5->0.5 (seed 0): started, no eval yet" in out
    run_eta = re.search(
        r"ETA 13m(\d\d)s for the run: 5,200,000 tokens left \(2 running, 1 to start\) at "
        r"4,000 tok/s together, 2 trial\(s\) at once",
        out,
    )
    assert run_eta, out
    assert 780 <= 780 + int(run_eta[1]) <= 790  # 790 s - the age of the last eval


def test_status_of_a_stopped_run_shows_its_unfinished_trials_without_an_eta(tmp_path):
    import json

    from typer.testing import CliRunner

    from tlmsearch.cli import app

    run = _running_run(tmp_path, reported_at=0.0)
    (run / "run.json").write_text(json.dumps({"status": "interrupted", "n_trials_planned": 4}))
    res = CliRunner().invoke(app, ["status", str(run)])
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "800,000/2,000,000 tokens (40%), val_bpb 2.3456" in out
    assert "ETA ?" in out and "the run is not going" in out and "for the run" not in out


def _race_frame(rows):
    frame = trials_frame(
        [
            {"trial_id": f"t{i}", "seed": s, "params": p, "state": "COMPLETE", "val_bpb": v}
            for i, (s, p, v) in enumerate(rows)
        ]
    )
    return add_deltas(frame, ["val_bpb"])


def test_best_yaml_follows_the_race(tmp_path):
    # against uniform, 4 seeds: GOOD separates (better) after 2 seeds and stops; FLAT ties and
    # races all 4. Counting seeds would make FLAT the only fully measured one, and best.
    cfg = tiny_config(
        tmp_path, search={"seeds": [0, 1, 2, 3], "racing": {"max_seeds": 4}, "pruner": "none"}
    )
    good, flat = {"shape": "cosine", "r_start": 1.25}, {"shape": "linear", "r_start": 1.5}
    rows = [(s, {"shape": "uniform"}, 2.0 + 0.1 * s) for s in range(4)]
    rows += [(s, good, 2.0 + 0.1 * s + d) for s, d in ((0, -0.30), (1, -0.31))]
    rows += [(s, flat, 2.0 + 0.1 * s + d) for s, d in enumerate((0.01, -0.01, 0.02, -0.02))]
    doc = best_document(_race_frame(rows), cfg)
    (best,) = doc["best"]
    assert best["candidate"] == "cosine 1.25->0.75" and best["n_of_k"] == "2 of 2 seeds"
    assert best["flag"] == "" and best["ranked_seeds"] == [0, 1]
    assert doc["conclusions"]["top_group"]["tied_with"] == []
    assert doc["verdict"].startswith("cosine 1.25->0.75 is the best: better than each of the")


def test_best_yaml_states_a_tie_of_the_top_group(tmp_path):
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1, 2], "pruner": "none"})
    a, b = {"shape": "cosine", "r_start": 1.25}, {"shape": "linear", "r_start": 1.5}
    rows = [(s, {"shape": "uniform"}, 2.0 + 0.1 * s) for s in range(3)]
    rows += [(s, a, 1.9 + 0.1 * s + d) for s, d in enumerate((0.0, 0.02, -0.01))]
    rows += [(s, b, 1.9 + 0.1 * s + d) for s, d in enumerate((0.01, 0.0, 0.0))]
    doc = best_document(_race_frame(rows), cfg)
    group = doc["conclusions"]["top_group"]
    assert group["best"] == doc["best"][0]["candidate"] and len(group["tied_with"]) == 1
    assert doc["verdict"].startswith("no single best at 95%")


def test_a_lower_ranked_candidate_better_on_common_seeds_means_no_best_yet(tmp_path):
    # b ran 2 of 3 seeds (seed 2 still running) and beats a clearly where both ran: a ranks
    # first (fully measured) but best.yaml must not call it the best
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1, 2], "pruner": "none"})
    a, b = {"shape": "cosine", "r_start": 1.25}, {"shape": "linear", "r_start": 1.5}
    rows = [
        (0, {"shape": "uniform"}, 3.0),
        (1, {"shape": "uniform"}, 3.1),
        (2, {"shape": "uniform"}, 2.9),
        (0, a, 2.9),
        (1, a, 3.0),
        (2, a, 2.8),
        (0, b, 2.5),
        (1, b, 2.61),
    ]
    frame = _race_frame(rows)
    doc = best_document(frame, cfg)
    group = doc["conclusions"]["top_group"]
    assert group["best"] == "cosine 1.25->0.75" and group["beaten_by"] == ["linear 1.5->0.5"]
    assert doc["verdict"].startswith("no best yet")


def test_keep_best_weights_keeps_the_twin_that_trained_a_replayed_best(tmp_path, monkeypatch):
    import pandas as pd

    from tlmsearch.train import checkpoints
    from tlmsearch.train.checkpoints import keep_best

    kept: list[set] = []
    monkeypatch.setattr(
        checkpoints, "keep_only", lambda run, numbers, paths=(): kept.append(numbers) or []
    )
    best = {"shape": "cosine", "r_start": 1.25}
    trials = pd.DataFrame(
        {
            "number": [0, 1, 2, 3],
            "is_baseline": [True, False, False, False],
            "params_json": [
                '{"shape": "uniform"}',
                '{"r_start": 1.5, "shape": "linear"}',
                json.dumps(best, sort_keys=True),
                '{"shape": "sigmoid"}',
            ],
            "same_as": [
                None,
                None,
                1,
                None,
            ],  # the best replayed trial 1's curve: 1 has its weights
        }
    )

    class _Study:
        def get_trials(self, deepcopy=False):
            return []

    keep_best(tmp_path, trials, [best])
    assert kept == [{0, 1, 2}]


def test_keep_best_weights_keeps_weights_a_resumed_best_took_over(tmp_path):
    """Trial 5 resumed from interrupted trial 2's final checkpoint (the driver died after it):
    5 names that folder as its weights, whose meta says trial 2. It was removed as trial 2's."""
    import pandas as pd

    from tlmsearch.train import checkpoints
    from tlmsearch.train.checkpoints import keep_best

    meta = {"candidate": {}, "seed": 0, "widths": [64, 64], "model": {}, "final": True}
    folders = {}
    for number in (0, 2, 3):  # uniform's, the interrupted best's, a loser's
        folders[number] = checkpoints.write_checkpoint(
            tmp_path / f"ray/session-0/trial_{number}/checkpoint_000001",
            {"model": {}},
            {**meta, "number": number, "tokens": 8192},
        )
    best = {"shape": "cosine", "r_start": 1.25}
    trials = pd.DataFrame(
        {
            "number": [0, 5, 3],
            "is_baseline": [True, False, False],
            "params_json": [
                '{"shape": "uniform"}',
                json.dumps(best, sort_keys=True),
                '{"shape": "sigmoid"}',
            ],
            "weights": [str(folders[0]), str(folders[2]), str(folders[3])],
        }
    )

    assert keep_best(tmp_path, trials, [best]) == 1
    assert folders[0].is_dir() and folders[2].is_dir() and not folders[3].exists()


def test_a_finished_run_keeping_the_best_weights_thins_them_and_its_table(tmp_path):
    """The end of a `keep_weights: best` run, on a real Optuna storage: it raised
    UpdateFinishedTrialError (clearing a finished trial's `weights` attribute), after removing
    the weights and before writing run.json, so the measured paper_grid run ended in a
    traceback. Now the losers' folders go and the table names only the folders that stay."""
    import optuna
    import pandas as pd

    from tlmsearch.search.attrs import CANDIDATE, SEED
    from tlmsearch.search.runner import _finish
    from tlmsearch.train import checkpoints

    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1], "keep_weights": "best"})
    (run / "study.yaml").write_text(cfg.to_yaml())
    url = f"sqlite:///{run / 'optuna.db'}"
    study = optuna.create_study(study_name="tiny", storage=url)
    best, loser = {"shape": "cosine", "r_start": 1.5}, {"shape": "linear", "r_start": 1.25}
    rows = [({"shape": "uniform"}, (2.1, 2.2)), (best, (2.0, 2.1)), (loser, (2.3, 2.4))]
    meta = {"candidate": {}, "widths": [64, 64], "model": {}, "final": True, "tokens": 8192}
    for number, (params, seed) in enumerate((p, s) for p, _ in rows for s in (0, 1)):
        value = next(v for p, v in rows if p == params)[seed]
        folder = checkpoints.write_checkpoint(
            run / f"ray/session-0/trial_{number}/checkpoint_000001",
            {"model": {}},
            {**meta, "number": number, "seed": seed},
        )
        attrs = {
            CANDIDATE: json.dumps(params),
            SEED: seed,
            "weights": str(folder),
            "metrics": {"val_bpb": value, "tokens": 8192},
        }
        study.add_trial(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE, value=value, user_attrs=attrs
            )
        )
    result = _finish(run, cfg, study, url, "finished", 0.0, echo=lambda _: None)
    assert result.status == "finished"
    kept = {w["number"] for w in checkpoints.kept_weights(run)}
    assert kept == {0, 1, 2, 3}  # uniform's and the best's, both seeds
    table = pd.read_parquet(run / "trials.parquet")
    named = table.loc[table["weights"].fillna("") != "", "number"]
    assert set(named) == {0, 1, 2, 3}
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


def test_a_tie_with_every_compared_candidate_says_the_ones_below_were_not_compared(tmp_path):
    """The verdict compares the best with the next 4 ranked: a tie with all of them was worded
    as the whole top group (paper_grid's "five-way tie" of 15)."""
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1, 2], "pruner": "none"})
    rows = [(s, {"shape": "uniform"}, 2.0 + 0.1 * s) for s in range(3)]
    # 6 candidates 0.001 apart in the mean, each with its own seed noise of 0.05: all tied
    noise = [(5, -5, 0), (0, 5, -5), (-5, 0, 5), (5, 0, -5), (0, -5, 5), (-5, 5, 0)]
    cands = [
        {"shape": sh, "r_start": r, **({"k": 10.0} if sh == "sigmoid" else {})}
        for r in (1.25, 1.5)
        for sh in ("cosine", "linear", "sigmoid")
    ]
    for n, cand in enumerate(cands):
        rows += [(s, cand, 2.0 + 0.1 * s - 0.001 * n + 0.01 * noise[n][s]) for s in range(3)]
    doc = best_document(_race_frame(rows), cfg)
    group = doc["conclusions"]["top_group"]
    # multiple comparisons with the best compare every candidate, uniform included
    assert len(group["tied_with"]) == 6 and group["separated_from"] == [], group
    assert group["not_compared"] == 0 and "not compared" not in doc["verdict"]
    (tie,) = [x for x in doc["conclusions"]["unsupported"] if x.startswith("no single best")]
    assert "over 7 candidates with uniform" in tie


def test_the_verdict_says_when_the_best_is_not_separated_from_uniform(tmp_path):
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1, 2], "pruner": "none"})
    a, b = {"shape": "cosine", "r_start": 1.25}, {"shape": "linear", "r_start": 1.5}
    rows = [(s, {"shape": "uniform"}, 2.0 + 0.1 * s) for s in range(3)]
    rows += [(s, a, 2.0 + 0.1 * s + d) for s, d in enumerate((-0.03, 0.02, -0.01))]  # ~ uniform
    rows += [(s, b, 2.0 + 0.1 * s + d) for s, d in enumerate((0.3, 0.31, 0.29))]  # clearly worse
    doc = best_document(_race_frame(rows), cfg)
    # the best is judged against uniform too: cosine ranks first but uniform could be the best
    assert doc["verdict"].startswith("no single best at 95%: cosine 1.25->0.75 ranks first")
    assert "uniform" in doc["conclusions"]["top_group"]["tied_with"]


def test_the_raw_weights_metrics_reach_both_tables_nan_where_a_run_does_not_average(tmp_path):
    # Evals as the ledger records them (each EVAL_KEYS key, None where absent): one
    # run averaging its weights (val_loss_raw / val_bpb_raw present), one not.
    import math

    import optuna

    from tlmsearch.config import EVAL_KEYS
    from tlmsearch.run_dir.tables import load_run, write_results
    from tlmsearch.search.records import clean as _clean
    from tlmsearch.search.records import trial_records
    from tlmsearch.search.sampling.samplers import DefineByRunSpace, write_initial_queue

    cfg = tiny_config(tmp_path)
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    evals = [
        {"tokens": 4096, "val_bpb": 2.5, "val_loss": 1.7, "val_bpb_raw": 2.6, "val_loss_raw": 1.8},
        {"tokens": 4096, "val_bpb": 2.4, "val_loss": 1.6},
    ]
    for ev in evals:
        trial = study.ask()
        fn(trial)
        rec = {k: _clean(ev.get(k)) for k in EVAL_KEYS}
        trial.set_user_attr("curve", [rec])
        trial.set_user_attr("metrics", rec)
        study.tell(trial, ev["val_bpb"])
    rows, curves = trial_records(study)
    write_results(tmp_path / "run", rows, curves)
    run = load_run(tmp_path / "run")
    for df in (run.trials, run.curves):
        assert df["val_bpb_raw"].dtype == "float64" and df["val_loss_raw"].dtype == "float64"
        (avg,) = df.index[df["val_bpb"] == 2.5]
        (raw,) = df.index[df["val_bpb"] == 2.4]
        assert (df.loc[avg, "val_bpb_raw"], df.loc[avg, "val_loss_raw"]) == (2.6, 1.8)
        assert math.isnan(df.loc[raw, "val_bpb_raw"]) and math.isnan(df.loc[raw, "val_loss_raw"])


def test_best_yaml_measures_the_checkpoint_noise_from_the_runs_curves(tmp_path):
    from fixtures_run import make_run

    from tlmsearch.config import load_study
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.best import write_best

    run = make_run(tmp_path / "r", seeds=(0, 1, 2), evals=8)
    doc = write_best(run, load_run(run).trials, load_study(run / "study.yaml"))
    ck = doc["signal_to_noise"]["checkpoint_noise"]
    assert ck["trials"] == 21 and ck["why"] is None and ck["snr"] > 0  # 7 candidates x 3 seeds
    assert ck["sd"] < ck["sd_not_detrended"]  # the falling curve is trend, not noise
    (run / "curves.parquet").unlink()
    doc = write_best(run, load_run(run).trials, load_study(run / "study.yaml"))
    assert doc["signal_to_noise"]["checkpoint_noise"]["why"] == "no learning curves given"


def test_status_prints_the_best_ones_effective_lr_and_the_one_lr_caveat(tmp_path):
    """``tlmsearch status`` says what the parametrization does to the best's layers,
    and that a study at one learning rate may be showing an LR effect."""
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    run = _running_run(tmp_path, reported_at=1_000_000.0)
    result = CliRunner().invoke(app, ["status", str(run)], terminal_width=400)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert (
        "effective LR vs uniform: standard: x1 in every layer (the uniform model is the base)"
    ) in out
    assert "note: effects are at one learning rate: may be an LR effect; see tuned" in out


def _stored_run(run: Path, study_yaml: str) -> Path:
    """A finished run dir with ``study_yaml`` as its study.yaml and CENSORED_ROWS in its Optuna
    storage, as the driver writes them (no Ray)."""
    import optuna

    from tlmsearch.search.attrs import CANDIDATE, SEED

    run.mkdir(parents=True)
    (run / "study.yaml").write_text(study_yaml)
    (run / "run.json").write_text(json.dumps({"status": "finished", "n_trials_planned": 6}))
    study = optuna.create_study(study_name="tiny", storage=f"sqlite:///{run / 'optuna.db'}")
    for seed, params, state, value in CENSORED_ROWS:
        attrs = {CANDIDATE: json.dumps(params), SEED: seed, "metrics": {"val_bpb": value}}
        study.add_trial(
            optuna.trial.create_trial(
                state=getattr(optuna.trial.TrialState, state),
                value=value if state == "COMPLETE" else None,
                user_attrs=attrs,
            )
        )
    return run


def test_status_export_and_the_report_read_an_older_versions_study_yaml(tmp_path):
    """A study.yaml holding keys this version does not know (a field since removed,
    a section since dropped) keeps status, export and the report working, each as without
    those keys, with a warning naming them; before, status and export refused the run dir."""
    import re
    import warnings

    import yaml
    from typer.testing import CliRunner

    from tlmsearch.cli import app
    from tlmsearch.config import StudyYamlWarning
    from tlmsearch.report.html import build_run, render

    cfg = tiny_config(tmp_path)
    older = yaml.safe_load(cfg.to_yaml())
    older["search"]["grace_fraction"] = 0.25
    older["legacy_report"] = {"theme": "dark"}
    shown = re.compile(r"<h2 id='study-config'>.*?</details>|\d{4}-\d\d-\d\dT[\d:+]+", re.S)
    seen = {}
    for name, text in (("clean", cfg.to_yaml()), ("older", yaml.safe_dump(older))):
        run = _stored_run(tmp_path / name / "tiny", text)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = CliRunner().invoke(app, ["status", str(run)], terminal_width=400)
            export = CliRunner().invoke(app, ["export", str(run), "--format", "yaml"])
            report, data = build_run(run)
        assert status.exit_code == 0 and export.exit_code == 0, status.output + export.output
        page = shown.sub("", render(report, data.name))  # study.yaml is shown as written
        seen[name] = (
            status.output.replace(str(run), "RUN"),
            (run / "best.yaml").read_text(),
            page,
        )
        warned = {str(w.message) for w in caught if issubclass(w.category, StudyYamlWarning)}
        assert bool(warned) == (name == "older")
        for line in warned:
            assert "search.grace_fraction (not a key of this version)" in line
            assert "legacy_report (not a key of this version)" in line
    assert seen["older"] == seen["clean"]
    assert "best: linear 1.5->0.5" in seen["older"][0]
    # resume trains it again: there a key it cannot read is still refused, naming it
    resume = CliRunner().invoke(app, ["resume", str(tmp_path / "older" / "tiny")])
    assert resume.exit_code == 2 and "search.grace_fraction: unknown key" in resume.output


def test_resume_refuses_an_optuna_without_the_checked_method_before_touching_the_run(
    tmp_path, monkeypatch
):
    """The sampler (and its check of Optuna's Study._get_trials, search/sampling/baseline.py) is
    built before resume queues interrupted trials again, prepares data or starts Ray, as in run."""
    import optuna
    from typer.testing import CliRunner

    from tlmsearch.cli import app
    from tlmsearch.search import runner

    run = _running_run(tmp_path, reported_at=0.0)
    (run / "run.json").write_text(json.dumps({"status": "interrupted", "n_trials_planned": 4}))
    before = (run / "run.json").read_text()

    def changed(self, deepcopy=True, states=None, use_cache=False, *, extra=None):
        return []

    monkeypatch.setattr(runner, "_prepare", lambda *a, **k: pytest.fail("data prepared"))
    monkeypatch.setattr(optuna.study.Study, "_get_trials", changed)
    result = CliRunner().invoke(app, ["resume", str(run)])
    monkeypatch.undo()
    assert result.exit_code == 2, result.output
    assert "optuna.study.Study._get_trials takes" in result.output
    assert (run / "run.json").read_text() == before
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{run / 'optuna.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING", "RUNNING"]
