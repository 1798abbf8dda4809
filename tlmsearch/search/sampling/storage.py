"""Optuna storage of a run: SQLite in the run dir (default), a journal file, or a server URL.

Only the driver writes (Ray Tune's searcher and our scheduler live there), so SQLite in the run
dir is the embedded default; a PostgreSQL URL serves runs whose driver moves between machines or
that several people watch. ``optuna-dashboard <url>`` opens any of them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from tlmsearch.config import StorageConfig
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir

_URL_SCHEMES = ("sqlite", "postgresql", "mysql")


def storage_url(storage: StorageConfig, run_dir: str | Path) -> str:
    """The storage as text: a SQLAlchemy URL, or ``journal:<path>`` for a journal file.

    >>> storage_url(StorageConfig(), "runs/x")
    'sqlite:///runs/x/optuna.db'
    """
    run = Path(run_dir)
    spec = storage.optuna
    if spec is None:
        return f"sqlite:///{RunDir(run).optuna_sqlite}"
    if spec == "journal":
        return f"journal:{RunDir(run).optuna_journal}"
    scheme = spec.split(":", 1)[0].split("+", 1)[0]
    if "://" not in spec or scheme not in _URL_SCHEMES:
        raise ConfigError(
            f"storage.optuna: {spec!r} is not a storage; leave it empty (SQLite in the run dir), "
            "write 'journal', or give a URL such as postgresql://user:pass@host/db"
        )
    return spec


def open_storage(url: str) -> Any:
    """An Optuna storage object for ``url`` (a fresh object: its own connections)."""
    import optuna

    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    if url.startswith("postgresql://"):
        url = "postgresql+" + _pg_driver(url) + url.removeprefix("postgresql")
    # pool_pre_ping: a long study outlives idle server connections.
    storage = optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    if url.startswith("sqlite:///"):
        # write-ahead on a local disk; the rollback journal elsewhere, also for a database that
        # was in write-ahead mode where it was made (the mode is stored in the file)
        _journal(storage.engine, _local_disk(Path(url.removeprefix("sqlite:///"))))
    return storage


# File systems where SQLite's write-ahead log must not be used: its index lives in shared memory
# of one host (https://sqlite.org/wal.html, "WAL does not work over a network filesystem").
NETWORK_FS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "fuse",
    "afs",
    "gfs2",
    "ocfs2",
    "panfs",
    "wekafs",
    "pvfs2",
    "autofs",
)


def _local_disk(path: Path, mounts: str | None = None) -> bool:
    r"""Whether ``path`` lies on a local file system (``mounts``: /proc/mounts' text, read when
    None; False when unknown).

    >>> table = "autofs /scratch autofs rw 0 0\nh:/x /scratch nfs4 rw 0 0\n/dev/sda / ext4 rw 0 0"
    >>> _local_disk(Path("/scratch/runs/x/optuna.db"), table), _local_disk(Path("/tmp/x"), table)
    (False, True)
    """
    try:
        lines = (Path("/proc/mounts").read_text() if mounts is None else mounts).splitlines()
    except OSError:
        return False
    # mount points escape a space as \040; of several mounts on one point the last is on top
    # (an autofs entry comes before the nfs it mounts)
    mounts = [[f.replace("\\040", " ") for f in line.split()[1:3]] for line in lines]
    full = str(path.resolve())
    best = None
    for m in mounts:
        if (full == m[0] or full.startswith(m[0].rstrip("/") + "/")) and (
            best is None or len(m[0]) >= len(best[0])
        ):
            best = m
    return best is not None and not best[1].startswith(NETWORK_FS)


def _journal(engine: Any, local: bool) -> None:
    """On a ``local`` disk, SQLite in write-ahead mode with ``synchronous=NORMAL``: a commit
    appends to optuna.db-wal without waiting for the disk (an fsync at checkpoints only), where
    the default waits for two fsyncs per commit. A search commits a few times a trial (its
    creation, its reported values, its user attributes in one upsert, its end): ~10 ms each on
    a disk that syncs, most of the driver's time per trial before (benchmarks/scale.py). Safe
    against a killed process (the log is on disk; the next open replays it); a power loss may
    drop the last commits, never corrupt the file. Readers (``tlmsearch status``) no longer wait
    for the writer. Elsewhere the rollback journal (a run dir made on a local disk and resumed
    from shared storage leaves write-ahead mode)."""
    from sqlalchemy import event

    def on_connect(conn: Any, _record: Any) -> None:
        cur = conn.cursor()
        if local:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        else:
            cur.execute("PRAGMA journal_mode=DELETE")
        cur.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connections opened before the listener: closed, reopened with it


def study_names(url: str) -> set[str]:
    """The studies a storage holds; a :class:`ConfigError` naming ``storage.optuna`` when it
    cannot be opened (an unreachable server, a SQLite file in a missing folder), so a run says
    so before it starts Ray and prepares data."""
    import optuna

    try:
        return set(optuna.get_all_study_names(open_storage(url)))
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError(f"storage.optuna: cannot open {redact(url)}: {err}") from None


def check_names_free(storage: StorageConfig, url: str, names: list[str]) -> None:
    """A storage outside the run dir (a server, or a file the user names) must open and hold
    none of ``names``: a :class:`ConfigError` otherwise, said before a run or ladder starts
    anything. A storage in the run dir (SQLite or journal) is new with the run: nothing to
    check."""
    if storage.optuna in (None, "journal"):
        return
    taken = study_names(url)
    clash = [n for n in names if n in taken]
    if clash:
        raise name_taken(url, clash[0])


def name_taken(url: str, name: str) -> ConfigError:
    """The error for a study name the storage already holds."""
    return ConfigError(
        f"storage.optuna: {redact(url)} already holds a study {name!r}; "
        "pick another run with --name NEW"
    )


def _pg_driver(url: str) -> str:
    """SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; use whichever is installed."""
    import importlib.util

    for module, dialect in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return dialect
    raise ConfigError(
        f"storage.optuna: {redact(url)} needs a PostgreSQL driver: "
        "pip install 'tlmsearch[postgres]' (psycopg2-binary)"
    )


def dashboard_command(url: str) -> str:
    """The shell command that opens this storage in optuna-dashboard, on loopback.

    A password in the URL is shown as ``***`` (terminals and CI logs keep what they print).
    """
    target = url.removeprefix("journal:") if url.startswith("journal:") else redact(url)
    return f"optuna-dashboard {target} --host 127.0.0.1 --port 8080"


def redact(url: str) -> str:
    """Hide a password in a URL before printing it."""
    if "://" in url and "@" in url:
        head, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{head}://{user}:***@{host}" if ":" in creds else url
    return url


def set_user_attrs(trial: Any, attrs: Mapping[str, Any]) -> None:
    """``trial.set_user_attr`` for every item of ``attrs``, in one storage transaction where
    the storage is a database (SQLite, PostgreSQL): Optuna commits each attribute on its own,
    and a commit (a session, a connection ping, a server round trip) costs more than the write
    itself, so a trial's several attributes per eval were most of the driver's time per trial
    (``benchmarks/scale.py``). The journal and in-memory storages take them one by one."""
    from optuna.storages import RDBStorage

    backend = getattr(trial.storage, "_backend", trial.storage)  # under Optuna's cache
    internals = _rdb_internals() if isinstance(backend, RDBStorage) else None
    if len(attrs) < 2 or internals is None:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    models, scoped = internals
    # as Optuna's own set_trial_user_attr: a concurrent insert of the same key is not an error
    with scoped(backend.scoped_session, True) as session:
        if not _upsert_user_attrs(backend, session, models, trial._trial_id, attrs):
            for key, value in attrs.items():
                backend._set_trial_attr_without_commit(
                    session, models.TrialUserAttributeModel, trial._trial_id, key, value
                )
    trial._cached_frozen_trial.user_attrs.update(attrs)  # as set_user_attr keeps it


def _upsert_user_attrs(
    backend: Any, session: Any, models: Any, trial_id: int, attrs: Mapping[str, Any]
) -> bool:
    """All of ``attrs`` in one statement (an insert of every row that updates the keys the
    trial already has), after one check that the trial still takes attributes: what Optuna's
    per-attribute write does on SQLite >= 3.24 and PostgreSQL (the same upsert, the same check),
    without its read of the trial and its statement for every attribute, which were most of
    the ledger's time per result. False where the database has no such upsert (MySQL and
    others): then the caller writes them one by one."""
    import json
    import sqlite3

    name = backend.engine.name
    if name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif name == "sqlite" and sqlite3.sqlite_version_info >= (3, 24, 0):
        from sqlalchemy.dialects.sqlite import insert
    else:
        return False
    trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
    backend.check_trial_is_updatable(trial_id, trial.state)
    table = models.TrialUserAttributeModel
    rows = [
        {"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()
    ]
    stmt = insert(table).values(rows)
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=[table.trial_id, table.key],
            set_={"value_json": stmt.excluded.value_json},
        )
    )
    return True


@functools.cache  # looked up once: set_user_attrs runs on every trial's result
def _rdb_internals() -> tuple[Any, Any] | None:
    """Optuna's RDB internals one transaction needs (its models module and scoped session),
    or None where this Optuna lacks them (then each attribute is written on its own)."""
    try:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import RDBStorage, _create_scoped_session
    except ImportError:
        return None
    if not hasattr(RDBStorage, "_set_trial_attr_without_commit"):
        return None
    return models, _create_scoped_session


class TrialRead(NamedTuple):
    """What the readers of a run's trials take of an Optuna trial (``trial_records``,
    ``status``' counts, progress and race): a FrozenTrial's fields of those names."""

    number: int
    state: Any  # optuna.trial.TrialState
    user_attrs: dict[str, Any]
    datetime_start: datetime | None
    datetime_complete: datetime | None


class StoredTrials:
    """A study's trials and user attributes read once, for a reader that reads them whole many
    times (``tlmsearch status``): ``get_trials`` and ``user_attrs`` as an Optuna study's.

    >>> from optuna.trial import TrialState
    >>> t = TrialRead(0, TrialState.COMPLETE, {"seed": 1}, None, None)
    >>> read = StoredTrials("s", {}, [t])
    >>> [x.user_attrs for x in read.get_trials(states=(TrialState.COMPLETE,))]
    [{'seed': 1}]
    >>> read.get_trials(states=(TrialState.RUNNING,))
    []
    """

    def __init__(self, name: str, user_attrs: dict[str, Any], trials: list[TrialRead]) -> None:
        self.study_name, self.user_attrs, self._trials = name, user_attrs, trials

    def get_trials(self, deepcopy: bool = False, states: Any = None) -> list[TrialRead]:
        if states is None:
            return list(self._trials)
        return [t for t in self._trials if t.state in states]


def stored_trials(study: Any) -> Any:
    """``study``'s trials and user attributes as :class:`StoredTrials`, read from a database in
    two queries of the columns the readers take. Optuna's own read builds every trial's params,
    values, intermediate values and system attributes through its ORM: at 5,000 trials on
    SQLite 3.9-4.3 s of it, against 0.5-0.75 s for these queries and their JSON
    (docs/benchmarks.md, "5,000 trials"). ``study`` itself where the storage is no database
    (journal, in memory) or this Optuna's tables are not the ones read here."""
    from optuna.storages import RDBStorage

    backend = getattr(study._storage, "_backend", study._storage)  # under Optuna's cache
    internals = _rdb_internals()
    if not isinstance(backend, RDBStorage) or internals is None:
        return study
    try:  # this Optuna's tables and columns, as the queries read them
        queries = _queries(internals[0], study._study_id)
    except (AttributeError, KeyError):
        return study  # another schema than this reader knows: Optuna's own read
    # naive UTC where this Optuna's model converts them (as it stores them); naive local time
    # in versions before it
    utc = hasattr(internals[0].TrialModel, "_datetime_start_utc")
    # Two statements, so a trial that ends between them shows its final attributes with its
    # RUNNING state, as Optuna's own read (a statement per table) can; one joined statement
    # converted each trial's columns once per attribute row and read 1.4-1.6x slower
    with backend.engine.connect() as conn:
        trials, attrs = (conn.execute(q).all() for q in queries)
    return _trials_of(study, trials, attrs, _local if utc else (lambda d: d))


def _queries(models: Any, study_id: int) -> tuple[Any, Any]:
    """The study's trials in trial order, and the user attributes of its trials."""
    import sqlalchemy as sa

    trial = models.TrialModel.__table__.c
    attr = models.TrialUserAttributeModel.__table__.c
    ids = sa.select(trial.trial_id).where(trial.study_id == study_id)
    trials = (
        sa.select(trial.trial_id, trial.number, trial.state, trial.datetime_start)
        .add_columns(trial.datetime_complete)
        .where(trial.study_id == study_id)
        .order_by(trial.number, trial.trial_id)
    )
    attrs = sa.select(attr.trial_id, attr.key, attr.value_json).where(attr.trial_id.in_(ids))
    return trials, attrs


def _trials_of(study: Any, trials: list[Any], attrs: list[Any], when: Any) -> StoredTrials:
    import json

    by_trial: dict[int, dict[str, Any]] = {}
    for tid, key, value in attrs:
        by_trial.setdefault(tid, {})[key] = json.loads(value)
    read = [
        TrialRead(number, state, by_trial.get(tid, {}), when(start), when(end))
        for tid, number, state, start, end in trials
    ]
    return StoredTrials(study.study_name, dict(study.user_attrs), read)


def _local(utc: datetime | None) -> datetime | None:
    """A naive UTC time as stored -> the naive local time an Optuna trial shows."""
    if utc is None:
        return None
    return utc.replace(tzinfo=timezone.utc).astimezone().replace(tzinfo=None)
