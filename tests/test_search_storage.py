"""SQLite's journal by file system: write-ahead on a local disk, the rollback journal on a
network file system (where write-ahead's shared-memory index is unsafe), also for a database
that was in write-ahead mode where it was made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.search.sampling import storage

AUTOFS_THEN_NFS = """autofs /scratch autofs rw 0 0
host:/export /scratch nfs4 rw,relatime 0 0
/dev/sda1 / ext4 rw 0 0
/dev/sdb1 /data\\040disk xfs rw 0 0
"""


def test_the_mount_on_top_decides_and_escaped_spaces_are_read() -> None:
    assert not storage._local_disk(Path("/scratch/runs/a/optuna.db"), AUTOFS_THEN_NFS)
    assert storage._local_disk(Path("/data disk/runs/a/optuna.db"), AUTOFS_THEN_NFS)
    assert storage._local_disk(Path("/home/u/runs/a/optuna.db"), AUTOFS_THEN_NFS)


def _mode(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]


@pytest.mark.parametrize("local", [True, False])
def test_a_database_moved_to_a_network_fs_leaves_write_ahead_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local: bool
) -> None:
    import optuna

    db = tmp_path / "optuna.db"
    monkeypatch.setattr(storage, "_local_disk", lambda *a, **k: True)
    made = storage.open_storage(f"sqlite:///{db}")
    optuna.create_study(study_name="s", storage=made)
    assert _mode(db) == "wal"  # made on a local disk
    made.engine.dispose()  # that run is over: nothing else has the file open
    monkeypatch.setattr(storage, "_local_disk", lambda *a, **k: local)
    optuna.load_study(study_name="s", storage=storage.open_storage(f"sqlite:///{db}")).ask()
    assert _mode(db) == ("wal" if local else "delete")


def test_a_results_attributes_are_one_transaction_on_a_database(tmp_path: Path) -> None:
    """Optuna commits each user attribute on its own, and on SQLite or PostgreSQL a commit
    (a session, a connection ping, a round trip) was most of a trial's driver time: the ledger
    writes one result's attributes (curve, facts, metrics, reported_at) in one transaction
    (old code: 7 commits at a trial's first eval, 3 at each later one)."""
    from types import SimpleNamespace

    import optuna
    import sqlalchemy

    from tlmsearch.search.ledger import TrialLedger

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = storage.open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    study = optuna.create_study(study_name="s", storage=db)
    ot = study.ask()
    commits: list[int] = []
    sqlalchemy.event.listen(db.engine, "commit", lambda conn: commits.append(1))
    facts = {"widths": [64, 64], "n_params": 1000, "flops_per_token": 5.0, "node": "a"}
    ledger, ray_trial = TrialLedger(), SimpleNamespace(trial_id="t0")
    for tokens in (10, 20):
        commits.clear()
        ledger.record(ot, ray_trial, {**facts, "tokens": tokens, "val_bpb": 1.0, "final": False})
        assert len(commits) == 1
    stored = (
        optuna.load_study(
            study_name="s", storage=storage.open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
        )
        .trials[0]
        .user_attrs
    )
    assert stored == ot.user_attrs  # what the trial object keeps is what the database holds
    assert [e["tokens"] for e in stored["curve"]] == [10, 20] and stored["widths"] == [64, 64]
    assert stored["metrics"]["val_bpb"] == 1.0


def test_attributes_on_a_journal_go_one_by_one_with_the_same_result(tmp_path: Path) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"journal:{tmp_path / 'optuna.journal'}"
    study = optuna.create_study(study_name="s", storage=storage.open_storage(url))
    ot = study.ask()
    storage.set_user_attrs(ot, {"a": 1, "b": [1, 2], "c": {"x": None}})
    again = optuna.load_study(study_name="s", storage=storage.open_storage(url))
    assert again.trials[0].user_attrs == {"a": 1, "b": [1, 2], "c": {"x": None}} == ot.user_attrs


def test_an_optuna_without_the_rdb_internals_writes_attributes_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    monkeypatch.setattr(storage, "_rdb_internals", lambda: None)
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage.open_storage(url))
    ot = study.ask()
    storage.set_user_attrs(ot, {"a": 1, "b": [1, 2]})
    again = optuna.load_study(study_name="s", storage=storage.open_storage(url))
    assert again.trials[0].user_attrs == {"a": 1, "b": [1, 2]} == ot.user_attrs


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def one_study(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """One SQLite study for every example (making the schema is most of a study's cost)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = storage.open_storage(f"sqlite:///{tmp_path_factory.mktemp('b') / 'optuna.db'}")
    return db, optuna.create_study(study_name="s", storage=db)


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(
        st.dictionaries(st.sampled_from(["curve", "metrics", "a", "b", "c"]), _JSON, max_size=5),
        min_size=1,
        max_size=4,
    )
)
def test_a_batched_write_stores_what_optuna_one_by_one_stores(
    one_study: tuple, writes: list[dict]
) -> None:
    """The one-statement upsert leaves the same rows (the same JSON text per key, later
    writes replacing earlier ones) as Optuna's own set_user_attr, key by key."""
    import optuna
    import sqlalchemy

    db, study = one_study
    batched, single = study.ask(), study.ask()
    for attrs in writes:
        storage.set_user_attrs(batched, attrs)
        for key, value in attrs.items():
            single.set_user_attr(key, value)
    with db.engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text("select trial_id, key, value_json from trial_user_attributes")
        ).all()
    by = {tid: {k: v for t, k, v in rows if t == tid} for tid in {r[0] for r in rows}}
    assert by.get(batched._trial_id, {}) == by.get(single._trial_id, {})
    again = optuna.load_study(study_name="s", storage=storage.open_storage(db.url))
    stored = {t.number: t.user_attrs for t in again.trials}
    assert stored[batched.number] == stored[single.number] == batched.user_attrs


def test_a_results_attributes_are_two_statements_whatever_their_number(tmp_path: Path) -> None:
    """One read of the trial (is it still running?) and one upsert: Optuna's own write read
    the trial and wrote once per attribute (old code: 2 statements per attribute)."""
    import optuna
    import sqlalchemy

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = storage.open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    ot = optuna.create_study(study_name="s", storage=db).ask()
    statements: list[str] = []
    sqlalchemy.event.listen(
        db.engine, "before_cursor_execute", lambda c, cur, sql, *a: statements.append(sql)
    )
    storage.set_user_attrs(ot, {f"k{i}": i for i in range(8)})
    writes = [s for s in statements if "trial_user_attributes" in s]
    assert (
        len(writes) == 1 and len([s for s in statements if s.lstrip().startswith("SELECT")]) == 1
    )


def test_a_finished_trial_refuses_a_batched_write_as_optuna_does(tmp_path: Path) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="s", storage=storage.open_storage(f"sqlite:///{tmp_path / 'optuna.db'}")
    )
    ot = study.ask()
    study.tell(ot, 1.0)
    with pytest.raises(RuntimeError, match="already finished"):
        storage.set_user_attrs(ot, {"a": 1, "b": 2})
    with pytest.raises(RuntimeError, match="already finished"):
        ot.set_user_attr("a", 1)


# -------------------------------------------------------------------------------------------------
# The study read once for a reader of every trial (stored_trials)


def _fields(trials: list) -> list[tuple]:
    return [
        (t.number, t.state, t.user_attrs, t.datetime_start, t.datetime_complete) for t in trials
    ]


@settings(max_examples=25, deadline=None)
@given(
    trials=st.lists(
        st.tuples(
            st.sampled_from(["COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"]),
            st.dictionaries(st.sampled_from(["curve", "metrics", "seed", "a"]), _JSON, max_size=4),
        ),
        max_size=6,
    ),
    zone=st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"]),
)
def test_stored_trials_hold_what_optuna_reads_of_every_trial(
    one_study: tuple, trials: list, zone: str
) -> None:
    """Number, state, user attributes and both datetimes (local time, as Optuna shows them, in
    any time zone), trial by trial and by state; the study's own attributes too. The database
    holds every earlier example's study as well: only this one's trials are read."""
    import os
    import time

    import optuna
    from optuna.trial import TrialState

    db, _ = one_study
    name = f"view-{len(optuna.study.get_all_study_names(db))}"
    study = optuna.create_study(study_name=name, storage=db)
    study.set_user_attr("tlm_race:x", {"seeds": [1]})
    for state, attrs in sorted(trials, key=lambda t: t[0] == "WAITING"):  # asks take the queue
        if state == "WAITING":
            study.enqueue_trial({}, user_attrs=attrs)
            continue
        ot = study.ask()
        for key, value in attrs.items():
            ot.set_user_attr(key, value)
        if state != "RUNNING":
            study.tell(ot, 1.0 if state == "COMPLETE" else None, state=TrialState[state])
    old = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        again = optuna.load_study(study_name=name, storage=storage.open_storage(db.url))
        view = storage.stored_trials(again)
        assert isinstance(view, storage.StoredTrials)
        assert _fields(view.get_trials(deepcopy=False)) == _fields(again.get_trials())
        done = (TrialState.COMPLETE, TrialState.PRUNED)
        assert _fields(view.get_trials(states=done)) == _fields(again.get_trials(states=done))
        assert view.user_attrs == again.user_attrs and view.study_name == name
        waiting = sum(state == "WAITING" for state, _ in trials)
        assert len(view.get_trials(states=(TrialState.WAITING,))) == waiting
    finally:
        if old is None:
            os.environ.pop("TZ")
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_a_journal_or_an_unknown_schema_is_read_by_optuna_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"journal:{tmp_path / 'optuna.journal'}"
    journal = optuna.create_study(study_name="s", storage=storage.open_storage(url))
    assert storage.stored_trials(journal) is journal
    db = optuna.create_study(
        study_name="s", storage=storage.open_storage(f"sqlite:///{tmp_path / 'o.db'}")
    )
    db.ask()

    class Renamed:  # tables whose columns are not the ones read
        TrialModel = type("T", (), {"__table__": None})
        TrialUserAttributeModel = TrialModel

    monkeypatch.setattr(storage, "_rdb_internals", lambda: (Renamed, None))
    assert storage.stored_trials(db) is db
