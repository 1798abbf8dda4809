"""Weights & Biases: a run per trial, opened and closed by the driver with wandb's public API.

Ray Tune calls :class:`WandbTracker`'s hooks in the driver (its public ``LoggerCallback``
interface). The trials that run at once are W&B runs open at once in that one process:
``wandb.init(reinit="create_new")`` (wandb >= 0.19.10, :data:`MIN_VERSION`) returns a run
object of its own each time and leaves wandb's global run alone. A run's ``finish`` returns
before W&B's own process has written it all, so the experiment's end waits for every run
(``wandb.teardown``). A run W&B cannot start (online, its server down) is a warning, never a
failed study: the session goes on without W&B. What each run holds: docs/tracking.md.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from ray.tune.logger import LoggerCallback

from tlmsearch.config import StudyConfig
from tlmsearch.search.tracking.facts import (
    TokenSteps,
    TrialFacts,
    ended_as,
    trial_facts,
    wandb_dir,
    widths_param,
)

# several runs open at once in one process (wandb.init's reinit="create_new")
MIN_VERSION = (0, 19, 10)


class WandbTracker(LoggerCallback):
    """A run per trial: ``group`` its candidate's label, ``job_type`` trial, config its
    candidate, seed, widths and outcome; its curve against tokens (``define_metric``)."""

    def __init__(self, cfg: StudyConfig, run: Path, name: str) -> None:
        opts = cfg.tracking.wandb
        assert opts is not None
        self.where = wandb_dir(cfg, run)
        self.project = opts.project or name
        self.kwargs: dict[str, Any] = {"mode": opts.mode, "dir": str(self.where)}
        if opts.entity:
            self.kwargs["entity"] = opts.entity
        self.study = name
        self._runs: dict[str, Any] = {}  # Ray trial id -> its open wandb run
        self._opened = False  # whether this experiment opened a run (then W&B is set up)
        self._off = False  # W&B could not start a run: none more this session
        self._abandoned: list[Any] = []  # runs left open when a W&B call failed
        self._steps = TokenSteps()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.where.mkdir(parents=True, exist_ok=True)

    def log_trial_start(self, trial: Any) -> None:
        if trial.trial_id in self._runs or self._off:  # a retried trial keeps its run
            return
        facts = trial_facts(trial.config)
        try:
            run = self._start(facts)
        except Exception as err:  # a tracker must not fail the study (online: W&B's server)
            self._off = True
            print(
                f"warning: W&B could not start the run of {facts.name} "
                f"({type(err).__name__}: {err}); no more W&B runs in this session",
                file=sys.stderr,
            )
            return
        self._runs[trial.trial_id] = run
        self._steps.forget(trial.trial_id)

    def _start(self, facts: TrialFacts) -> Any:
        import wandb

        config = {**facts.params, "candidate": facts.label, "study": self.study}
        if facts.number is not None:
            config["trial"] = facts.number
        self._opened = True
        run = wandb.init(
            project=self.project,
            name=facts.name,
            group=facts.label,
            job_type="trial",
            config=config,
            reinit="create_new",  # several trials' runs open at once, none of them global
            # the driver's console shows the study, not each trial's W&B chatter (its log does)
            settings=wandb.Settings(console="off", silent=True),
            **self.kwargs,
        )
        try:
            run.define_metric("tokens")
            run.define_metric("*", step_metric="tokens")
        except Exception:
            run.finish()  # not left open and untracked
            raise
        return run

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial.trial_id not in self._runs:
            self.log_trial_start(trial)
        run = self._runs.get(trial.trial_id)
        if run is None:  # W&B could not start it
            return
        first = self._steps.first(trial.trial_id)
        point = self._steps.new_point(trial.trial_id, result)
        with self._guard(f"log to the run of trial {trial.trial_id}"):
            if first and (widths := widths_param(result)):
                run.config.update(widths, allow_val_change=True)
            if point is not None:
                run.log(point)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._finish(trial.trial_id, ended_as(trial, failed))

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for trial_id in list(self._runs):  # the driver was interrupted: trials never ended
            self._finish(trial_id, "interrupted")
        for run in self._abandoned:
            with contextlib.suppress(Exception):
                run.finish()
        self._abandoned.clear()
        if self._opened:
            import wandb

            # a run's finish returns before W&B's own process has written (offline) or sent
            # (online) all of it: the last run's offline file was still 7 bytes when it
            # returned. teardown waits for every run (tests/test_search_tracking_wandb.py reads
            # the files as the experiment ends)
            with self._guard("wait for W&B to write its runs"):
                wandb.teardown()
            self._opened = False

    def _finish(self, trial_id: str, kind: str) -> None:
        run = self._runs.pop(trial_id, None)
        if run is None:
            return
        with self._guard(f"finish the run of trial {trial_id}"):
            try:
                run.config.update({"outcome": kind}, allow_val_change=True)
            finally:
                run.finish()

    @contextlib.contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        """A W&B call that fails warns once and turns W&B off for the session: a tracker must
        not fail the study (online, W&B's server can go away mid-run)."""
        try:
            yield
        except Exception as err:
            if not self._off:
                print(
                    f"warning: W&B could not {what} ({type(err).__name__}: {err}); no more "
                    "W&B logging in this session",
                    file=sys.stderr,
                )
            self._off = True
            # no more logging: the open runs are finished (best effort) at the experiment's end
            self._abandoned += list(self._runs.values())
            self._runs.clear()


def wandb_problem(mode: str) -> str | None:
    """Why W&B cannot run as the YAML asks, before anything starts; None when it can: a wandb
    too old for several runs in one process, or ``mode: online`` without an API key."""
    version = metadata.version("wandb")
    if _version_tuple(version) < MIN_VERSION:
        least = ".".join(map(str, MIN_VERSION))
        return (
            f"tracking.wandb: wandb {version} is too old: each trial is a W&B run, several "
            f"open at once, which needs wandb >= {least}; pip install -U 'wandb>={least}'"
        )
    if mode == "online" and not has_api_key():
        return (
            "tracking.wandb.mode: online needs a W&B API key: run `wandb login` or set "
            "WANDB_API_KEY, or use mode: offline (`wandb sync` uploads later)"
        )
    return None


def has_api_key() -> bool:
    """Whether W&B finds an API key where it looks (WANDB_API_KEY, its settings, the netrc),
    asking nobody and no server: ``wandb.login(verify=False, prompt=False)``. A wandb whose
    ``login`` has no ``prompt`` (it would ask on a terminal) is answered from the two places
    wandb documents for a key: WANDB_API_KEY, and the netrc that ``wandb login`` writes."""
    import wandb

    if "prompt" in inspect.signature(wandb.login).parameters:
        return bool(wandb.login(verify=False, prompt=False))
    return bool(os.environ.get("WANDB_API_KEY")) or _key_in_netrc()


def _key_in_netrc() -> bool:
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        return netrc.netrc(path).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _version_tuple(version: str) -> tuple[int, ...]:
    """``0.19.10`` -> (0, 19, 10); a pre-release counts as its release."""
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])
