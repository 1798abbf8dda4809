"""W&B through Ray Tune's public callback hooks and wandb's public API
(search/tracking/wandb_tracker.py).

No Ray: the trials of tests/tracking_trials.py (a retried trial, an error, a diverged run, a
pruned one, one the driver left running) through the tracker, first with ``wandb.init``
recorded (what each run is given), then with wandb itself, offline in a temporary folder.
Before anything starts: a wandb too old for a run per trial, and the API-key check.
"""

from __future__ import annotations

from typing import Any

import pytest
from search_helpers import tiny_config
from tracking_trials import play

from tlmsearch.errors import ConfigError
from tlmsearch.search.tracking import callbacks as tracking
from tlmsearch.search.tracking import wandb_tracker as tracking_wandb
from tlmsearch.search.tracking.callbacks import tracker_callbacks

wandb = pytest.importorskip("wandb")


class _Config(dict):
    """A run's config as the tracker updates it."""

    def update(self, values: dict[str, Any], allow_val_change: bool = False) -> None:
        super().update(values)


class _Run:
    """What the tracker does with a run: config updates, logged points, metrics, finish."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.config = _Config(kwargs["config"])
        self.logged: list[dict[str, float]] = []
        self.metrics: list[tuple[str, dict]] = []
        self.finished = 0

    def define_metric(self, name: str, **kwargs: Any) -> None:
        self.metrics.append((name, kwargs))

    def log(self, point: dict[str, float]) -> None:
        self.logged.append(dict(point))

    def finish(self) -> None:
        self.finished += 1


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """The five trials through the tracker with ``wandb.init`` recorded: runs by trial name."""
    runs: list[_Run] = []

    def init(**kwargs: Any) -> _Run:
        runs.append(_Run(**kwargs))
        return runs[-1]

    torn: list[bool] = []
    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda: torn.append(True))
    cfg = tiny_config(tmp_path, tracking={"wandb": {"project": "p"}})
    (tracker,) = tracker_callbacks(cfg, tmp_path / "runs" / "tiny")
    play(tracker)
    assert torn == [True]  # the experiment's end waits for W&B to write every run
    return {r.kwargs["name"]: r for r in runs}, tmp_path


def test_a_run_per_trial_grouped_by_candidate_offline_in_the_run_dir(recorded):
    runs, tmp_path = recorded
    assert sorted(runs) == [
        "linear 1.5->0.5 seed 0 #1",
        "linear 1.5->0.5 seed 1 #2",
        "linear 1.5->0.5 seed 2 #3",
        "linear 1.5->0.5 seed 3 #4",
        "uniform seed 0 #0",
    ]
    a = runs["uniform seed 0 #0"]
    assert a.kwargs["group"] == "uniform" and a.kwargs["job_type"] == "trial"
    assert a.kwargs["project"] == "p" and a.kwargs["mode"] == "offline"
    assert a.kwargs["dir"] == str((tmp_path / "runs" / "tiny").resolve())
    assert a.kwargs["reinit"] == "create_new"  # several open at once, none global
    assert {r.kwargs["group"] for r in runs.values() if r is not a} == {"linear 1.5->0.5"}
    assert a.metrics == [("tokens", {}), ("*", {"step_metric": "tokens"})]


def test_a_retried_trial_keeps_its_run_and_logs_each_token_count_once(recorded):
    runs, _ = recorded
    a = runs["uniform seed 0 #0"]
    assert [p["tokens"] for p in a.logged] == [2048, 4096, 6144]
    assert set(a.logged[0]) == {"tokens", "val_bpb", "val_loss", "params"}
    assert a.config == {
        "shape": "uniform",
        "seed": 0,
        "candidate": "uniform",
        "study": "tiny",
        "trial": 0,
        "widths": "[96, 32]",
        "n_layer": 2,
        "outcome": "complete",
    }


def test_each_way_a_trial_ends_is_its_outcome_and_every_run_is_finished(recorded):
    runs, _ = recorded
    outcomes = {name[-2:]: r.config["outcome"] for name, r in runs.items()}
    assert outcomes == {
        "#0": "complete",
        "#1": "failed",
        "#2": "failed",
        "#3": "pruned",
        "#4": "interrupted",
    }
    assert all(r.finished == 1 for r in runs.values())


def test_a_run_wandb_cannot_start_is_a_warning_and_the_study_goes_on(
    tmp_path, monkeypatch, capsys
):
    calls: list[str] = []

    def init(**kwargs: Any) -> _Run:
        calls.append(kwargs["name"])
        raise ConnectionError("server gone")

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda: None)
    cfg = tiny_config(tmp_path, tracking={"wandb": {"project": "p", "mode": "online"}})
    (tracker,) = tracker_callbacks(cfg, tmp_path / "runs" / "tiny")
    play(tracker)  # no exception reaches Ray
    assert calls == ["uniform seed 0 #0"]  # then no more tries (each could wait on a server)
    err = capsys.readouterr().err
    assert "warning: W&B could not start the run of uniform seed 0 #0" in err
    assert "ConnectionError: server gone" in err and "no more W&B runs" in err


@pytest.mark.parametrize("fails", ["log", "define_metric", "finish"])
def test_a_wandb_call_failing_mid_run_is_a_warning_and_the_study_goes_on(
    tmp_path, monkeypatch, capsys, fails
):
    """After a run started, W&B's calls run in the driver's callbacks: one that raises (the
    server went away) must not end Tuner.fit; a run whose metrics could not be defined is
    finished, not left open."""
    runs: list[_Run] = []

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("server gone")

    def init(**kwargs: Any) -> _Run:
        runs.append(_Run(**kwargs))
        if fails == "define_metric":
            runs[-1].define_metric = broken  # type: ignore[method-assign]
        elif fails == "log":
            runs[-1].log = broken  # type: ignore[method-assign]
        return runs[-1]

    monkeypatch.setattr(wandb, "init", init)
    monkeypatch.setattr(wandb, "teardown", lambda: None)
    if fails == "finish":
        monkeypatch.setattr(_Run, "finish", broken)
    cfg = tiny_config(tmp_path, tracking={"wandb": {"project": "p", "mode": "online"}})
    (tracker,) = tracker_callbacks(cfg, tmp_path / "runs" / "tiny")
    play(tracker)  # no exception reaches Ray
    if fails != "finish":  # off for the rest of the session after the first failure
        assert len(runs) == 1
    err = capsys.readouterr().err
    assert err.count("warning: W&B could not") == 1 and "ConnectionError: server gone" in err
    if fails != "finish":  # the run a failed call left open is finished, not dropped
        assert runs[0].finished == 1


def test_wandb_itself_writes_a_folder_per_trial_offline(tmp_path):
    cfg = tiny_config(tmp_path, tracking={"wandb": {"project": "p"}})
    run = tmp_path / "runs" / "tiny"
    (tracker,) = tracker_callbacks(cfg, run)
    play(tracker)
    folders = sorted((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 5  # the retried trial is one run
    records = [next(f.glob("run-*.wandb")).read_bytes() for f in folders]
    assert all(b"val_bpb" in r and b"tokens" in r and b"outcome" in r for r in records)
    assert sum(b"linear 1.5->0.5" in r for r in records) == 4
    assert sum(b"interrupted" in r for r in records) == 1
    assert wandb.run is None  # the driver's global run untouched


def test_a_wandb_too_old_for_a_run_per_trial_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking_wandb.metadata, "version", lambda name: "0.19.9")
    cfg = tiny_config(tmp_path, tracking={"wandb": True})
    with pytest.raises(ConfigError, match=r"tracking\.wandb: wandb 0\.19\.9 is too old"):
        tracking.preflight(cfg)
    monkeypatch.setattr(tracking_wandb.metadata, "version", lambda name: "0.19.10")
    tracking.preflight(cfg)


def test_a_wandb_without_a_quiet_login_is_asked_nothing(tmp_path, monkeypatch):
    """A wandb whose login has no ``prompt``: the key from WANDB_API_KEY or the netrc, the
    places wandb documents, and no call that could prompt."""

    def login(key=None, relogin=None, host=None, verify=False):
        raise AssertionError("login could prompt")

    monkeypatch.setattr(wandb, "login", login)
    for var in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert not tracking_wandb.has_api_key()
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40)
    assert tracking_wandb.has_api_key()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert not tracking_wandb.has_api_key()
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert tracking_wandb.has_api_key()
