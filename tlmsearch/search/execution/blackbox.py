"""Blackboxes of learning curves: what a trial of ``train.backend: simulate`` reports instead of
training (Syne Tune's simulated backend is the model: a tabulated or surrogate blackbox replayed
through the real tuner).

Two kinds, both looked up by (candidate, seed):

- :class:`TabularBlackbox`: a finished run dir's stored curves, replayed as they were. Training
  is deterministic per (candidate, seed), so a trial's curve does not depend on which pruner,
  sampler or race ran it: one stored run answers for every policy, as long as the replay asks
  only for what the run trained (a trial the stored run pruned has only a prefix; asked past it,
  the replayed trial fails with that reason rather than invent evals).
- :class:`SurrogateBlackbox`: a parametric model (``train.simulate.surrogate``): a candidate's
  effect, a seed's shared effect, the (candidate, seed)'s own noise (one sd for all, or one per
  candidate with a noisier baseline), a power-law curve and each eval's jitter; given in the YAML
  or fitted to a stored run (:func:`fit_surrogate`).

Pure Python + numpy + pandas: no torch, no Ray. The trainable reports what :meth:`curve` gives
(``tlmsearch/search/execution/trainable.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tlmsearch.config import StudyConfig
from tlmsearch.config.train import SurrogateConfig
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.widths.candidate import IDENTITY, Candidate
from tlmsearch.widths.space import is_baseline

LN2 = math.log(2)
# The surrogate's defaults, for every field neither the YAML nor a fit gives.
DEFAULTS = {
    "final": 3.0,
    "offset": 0.0,
    "curvature": 0.0,
    "seed_sd": 0.01,
    "noise_sd": 0.01,
    "amplitude": 1.0,
    "alpha": 0.5,
    "eval_sd": 0.002,
    "bytes_per_token": 1.0,
}
ALPHAS = np.geomspace(0.05, 4.0, 80)  # the curve exponents a fit tries


@dataclass(frozen=True)
class Replay:
    """One trial's blackbox answer: its evals (EVAL_KEYS rows, ``tokens`` ascending), and how it
    ended when it runs to its last eval (``status`` as the trainer's, with a reason)."""

    evals: list[dict[str, Any]]
    status: str = "completed"
    reason: str = ""


def key(candidate: Candidate | Mapping[str, Any]) -> str:
    """A candidate's identity in the trials table and in Optuna (:attr:`Candidate.identity`)."""
    return Candidate.of(candidate).identity


def vocab_of(cfg: StudyConfig) -> int:
    """The vocabulary a simulated trial counts its parameters with (no data is prepared)."""
    tok = cfg.data.tokenizer
    vocab = cfg.model.vocab_size or {"bpe": tok.vocab_size, "bytes": 256}.get(tok.kind)
    if vocab is None:
        raise ConfigError(
            f"model.vocab_size: the simulator prepares no data, so a {tok.kind} tokenizer's "
            "vocabulary is unknown; set model.vocab_size"
        )
    return int(vocab)


def eval_tokens(cfg: StudyConfig) -> list[int]:
    """The token counts a trial of ``cfg`` evaluates at: every eval interval, and the end."""
    every, total = cfg.train.eval_interval, cfg.train.tokens
    return [*range(every, total, every), total]


def load_blackbox(cfg: StudyConfig) -> TabularBlackbox | SurrogateBlackbox:
    """The blackbox ``train.simulate`` names; a bad run dir is an input error (exit 2)."""
    sim = cfg.train.simulate
    assert sim is not None  # TrainConfig checks backend simulate has it
    vocab = vocab_of(cfg)
    if sim.run is not None:
        trials, curves = _stored(sim.run, "train.simulate.run")
        return TabularBlackbox.from_tables(trials, curves, vocab, sim.seconds_per_eval)
    assert sim.surrogate is not None
    params = fit_surrogate(sim.surrogate, cfg)
    return SurrogateBlackbox(params, eval_tokens(cfg), vocab, sim.seconds_per_eval)


def _stored(run: str, where: str) -> tuple[Any, Any]:
    import pandas as pd

    rd = RunDir(run)
    if not rd.table("trials").is_file() or not rd.table("curves").is_file():
        raise ConfigError(
            f"{where}: {run!r} holds no trials.parquet and curves.parquet; give a finished run "
            "dir (`tlmsearch export RUN_DIR` writes them for a stopped one)"
        )
    return pd.read_parquet(rd.table("trials")), pd.read_parquet(rd.table("curves"))


# -------------------------------------------------------------------------------------------------
# Tabular: a stored run's curves


@dataclass
class TabularBlackbox:
    """A stored run's curves by (candidate key, seed): the evals, the stored state and reason."""

    table: dict[tuple[str, int], tuple[list[dict[str, Any]], str, str]]
    vocab_size: int
    seconds_per_eval: float = 0.0

    @classmethod
    def from_tables(
        cls, trials: Any, curves: Any, vocab_size: int, seconds_per_eval: float = 0.0
    ) -> TabularBlackbox:
        """From a run dir's trials and curves tables (docs/run_dir.md). A (candidate, seed)
        stored more than once (a retry, a twin) answers with its most complete trial."""
        from tlmsearch.constants import EVAL_KEYS

        cols = [c for c in EVAL_KEYS if c in curves.columns]
        by_trial = {t: g.sort_values("tokens") for t, g in curves.groupby("trial_id", sort=False)}
        rank = {"COMPLETE": 2, "PRUNED": 1}
        table: dict[tuple[str, int], tuple[list[dict[str, Any]], str, str]] = {}
        best: dict[tuple[str, int], tuple[int, int]] = {}
        for tr in trials.itertuples():
            g = by_trial.get(tr.trial_id)
            if g is None or g.empty:
                continue
            evals = [_clean(row) for row in g[cols].to_dict("records")]
            pair = (str(getattr(tr, IDENTITY)), int(tr.seed))
            score = (rank.get(str(tr.state), 0), len(evals))
            if pair not in best or score > best[pair]:
                best[pair] = score
                table[pair] = (evals, str(tr.state), str(tr.reason or ""))
        return cls(table, vocab_size, seconds_per_eval)

    def curve(self, candidate: Candidate, seed: int) -> Replay:
        """The stored curve of (candidate, seed). A stored PRUNED trial's curve is a prefix:
        a replay that runs past it ends failed (the stored run never trained the rest)."""
        found = self.table.get((key(candidate), int(seed)))
        if found is None:
            return Replay(
                [], "failed", f"the stored run holds no trial of this candidate at seed {seed}"
            )
        evals, state, reason = found
        if state == "COMPLETE":
            return Replay(evals)
        if state == "PRUNED":
            end = int(evals[-1]["tokens"])
            return Replay(
                evals,
                "failed",
                f"the stored run pruned it at {end:,} tokens: its curve ends there",
            )
        return Replay(evals, "failed", reason or "failed in the stored run")


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}
    out["tokens"] = int(out["tokens"])
    return out


# -------------------------------------------------------------------------------------------------
# Surrogate: a parametric model of curves


@dataclass(frozen=True)
class SurrogateParams:
    """Every field of :class:`SurrogateConfig` resolved, and (fitted) the stored candidates'
    effects with their numeric params, which unseen candidates borrow from the nearest."""

    final: float
    offset: float
    curvature: float
    optimum: dict[str, float]
    seed_sd: float
    noise_sd: float
    noise: str
    spread: float
    baseline_noise: float
    amplitude: float
    alpha: float
    eval_sd: float
    bytes_per_token: float
    seed: int
    effects: dict[str, float] = field(default_factory=dict)  # stored candidate key -> effect


def fit_surrogate(given: SurrogateConfig, cfg: StudyConfig) -> SurrogateParams:
    """The surrogate's parameters: the YAML's, the rest fitted to ``given.fit`` (a stored run's
    complete trials: a two-way additive fit of final val_loss on candidate and seed, the
    residuals' sd, and a power law through the mean curve above its end), else the defaults."""
    fitted: dict[str, Any] = {}
    if given.fit is not None:
        trials, curves = _stored(given.fit, "train.simulate.surrogate.fit")
        fitted = _fit(trials, curves)
        if given.curvature is not None:  # the formula, not the stored candidates, gives effects
            fitted.pop("effects", None)
    values = {k: getattr(given, k) for k in DEFAULTS if getattr(given, k) is not None}
    rest = {
        "optimum": dict(given.optimum),
        "noise": given.noise,
        "spread": given.spread,
        "baseline_noise": given.baseline_noise,
        "seed": given.seed,
    }
    return SurrogateParams(**{**DEFAULTS, **fitted, **values, **rest})


def _fit(trials: Any, curves: Any) -> dict[str, Any]:
    """Fitted surrogate fields from a stored run's complete trials (val_loss, nats)."""
    done = trials[(trials["state"] == "COMPLETE") & trials["val_loss"].notna()]
    baselines = done[IDENTITY].map(lambda p: Candidate.from_identity(p).is_baseline)
    if done.empty or not baselines.any():
        raise ConfigError(
            "train.simulate.surrogate.fit: the run has no complete uniform trial to fit to; "
            "give a run that trained the baseline, or the surrogate's fields"
        )
    y = done.pivot_table(index=IDENTITY, columns="seed", values="val_loss", aggfunc="mean")
    cand, seed = _two_way(y.to_numpy())
    resid = y.to_numpy() - cand[:, None] - seed[None, :]
    n = int(np.isfinite(resid).sum())
    dof = max(1, n - len(cand) - len(seed) + 1)
    baselines = np.array([Candidate.from_identity(p).is_baseline for p in y.index])
    base = float(np.mean(cand[baselines]))
    out: dict[str, Any] = {
        "final": base + float(np.mean(seed)),
        "noise_sd": math.sqrt(float(np.nansum(resid**2)) / dof) if n > len(cand) else 0.0,
        "seed_sd": float(np.std(seed, ddof=1)) if len(seed) > 1 else 0.0,
        "effects": {p: float(c - base) for p, c in zip(y.index, cand, strict=True)},
    }
    bpt = (done["val_loss"] / done["val_bpb"] / LN2).dropna()
    if len(bpt):
        out["bytes_per_token"] = float(bpt.median())
    out.update(_curve_shape(done, curves))
    return out


def _two_way(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row (candidate) and column (seed) effects of an additive fit to ``y`` with holes (NaN);
    the seed effects centred. Alternating means: exact for a complete table in one pass."""
    seed = np.zeros(y.shape[1])
    cand = np.nanmean(y, axis=1)
    for _ in range(20):
        seed = np.nanmean(y - cand[:, None], axis=0)
        seed = np.where(np.isfinite(seed), seed - np.nanmean(seed), 0.0)
        cand = np.nanmean(y - seed[None, :], axis=1)
    return cand, seed


def _curve_shape(done: Any, curves: Any) -> dict[str, float]:
    """amplitude and alpha of ``A ((t/T)^-alpha - 1)`` through each complete curve above its
    end (least squares over a grid of alpha), and the evals' jitter around it."""
    mine = curves[curves["trial_id"].isin(set(done["trial_id"]))].dropna(subset=["val_loss"])
    if mine.empty:
        return {}
    total = mine.groupby("trial_id")["tokens"].transform("max")
    last = mine.sort_values("tokens").groupby("trial_id")["val_loss"].transform("last")
    x = (mine["tokens"] / total).to_numpy(float)
    gap = (mine["val_loss"] - last).to_numpy(float)
    keep = x < 1
    if keep.sum() < 2:
        return {}
    x, gap = x[keep], gap[keep]
    best: tuple[float, float, float] = (math.inf, 0.0, 0.5)
    for a in ALPHAS:
        f = x ** (-a) - 1
        amp = max(0.0, float(f @ gap / (f @ f)))
        sse = float(((gap - amp * f) ** 2).sum())
        best = min(best, (sse, amp, float(a)))
    sse, amp, alpha = best
    return {"amplitude": amp, "alpha": alpha, "eval_sd": math.sqrt(sse / max(1, len(x) - 2))}


class SurrogateBlackbox:
    """Curves from :class:`SurrogateParams` at the study's eval points; deterministic per
    (candidate, seed, ``seed``): the same trial reports the same curve in any process."""

    def __init__(
        self,
        params: SurrogateParams,
        tokens: Sequence[int],
        vocab_size: int,
        seconds_per_eval: float = 0.0,
    ) -> None:
        self.p = params
        self.tokens = [int(t) for t in tokens]
        self.vocab_size = vocab_size
        self.seconds_per_eval = seconds_per_eval
        self._near = _Nearest(params.effects) if params.effects else None

    def effect(self, candidate: Candidate) -> float:
        """The candidate's mean final val_loss over uniform's (nats)."""
        p = self.p
        if self._near is not None:
            return self._near.effect(candidate)
        dist = sum((float(candidate[k]) - v) ** 2 for k, v in p.optimum.items() if k in candidate)
        return (0.0 if is_baseline(candidate) else p.offset) + p.curvature * dist

    def noise_sd(self, candidate: Candidate) -> float:
        """The sd of a (candidate, seed)'s own noise: one for all (homoscedastic), or the
        candidate's draw around it, uniform's ``baseline_noise`` times it (heteroscedastic)."""
        p = self.p
        if p.noise == "homoscedastic":
            return p.noise_sd
        if is_baseline(candidate):
            return p.noise_sd * p.baseline_noise
        return p.noise_sd * math.exp(p.spread * _normal(p.seed, "sd", key(candidate)))

    def curve(self, candidate: Candidate, seed: int) -> Replay:
        p, k = self.p, key(candidate)
        end = (
            p.final
            + self.effect(candidate)
            + p.seed_sd * _normal(p.seed, "seed", seed)
            + self.noise_sd(candidate) * _normal(p.seed, "cell", k, seed)
        )
        jitter = np.random.default_rng(_digest(p.seed, "evals", k, seed)).standard_normal(
            len(self.tokens)
        )
        total, evals = self.tokens[-1], []
        for i, t in enumerate(self.tokens):
            loss = end + p.amplitude * ((t / total) ** -p.alpha - 1) + p.eval_sd * jitter[i]
            evals.append(
                {
                    "tokens": t,
                    "train_loss": loss,
                    "val_loss": loss,
                    "val_ppl": math.exp(min(loss, 700.0)),
                    "val_bpb": loss / LN2 / p.bytes_per_token,
                }
            )
        return Replay(evals)


class _Nearest:
    """A fitted effect for any candidate: a stored one's own, else the nearest stored
    candidate's (numeric params standardised over the stored ones; a differing categorical
    value counts 1)."""

    def __init__(self, effects: dict[str, float]) -> None:
        self.effects = effects
        self.params = {k: json.loads(k) for k in effects}
        nums: dict[str, list[float]] = {}
        for c in self.params.values():
            for name, v in c.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    nums.setdefault(name, []).append(float(v))
        self.scale = {n: (float(np.std(v)) or 1.0) for n, v in nums.items()}

    def effect(self, candidate: Candidate) -> float:
        found = self.effects.get(key(candidate))
        if found is not None:
            return found
        if is_baseline(candidate):
            return 0.0
        near = min(self.params, key=lambda k: (self._dist(self.params[k], candidate), k))
        return self.effects[near]

    def _dist(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
        d = 0.0
        for name in set(a) | set(b):
            x, y = a.get(name), b.get(name)
            if name in self.scale and isinstance(x, int | float) and isinstance(y, int | float):
                d += ((float(x) - float(y)) / self.scale[name]) ** 2
            elif x != y:
                d += 1.0
        return d


def _digest(*parts: Any) -> int:
    """A stable 64-bit seed from ``parts`` (Python's hash() differs between processes)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def _normal(*parts: Any) -> float:
    """One standard normal draw keyed by ``parts``."""
    return float(np.random.default_rng(_digest(*parts)).standard_normal())
