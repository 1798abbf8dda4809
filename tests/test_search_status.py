"""``tlmsearch status`` of a run that ended reads the tables its end wrote, not the storage,
and says exactly what the storage would (tlmsearch/search/status.py,
tlmsearch/run_dir/tables.py's ``final_tables``). No Ray: the driver's queue is asked and told
in this process, then the driver's own end writes the tables, best.yaml and run.json."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from search_helpers import tiny_config
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import TABLES
from tlmsearch.search import confirm, export, runner, status
from tlmsearch.search.sampling.pruning import OptunaPruningScheduler
from tlmsearch.search.sampling.race import advance
from tlmsearch.search.sampling.samplers import DefineByRunSpace, write_initial_queue
from tlmsearch.widths.candidate import Candidate

optuna.logging.set_verbosity(optuna.logging.WARNING)
SPACE = {
    "shape": {"type": "fixed", "value": "cosine"},
    "r_start": {"type": "categorical", "choices": [1.75, 1.5, 1.25, 0.75]},
}
EFFECT = {1.75: -0.30, 1.5: -0.05, 1.25: 0.0, 0.75: 0.10}  # val_bpb vs uniform


def _value(cand: Candidate, seed: int) -> float:
    rng = random.Random(f"{cand.identity}/{seed}")
    return 1.0 + 0.01 * seed + EFFECT.get(cand.get("r_start"), 0.0) + rng.gauss(0, 0.03)


def _drain(study, cfg, prune=frozenset()) -> None:
    """Ask and tell every queued trial as the driver would (its curve, metrics and end state),
    advancing the race after each; ``prune``: (r_start, seed) told PRUNED where the scheduler
    may prune it."""
    space = DefineByRunSpace(cfg)
    waiting = (optuna.trial.TrialState.WAITING,)
    while study.get_trials(deepcopy=False, states=waiting):
        trial = study.ask()
        conf = space(trial)
        cand, seed = conf["candidate"], conf["seed"]
        v = _value(cand, seed)
        tokens = cfg.train.tokens
        curve = [
            {"tokens": tokens // 2, "wall_s": 1.0, "val_bpb": v + 0.2},
            {"tokens": tokens, "wall_s": 2.0, "val_bpb": v},
        ]
        trial.set_user_attr("curve", curve)
        trial.set_user_attr("metrics", curve[-1])
        fake = SimpleNamespace(config=conf, trial_id=str(trial.number))
        scheduler = OptunaPruningScheduler(0, "val_bpb", tokens)
        if (cand.get("r_start"), seed) in prune and scheduler._may_prune(fake, 1):
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, v)
        if cfg.search.racing is not None:
            advance(study, cfg)


def _ended_run(tmp_path: Path, **search) -> Path:
    """A run dir whose study ran to its end: trials told in its SQLite storage, then the
    driver's end (:func:`runner._finish`) wrote the tables, best.yaml and run.json."""
    cfg = tiny_config(tmp_path, space={"dimensions": SPACE}, search={"pruner": "median", **search})
    run = tmp_path / "runs" / cfg.name
    run.mkdir(parents=True)
    RunDir(run).study.write_text(cfg.to_yaml())
    url = f"sqlite:///{run / 'optuna.db'}"
    info = {"status": "running", "optuna_study": cfg.name, "n_trials_planned": 0}
    RunDir(run).status.write_text(json.dumps(info))
    study = optuna.create_study(study_name=cfg.name, storage=url)
    write_initial_queue(study, cfg)
    _drain(study, cfg, prune={(0.75, 1)})
    if cfg.search.confirm is not None:
        confirm.prepare(run, study, cfg, echo=lambda _: None)
        _drain(study, cfg)
    runner._finish(run, cfg, study, url, "finished", time.time(), lambda _: None)
    return run


def _same(a, b, where="status") -> None:
    """Equal, NaN equal to NaN, frames equal by value and dtype."""
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (where, set(a) ^ set(b))
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert type(a) is type(b), where
        _same(vars(a), vars(b), where)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), (where, a, b)
    else:
        assert (a, type(a)) == (b, type(b)), (where, a, b)


def _from_storage(monkeypatch) -> list[str]:
    """Make status read the storage whatever run.json says; returns the runs it opened."""
    opened: list[str] = []
    monkeypatch.setattr(status, "final_tables", lambda *a: None)
    real = export.open_run
    monkeypatch.setattr(status, "open_run", lambda r, **k: opened.append(str(r)) or real(r, **k))
    return opened


def _opens(monkeypatch) -> list[str]:
    """Record the runs status opens the storage of (status' tables path stays)."""
    opened: list[str] = []
    real = export.open_run
    monkeypatch.setattr(status, "open_run", lambda r, **k: opened.append(str(r)) or real(r, **k))
    return opened


@pytest.mark.parametrize(
    "search",
    [
        {"seeds": [0, 1, 2], "confirm": {"top": 2, "seeds": 2}},
        {"seeds": [0, 1, 2, 3], "racing": {"prior_sd": 0.05}},
    ],
    ids=["confirm", "racing"],
)
def test_status_of_an_ended_run_reads_its_tables_and_says_what_the_storage_says(
    tmp_path, monkeypatch, search
):
    run = _ended_run(tmp_path, **search)
    stamp = json.loads(RunDir(run).status.read_text())[TABLES]
    assert stamp["trials"] == len(pd.read_parquet(RunDir(run).table("trials")))
    opened = _opens(monkeypatch)
    fast = status.status_report(run, now=0.0)
    printed = CliRunner().invoke(app, ["status", str(run)])
    assert printed.exit_code == 0, printed.output
    assert opened == []  # the storage was never opened
    if "racing" in search:
        assert fast["race"] and all(":" in line for line in fast["race"])
    else:
        assert fast["confirmation"] and fast["best"][0]["confirmed_on_seeds"] == [3, 4]
    monkeypatch.undo()
    opened = _from_storage(monkeypatch)
    _same(fast, status.status_report(run, now=0.0))  # the storage's columns, read in two queries
    again = CliRunner().invoke(app, ["status", str(run)])
    assert opened == [str(run), str(run)] and again.output == printed.output
    monkeypatch.setattr(status, "stored_trials", lambda study: study)  # Optuna's own read
    _same(fast, status.status_report(run, now=0.0))
    # new questions of the stored trials (--stats-from): the same either way too
    asked = yaml.safe_load(RunDir(run).study.read_text())
    asked["stats"] = {**asked.get("stats", {}), "level": 0.9}
    (tmp_path / "asked.yaml").write_text(yaml.safe_dump(asked))
    from_storage = status.status_report(run, now=0.0, stats_from=tmp_path / "asked.yaml")
    monkeypatch.undo()
    from_tables = status.status_report(run, now=0.0, stats_from=tmp_path / "asked.yaml")
    assert from_tables["level"] == 0.9
    _same(from_tables, from_storage)


@pytest.mark.parametrize(
    "change",
    ["running", "version", "a row less", "no stamp", "queued", "no choice on disk"],
)
def test_status_reads_the_storage_when_the_tables_may_not_stand_for_it(
    tmp_path, monkeypatch, change
):
    run = _ended_run(tmp_path, seeds=[0, 1, 2], confirm={"top": 1, "seeds": 2})
    rd = RunDir(run)
    info = json.loads(rd.status.read_text())
    if change == "running":  # resumed: the storage moves on
        info["status"] = "running"
    elif change == "version":  # another version wrote them: its columns may differ
        info[TABLES]["version"] = "0.0.1"
    elif change == "no stamp":  # a run dir an older version ended
        del info[TABLES]
    elif change == "queued":
        info["counts"]["WAITING"] = 1
    elif change == "a row less":  # a table copied or edited by hand
        trials = pd.read_parquet(rd.table("trials"))
        trials.iloc[1:].to_parquet(rd.table("trials"), index=False)
    else:  # the stage's choice is the study's copy alone
        rd.confirm.unlink()
    rd.status.write_text(json.dumps(info))
    opened = _opens(monkeypatch)
    rep = status.status_report(run, now=0.0)
    assert opened == [str(run)]
    assert rep["counts"]["COMPLETE"] > 0
    assert rep["best"][0]["confirmed_on_seeds"] == [3, 4]


def test_a_resume_stops_status_reading_the_tables_before_it_touches_the_storage(
    tmp_path, monkeypatch
):
    """``resume`` queues trials again long before its run's status says running (data, Ray):
    the tables' stamp goes first, so status reads the storage from then on."""
    run = _ended_run(tmp_path, seeds=[0, 1], confirm={"top": 1, "seeds": 2})
    assert status.final_tables(run, json.loads(RunDir(run).status.read_text())) is not None
    seen = []

    def first_write(study, cfg, run_dir):  # resume's first write to the storage
        seen.append(json.loads(RunDir(run).status.read_text()))
        raise KeyboardInterrupt  # the user stops it there

    monkeypatch.setattr(runner, "record_unpruned", first_write)
    with pytest.raises(KeyboardInterrupt):
        runner.resume_run(run, echo=lambda _: None)
    info = json.loads(RunDir(run).status.read_text())
    assert seen and seen[0]["status"] == info["status"] == "finished"
    assert seen[0][TABLES] is None and status.final_tables(run, info) is None


def test_a_kept_weights_folder_removed_since_is_no_weights_folder(tmp_path):
    """As the storage's records say it: a trial's weights folder only while it is there."""
    run = _ended_run(tmp_path, seeds=[0, 1])
    rd = RunDir(run)
    trials = pd.read_parquet(rd.table("trials"))
    kept, gone = tmp_path / "w0", tmp_path / "w1"
    kept.mkdir()
    trials["weights"] = [str(kept), str(gone)] + [""] * (len(trials) - 2)
    trials.to_parquet(rd.table("trials"), index=False)
    ended = status.final_tables(run, json.loads(rd.status.read_text()))
    assert list(ended.trials["weights"][:3]) == [str(kept), "", ""]


def test_an_export_by_another_version_stops_status_reading_the_tables(tmp_path, monkeypatch):
    """Tables rewritten by a version other than the one that stamped them are no longer read
    in place of the storage; an export by the same version leaves the stamp."""
    from tlmsearch import constants

    run = _ended_run(tmp_path, seeds=[0, 1])
    rd = RunDir(run)
    stamp = json.loads(rd.status.read_text())[TABLES]
    assert CliRunner().invoke(app, ["export", str(run), "--format", "csv"]).exit_code == 0
    assert json.loads(rd.status.read_text())[TABLES] == stamp
    monkeypatch.setattr(constants, "VERSION", "9.9.9")  # the exporting version
    assert CliRunner().invoke(app, ["export", str(run), "--format", "csv"]).exit_code == 0
    info = json.loads(rd.status.read_text())
    assert info[TABLES] is None and status.final_tables(run, info) is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**4) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def ended(tmp_path_factory):
    return _ended_run(tmp_path_factory.mktemp("ended"), seeds=[0, 1])


@pytest.mark.slow  # a fuzzer (~30 s): every run.json a hand could leave
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_run_json_edited_by_hand_is_read_only_when_it_stands_for_the_tables(ended, data):
    """The tables are read exactly when run.json says the run ended, its stamp is this
    version's record of their rows (any field changed: not), and its counts are numbers
    status can print with nothing running or queued."""
    info = json.loads(RunDir(ended).status.read_text())
    real = info[TABLES]
    fuzzed = {
        **info,
        "status": data.draw(st.sampled_from(["finished", "failed", "running", None])),
    }
    if data.draw(st.booleans(), label="change the stamp"):
        field = data.draw(st.sampled_from([*real, "extra"]), label="field")
        fuzzed[TABLES] = {**real, field: data.draw(_JSON, label="value")}
    if data.draw(st.booleans(), label="change the counts"):
        fuzzed["counts"] = data.draw(
            _JSON
            | st.dictionaries(
                st.sampled_from(["COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING", "x"]), _JSON
            ),
            label="counts",
        )
    counts, stamp = fuzzed["counts"], fuzzed[TABLES]
    expected = (
        fuzzed["status"] in ("finished", "failed")
        and all(stamp.get(k) == v for k, v in real.items())
        and isinstance(counts, dict)
        and all(type(n) is int for n in counts.values())
        and not counts.get("RUNNING")
        and not counts.get("WAITING")
    )
    got = status.final_tables(ended, fuzzed)
    assert (got is not None) == expected, (fuzzed, got)
    if got is not None:
        assert len(got.trials) == real["trials"]


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
_RUN_JSON = ["status", "counts", TABLES, "n_trials_planned", "trial_slots", "updated"]
_RUN_JSON += ["driver_pid", "driver_host", "driver_start", "heartbeat", "phase", "optuna_study"]


@pytest.mark.slow  # a fuzzer (~30 s)
@settings(max_examples=80, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(_RUN_JSON), _ANY, max_size=4))
@example(changes={"optuna_study": "0", TABLES: None})  # a name the storage does not have
def test_status_of_any_run_json_reports_or_names_the_field(ended, changes):
    """Whatever a hand leaves in run.json's fields, status reports (what it cannot read it
    leaves out) or says which field to fix (exit 2): never a traceback."""
    rd = RunDir(ended)
    kept = rd.status.read_text()
    rd.status.write_text(json.dumps({**json.loads(kept), **changes}))
    try:
        rep = status.status_report(ended, now=0.0)
        assert rep["planned"] is None or type(rep["planned"]) is int
    except ConfigError as err:
        assert "run.json" in str(err)
    finally:
        rd.status.write_text(kept)


def test_a_study_name_that_is_no_name_is_exit_2_naming_the_field(tmp_path):
    run = _ended_run(tmp_path, seeds=[0, 1])
    rd = RunDir(run)
    info = json.loads(rd.status.read_text())
    info.pop(TABLES)  # read from the storage, which the name opens
    rd.status.write_text(json.dumps({**info, "optuna_study": ["x"]}))
    res = CliRunner().invoke(app, ["status", str(run)])
    assert res.exit_code == 2 and "optuna_study is ['x'], not a study name" in res.output
    rd.status.write_text(json.dumps({**info, "optuna_study": "nope"}))  # no such study
    res = CliRunner().invoke(app, ["status", str(run)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "no study 'nope', the name" in out and "(optuna_study)" in out
