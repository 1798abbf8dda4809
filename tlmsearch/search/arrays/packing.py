"""The search drives trial arrays: due (candidate, seed) trainings packed K to a Ray trial.

With ``search.array`` on and a fusable arch (:data:`tlmsearch.config.model.FUSABLE_ARCHS`), one
Ray trial (one trial's resources) trains up to K Optuna trials in one process as one fused model
(:class:`tlmsearch.train.trial_array.TrialArray`;
:func:`tlmsearch.search.arrays.trainable.run_array`). Every member stays its own Optuna trial,
recorded exactly as a solo trial is:

- **Asking.** :meth:`ArraySearcher.suggest` asks Optuna for up to K trials (``Study.ask``, each
  filled by the define-by-run space: its own params, seed, number, queue attributes) and returns
  one Ray config holding them (``members``). Members must fuse (the same model after their
  settings, batch shape and precision, :func:`fuse_key`): a trial that does not fuse with the
  array being packed is held for the next one. ``size: auto`` is :func:`auto_size`.
- **Recording.** The trainable reports every member's evals as Ray results tagged with the
  member's index (``member``). :class:`ArrayScheduler` hands each to the solo machinery as if it
  came from the member's own trial (:class:`MemberView`: the member's id, config and checkpoint
  folder): the ledger's curve and attributes, the Optuna report at step = tokens, the pruner's
  ``should_prune`` with the same grace, baseline and last-eval rules; a member's final report is
  told COMPLETE or FAIL with the same attributes and ``search.keep_weights``.
- **Pruning.** A member the pruner stops is told PRUNED in the driver (where the pruner and the
  storage are), and the array learns it from a marker file the searcher writes in the member's
  folder (``ended``). Tune's function trainables report synchronously: ``tune.report`` returns
  only after the driver's scheduler has processed the result (Ray 2.60,
  ``_TrainSession._report_training_result`` waits for the next ``train()``, which the
  controller schedules after ``on_trial_result``), so a member pruned at an eval is dropped
  from the array before its next step. Why not let the trainable ask the pruner itself: the
  storage is written by the driver only and may not be reachable from a worker (SQLite in the
  driver's run dir, ``storage.py``), and the scheduler's rules (grace, the baseline, replays)
  would then live twice. The member folders lie in the run dir, which every node of a cluster
  mounts already (checkpoints go there, docs/cluster.md).
- **Checkpoints, retries, resume.** Each member writes its checkpoints in the solo format into
  a trial folder of its own, ``RUN/ray/session-N/trial_<ray id>-<k>`` (its ``ray_trial_id``),
  where ``tlmsearch resume`` and ``--retry-failed`` look for a trial's checkpoints; older ones
  are removed as Ray removes a solo trial's (``keep_weights: all`` keeps them). A lost array
  that Ray retries skips the members already recorded and continues the others from their
  checkpoints; an array lost for good fails its unfinished members (``resume --retry-failed``
  continues them); members a dead driver left RUNNING are queued again by ``tlmsearch resume``
  and packed again like any due training.

Where arrays do not apply (:func:`tlmsearch.config.planning.fallback`: an arch that does not
fuse, several workers per trial, experiment trackers, whose callbacks log one run per Ray
trial) the search runs one process per trial and says so once (the run log, ``validate``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
from ray.tune import Callback
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from tlmsearch.config import StudyConfig
from tlmsearch.config.planning import AUTO_MAX_CPU, AUTO_MAX_GPU
from tlmsearch.reasons import is_lost
from tlmsearch.search.execution.failures import error_reason, max_failures
from tlmsearch.search.sampling.pruning import OptunaPruningScheduler
from tlmsearch.search.sampling.searcher import StudySearcher
from tlmsearch.widths.space import is_baseline

TrialState = optuna.trial.TrialState
MEMBERS = "members"  # Ray trial config key: the array's member configs
MEMBER = "member"  # result key: the index of the member a report is about
MEMBER_ID = "id"  # member config key: its trial id (ray_trial_id of its Optuna trial)
MEMBER_DIR = "dir"  # member config key: its trial folder (checkpoints, the ended marker)
CHECKPOINT = "member_checkpoint"  # result key: the checkpoint written at that eval
ENDED = "ended"  # file in a member's folder: Optuna has its end state (the state's name)


# -------------------------------------------------------------------------------------------------
# Pure helpers


def auto_size(due: int, slots: int, gpu: bool) -> int:
    """``size: auto``: the trainings due spread over the trial slots, at most 4 a process on
    CPUs (measured on 2 cores: an array is no faster than processes there, docs/cluster.md),
    at most 16 on a GPU (where a small proxy is launch-bound and fusing pays).

    >>> auto_size(3, 2, gpu=False), auto_size(40, 2, gpu=False), auto_size(40, 2, gpu=True)
    (2, 4, 16)
    """
    cap = AUTO_MAX_GPU if gpu else AUTO_MAX_CPU
    return max(1, min(cap, math.ceil(max(1, due) / max(1, slots))))


def training_slots(cfg: StudyConfig, slots: int, due: int) -> int:
    """Trainings that run at once on ``slots`` trial slots: one a slot, or with trial arrays
    an array's members a slot (``search.array.size``; auto: :func:`auto_size` of the ``due``
    trainings). The progress's ETA schedules trainings, not Ray trials.

    >>> from tlmsearch.config import study_from_mapping
    >>> cfg = study_from_mapping({"name": "s", "model": {"n_layer": 2, "d_model": 32,
    ...     "n_head": 2}, "space": "paper", "search": {"array": {"size": "auto"}}})
    >>> training_slots(cfg, 2, due=72), training_slots(cfg, 2, due=3)
    (8, 4)
    """
    from tlmsearch.config.planning import arrays_on

    if not arrays_on(cfg):
        return slots
    size = cfg.search.array.size  # type: ignore[union-attr]
    k = auto_size(due, slots, gpu=bool(cfg.ray.gpus_per_trial)) if size == "auto" else int(size)
    return slots * k


def fuse_key(cfg: StudyConfig, candidate: dict[str, Any]) -> str:
    """What members of one array must share (:func:`tlmsearch.train.trial_array.check_fusable` and
    the array's batch shape and precision): the model after the candidate's settings and heads
    schedule, the batch tokens, micro batch and dtype. A candidate that cannot be planned gets
    a key of its own: it fails alone."""
    try:
        c = cfg.for_candidate(candidate)
        c.model.plan(candidate)
    except Exception:
        return "alone:" + json.dumps(candidate, sort_keys=True, default=str)
    shared = [
        c.model.model_dump(mode="json"),
        c.train.batch_tokens,
        c.train.micro_batch_size,
        c.train.dtype,
    ]
    return json.dumps(shared, sort_keys=True, default=str)


def member_id(trial_id: str, k: int) -> str:
    """A member's trial id: its array's Ray trial id and its index (``a1b2_00003-1``)."""
    return f"{trial_id}-{k}"


def is_array(trial: Any) -> bool:
    return MEMBERS in (getattr(trial, "config", None) or {})


class MemberView:
    """A member of an array trial seen as a trial of its own: its id, config, folder and
    checkpoint; anything else is the array trial's (status, errors, retries)."""

    def __init__(self, trial: Any, k: int, checkpoint: str | None = None) -> None:
        conf = trial.config[MEMBERS][k]
        self._array = trial
        self.trial_id = conf[MEMBER_ID]
        self.config = conf
        self.path = conf.get(MEMBER_DIR)
        self.checkpoint = _Checkpoint(checkpoint) if checkpoint else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._array, name)


class _Checkpoint:
    def __init__(self, path: str) -> None:
        self.path = path


def views(trial: Any) -> list[MemberView]:
    return [MemberView(trial, k) for k in range(len(trial.config[MEMBERS]))]


# -------------------------------------------------------------------------------------------------
# The searcher


class ArraySearcher(StudySearcher):
    """:class:`StudySearcher` that packs up to ``size`` Optuna trials into each Ray trial.

    ``budget``: the Optuna trials this session may ask for (the runner's ``remaining``: Ray's
    ``num_samples`` counts arrays, not trainings); ``slots``: trials at once (for ``auto``);
    ``gpu``: whether trials train on a GPU (``auto``'s cap); ``trial_root``: the Ray session
    folder the members' trial folders go in.
    """

    def __init__(
        self,
        study: optuna.Study,
        space: Any,
        *,
        cfg: StudyConfig,
        size: int | str,
        budget: int,
        slots: int = 1,
        gpu: bool = False,
        trial_root: str | None = None,
        **kw: Any,
    ) -> None:
        if not trial_root:  # members write checkpoints and their ended marker there
            raise ValueError(
                "trial_root: an array needs the folder its members' trial "
                "folders go in (the run's Ray session folder)"
            )
        super().__init__(study, space, **kw)
        self._cfg, self._size, self._budget, self._slots, self._gpu = cfg, size, budget, slots, gpu
        self._root = trial_root
        self._asked = 0
        self._held: list[tuple[optuna.Trial, dict[str, Any], str]] = []  # asked, not packed
        self._arrays: dict[str, dict[str, Any]] = {}  # Ray trial id -> its config
        self._ended: dict[str, str] = {}  # member id -> its end state's name
        self._folders: dict[str, str | None] = {}  # member id -> its trial folder

    # -- members --------------------------------------------------------------------------------

    def ended(self, member: str) -> str | None:
        """The end state told for a member (COMPLETE, PRUNED, FAIL), None while it runs."""
        return self._ended.get(member)

    def tell(self, trial_id: str, state: TrialState, values: Any = None, reason: str = "") -> None:
        trial = self.live_trial(trial_id)
        super().tell(trial_id, state, values, reason)
        if trial is None or trial_id not in self._folders:
            return
        self._ended[trial_id] = state.name
        folder = self._folders[trial_id]
        if folder:  # the array reads it after each report: a pruned member leaves at once
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / ENDED).write_text(state.name)

    def end_member(self, member: str, result: dict[str, Any]) -> None:
        """A member's final report: COMPLETE with its objective values, or FAIL with why."""
        state, values, reason = self._final(result)
        self.tell(member, state, values, reason)

    # -- Ray's Searcher API ----------------------------------------------------------------------

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id in self._arrays:
            return self._arrays[trial_id]
        picked: list[tuple[optuna.Trial, dict[str, Any], str]] = []
        k = self._k()
        while len(picked) < k:
            nxt = self._next()
            if nxt is None:
                break
            if picked and nxt[2] != picked[0][2]:  # does not fuse with these: the next array's
                self._held.insert(0, nxt)
                break
            picked.append(nxt)
        if not picked:
            live = [m for m in self._trials if m not in self._told]
            return None if live and self._open is not None else Searcher.FINISHED
        members = []
        for j, (ot, conf, _) in enumerate(picked):
            mid = member_id(trial_id, j)
            self._trials[mid] = ot
            folder = str(Path(self._root) / f"trial_{mid}") if self._root else None
            self._folders[mid] = folder
            members.append({**conf, MEMBER_ID: mid, MEMBER_DIR: folder})
        self._arrays[trial_id] = {MEMBERS: members}
        return self._arrays[trial_id]

    def _k(self) -> int:
        if self._size != "auto":
            return int(self._size)
        if self._open is not None:
            waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            due = len(waiting) + len(self._held)
        else:
            due = self._budget - self._asked + len(self._held)
        return auto_size(due, self._slots, self._gpu)

    def _next(self) -> tuple[optuna.Trial, dict[str, Any], str] | None:
        """The next training to pack: one held back, else a new Optuna trial, else None."""
        if self._held:
            return self._held.pop(0)
        if self._asked >= self._budget:
            return None
        if self._open is not None and not self._more_to_run():
            return None
        ot = self.study.ask()
        self._asked += 1
        conf = self._space(ot)
        return ot, conf, fuse_key(self._cfg, conf["candidate"])

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if trial_id not in self._arrays:
            return super().on_trial_complete(trial_id, result, error)
        # members ended one by one as their final reports came (ArrayScheduler); what is
        # left: an array that raised in Ray (lost for good) fails them, an interrupted one
        # leaves them RUNNING for `tlmsearch resume`
        if not error:
            return
        for m in self._arrays[trial_id][MEMBERS]:
            trial = self.live_trial(m[MEMBER_ID])
            if trial is not None:
                reason = trial.user_attrs.get("reason") or "the trial raised an exception"
                self.tell(m[MEMBER_ID], TrialState.FAIL, reason=reason)


# -------------------------------------------------------------------------------------------------
# The scheduler


class ArrayScheduler(OptunaPruningScheduler):
    """:class:`OptunaPruningScheduler` for array trials: each member's results go through the
    solo rules as its own trial's (:class:`MemberView`); a pruned member is told PRUNED and
    the array goes on (CONTINUE) without it. Solo trials pass through unchanged."""

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        if not is_array(trial):
            return super().on_trial_add(tune_controller, trial)
        members = trial.config[MEMBERS]
        baseline = any(is_baseline(m.get("candidate") or {}) for m in members)
        trial.max_failures = max_failures(self._max_retries, baseline)
        for view in views(trial):
            _, ot = self._live(tune_controller, view.trial_id)
            if ot is not None:
                self._ledger.started(view, ot)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        if not is_array(trial):
            return super().on_trial_result(tune_controller, trial, result)
        k = result.get(MEMBER)
        if not isinstance(k, int):
            return TrialScheduler.CONTINUE
        view = MemberView(trial, k, result.get(CHECKPOINT))
        searcher, ot = self._live(tune_controller, view.trial_id)
        if ot is None:
            return TrialScheduler.CONTINUE
        if super().on_trial_result(tune_controller, view, result) == TrialScheduler.STOP:
            self._pruned.discard(view.trial_id)
            self._retain(view, None, completed=False)  # told PRUNED: no attribute to set
            self._forget(view.trial_id)
        elif result.get("final"):
            self._retain(view, ot, completed=result.get("status") == "completed")
            searcher.end_member(view.trial_id, result)
            self._forget(view.trial_id)
        return TrialScheduler.CONTINUE

    def _forget(self, member: str) -> None:
        self._reported.pop(member, None)
        self._ledger.forget(member)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        if not is_array(trial):
            return super().on_trial_error(tune_controller, trial)
        reason = error_reason(trial)
        for view in views(trial):
            _, ot = self._live(tune_controller, view.trial_id)
            if ot is None:
                continue  # ended before the array was lost
            self._ledger.errored(view.trial_id, ot, reason)
            if not trial.should_recover() and not is_lost(reason):
                self._retain(view, ot, completed=False)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        if not is_array(trial):
            return super().on_trial_complete(tune_controller, trial, result)
        # members that ended were retained as they ended; the rest were interrupted (Ctrl-C)
        # and keep their checkpoints for `tlmsearch resume`
        for view in views(trial):
            self._forget(view.trial_id)


# -------------------------------------------------------------------------------------------------
# Callbacks: every member as a trial of its own


class MemberCallbacks(Callback):
    """Ray Tune callbacks (the live progress) shown each member of an array as its own trial:
    its evals, and its end when the searcher records it (complete, pruned, failed)."""

    def __init__(self, inner: list[Any], searcher: ArraySearcher) -> None:
        self.inner = inner
        self.searcher = searcher
        self._last: dict[str, dict[str, Any]] = {}  # member id -> its last result
        self._done: set[str] = set()

    def _view(self, trial: Any, k: int) -> MemberView:
        view = MemberView(trial, k)
        ended = view.trial_id in self._done
        view.status = "TERMINATED" if ended else trial.status  # type: ignore[attr-defined]
        view.last_result = self._last.get(view.trial_id, {})  # type: ignore[attr-defined]
        return view

    def _trials(self, trials: list[Any]) -> list[Any]:
        out = []
        for t in trials:
            n = len(t.config[MEMBERS]) if is_array(t) else 0
            out += [self._view(t, k) for k in range(n)] if n else [t]
        return out

    def _call(self, hook: str, **info: Any) -> None:
        if "trials" in info:
            info["trials"] = self._trials(info["trials"])
        for cb in self.inner:
            getattr(cb, hook)(**info)

    def _ends(self, iteration: int, trials: list[Any], trial: Any, error: bool = False) -> None:
        for k in range(len(trial.config[MEMBERS])):
            view = self._view(trial, k)
            if view.trial_id in self._done:
                continue
            if self.searcher.ended(view.trial_id) is None and not error:
                continue
            self._done.add(view.trial_id)
            view.status = "TERMINATED"  # type: ignore[attr-defined]
            hook = "on_trial_error" if error else "on_trial_complete"
            self._call(hook, iteration=iteration, trials=trials, trial=view)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        if not is_array(trial):
            return self._call(
                "on_trial_result",
                iteration=iteration,
                trials=trials,
                trial=trial,
                result=result,
                **info,
            )
        k = result.get(MEMBER)
        if isinstance(k, int):
            view = self._view(trial, k)
            self._last[view.trial_id] = result
            self._call(
                "on_trial_result",
                iteration=iteration,
                trials=trials,
                trial=view,
                result=result,
                **info,
            )
        self._ends(iteration, trials, trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if not is_array(trial):
            return self._call(
                "on_trial_complete", iteration=iteration, trials=trials, trial=trial, **info
            )
        self._ends(iteration, trials, trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if not is_array(trial):
            return self._call(
                "on_trial_error", iteration=iteration, trials=trials, trial=trial, **info
            )
        self._ends(iteration, trials, trial, error=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        if is_array(trial):
            trial = self._view(trial, 0)
        self._call("on_trial_recover", iteration=iteration, trials=trials, trial=trial, **info)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._call("on_step_end", iteration=iteration, trials=trials, **info)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self._call("on_experiment_end", trials=trials, **info)
