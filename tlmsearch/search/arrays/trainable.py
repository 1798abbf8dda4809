"""The Ray Tune trainable of a trial array: K (candidate, seed) members in one process.

The members come packed by :class:`tlmsearch.search.arrays.packing.ArraySearcher` (each its
own Optuna trial). Each member reports exactly what a solo trial reports (execution/trainable.py:
the static facts, every eval, a final report with the trainer's status), tagged with its index
(``member``), and writes its checkpoints in the solo format into its own trial folder. After
each eval's reports the array drops the members the driver has recorded as ended (pruned: the
``ended`` marker, :mod:`.packing`); a member that diverges, finishes or fails leaves on its own.
One member left to train runs the solo path (``train_proxy``), two or more one
:class:`tlmsearch.train.trial_array.TrialArray`. An exception fails every member still training
(their final reports carry it, as a solo trial's does); an allocation failure is raised, for Ray
to retry the array, which then skips the members already recorded and continues the others from
their checkpoints.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.search.arrays.packing import CHECKPOINT, ENDED, MEMBER, MEMBER_DIR, MEMBERS
from tlmsearch.search.attrs import REPLAY, RESUME_FROM
from tlmsearch.search.execution import faults
from tlmsearch.search.execution.failures import exception_line, is_out_of_memory
from tlmsearch.search.execution.trainable import (
    TRACEBACK_CHARS,
    _matching,
    _meta,
    _metrics,
    _replay,
    _setup,
    trial_device,
    trial_threads,
)
from tlmsearch.widths.candidate import Candidate


class _Member:
    """One member of the array: its model and facts, its reports (tagged with its index), its
    checkpoints (its own trial folder, the solo format) and whether the driver ended it."""

    def __init__(self, k: int, conf: dict[str, Any], base: StudyConfig, data: Any) -> None:
        self.k, self.conf = k, conf
        self.candidate, self.seed = Candidate.of(conf["candidate"]), int(conf["seed"])
        self.folder = Path(conf[MEMBER_DIR])
        self.last: dict[str, Any] = {}  # the last eval's report: a failure keeps its metrics
        self.finished = False
        self.cfg, self.model, self.plan, self.static = _setup(base, self.candidate, data)
        self.last.update(_metrics({}, self.static), **self.static)
        self.meta = _meta(conf, self.cfg, self.model, self.plan)
        self.keep_all = base.search.keep_weights == "all"
        self.final_checkpoint = base.search.keep_weights != "none"
        self.checkpointed = -1
        self._pending: str | None = None

    def ended(self) -> bool:
        """The driver has told Optuna this member's end (it was pruned, or recorded before a
        retry of the array)."""
        return (self.folder / ENDED).is_file()

    def report(self, values: dict[str, Any], **extra: Any) -> dict[str, Any]:
        from ray import tune

        out = {**_metrics(values, self.static), **self.static, "final": False, **extra}
        if self._pending:
            out[CHECKPOINT], self._pending = self._pending, None
        tune.report({**out, MEMBER: self.k})
        return out

    def on_eval(self, ev: dict[str, Any]) -> None:
        ev = faults.shifted(self.candidate, ev)  # tests only; inert otherwise
        self.last.update(self.report(ev))
        faults.at_eval(self.candidate, self.seed, ev.get("tokens"))  # tests only

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Write a checkpoint into the member's folder; the older ones go (as Ray keeps a solo
        trial's newest only) unless ``keep_weights: all``."""
        from tlmsearch.train.checkpoints import PREFIX, checkpoint_dirs, remove, write_checkpoint

        before = checkpoint_dirs(self.folder)
        index = 1 + max(
            (
                int(p.name.removeprefix(PREFIX))
                for p in before
                if p.name.removeprefix(PREFIX).isdigit()
            ),
            default=-1,
        )
        path = self.folder / f"{PREFIX}{index:06d}"
        tokens = int(state["tokens"])
        final = tokens >= self.cfg.train.tokens
        write_checkpoint(path, state, {**self.meta, "tokens": tokens, "final": final})
        if not self.keep_all:
            remove(before)
        self._pending, self.checkpointed = str(path), tokens

    def resume(self) -> dict[str, Any] | None:
        """The state to continue from: this member's newest checkpoint (a retry of the array),
        else the interrupted trial's that ``tlmsearch resume`` named; its evals reported."""
        from tlmsearch.train.checkpoints import latest_checkpoint, load_checkpoint
        from tlmsearch.train.trainer import Trainer

        latest = latest_checkpoint(self.folder)
        loaded = load_checkpoint(latest) if latest is not None else None
        if loaded is None and self.conf.get(RESUME_FROM):
            loaded = load_checkpoint(self.conf[RESUME_FROM])
        state = _matching(loaded, self.meta)
        if state is not None:  # the evals before the checkpoint, so Optuna has the whole curve
            self.checkpointed = int(state["tokens"])
            for ev in Trainer.evals_of(state):
                self.report(ev)
        return state

    def finish(self, summary: Any, start: float) -> None:
        """The final report (not for a member the driver ended: it was told already)."""
        self.finished = True
        if self.ended():
            return
        metrics = faults.shifted(self.candidate, dict(summary.metrics or {}))
        metrics.update(tokens=summary.tokens, wall_s=time.time() - start)
        self.report(metrics, final=True, status=summary.status, reason=summary.reason or "")

    def fail(self, err: BaseException) -> None:
        from ray import tune

        self.finished = True
        tb = traceback.format_exc()[-TRACEBACK_CHARS:]
        failed = {
            "final": True,
            "status": "failed",
            "reason": exception_line(err),
            "traceback": tb,
            MEMBER: self.k,
        }
        tune.report({**_metrics({}, {}), **self.last, **failed})


def run_array(
    config: dict[str, Any], study: dict[str, Any], data: Any, compile_cache: str | None = None
) -> None:
    """Train the members of ``config["members"]`` (each a solo trial's config plus its id and
    folder); report each one's evals and end. ``compile_cache``: as :func:`.trainable.run_trial`'s.
    """
    from ray import tune

    if compile_cache:  # none for a simulated study: its arrays never import torch
        from tlmsearch.train.runtime import use_compile_cache

        use_compile_cache(compile_cache)  # before the array (or its last member alone) compiles
    base = StudyConfig.model_validate(study)
    members: list[_Member] = []
    for k, conf in enumerate(config[MEMBERS]):
        if (Path(conf[MEMBER_DIR]) / ENDED).is_file():
            continue  # a retry of the array: this one is recorded already
        try:
            members.append(_Member(k, conf, base, data))
        except Exception as err:  # cannot be built (its widths): it fails alone
            tb = traceback.format_exc()[-TRACEBACK_CHARS:]
            failed = {
                "final": True,
                "status": "failed",
                "reason": exception_line(err),
                "traceback": tb,
                MEMBER: k,
            }
            tune.report({**_metrics({}, {}), **failed})
    try:
        _train(base, members, data)
    except Exception as err:
        if is_out_of_memory(err):
            raise  # the system's doing: Ray retries the array (search.max_retries)
        for m in members:
            if not m.finished and not m.ended():
                m.fail(err)


def _simulate(trainees: list[_Member], box: Any) -> None:
    """``train.backend: simulate``: the members' blackbox curves (execution/blackbox.py), eval by
    eval in step as a fused array reports them; a member the driver ended leaves."""
    answers = [box.curve(m.candidate, m.seed) for m in trainees]
    start = time.time()
    for i in range(max((len(a.evals) for a in answers), default=0)):
        if box.seconds_per_eval:
            time.sleep(box.seconds_per_eval)
        for m, a in zip(trainees, answers, strict=True):
            if m.ended():
                m.finished = True
            elif i < len(a.evals):
                m.on_eval({**a.evals[i], "wall_s": time.time() - start})
    for m, a in zip(trainees, answers, strict=True):
        if not m.finished and not m.ended():
            m.finished = True
            m.report(
                {**m.last, "wall_s": time.time() - start},
                final=True,
                status=a.status,
                reason=a.reason,
            )


def _train(base: StudyConfig, members: list[_Member], data: Any) -> None:
    from ray import tune

    start = time.time()
    trainees = []
    for m in members:
        if m.conf.get(REPLAY):  # a finished twin trained these widths: its curve
            _replay(lambda r, k=m.k: tune.report({**r, MEMBER: k}), m.conf[REPLAY], m.static)
            m.finished = True
        else:
            trainees.append(m)
    if base.train.backend == "simulate":  # ``data`` is the blackbox
        _simulate(trainees, data)
        return
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.train.trial_array import Member, TrialArray

    states = [m.resume() for m in trainees]
    threads, device = trial_threads(base), trial_device(base)
    if len(trainees) == 1:  # one left: the solo path, as a trial of its own
        (m,) = trainees

        def on_eval(ev: dict[str, Any]) -> object:
            m.on_eval(ev)
            return "stop" if m.ended() else False  # pruned: the driver said so

        summary = train_proxy(
            m.model,
            m.plan.widths,
            data,
            m.cfg.train,
            seed=m.seed,
            threads=threads,
            device=device,
            on_eval=on_eval,
            resume=states[0],
            on_checkpoint=m.checkpoint,
            final_checkpoint=m.final_checkpoint,
        )
        m.finish(summary, start)
        return
    if not trainees:
        return
    runs = [Member(m.model, tuple(m.plan.widths), m.cfg.train, m.seed) for m in trainees]
    arr = TrialArray(
        runs,
        data,
        device=device,
        threads=threads,
        compile=base.train.compile == "on",
        states=states,
    )
    try:
        while not arr.done:
            arr.step()
            for i in arr.evals_due():
                row = arr.evaluate(i)
                if row is None:
                    continue  # diverged: its final report says so below
                if arr.trainers[i].checkpoint_due():
                    trainees[i].checkpoint(arr.state_dict(i))
                trainees[i].on_eval(dict(row))
            for i in arr.active:
                if trainees[i].ended():
                    arr.drop(i, "pruned")  # leaves the fused step from the next step
            for i, m in enumerate(trainees):
                t = arr.trainers[i]
                if not t.done or m.finished:
                    continue
                if m.final_checkpoint and t.status == "completed" and m.checkpointed != t.tokens:
                    m.checkpoint(arr.state_dict(i))
                m.finish(arr.summary(i), start)
    finally:
        arr.close()
