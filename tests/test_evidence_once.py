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


def test_the_identity_keyed_evidence_says_the_words_a_label_keyed_one_says(tmp_path):
    """The run's Evidence is keyed by params_json and named by the table's labels: its sentences
    and verdict are word for word those of an Evidence keyed by the labels themselves."""
    from tlmsearch.evidence import study_evidence
    from tlmsearch.evidence.conclusions import conclusions
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.export import write_tables

    run, cfg, study = _run(tmp_path, 1)
    write_tables(run, study, cfg)
    trials = load_run(run).trials
    by_identity = study_evidence(trials, cfg, key="params_json")
    by_label = study_evidence(trials, cfg)
    assert by_identity.key == "params_json" and by_label.key == "candidate"
    assert [by_identity.name(k) for k in by_identity.ranking["params_json"]] == list(
        by_label.ranking["candidate"]
    )
    said = conclusions(trials, label="val_bpb", evidence=by_identity)
    fresh = conclusions(trials, label="val_bpb", evidence=by_label)
    assert said == fresh and said.supported + said.unsupported
    assert "{" not in " ".join(said.supported + said.unsupported)  # no identity leaks into words
    eff_n = by_identity.effects.set_index("params_json").rename(index=by_identity.name)
    eff_f = by_label.effects.set_index("candidate")
    assert eff_n["separated"].sort_index().tolist() == eff_f["separated"].sort_index().tolist()


# keys whose labels nest: "cosine" is inside "cosine 1.5->0.5" and inside "better than cosine",
# and cosine's identity is inside the custom shape's (a mapping value)
_U, _A = '{"shape": "uniform"}', '{"shape": "cosine"}'
_B = '{"nest": {"shape": "cosine"}, "shape": "custom"}'
_C = '{"shape": "linear"}'
_LABELS = {_U: "uniform", _A: "cosine", _B: "cosine 1.5->0.5", _C: "better than cosine"}


def _against_best():
    from tlmsearch.config import PartialStudy

    return PartialStudy.model_validate(
        {
            "search": {"seeds": [0, 1, 2], "racing": {"max_seeds": 3, "against": "best"}},
            "objectives": [{"metric": "val_bpb"}],
        }
    )


def _nested_race_table():
    """_B leads (the incumbent of a race against the best), _A is within noise of it, _C far
    worse; three seeds each, every seed's uniform complete."""
    import pandas as pd

    deltas = {
        _U: (0.0, 0.0, 0.0),
        _A: (-0.29, -0.30, -0.28),
        _B: (-0.30, -0.31, -0.29),
        _C: (0.2, 0.21, 0.19),
    }
    rows = [
        {
            "params_json": k,
            "candidate": _LABELS[k],
            "seed": s,
            "state": "COMPLETE",
            "val_bpb": 2.0 + 0.1 * s + d,
            "val_loss": 3.0 + 0.1 * s + d,
            "is_baseline": k == _U,
        }
        for k, ds in deltas.items()
        for s, d in enumerate(ds)
    ]
    return pd.DataFrame(rows)


def test_race_reasons_say_labels_from_the_start_and_no_text_is_renamed():
    """A race keyed by identity names the incumbent by its label as it writes the reason: a
    label that another label, a reason's words or another identity contains is never mangled
    (renaming keys inside finished text turned "not separated from <_B>" into a fragment of
    JSON, _A's identity replaced inside _B's)."""
    trials = _nested_race_table()
    ev = Evidence.build(trials, "val_bpb", key="params_json", config=_against_best())
    lanes = {ln.candidate: ln for ln in ev.lanes}
    assert set(lanes) == {_A, _B, _C}  # keyed by identity
    assert lanes[_A].reason.startswith("not separated from cosine 1.5->0.5 after 3 of 3 seeds")
    assert lanes[_C].reason.startswith("worse than cosine 1.5->0.5 after 3 seed(s): ")
    assert lanes[_B].reason == "the incumbent: raced 3 seed(s)"
    assert all("{" not in ln.reason for ln in ev.lanes)
    assert [ev.name(k) for k in (_A, _B, _C)] == [
        "cosine",
        "cosine 1.5->0.5",
        "better than cosine",
    ]
    # without labels the keys name themselves, as a table keyed by labels does
    plain = Evidence.build(trials, "val_bpb", key="params_json", labels={}, config=_against_best())
    assert {ln.candidate: ln for ln in plain.lanes}[_A].reason == (
        f"not separated from {_B} after 3 of 3 seeds (no seed left with a baseline)"
    )


def test_a_race_note_names_the_candidate_by_its_label():
    """A record that is no decision is reported by label (the family decides then)."""
    trials = _nested_race_table()
    trials["race_decision"] = [
        "not json" if k == _B and s == 0 else None
        for k, s in zip(trials["params_json"], trials["seed"], strict=True)
    ]
    ev = Evidence.build(trials, "val_bpb", key="params_json", config=_against_best())
    assert ev.note.startswith("race not computable (race_decision of cosine 1.5->0.5: ")
    assert ev.lanes is None and set(ev.effects["decided_by"]) == {"family"}
