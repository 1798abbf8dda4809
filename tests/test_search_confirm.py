"""The confirmation stage (search.confirm): the main stage's best candidates and uniform again on
fresh seeds, never pruned; chosen once and recorded before its first trial; its own evidence
gives best.yaml's best (tlmsearch/search/confirm.py, tlmsearch/evidence/confirm.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import tiny_config, tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config.limits import MAX_SEED
from tlmsearch.config.search import RacingConfig, SearchConfig
from tlmsearch.constants import CONFIRM_STAGE
from tlmsearch.evidence import Evidence
from tlmsearch.evidence.confirm import (
    CONFIRMED,
    NOT_CONFIRMED,
    choose,
    confirm_evidences,
    confirmation,
)
from tlmsearch.evidence.stages import main_stage
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import add_deltas, add_effects, trials_frame
from tlmsearch.search import confirm
from tlmsearch.search.attrs import CONFIRM_CHOICE, STAGE
from tlmsearch.search.best import best_document
from tlmsearch.search.records import trial_records
from tlmsearch.search.sampling.pruning import OptunaPruningScheduler
from tlmsearch.search.sampling.samplers import DefineByRunSpace, write_initial_queue
from tlmsearch.widths.candidate import IDENTITY, Candidate

optuna.logging.set_verbosity(optuna.logging.WARNING)
runner = CliRunner()
FOUR = {
    "shape": {"type": "fixed", "value": "cosine"},  # four distinct proxy widths
    "r_start": {"type": "categorical", "choices": [1.75, 1.5, 1.25, 0.75]},
}
# the true effect of each r_start vs uniform (val_bpb: lower is better)
EFFECT = {1.75: -0.30, 1.5: -0.20, 1.25: 0.0, 0.75: 0.10}


def _cfg(tmp: Path, **search):
    return tiny_config(
        tmp,
        space={"dimensions": FOUR},
        search={
            "pruner": "median",
            "seeds": [0, 1, 2],
            "confirm": {"top": 2, "seeds": 3},
            **search,
        },
    )


# -------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
    ("search", "words"),
    [
        ({"pruner": "none", "confirm": {}}, "search.confirm: a grid without a pruner"),
        ({"pruner": "median", "baseline": False, "confirm": {}}, "set search.baseline: true"),
        ({"pruner": "median", "confirm": {"top": 0}}, "search.confirm.top"),
        ({"pruner": "median", "confirm": {"seeds": 1}}, "search.confirm.seeds"),
        ({"pruner": "median", "confirm": {"top": 2, "fresh": 3}}, "search.confirm.fresh"),
    ],
)
def test_a_confirm_that_means_nothing_or_is_malformed_exits_2_naming_the_field(
    tmp_path, search, words
):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_study(tmp_path, search=search)))
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert words in out, out


def test_a_sampler_search_without_a_pruner_may_confirm_its_selected_best(tmp_path):
    # the sampler's selection biases its best too: confirming its top k means something
    cfg = tiny_config(
        tmp_path,
        search={"sampler": "random", "n_trials": 3, "pruner": "none", "confirm": {"top": 1}},
    )
    assert cfg.search.confirm.top == 1 and cfg.search.confirm_seeds == [1, 2, 3]
    assert tiny_config(tmp_path).search.confirm is None  # off by default


@settings(max_examples=60, deadline=None)
@given(
    seeds=st.lists(
        st.one_of(st.integers(0, 50), st.integers(MAX_SEED - 5, MAX_SEED)),
        min_size=1,
        max_size=8,
        unique=True,
    ),
    n=st.integers(2, 6),
)
def test_the_fresh_seeds_are_new_distinct_and_a_function_of_the_seed_list(seeds, n):
    s = SearchConfig(seeds=seeds, confirm={"seeds": n})
    fresh = s.confirm_seeds
    assert len(fresh) == n == len(set(fresh))
    assert not set(fresh) & set(seeds) and all(0 <= x <= MAX_SEED for x in fresh)
    assert SearchConfig(seeds=seeds, confirm={"seeds": n}).confirm_seeds == fresh


# -------------------------------------------------------------------------------------------------
# A study run in memory: the queue asked and told as the driver would, values from EFFECT


def _value(cand: Candidate, seed: int, noise: float = 0.02) -> float:
    rng = random.Random(f"{cand.identity}/{seed}")
    base = 1.0 + 0.05 * ((seed * 7919) % 11) / 11  # each seed its own level (paired)
    return base + EFFECT.get(cand.get("r_start"), 0.0) + rng.gauss(0, noise)


def _drain(study, cfg, prune=(), values=_value) -> list[dict]:
    """Ask and tell every queued trial through the driver's DefineByRunSpace; a (r_start, seed) in
    ``prune`` is told PRUNED unless its trial config says it may not be. Returns the configs."""
    space, configs = DefineByRunSpace(cfg), []
    while study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        trial = study.ask()
        conf = space(trial)
        configs.append(conf)
        cand, seed = conf["candidate"], conf["seed"]
        v = values(cand, seed)
        trial.set_user_attr("metrics", {"val_bpb": v, "tokens": cfg.train.tokens})
        fake = SimpleNamespace(config=conf, trial_id=str(trial.number))
        scheduler = OptunaPruningScheduler(0, "val_bpb", cfg.train.tokens)
        if (cand.get("r_start"), seed) in prune and scheduler._may_prune(fake, 1):
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, v)
    return configs


def _frame(study, cfg) -> pd.DataFrame:
    rows, _ = trial_records(study)
    return add_deltas(trials_frame(rows, cfg.model), ["val_bpb"])


def _main_done(tmp_path, **search):
    cfg = _cfg(tmp_path, **search)
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    # 0.75 (the worst) pruned on seed 1: censored, never confirmed
    _drain(study, cfg, prune={(0.75, 1)})
    return cfg, study


def test_the_stage_takes_the_top_k_and_runs_them_and_uniform_unpruned_on_fresh_seeds(tmp_path):
    cfg, study = _main_done(tmp_path, unpruned_candidates=0)  # none unpruned: the stage exempts
    run = tmp_path / "run"
    run.mkdir()
    left = confirm.prepare(run, study, cfg, echo=lambda _: None)
    choice = json.loads(RunDir(run).confirm.read_text())
    top = [Candidate.from_identity(k)["r_start"] for k in choice["top"]]
    assert top == [1.75, 1.5]  # the main stage's two best, in rank order
    assert choice["seeds"] == [3, 4, 5] and json.loads(study.user_attrs[CONFIRM_CHOICE]) == choice
    assert left == 3 * 3  # (uniform + 2) x 3 fresh seeds
    # every one of them asks to be pruned: the scheduler lets none be (stage: confirm)
    confs = _drain(study, cfg, prune={(r, s) for r in EFFECT for s in (3, 4, 5)} | {(None, 3)})
    assert {c["seed"] for c in confs} == {3, 4, 5} and all(c[STAGE] == "confirm" for c in confs)
    frame = _frame(study, cfg)
    stage = frame[frame["stage"] == CONFIRM_STAGE]
    assert len(stage) == 9 and set(stage["state"]) == {"COMPLETE"}
    assert set(stage.loc[~stage["is_baseline"], "r_start"]) == {1.75, 1.5}
    assert confirm.prepare(run, study, cfg) == 0 and not confirm.owed(run, study, cfg)


def test_a_resume_after_the_choice_finishes_the_same_stage_and_never_chooses_again(
    tmp_path, monkeypatch
):
    from tlmsearch.search.runner import requeue_interrupted

    cfg, study = _main_done(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    confirm.prepare(run, study, cfg, echo=lambda _: None)
    chosen = json.loads(RunDir(run).confirm.read_text())["top"]
    # the driver dies after two of the stage's trials: one told, one left running
    space = DefineByRunSpace(cfg)
    done = study.ask()
    space(done)
    study.tell(done, 1.0)
    space(study.ask())
    assert confirm.owed(run, study, cfg)
    # the main stage owes nothing (the stage's trials are no planned ones): resume goes on to
    # the stage because it is owed, not because the main stage looks short of trials
    from tlmsearch.search.runner import _remaining

    assert _remaining(cfg, study) == 0
    # tlmsearch resume: the running one queued again, then the stage read back, never chosen
    assert len(requeue_interrupted(study, cfg, run)) == 1
    assert _remaining(cfg, study) == 0  # the stage's trial queued again is no main-stage one
    monkeypatch.setattr(confirm, "choose_now", lambda *a: pytest.fail("chose again"))
    assert confirm.prepare(run, study, cfg, echo=lambda _: None) == 9 - 1
    assert json.loads(RunDir(run).confirm.read_text())["top"] == chosen
    _drain(study, cfg)
    frame = _frame(study, cfg)
    stage = frame[frame["stage"] == CONFIRM_STAGE]
    assert len(stage) == 9 and not stage.duplicated([IDENTITY, "seed"]).any()
    assert not confirm.owed(run, study, cfg)
    # the study's copy alone (a run dir without confirm.json) is read back too
    RunDir(run).confirm.unlink()
    assert confirm.recorded(run, study)["top"] == chosen
    assert confirm.recorded(None, study)["top"] == chosen


def test_a_fresh_study_without_finished_candidates_chooses_none_and_owes_nothing(tmp_path):
    cfg = _cfg(tmp_path)
    study = optuna.create_study()
    assert confirm.prepare(tmp_path, study, cfg, echo=lambda _: None) == 0
    assert json.loads(RunDir(tmp_path).confirm.read_text())["top"] == []
    assert not confirm.owed(tmp_path, study, cfg)


# -------------------------------------------------------------------------------------------------
# Evidence on the stage; best.yaml from it


def test_choose_takes_fully_measured_candidates_in_rank_order_never_uniform():
    r = pd.DataFrame(
        {
            "k": ['{"shape": "uniform"}', "a", "b", "c", "d"],
            "tier": [0, 2, 0, 1, 0],
        }
    )
    assert choose(r, "k", 2) == ["b", "d"]
    assert choose(r, "k", 5) == ["b", "d"]


def _stage_table(effects: dict[str, float], seeds=(10, 11, 12, 13), sd=0.01) -> pd.DataFrame:
    rows = []
    rng = random.Random(0)
    for s in seeds:
        level = rng.gauss(0, 0.2)  # the seed's own level, shared by its cells
        rows.append({"candidate": "uniform", "is_baseline": True, "seed": s, "v": 2 + level})
        for name, d in effects.items():
            v = 2 + level + d + rng.gauss(0, sd)
            rows.append({"candidate": name, "is_baseline": False, "seed": s, "v": v})
    return pd.DataFrame(rows).assign(state="COMPLETE")


def test_the_stage_evidence_is_one_family_of_k_and_words_each_candidate():
    t = _stage_table({"a": -0.2, "b": 0.0, "c": 0.2})
    ev = Evidence.build(t, "v", "minimize", seeds=[10, 11, 12, 13])
    assert set(ev.effects["family_size"]) == {3}
    main = SimpleNamespace(
        key="candidate",
        sense="minimize",
        effects=pd.DataFrame(
            {
                "candidate": ["a", "b", "c"],
                "mean_delta": [-0.3, -0.25, -0.2],
                "conditional": [True, True, False],
            }
        ),
    )
    doc = confirmation(["a", "b", "c"], main, ev, [10, 11, 12, 13])
    words = {r["candidate"]: r["word"] for r in doc["candidates"]}
    # a: better on fresh seeds; b: no effect; c: separated, but worse than uniform
    assert words == {"a": CONFIRMED, "b": NOT_CONFIRMED, "c": NOT_CONFIRMED}
    a = doc["candidates"][0]
    assert a["main_conditional"] and a["main_delta"] == -0.3
    assert a["ci95"][1] < 0 and a["delta"] == pytest.approx(-0.2, abs=0.03)
    assert "3 comparison(s)" in doc["family"]
    # a candidate whose fresh seeds are not all in: pending, never a word yet
    short = confirmation(["a"], main, ev, [10, 11, 12, 13, 14])
    assert short["candidates"][0]["word"] == "pending"


def test_best_yaml_comes_from_the_stage_and_keeps_the_main_stage_conditional(tmp_path):
    cfg, study = _main_done(tmp_path)
    confirm.prepare(None, study, cfg, echo=lambda _: None)

    def fresh(cand, seed):  # on the fresh seeds 1.5 is the better one (1.75 was lucky)
        v = _value(cand, seed)
        return v + (0.25 if seed >= 3 and cand.get("r_start") == 1.75 else 0.0)

    _drain(study, cfg, values=fresh)
    frame = _frame(study, cfg)
    doc = best_document(frame, cfg)
    best = doc["best"][0]
    assert best["params"]["r_start"] == 1.5 and best["confirmed_on_seeds"] == [3, 4, 5]
    assert sorted(best["per_seed"]["val_bpb"]) == [3, 4, 5]
    assert best["separated_from_uniform"]["val_bpb"] is True
    assert doc["main_stage_best"][0]["params"]["r_start"] == 1.75  # as the main stage had it
    assert sorted(doc["main_stage_best"][0]["per_seed"]["val_bpb"]) == [0, 1, 2]
    words = {r["candidate"]: r["word"] for r in doc["confirmation"]["candidates"]}
    assert words == {"cosine 1.75->0.25": NOT_CONFIRMED, "cosine 1.5->0.5": CONFIRMED}, words
    # the main stage's evidence never sees the fresh seeds
    stage = confirm_evidences(frame, cfg)["val_bpb"]
    assert set(stage.effects["family_size"]) == {2}
    assert set(main_stage(frame)["seed"]) == {0, 1, 2}
    # a stage still running decides nothing yet: the main stage's best stands, words pending
    cell = frame.index[(frame["stage"] == "confirm") & ~frame["is_baseline"]][0]
    partial = frame.copy()
    partial.loc[cell, "state"] = "RUNNING"
    early = best_document(partial, cfg)
    assert "main_stage_best" not in early and "confirmed_on_seeds" not in early["best"][0]
    assert early["best"][0]["params"]["r_start"] == 1.75
    assert "pending" in {r["word"] for r in early["confirmation"]["candidates"]}
    # a stage that ended with a failed fresh seed: that candidate is not confirmed, not pending
    failed = frame.copy()
    failed.loc[cell, "state"] = "FAIL"
    rows = best_document(failed, cfg)["confirmation"]["candidates"]
    short = next(r for r in rows if r["candidate"] == frame.at[cell, "candidate"])
    assert short["word"] == NOT_CONFIRMED and short["why"] == "measured on 2 of 3 fresh seeds"
    # a fresh seed never started (the driver stopped before it; resume runs it): the stage has
    # not ended although every row it has is finished, so the word is pending
    unstarted = frame.drop(index=cell)
    rows = best_document(unstarted, cfg)["confirmation"]["candidates"]
    short = next(r for r in rows if r["candidate"] == frame.at[cell, "candidate"])
    assert short["word"] == "pending", short
    # a chosen candidate whose every fresh seed is still queued has no row at all: every row
    # the stage has is finished, and only the stage's record (confirm.json) says it has not
    # ended
    on_stage = frame["stage"] == "confirm"
    queued = frame.drop(
        index=frame.index[on_stage & (frame[IDENTITY] == frame.at[cell, IDENTITY])]
    )
    assert confirm.chosen(tmp_path) is None  # no record yet
    confirm.record(tmp_path, study, confirm.recorded(None, study))
    chosen = confirm.chosen(tmp_path)
    assert sorted(chosen) == sorted(set(frame.loc[on_stage & ~frame["is_baseline"], IDENTITY]))
    held = best_document(queued, cfg, chosen=chosen)
    assert "confirmed_on_seeds" not in held["best"][0]
    words = {r["candidate"]: r["word"] for r in held["confirmation"]["candidates"]}
    assert words[frame.at[cell, "candidate"]] == "pending" and len(words) == 2, words
    assert "confirmed_on_seeds" in best_document(queued, cfg)["best"][0]  # without the record
    # every fresh seed's uniform too: a seed whose uniform is queued again has not ended
    no_base = frame.drop(index=frame.index[on_stage & frame["is_baseline"] & (frame["seed"] == 3)])
    assert "confirmed_on_seeds" not in best_document(no_base, cfg, chosen=chosen)["best"][0]
    # the report's main evidence is keyed by label: the same words and main-stage deltas
    from tlmsearch.evidence import study_evidence
    from tlmsearch.evidence.confirm import study_confirmation

    main_rows = main_stage(frame)
    by_label = study_confirmation(
        main_rows, frame[frame["stage"] == "confirm"], cfg, study_evidence(main_rows, cfg), stage
    )
    report = {r["candidate"]: (r["word"], r.get("main_delta")) for r in by_label["candidates"]}
    yaml_doc = {
        r["candidate"]: (r["word"], r.get("main_delta")) for r in doc["confirmation"]["candidates"]
    }
    assert report == yaml_doc and all(d is not None for _, d in report.values()), report
    # the trials table's effect columns are the main stage's: blank on the stage's rows
    table = add_effects(frame, ["val_bpb"], cfg)
    on_stage = table["stage"] == "confirm"
    assert on_stage.any() and table.loc[on_stage, "effect_val_bpb"].isna().all()
    assert table.loc[~on_stage & ~table["is_baseline"], "effect_val_bpb"].notna().any()


def test_a_best_yaml_without_the_stage_has_no_confirmation_numbers(tmp_path):
    cfg, study = _main_done(tmp_path)
    doc = best_document(_frame(study, cfg), cfg)
    assert "confirmed_on_seeds" not in doc["best"][0] and "main_stage_best" not in doc
    assert all(r["word"] == "pending" for r in doc["confirmation"]["candidates"])
    assert doc["confirmation"]["candidates"] == []  # nothing chosen into the table yet
    plain = tiny_config(tmp_path, space={"dimensions": FOUR}, search={"pruner": "median"})
    assert "confirmation" not in best_document(_frame(study, plain), plain)


def test_the_report_says_confirmed_or_not_per_candidate():
    from tlmsearch.report.html import confirmation_html

    doc = {
        "seeds": [3, 4],
        "family": "holm over the 2 comparison(s) with uniform on the fresh seeds, at 95%",
        "candidates": [
            {
                "candidate": "a",
                "main_delta": -0.3,
                "main_conditional": True,
                "delta": -0.2,
                "ci95": [-0.3, -0.1],
                "word": CONFIRMED,
            },
            {"candidate": "b", "main_delta": -0.25, "word": "pending"},
        ],
    }
    page = confirmation_html(doc)
    assert "Confirmed on fresh seeds (3, 4)" in page and "<b>confirmed</b>" in page
    assert "-0.3000 (conditional on surviving the pruner)" in page and "<b>pending</b>" in page
    assert confirmation_html(None) == ""
    # the interval's level is the stage's, not a fixed 95%
    assert "on the fresh seeds (90%, simultaneous)" in confirmation_html({**doc, "level": 0.9})


def test_the_race_reads_the_main_stage_only(tmp_path):
    cfg = _cfg(tmp_path)
    frame = pd.DataFrame({IDENTITY: ["a", "a"], "seed": [0, 3], "stage": ["", CONFIRM_STAGE]})
    assert list(main_stage(frame)["seed"]) == [0]
    assert list(main_stage(frame.drop(columns="stage"))["seed"]) == [0, 3]
    assert cfg.search.confirm_seeds == [3, 4, 5]


# -------------------------------------------------------------------------------------------------
# Through the real driver and Ray


def _run_cli(tmp: Path, data: dict) -> tuple[Path, str]:
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    return tmp / "runs" / data["name"], res.output


def _check_stage(run: Path, fresh: list[int], k: int) -> dict:
    """The run dir of a finished run with search.confirm: the recorded choice, the stage's
    trials (k + uniform on each fresh seed, complete, never pruned) and best.yaml from them."""
    choice = json.loads(RunDir(run).confirm.read_text())
    assert choice["seeds"] == fresh and len(choice["top"]) == k
    df = pd.read_parquet(run / "trials.parquet")
    stage = df[df["stage"] == CONFIRM_STAGE]
    assert set(stage["seed"]) == set(fresh) and len(stage) == (k + 1) * len(fresh)
    assert set(stage["state"]) == {"COMPLETE"}
    assert set(stage.loc[~stage["is_baseline"], IDENTITY]) == set(choice["top"])
    assert not set(df.loc[df["stage"] != CONFIRM_STAGE, "seed"]) & set(fresh)
    doc = yaml.safe_load((run / "best.yaml").read_text())
    assert doc["best"][0]["confirmed_on_seeds"] == fresh
    assert sorted(doc["best"][0]["per_seed"]["val_bpb"]) == fresh
    assert {r["word"] for r in doc["confirmation"]["candidates"]} <= {
        CONFIRMED,
        NOT_CONFIRMED,
    }
    return doc


@pytest.mark.slow
def test_a_simulated_pruned_grid_confirms_its_top_two_through_the_driver(local_ray, tmp_path):
    data = tiny_study(
        tmp_path,
        name="confirmed",
        train={
            "backend": "simulate",
            "simulate": {
                "surrogate": {"offset": -0.02, "curvature": 0.1, "optimum": {"r_start": 1.5}}
            },
        },
        space={"dimensions": FOUR},
        search={
            "pruner": "median",
            "unpruned_candidates": 0,
            "seeds": [0, 1],
            "confirm": {"top": 2, "seeds": 2},
        },
    )
    run, out = _run_cli(tmp_path, data)
    assert "confirm: " in out and "on fresh seeds [2, 3], never pruned" in out
    # the stage's progress lines count to the whole study's 16 trials, not the main 10
    stage_out = out[out.index("confirm: ") :]
    assert "/16 " in stage_out and "/10 " not in stage_out, stage_out
    _check_stage(run, [2, 3], 2)
    res = runner.invoke(app, ["status", str(run)])
    text = " ".join(res.output.split())
    assert res.exit_code == 0 and "confirmation on fresh seeds [2, 3]" in text, res.output
    assert "best (confirmation stage):" in text
    assert "trials 16/16 finished" in text  # 5 x 2 main, and the stage's 2 x (2 + uniform)
    page = (run / "report.html").read_text()
    assert "Confirmed on fresh seeds (2, 3)" in page and "confirmed</b>" in page


@pytest.mark.slow
def test_a_tiny_trained_study_confirms_on_fresh_seeds_through_ray(local_ray, tmp_path):
    # 2 layers, d_model 32, 4,096 tokens a trial: uniform and two candidates on 1 seed, then
    # the best one and uniform on 2 fresh seeds
    two = {
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "categorical", "choices": [1.5, 0.75]},
    }
    data = tiny_study(
        tmp_path,
        name="trained",
        space={"dimensions": two},
        train={"tokens": 4096, "eval_every_tokens": 1024},
        search={"pruner": "median", "seeds": [5], "confirm": {"top": 1, "seeds": 2}},
    )
    run, _ = _run_cli(tmp_path, data)
    _check_stage(run, [6, 7], 1)


def test_the_race_never_counts_the_stages_queued_seeds_as_its_own(tmp_path, monkeypatch):
    """With racing on, the stage's queued trials on fresh seeds are no seeds in flight of the
    race (it would wait on them, or say so in its reasons)."""
    from tlmsearch.search.sampling import race as race_mod

    cfg, study = _main_done(tmp_path)
    confirm.prepare(None, study, cfg, echo=lambda _: None)  # the stage's trials: WAITING
    raced = cfg.model_copy(
        update={"search": cfg.search.model_copy(update={"racing": RacingConfig()})}
    )
    seen = {}
    monkeypatch.setattr(race_mod, "race", lambda *a, **k: seen.update(k) or [])
    race_mod._race(study, raced)
    fresh = set(cfg.search.confirm_seeds)
    assert seen and not {s for _, s in seen["queued"]} & fresh, seen["queued"]
