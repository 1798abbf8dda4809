"""A Ray Tune ``Searcher`` that drives an Optuna study through its public ask/tell API.

Ray's own ``OptunaSearch`` owns the study (it creates it with a ``NopPruner``), keeps its live
trials in private fields and tells COMPLETE with whatever value a result last carried, so a
pruner or a ledger outside it had to reach into those fields. Here the study is ours: the runner
loads it with the study's sampler and pruner (``optuna.load_study``), :meth:`StudySearcher.suggest`
asks it for a trial (``Study.ask``) and fills it with the define-by-run space
(:class:`~tlmsearch.search.sampling.samplers.DefineByRunSpace`), and every end state goes through
:meth:`StudySearcher.tell`: COMPLETE with the objective values of the trainable's final report,
FAIL with the reason (divergence, an exception, a lost worker), or PRUNED when the scheduler
(:mod:`.pruning`) stops a trial. A trial stopped with no final report (the driver was
interrupted) stays RUNNING in Optuna; ``tlmsearch resume`` runs it again.

With ``race`` (a study whose ``search.racing`` is set) the number of trials is not known in
advance: after each trial ends the race may queue more seeds (:mod:`.race`), so :meth:`suggest`
waits (None) while trials that could add seeds are running, and ends the search (``FINISHED``)
when the queue is empty, nothing runs and no candidate is left to sample.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import optuna
from ray.tune.search import Searcher

from tlmsearch.search.records import finite

TrialState = optuna.trial.TrialState


class StudySearcher(Searcher):
    """Ray Tune's view of one Optuna study: a trial per Ray trial, told once.

    ``study``: the run's study, loaded with its sampler and pruner; ``space``: the
    define-by-run space, called with each new ``optuna.Trial``, returning the Ray trial config.
    ``metric`` / ``mode``: one objective (str) or several (lists, a multi-objective study).
    ``race`` / ``open_ended``: the study config when the number of trials is an upper bound
    (:func:`~tlmsearch.search.sampling.samplers.open_ended`); ``race`` also queues seeds as trials
    end.
    """

    def __init__(
        self,
        study: optuna.Study,
        space: Callable[[optuna.Trial], dict[str, Any]],
        *,
        metric: str | list[str],
        mode: str | list[str],
        race: Any = None,
        open_ended: Any = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.study = study
        self._space = space
        self._race = race
        self._open = open_ended if open_ended is not None else race
        self._trials: dict[str, optuna.Trial] = {}  # Ray trial id -> its Optuna trial
        self._told: set[str] = set()  # Ray trial ids whose end state Optuna has

    # -- what the scheduler and the ledger use ---------------------------------------------------

    def live_trial(self, trial_id: str) -> optuna.Trial | None:
        """The Optuna trial of a Ray trial that has not ended yet (else None)."""
        return None if trial_id in self._told else self._trials.get(trial_id)

    def tell(
        self,
        trial_id: str,
        state: TrialState,
        values: float | list[float] | None = None,
        reason: str = "",
    ) -> None:
        """Record a Ray trial's end state in Optuna, once; then let the race queue seeds."""
        trial = self.live_trial(trial_id)
        if trial is None:
            return
        if reason:
            trial.set_user_attr("reason", reason[:500])
        self.study.tell(trial, values, state=state)
        self._told.add(trial_id)
        if self._race is not None:
            from tlmsearch.search.sampling.race import advance

            advance(self.study, self._race)

    # -- Ray's Searcher API ----------------------------------------------------------------------

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if trial_id not in self._trials:
            if self._open is not None and not self._more_to_run():
                live = set(self._trials) - self._told
                return None if live else Searcher.FINISHED
            self._trials[trial_id] = self.study.ask()
        return self._space(self._trials[trial_id])

    def _more_to_run(self) -> bool:
        """A queued trial, or a candidate the sampler may still draw."""
        from tlmsearch.search.sampling.samplers import may_sample

        waiting = self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        return bool(waiting) or may_sample(self._open, self.study)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # The scheduler reports each eval at step = tokens (Ray's OptunaSearch would use the
        # iteration count, which differs between trials with different eval spacing).
        return

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        trial = self.live_trial(trial_id)
        if trial is None:
            return  # pruned (told already), or never asked
        if error:
            reason = trial.user_attrs.get("reason") or "the trial raised an exception"
            self.tell(trial_id, TrialState.FAIL, reason=reason)
        elif result and result.get("final"):
            state, values, reason = self._final(result)
            self.tell(trial_id, state, values, reason)
        # else: interrupted, not finished: left RUNNING for `tlmsearch resume`

    def _final(self, result: dict) -> tuple[TrialState, Any, str]:
        """(state, values, reason) of a trainable's final report."""
        metrics = self.metric if isinstance(self.metric, list) else [self.metric]
        values = [result.get(m) for m in metrics]
        status = result.get("status", "completed")
        if status != "completed":
            return TrialState.FAIL, None, result.get("reason") or status
        if not all(finite(v) for v in values):
            shown = dict(zip(metrics, values, strict=True))
            return TrialState.FAIL, None, f"objective is not a finite number: {shown}"
        floats = [float(v) for v in values]
        return TrialState.COMPLETE, floats if isinstance(self.metric, list) else floats[0], ""

    def save(self, checkpoint_path: str) -> None:
        # The Optuna storage is the searcher's state; this file only names each Ray trial's
        # Optuna trial, for a reader of Ray's experiment folder.
        numbers = {tid: t.number for tid, t in self._trials.items()}
        with open(checkpoint_path, "w") as f:
            json.dump({"optuna_study": self.study.study_name, "trials": numbers}, f)

    def restore(self, checkpoint_path: str) -> None:
        raise NotImplementedError(
            "a tlmsearch run continues with `tlmsearch resume RUN_DIR`, which reads the Optuna "
            "storage; Ray's Tuner.restore is not used"
        )


def searcher_of(controller: Any) -> StudySearcher | None:
    """Our searcher under Ray's wrappers (``SearchGenerator.searcher``,
    ``ConcurrencyLimiter.searcher``), looked up on every call, never cached."""
    node, seen = getattr(controller, "search_alg", None), 0
    while node is not None and seen < 8:
        if isinstance(node, StudySearcher):
            return node
        node, seen = getattr(node, "searcher", None), seen + 1
    return None
