"""Ray trials as the tracker callbacks see them, driven through Ray Tune's public hooks.

No Ray runs: a trial is the few attributes a tracker reads (``trial_id``, ``config``,
``last_result``, ``status``), and :func:`play` calls the hooks in the order Ray's tune
controller does, for five trials that end every way a trial can:

- ``a``: evals at 2,048 and 4,096 tokens, its worker lost, retried by Ray (``on_trial_recover``,
  then ``on_trial_start`` again) from its first checkpoint: it reports 2,048 and 4,096 again,
  then 6,144 and a final report at 6,144: complete;
- ``b``: one eval, then an error Ray does not retry (``on_trial_error``): failed;
- ``c``: one eval, then a final report of a diverged run: failed, with its reason;
- ``d``: one eval, stopped by the pruner: pruned;
- ``e``: one eval, still running when the experiment ends (the driver was interrupted).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

LINEAR = {"shape": "linear", "r_start": 1.5, "r_end": 0.5}
CANDIDATES = {"a": {"shape": "uniform"}, "b": LINEAR, "c": LINEAR, "d": LINEAR, "e": LINEAR}
SEEDS = {"a": 0, "b": 0, "c": 1, "d": 2, "e": 3}


def trial(trial_id: str) -> SimpleNamespace:
    config = {
        "candidate": dict(CANDIDATES[trial_id]),
        "seed": SEEDS[trial_id],
        "number": "abcde".index(trial_id),
    }
    return SimpleNamespace(trial_id=trial_id, config=config, last_result={}, status="PENDING")


def result(tokens: int, **more: Any) -> dict[str, Any]:
    """A report of trainable.py's shape: the eval keys, the widths, and Ray's own keys."""
    ray_keys = {"training_iteration": 1, "node_ip": "127.0.0.1", "done": False}
    return {
        "tokens": tokens,
        "val_bpb": 3.0 - tokens / 10_000,
        "val_loss": 2.0,
        "params": 1000,
        "widths": [96, 32],
        **ray_keys,
        **more,
    }


def play(cb: Any) -> dict[str, SimpleNamespace]:
    """The five trials above through ``cb``'s hooks, from ``setup`` to ``on_experiment_end``."""
    trials = {t: trial(t) for t in "abcde"}
    every = list(trials.values())
    cb.setup(stop=None, num_samples=1, total_num_samples=5)

    def start(t: SimpleNamespace) -> None:
        t.status = "RUNNING"
        cb.on_trial_start(iteration=0, trials=every, trial=t)

    def report(t: SimpleNamespace, tokens: int, **more: Any) -> None:
        t.last_result = result(tokens, **more)
        cb.on_trial_result(iteration=0, trials=every, trial=t, result=t.last_result)

    for t in every:
        start(t)
        report(t, 2048)
    a = trials["a"]
    report(a, 4096)
    cb.on_trial_recover(iteration=0, trials=every, trial=a)  # a lost worker: Ray retries
    start(a)
    for tokens in (2048, 4096, 6144):  # from the checkpoint at 0: the earlier evals again
        report(a, tokens)
    report(a, 6144, final=True, status="completed")
    cb.on_trial_complete(iteration=0, trials=every, trial=a)
    cb.on_trial_error(iteration=0, trials=every, trial=trials["b"])
    report(trials["c"], 2048, final=True, status="diverged", reason="diverged: loss 9.1 > 2x")
    cb.on_trial_complete(iteration=0, trials=every, trial=trials["c"])
    cb.on_trial_complete(iteration=0, trials=every, trial=trials["d"])  # pruned: not final
    cb.on_experiment_end(trials=every)
    return trials
