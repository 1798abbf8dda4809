"""Search orchestration: overhead of Ray Tune + Optuna, and what pruning saves.

Run: ``.venv/bin/python benchmarks/search.py [--tokens N]
[--what overhead,pruning,samplers,replay]``.

(a) Overhead: a grid study without pruning; the study's wall time (Ray started, data ready)
    against the sum of its trials' own wall times (model build + training + evals, measured in
    the trainable) divided by the concurrency. Goal: <= 1.10x, plus Ray's start.
(b) Pruning: the paper's space (linear / cosine / sigmoid x 5 ratio pairs + uniform, 16 trials)
    at a tiny size, grid order, once with the median pruner and once without: tokens trained in
    all, wall time, and the best candidate each finds.
(c) Samplers (no Ray, no training): search_spaces/continuous.yaml on a 12-layer model (d_ff
    1024, multiple_of 8), the product's queue (uniform baseline first) and asks, 30 candidates
    told a synthetic loss: the RMS distance of the realised width ratios from those of cosine
    1.6 -> 0.4 (optimum 0; the baseline scores 0.4428). Best candidate value per study, median
    and IQR over sampler seeds 0-11; beats_random counts seeds where it is below random's
    (paired by seed). "old" is make_sampler without its baseline wrapper: no baseline wrapper, so
    the parameterless baseline empties Optuna's intersection search space.
    ``PYTHONPATH=. python benchmarks/search.py --what samplers`` (2 shared cores, Dec 2026):

        sampler          variant  median_best           iqr beats_random  s_per_study
         random        new = old       0.0415 0.0256-0.0600         0/12         0.08
            tpe              old       0.0138 0.0049-0.0430         8/12         0.17
            tpe new, group=False       0.0095 0.0053-0.0122        10/12         0.10
            tpe              new       0.0063 0.0053-0.0169        11/12         0.15
             gp              old       0.0415 0.0256-0.0600         0/12         0.06
             gp              new       0.0032 0.0000-0.0057        11/12        14.00
          nsga2              old       0.0415 0.0256-0.0600         0/12         0.09
          nsga2              new       0.0360 0.0256-0.0600         3/12         0.13

    Old GP and NSGA-II were random search, value for value; old TPE modelled each parameter
    alone. NSGA-II's population is n_trials // 2 = 15, so 30 trials hold one generation of
    children: too few for a genetic search to pull ahead. GP's time is its fits (scipy
    L-BFGS-B, sequential without the optional greenlet package), small next to a trial.
(d) Pruners and races replayed (no extra training): one no-pruning grid run of the paper space
    (15 candidates + uniform) x 3 seeds at the tiny size above, then each pruner (and racing
    with a pruner) replayed on its curves (see :func:`replay`, :func:`race_replay`): share of
    the no-pruning tokens, trials pruned, whether the best (stats.rank) is kept, the picked
    candidate's gap to the true best (bpb and in units of the pooled seed noise of a
    difference of 3-seed means), and Kendall's tau of the final ranking against the no-pruning
    one. The first row is a bound (:func:`_oracle`). ``benchmarks/search.py --what replay``
    (131,072 tokens a trial, seeds 0,1,2; ``--replay-run DIR`` replays a kept run; 2 shared
    cores, Dec 2026):

        replay                          trials  tokens  pruned  best_kept  gap_noise   tau
        oracle (see _oracle)                48   0.812      12       True       0.00     -
        none                                48   1.000       0       True       0.00  1.000
        median                              48   0.638      34      False       3.55  0.283
        percentile                          48   0.513      38      False       3.55 -0.033
        successive_halving                  48   0.719      32      False       3.55  0.367
        hyperband                           48   0.786      33      False       3.55  0.350
        wilcoxon                            48   0.805      35      False       3.55 -0.050
        paired                              48   1.000       0       True       0.00  1.000
        paired margin 1, patience 1         48   0.919       7       True       0.00  0.733
        race vs best                        48   1.000       0       True       0.00  1.000
        race vs best + paired               48   1.000       0       True       0.00  1.000
        race vs best + paired margin 1      41   0.773       7       True       0.00  0.733

    The raw-value pruners pruned the best (linear 1.75->0.25) on some seed; a candidate censored
    that way never outranks a fully measured one, so their answer fell back to uniform (0.0098
    bpb, 3.6 noise units, worse). The paired pruner kept the best and the ranking; at its
    defaults it pruned nothing, at margin 1 / patience 1 it saved 8% (23% with a race against
    the best). The pruning goal (35% of the tokens, best kept) is out of reach here: even the
    oracle, which stops only the candidates the finished 3-seed data separates from the best at
    95% (4 of 14, and only from the grace on), spends 81%, because the other 10 are within the
    seed noise (sd of a paired delta 0.0048 bpb, 30 df) of the best. No race stopped a
    candidate at one seed for the same reason. One run, so these are single draws.
Each run is one run (the machine may be shared: figures move by several percent).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from tlmsearch.config import StudyConfig, study_from_mapping
from tlmsearch.search import run_study
from tlmsearch.search.sampling.baseline import is_baseline_trial
from tlmsearch.search.sampling.samplers import (
    DefineByRunSpace,
    make_sampler,
    planned_trials,
    write_initial_queue,
)
from tlmsearch.widths.space import UNIFORM


def study(name: str, runs: Path, tokens: int, pruner: str, space: Any) -> dict[str, Any]:
    return {
        "name": name,
        "space": space,
        "model": {"n_layer": 4, "d_model": 64, "n_head": 2, "d_ff": 256, "multiple_of": 16},
        "data": {
            "sources": ["classics"],
            "tokenizer": {"kind": "bpe", "vocab_size": 4096},
            "seq_len": 128,
            "val_tokens": 16384,
        },
        "train": {
            "tokens": tokens,
            "batch_tokens": 2048,
            "micro_batch_size": 16,
            "warmup_tokens": tokens // 10,
            "eval_every_tokens": tokens // 8,
            "lr": 0.003,
            "compile": "off",
        },
        "search": {"sampler": "grid", "pruner": pruner, "concurrency": 2},
        "storage": {"runs_dir": str(runs)},
        "ray": {"num_cpus": 2, "cpus_per_trial": 1},
    }


def timed_run(cfg_dict: dict[str, Any]) -> tuple[pd.DataFrame, float, float]:
    """(trials, study wall s excluding Ray start and data, Ray start s)."""
    cfg = study_from_mapping(cfg_dict)
    marks: dict[str, float] = {}

    def echo(text: str) -> None:
        now = time.time()
        if text.startswith("ray:"):
            marks["ray"] = now
        elif "trial(s) to run" in text:
            marks["go"] = now

    t0 = time.time()
    res = run_study(cfg, echo=echo)
    wall = time.time() - marks["go"]  # from the first trial's launch to the tables written
    trials = pd.read_parquet(res.run_dir / "trials.parquet")
    return trials, wall, marks["go"] - t0


def overhead(runs: Path, tokens: int) -> dict[str, Any]:
    space = {
        "dimensions": {  # 9 cosine tapers + uniform: 10 trials, 5 rounds of 2
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "float", "low": 1.25, "high": 1.75, "step": 0.0625},
        }
    }
    trials, wall, start = timed_run(study("overhead", runs, tokens, "none", space))
    ideal = trials["wall_s"].sum() / 2
    # The same trials packed on 2 slots in launch order with zero overhead: with an odd count
    # the last round leaves a slot idle, which no orchestrator can avoid.
    slots = [0.0, 0.0]
    for w in trials.sort_values("number")["wall_s"]:
        slots[slots.index(min(slots))] += float(w)
    return {
        "trials": len(trials),
        "tokens_per_trial": tokens,
        "study_wall_s": round(wall, 1),
        "sum_trial_wall_s": round(trials["wall_s"].sum(), 1),
        "ideal_s (sum / concurrency 2)": round(ideal, 1),
        "overhead_ratio": round(wall / ideal, 3),
        "packed_s (2 slots, launch order)": round(max(slots), 1),
        "ratio_vs_packed": round(wall / max(slots), 3),
        "data_and_ray_start_s": round(start, 1),
    }


def pruning(runs: Path, tokens: int, pruners: list[str]) -> list[dict[str, Any]]:
    out = []
    for pruner in pruners:
        trials, wall, _ = timed_run(study(f"prune-{pruner}", runs, tokens, pruner, "paper"))
        done = trials[trials["state"] == "COMPLETE"]
        best = done.sort_values("val_bpb").iloc[0]
        out.append(
            {
                "pruner": pruner,
                "trials": len(trials),
                "pruned": int((trials["state"] == "PRUNED").sum()),
                "tokens_trained": int(trials["tokens"].sum()),
                "study_wall_s": round(wall, 1),
                "best": best["candidate"],
                "best_val_bpb": round(float(best["val_bpb"]), 4),
                "uniform_val_bpb": round(
                    float(trials[trials["is_baseline"]]["val_bpb"].iloc[0]), 4
                ),
            }
        )
    return out


# -------------------------------------------------------------------------------------------------
# (c) Samplers on a synthetic objective (no Ray, no training)

# The objective's optimum: the realised width ratios of this candidate.
TARGET = {"shape": "cosine", "r_start": 1.6, "r_end": 0.4}


def sampler_config(sampler: str, seed: int, n_trials: int) -> StudyConfig:
    return study_from_mapping(
        {
            "name": f"samplers-{sampler}-{seed}",
            "space": "continuous",
            "model": {"n_layer": 12, "d_model": 256, "n_head": 4, "d_ff": 1024, "multiple_of": 8},
            "search": {"sampler": sampler, "sampler_seed": seed, "n_trials": n_trials},
        }
    )


def profile_loss(cfg: StudyConfig, candidate: dict[str, Any]) -> float:
    """RMS distance of the candidate's realised width ratios from TARGET's (0 at the optimum)."""
    d_ff = cfg.model.d_ff_uniform
    got, want = cfg.model.plan(candidate).widths, cfg.model.plan(TARGET).widths
    return (sum(((a - b) / d_ff) ** 2 for a, b in zip(got, want, strict=True)) / len(got)) ** 0.5


def best_found(cfg: StudyConfig, sampler: Any) -> float:
    """The product's queue and asks (baseline first), told profile_loss; best candidate value."""
    import optuna

    study = optuna.create_study(sampler=sampler)
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    for _ in range(planned_trials(cfg)):
        trial = study.ask()
        study.tell(trial, profile_loss(cfg, fn(trial)["candidate"]))
    return min(t.value for t in study.get_trials() if not is_baseline_trial(t))


def _old_tpe(seed: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)


def _tpe_no_group(seed: int) -> Any:
    from tlmsearch.search.sampling.baseline import BaselineBlindSampler

    return BaselineBlindSampler(_old_tpe(seed))


# (sampler, variant, how to build it from the study config). "old": a sampler without the
# baseline wrapper (no baseline wrapper; TPE without group); "new": make_sampler as it is.
SAMPLER_VARIANTS = [
    ("random", "new = old", make_sampler),
    ("tpe", "old", lambda cfg: _old_tpe(cfg.search.sampler_seed)),
    ("tpe", "new, group=False", lambda cfg: _tpe_no_group(cfg.search.sampler_seed)),
    ("tpe", "new", make_sampler),
    ("gp", "old", lambda cfg: make_sampler(cfg).inner),
    ("gp", "new", make_sampler),
    ("nsga2", "old", lambda cfg: make_sampler(cfg).inner),
    ("nsga2", "new", make_sampler),
]


def samplers(n_trials: int, n_seeds: int) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    random_best: dict[int, float] = {}
    out = []
    for name, variant, build in SAMPLER_VARIANTS:
        t0, bests = time.time(), []
        for seed in range(n_seeds):
            cfg = sampler_config(name, seed, n_trials)
            bests.append(best_found(cfg, build(cfg)))
            if name == "random":
                random_best[seed] = bests[-1]
        q = pd.Series(bests).quantile([0.25, 0.5, 0.75])
        out.append(
            {
                "sampler": name,
                "variant": variant,
                "median_best": round(q[0.5], 4),
                "iqr": f"{q[0.25]:.4f}-{q[0.75]:.4f}",
                "beats_random": f"{sum(b < random_best[s] for s, b in enumerate(bests))}"
                f"/{n_seeds}",
                "s_per_study": round((time.time() - t0) / n_seeds, 2),
            }
        )
    base = profile_loss(sampler_config("random", 0, n_trials), dict(UNIFORM))
    print(f"uniform baseline's value: {base:.4f}; optimum 0 at {TARGET}", flush=True)
    return out


# -------------------------------------------------------------------------------------------------
# (d) Pruners (and racing) replayed on one no-pruning run's curves

# (row name, pruner, pruner options, racing settings or None)
REPLAYS: list[tuple[str, str, dict[str, Any], dict[str, Any] | None]] = [
    ("none", "none", {}, None),
    ("median", "median", {}, None),
    ("percentile", "percentile", {}, None),
    ("successive_halving", "successive_halving", {}, None),
    ("hyperband", "hyperband", {}, None),
    ("wilcoxon", "wilcoxon", {}, None),
    ("paired", "paired", {}, None),
    ("paired margin 1, patience 1", "paired", {"margin_sds": 1.0, "patience": 1}, None),
    ("race vs best", "none", {}, {"against": "best"}),
    ("race vs best + paired", "paired", {}, {"against": "best"}),
    (
        "race vs best + paired margin 1",
        "paired",
        {"margin_sds": 1.0, "patience": 1},
        {"against": "best"},
    ),
]


class _Replayer:
    """Replays trials of a no-pruning run through a pruner, one trial at a time.

    Training is deterministic per (candidate, seed), so a pruned trial's curve is the prefix of
    the full one: one no-pruning run answers for every pruner. Each trial reports its evals to an
    in-memory Optuna study as OptunaPruningScheduler does (step = tokens; nothing before the
    grace, the baseline and the last eval never pruned) and is asked after every eval. One
    trial at a time, so every pruner sees every earlier trial finished: its best case.
    """

    def __init__(
        self,
        cfg: StudyConfig,
        trials: pd.DataFrame,
        curves: pd.DataFrame,
        pruner: str,
        options: dict,
    ) -> None:
        import optuna

        from tlmsearch.search.execution.blackbox import TabularBlackbox
        from tlmsearch.search.sampling.samplers import grace_tokens, make_pruner

        search = cfg.search.model_copy(update={"pruner": pruner, "pruner_options": options})
        self.cfg = cfg.model_copy(update={"search": search})
        self.grace = grace_tokens(self.cfg)
        self.study = optuna.create_study(direction="minimize", pruner=make_pruner(self.cfg))
        # the simulator backend's stored-curve lookup (train.backend: simulate)
        self.box = TabularBlackbox.from_tables(trials, curves, vocab_size=0)

    def run(self, tr: Any) -> dict[str, Any]:
        import optuna

        from tlmsearch.search.attrs import BASELINE

        ot = self.study.ask()
        ot.set_user_attr("seed", int(tr.seed))
        ot.set_user_attr("candidate", tr.params_json)
        if tr.is_baseline:
            ot.set_user_attr(BASELINE, True)
        state, last, spent = "COMPLETE", math.nan, 0
        for ev in self.box.curve(json.loads(tr.params_json), int(tr.seed)).evals:
            ot.report(float(ev["val_bpb"]), ev["tokens"])
            last, spent = float(ev["val_bpb"]), ev["tokens"]
            final = spent >= self.cfg.train.tokens
            if spent >= self.grace and not final and not tr.is_baseline and ot.should_prune():
                state = "PRUNED"
                break
        self.study.tell(
            ot, None if state == "PRUNED" else last, state=getattr(optuna.trial.TrialState, state)
        )
        row = {"candidate": tr.candidate, "seed": int(tr.seed), "state": state}
        return {**row, "is_baseline": bool(tr.is_baseline), "val_bpb": last, "tokens": spent}


def replay(
    cfg: StudyConfig, trials: pd.DataFrame, curves: pd.DataFrame, pruner: str, options: dict
) -> pd.DataFrame:
    """The trials table had ``pruner`` run the study: every trial, in launch order."""
    rep = _Replayer(cfg, trials, curves, pruner, options)
    return pd.DataFrame([rep.run(tr) for tr in trials.sort_values("number").itertuples()])


def race_replay(
    cfg: StudyConfig,
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    pruner: str,
    options: dict,
    racing: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, tuple[int, ...]]]:
    """The trials table had a race (``search.racing``) with ``pruner`` run the study.

    Every candidate on the first seed in launch order (the baseline first), then, after each
    trial, the seeds :func:`tlmsearch.evidence.racing.race` says are due (a seed's baseline before
    its candidates), one trial at a time. Returns the replayed table and the race's planned seeds.
    """
    from tlmsearch.evidence.racing import planned_seeds, race

    seeds = list(cfg.search.seeds)
    rep = _Replayer(cfg, trials, curves, pruner, options)
    by_pair = {(str(t.candidate), int(t.seed)): t for t in trials.itertuples()}
    base = str(trials.loc[trials["is_baseline"], "candidate"].iloc[0])
    first = trials[trials["seed"] == seeds[0]].sort_values("number")
    queue = [(str(c), seeds[0]) for c in first["candidate"]]
    done: list[dict[str, Any]] = []
    settings = {"max_seeds": len(seeds), "confidence": 0.95, **racing}
    while queue:
        cand, seed = queue.pop(0)
        done.append(rep.run(by_pair[(cand, seed)]))
        lanes = race(pd.DataFrame(done), "val_bpb", seeds=seeds, queued=set(queue), **settings)
        ran = {(r["candidate"], r["seed"]) for r in done} | set(queue)
        for lane in lanes:
            if lane.next_seed is None:
                continue
            for pair in ((base, lane.next_seed), (lane.candidate, lane.next_seed)):
                if pair not in ran:
                    queue.append(pair)
                    ran.add(pair)
    table = pd.DataFrame(done)
    lanes = race(table, "val_bpb", seeds=seeds, **settings)
    return table, planned_seeds(table, lanes)


def pruner_table(runs: Path, tokens: int, seeds: list[int], reuse: Path | None) -> list[dict]:
    """One no-pruning run of the paper space; every pruner and race replayed on it."""
    from scipy.stats import kendalltau

    from tlmsearch import stats

    if reuse is None:
        cfg_dict = study("replay", runs, tokens, "none", "paper")
        cfg_dict["search"]["seeds"] = seeds
        timed_run(cfg_dict)
        reuse = runs / "replay"
    cfg = study_from_mapping(yaml.safe_load((reuse / "study.yaml").read_text()))
    full = pd.read_parquet(reuse / "trials.parquet")
    curves = pd.read_parquet(reuse / "curves.parquet")
    truth = stats.rank(full, "val_bpb", "minimize")
    mean = truth.set_index("candidate")["mean"]
    order = list(truth["candidate"])
    best = order[0]
    # two candidates' means over the same seeds: v_a - v_b per seed has the seed noise of one
    # paired delta (uniform cancels), so the difference of means has sd noise / sqrt(n)
    noise = _pooled(full) / math.sqrt(len(cfg.search.seeds))
    out = [_oracle(cfg, full, best)]
    for name, pruner, options, racing in REPLAYS:
        if racing is None:
            rep, plan = replay(cfg, full, curves, pruner, options), None
        else:
            rep, plan = race_replay(cfg, full, curves, pruner, options, racing)
        ranked = stats.rank(rep, "val_bpb", "minimize", seeds=plan)
        picked = str(ranked["candidate"].iloc[0])
        gap = float(mean[picked] - mean[best])
        pos = {c: i for i, c in enumerate(ranked["candidate"])}
        tau = kendalltau([order.index(c) for c in order], [pos[c] for c in order]).statistic
        out.append(
            {
                "replay": name,
                "trials": len(rep),
                "tokens_share": round(rep["tokens"].sum() / full["tokens"].sum(), 3),
                "pruned": int((rep["state"] == "PRUNED").sum()),
                "best_kept": picked == best,
                "picked": picked,
                "gap_bpb": round(gap, 4),
                "gap_in_noise": round(gap / noise, 2) if noise > 0 else math.nan,
                "kendall_tau": round(float(tau), 3),
            }
        )
    return out


def _oracle(cfg: StudyConfig, full: pd.DataFrame, best: str) -> dict[str, Any]:
    """The least a pruner that runs every seed and keeps what is within noise of the best spends.

    It knows the end: it stops (at the grace, on every seed) exactly the candidates whose
    difference to the best, over all the run's seeds with the block-design noise, is separated
    at 95% (Holm over the pairs with the best); everything else, the best and uniform run to
    the end. No pruner that runs every seed and keeps every candidate the data cannot tell
    from the best can spend less (a race can: it runs fewer seeds).
    """
    from tlmsearch import stats
    from tlmsearch.search.sampling.samplers import grace_tokens

    noise = stats.block_noise(full, "val_bpb")
    names = [c for c in full["candidate"].unique() if c != best]
    pairs = stats.pairwise(full, "val_bpb", [best, *names], noise=noise)
    pairs = pairs[pairs["a"] == best].set_index("b")
    stop = {c for c in names if bool(pairs.loc[c, "separated"]) and c != "uniform"}
    grace = grace_tokens(cfg)
    spent = sum(
        min(grace, t) if c in stop else t
        for c, t in zip(full["candidate"], full["tokens"], strict=True)
    )
    return {
        "replay": "oracle: stop only what the end separates from the best",
        "trials": len(full),
        "tokens_share": round(spent / full["tokens"].sum(), 3),
        "pruned": len(stop) * full["seed"].nunique(),
        "best_kept": True,
        "picked": best,
        "gap_bpb": 0.0,
        "gap_in_noise": 0.0,
        "kendall_tau": math.nan,
    }


def _pooled(trials: pd.DataFrame) -> float:
    """The sd of one paired delta from the block-design fit (tlmsearch.stats.block_noise)."""
    from tlmsearch.stats import block_noise

    noise = block_noise(trials, "val_bpb")
    return noise.sd if noise else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=131072, help="tokens per trial")
    ap.add_argument("--what", default="overhead,pruning")
    ap.add_argument("--pruners", default="none,median", help="pruning runs to compare")
    ap.add_argument("--trials", type=int, default=30, help="samplers: candidates per study")
    ap.add_argument("--seeds", type=int, default=12, help="samplers: sampler seeds per row")
    ap.add_argument("--replay-seeds", default="0,1,2", help="replay: seeds of the no-pruning run")
    ap.add_argument(
        "--replay-run",
        type=Path,
        default=None,
        help="replay: an existing no-pruning run dir of the paper space to reuse",
    )
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument(
        "--runs-dir",
        type=Path,
        default=None,
        help="keep the benchmark's run dirs here (default: a temporary dir)",
    )
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = str(args.runs_dir) if args.runs_dir else scratch
        if "overhead" in args.what:
            results["overhead"] = overhead(Path(tmp), args.tokens)
            print(json.dumps(results["overhead"], indent=1), flush=True)
        if "pruning" in args.what:
            results["pruning"] = pruning(Path(tmp), args.tokens, args.pruners.split(","))
            print(pd.DataFrame(results["pruning"]).to_string(index=False), flush=True)
        if "replay" in args.what:
            seeds = [int(x) for x in args.replay_seeds.split(",")]
            results["replay"] = pruner_table(Path(tmp), args.tokens, seeds, args.replay_run)
            print(pd.DataFrame(results["replay"]).to_string(index=False), flush=True)
        if "samplers" in args.what:
            results["samplers"] = samplers(args.trials, args.seeds)
            print(pd.DataFrame(results["samplers"]).to_string(index=False), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
