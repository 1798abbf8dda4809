"""SQLite's journal by file system: write-ahead on a local disk, the rollback journal on a
network file system (where write-ahead's shared-memory index is unsafe), also for a database
that was in write-ahead mode where it was made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tlmsearch.search import storage

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
