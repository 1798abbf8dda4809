"""One Evidence per (study, objective), built once per status, best.yaml and run's end.

Every reader of a report (best entries, censored, conclusions, verdict, tuned, snr, the trials
table's effect columns) takes the one Evidence the report built; a second build of the same
study would be a second place a number could come from.
"""

from __future__ import annotations

import json
import time

import pytest
from search_helpers import tiny_config

from tlmsearch.evidence import Evidence

OBJECTIVES = {
    1: [{"metric": "val_bpb"}],
    2: [{"metric": "val_bpb"}, {"metric": "tokens_per_s"}],
}


def _run(tmp_path, n_objectives: int):
    """A finished run dir whose Optuna storage holds uniform and two candidates on three seeds,
    with learning curves (no Ray)."""
    import optuna

    from tlmsearch.search.attrs import CANDIDATE, SEED

    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    search = {"pruner": "none", "sampler": "grid", "seeds": [0, 1, 2]}
    cfg = tiny_config(tmp_path, objectives=OBJECTIVES[n_objectives], search=search)
    (run / "study.yaml").write_text(cfg.to_yaml())
    (run / "run.json").write_text(json.dumps({"status": "finished", "n_trials_planned": 9}))
    directions = [o.sense for o in cfg.objectives]
    study = optuna.create_study(
        study_name=cfg.name, storage=f"sqlite:///{run / 'optuna.db'}", directions=directions
    )
    cands = (
        ({"shape": "uniform"}, 2.0, 100.0),
        ({"shape": "cosine", "r_start": 1.5}, 1.9, 90.0),
        ({"shape": "linear", "r_start": 1.5}, 2.05, 120.0),
    )
    for seed in (0, 1, 2):
        for params, bpb, tps in cands:
            bpb += 0.01 * ((seed * 7 + len(json.dumps(params))) % 5)
            metrics = {"val_bpb": bpb, "tokens_per_s": tps + seed, "tokens": 1000}
            steps = range(125, 1001, 125)
            curve = [{**metrics, "tokens": t, "val_bpb": bpb + 1.0 / t} for t in steps]
            values = [metrics[o.metric] for o in cfg.objectives]
            study.add_trial(
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.COMPLETE,
                    values=values,
                    user_attrs={
                        CANDIDATE: json.dumps(params),
                        SEED: seed,
                        "metrics": metrics,
                        "curve": curve,
                    },
                )
            )
    return run, cfg, study


@pytest.fixture
def builds(monkeypatch):
    """The metrics (trials columns) of every Evidence.build call, in order."""
    calls: list[str] = []
    original = Evidence.build.__func__

    def counting(cls, trials, value, *args, **kw):
        calls.append(value)
        return original(cls, trials, value, *args, **kw)

    monkeypatch.setattr(Evidence, "build", classmethod(counting))
    return calls


@pytest.mark.parametrize("n", [1, 2])
def test_status_builds_each_objectives_evidence_once(tmp_path, builds, n):
    from tlmsearch.search.status import status_report

    run, cfg, _ = _run(tmp_path, n)
    rep = status_report(run)
    assert rep["best"] and rep["conclusions"].supported + rep["conclusions"].unsupported
    assert rep["signal_to_noise"] is not None
    assert sorted(builds) == sorted(o.metric for o in cfg.objectives)


@pytest.mark.parametrize("n", [1, 2])
def test_best_yaml_builds_each_objectives_evidence_once(tmp_path, builds, n):
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.best import write_best
    from tlmsearch.search.export import write_tables

    run, cfg, study = _run(tmp_path, n)
    write_tables(run, study, cfg)
    trials = load_run(run).trials
    builds.clear()
    doc = write_best(run, trials, cfg)
    assert doc["best"] and doc["conclusions"]["supported"] + doc["conclusions"]["unsupported"]
    assert doc["signal_to_noise"]["checkpoint_noise"]["trials"] == 9  # the curves reached it
    assert sorted(builds) == sorted(o.metric for o in cfg.objectives)


@pytest.mark.parametrize("n", [1, 2])
def test_a_runs_end_builds_each_objectives_evidence_once(tmp_path, builds, n):
    """The runner's end: the tables (their effect columns) and best.yaml from one build."""
    from tlmsearch.search import runner

    run, cfg, study = _run(tmp_path, n)
    result = runner._finish(run, cfg, study, "", "finished", time.time(), lambda _: None)
    assert result.best and (run / "best.yaml").is_file() and (run / "trials.csv").is_file()
    assert sorted(builds) == sorted(o.metric for o in cfg.objectives)
    doc = (run / "best.yaml").read_text()
    assert "signal_to_noise" in doc and "no learning curves given" not in doc


def test_a_runs_end_that_thins_the_weights_rewrites_the_tables_from_the_same_build(
    tmp_path, builds, monkeypatch
):
    """keep_weights: best removes weight folders, then the tables are written again: same
    trials, same evidence, no second build."""
    from tlmsearch.search import runner
    from tlmsearch.train import checkpoints

    run, cfg, study = _run(tmp_path, 1)
    cfg = cfg.model_copy(update={"search": cfg.search.model_copy(update={"keep_weights": "best"})})
    thinned = []
    monkeypatch.setattr(checkpoints, "keep_best", lambda *a: thinned.append(1) or 2)
    runner._finish(run, cfg, study, "", "finished", time.time(), lambda _: None)
    assert thinned == [1] and builds == [cfg.objectives[0].metric]
    assert "effect_val_bpb" in (run / "trials.csv").read_text().splitlines()[0]


@pytest.mark.parametrize("n", [1, 2])
def test_export_yaml_builds_each_objectives_evidence_once(tmp_path, builds, n):
    from tlmsearch.search.export import export_run

    run, cfg, _ = _run(tmp_path, n)
    export_run(run, "yaml")
    assert sorted(builds) == sorted(o.metric for o in cfg.objectives)


def test_the_relabelled_evidence_names_candidates_by_label_with_the_same_decisions(tmp_path):
    """by_label: the params_json-keyed Evidence, named as a label-keyed build names them."""
    from tlmsearch.evidence import by_label, study_evidence
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.export import write_tables

    run, cfg, study = _run(tmp_path, 1)
    write_tables(run, study, cfg)
    trials = load_run(run).trials
    named = by_label(trials, study_evidence(trials, cfg, key="params_json"))
    fresh = study_evidence(trials, cfg)
    assert named.key == fresh.key == "candidate"
    assert list(named.ranking["candidate"]) == list(fresh.ranking["candidate"])
    assert list(named.best["candidate"]) == list(fresh.best["candidate"])
    assert list(named.best["selected"]) == list(fresh.best["selected"])
    eff_n = named.effects.set_index("candidate").sort_index()
    eff_f = fresh.effects.set_index("candidate").sort_index()
    assert list(eff_n.index) == list(eff_f.index)
    assert eff_n["separated"].tolist() == eff_f["separated"].tolist()
    assert eff_n["mean_delta"].tolist() == pytest.approx(eff_f["mean_delta"].tolist())
    assert eff_n["lo"].tolist() == pytest.approx(eff_f["lo"].tolist(), rel=1e-12)
    assert set(named.model.rows) == set(fresh.model.rows)


def test_relabel_names_candidates_inside_a_races_reasons_and_note():
    """A race's reasons name the incumbent or the control by its key; relabel renames them."""
    import dataclasses

    import pandas as pd

    from tlmsearch.evidence import Evidence
    from tlmsearch.evidence.racing import Lane

    a, b = '{"shape": "cosine"}', '{"shape": "linear"}'
    ev = Evidence.build(
        pd.DataFrame(columns=["params_json", "seed", "val_bpb", "is_baseline", "state"]),
        "val_bpb", "minimize", key="params_json",
    )  # fmt: skip
    ev = dataclasses.replace(
        ev,
        lanes=(Lane(a, "tied", f"not separated from {b} after 3 seed(s)", (0,), 0.0, 0.1, None),),
        note=f"race not computable (race_decision of {a})",
    )
    named = ev.relabel({a: "cosine 1.5->0.5", b: "linear 1.5->0.5"})
    (lane,) = named.lanes
    assert lane.candidate == "cosine 1.5->0.5"
    assert lane.reason == "not separated from linear 1.5->0.5 after 3 seed(s)"
    assert named.note == "race not computable (race_decision of cosine 1.5->0.5)"
