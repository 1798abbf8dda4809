"""Signal and noise (Heineman et al. 2025, "Signal and Noise", arXiv 2508.13144, section 2)

Their signal is the *relative dispersion* of the candidates' scores, max_{j,k} |m_j - m_k| / m̄,
their noise the *relative standard deviation* of one model's score over its final checkpoints,
sd / m̄, and SNR = signal / noise (allenai/signal-and-noise, snr/metrics.py). Here the scores
are the candidates' means on the study's seeds, and there are two noises: (a) seeds, the sd of
one paired delta (:func:`block_noise`): what separates or ties two candidates; (b) checkpoints,
their noise: how much the metric moves between the last evals of one training.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch.constants import LEVEL
from tlmsearch.stats.deltas import (
    as_dtypes,
    baseline_means,
    cells_once,
    pruner_selected,
    trial_cells,
)
from tlmsearch.stats.noise import Noise
from tlmsearch.stats.ranking import _summary_once

CHECKPOINT_EVALS = 4  # the last 4 evals of a trial (the second half of the default 8 evals)


def relative_dispersion(means: Sequence[float]) -> float:
    """Signal (arXiv 2508.13144, eq. 1): max_{j,k} |m_j - m_k| / |mean of m|; NaN with fewer
    than two finite means or a mean of 0.

    >>> relative_dispersion([2.0, 2.1, 1.9])  # 0.2 / 2.0
    0.1
    """
    m = np.asarray(means, dtype="float64")
    m = m[np.isfinite(m)]
    centre = float(abs(m.mean())) if len(m) else 0.0
    if len(m) < 2 or centre == 0.0:
        return math.nan
    return float(round(float(np.ptp(m)) / centre, 15))


@functools.lru_cache(maxsize=64)
def expected_range(k: int) -> float:
    """E[max - min] of ``k`` independent standard normals (Tippett's d2): what the dispersion of
    k means is in their sd when every candidate is equal. 0 for k < 2.

    >>> round(expected_range(2), 4), round(expected_range(10), 3)  # 2 / sqrt(pi); 3.078
    (1.1284, 3.078)
    """
    if k < 2:
        return 0.0
    from scipy.special import ndtr  # the normal cdf, without scipy.stats' import time

    x = np.linspace(-12.0, 12.0, 48_001)
    cdf = ndtr(x)
    return float(np.trapezoid(1.0 - cdf**k - (1.0 - cdf) ** k, x))


class CheckpointNoise(NamedTuple):
    """The metric's checkpoint-to-checkpoint sd over the last ``k`` evals of each trial."""

    sd: float  # detrended: pooled residual sd of a least-squares line in tokens (df k - 2 each)
    sd_raw: float  # their literal definition: pooled sd around each trial's mean (df k - 1 each)
    mean: float  # mean of those evals (the relative noise's denominator)
    n_trials: int
    k: int


def checkpoint_noise(
    curves: pd.DataFrame, value: str, *, k: int = CHECKPOINT_EVALS, trial: str = "trial_id"
) -> CheckpointNoise | None:
    """Checkpoint noise from learning curves: one row per (``trial``, eval) with ``tokens`` and
    ``value``; each trial's last ``k`` finite evals by tokens (trials with fewer are left out).

    ``sd`` detrends: a proxy's last evals still fall (its LR decays over them), and a trend that
    every seed shares is no noise, so each trial's evals are fitted by a line in tokens and the
    residuals pooled (variance sum over df sum). ``sd_raw`` keeps the trend, as the paper does
    for checkpoints late in a long run, where the trend is small. None when no trial has ``k``
    evals (``k`` >= 3: a line needs one df left).

    >>> c = pd.DataFrame({"trial_id": ["a"] * 4, "tokens": [1, 2, 3, 4],
    ...                   "v": [4.1, 2.9, 1.9, 1.1]})  # 5 - x, then +-0.1: SSE 0.04 over 2 df
    >>> n = checkpoint_noise(c, "v")
    >>> round(n.sd, 4), round(n.sd_raw, 4), n.n_trials  # sqrt(0.02); sqrt(5.04 / 3) with trend
    (0.1414, 1.2961, 1)
    """
    if k < 3:
        raise ValueError(f"k must be >= 3 (a line and one df), but got {k=}")
    if curves.empty or value not in curves or "tokens" not in curves:
        return None
    frame = curves[[trial, "tokens", value]].copy()
    frame[value] = pd.to_numeric(frame[value], errors="coerce")
    frame = frame[np.isfinite(frame[value].astype("float64"))]
    sse = sse_raw = 0.0
    n, values = 0, []
    for _, g in frame.sort_values([trial, "tokens"], kind="stable").groupby(trial, sort=True):
        x = g["tokens"].to_numpy(dtype="float64")[-k:]
        y = g[value].to_numpy(dtype="float64")[-k:]
        if len(g) < k or len(np.unique(x)) < k:  # too few evals, or one eval recorded twice
            continue
        slope, intercept = np.polyfit(x - x.mean(), y, 1)
        resid = y - (intercept + slope * (x - x.mean()))
        sse += float(resid @ resid)
        sse_raw += float(((y - y.mean()) ** 2).sum())
        n += 1
        values.extend(y.tolist())
    if n == 0:
        return None
    return CheckpointNoise(
        math.sqrt(sse / (n * (k - 2))),
        math.sqrt(sse_raw / (n * (k - 1))),
        float(np.mean(values)),
        n,
        k,
    )


@dataclass(frozen=True)
class SignalToNoise:
    """A study's signal over its two noises (arXiv 2508.13144): see :func:`signal_to_noise`.

    Every ratio is None where it cannot be measured, with the reason in ``why_*``.
    """

    n_candidates: int  # the candidates the signal spreads over, uniform included
    n_seeds: float  # their paired seeds (harmonic mean)
    mean: float  # m̄: the mean of the candidates' means
    dispersion: float  # max_{j,k} |m_j - m_k| in the metric's units
    signal: float | None  # dispersion / |m̄| (relative dispersion)
    seed_sd: float | None  # (a) the sd of one paired delta (block design)
    seed_df: int
    seed_snr: float | None  # signal / (seed_sd / |m̄|) = dispersion / seed_sd
    null_snr: float | None  # seed_snr expected when every candidate is equal
    checkpoint: CheckpointNoise | None  # (b)
    checkpoint_snr: float | None  # signal / (checkpoint sd / |its mean|)
    why_signal: str = ""
    why_seed: str = ""
    why_checkpoint: str = ""

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's / fidelity.json's ``signal_to_noise`` block: numbers and what they mean."""
        ck = self.checkpoint

        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        return {
            "definition": "Signal and Noise (Heineman et al. 2025, arXiv 2508.13144): signal = "
            "relative dispersion max|m_j - m_k| / mean of the candidates' means; SNR = signal / "
            "(noise sd / mean)",
            "candidates": self.n_candidates,  # seeds: their paired seeds, harmonic mean
            "seeds": None if num(self.n_seeds) is None else round(self.n_seeds, 3),
            "dispersion": num(self.dispersion),
            "signal": num(self.signal),
            "signal_why": self.why_signal or None,
            "seed_noise": {
                "meaning": "sd of one paired delta (a candidate minus uniform on one seed) from "
                "the block-design fit: what separates two candidates",
                "sd": num(self.seed_sd),
                "df": self.seed_df,
                "snr": num(self.seed_snr),
                "snr_if_all_equal": num(self.null_snr),
                "why": self.why_seed or None,
            },
            "checkpoint_noise": {
                "meaning": f"sd of the metric over the last {ck.k if ck else CHECKPOINT_EVALS} "
                "evals of each complete trial around a line in tokens (detrended), pooled over "
                "trials: how much one number moves between checkpoints",
                "sd": num(ck.sd) if ck else None,
                "sd_not_detrended": num(ck.sd_raw) if ck else None,
                "trials": ck.n_trials if ck else 0,
                "snr": num(self.checkpoint_snr),
                "why": self.why_checkpoint or None,
            },
        }

    def line(self) -> str:
        """One line for ``tlmsearch status``: both SNRs, or n/a and why."""
        if self.signal is None:
            return f"signal-to-noise: n/a ({self.why_signal})"
        seed = (
            f"{self.seed_snr:.1f} over seeds (noise alone gives ~{self.null_snr:.1f})"
            if self.seed_snr is not None
            else f"n/a over seeds ({self.why_seed})"
        )
        ck = (
            f"{self.checkpoint_snr:.1f} over checkpoints"
            if self.checkpoint_snr is not None
            else f"n/a over checkpoints ({self.why_checkpoint})"
        )
        return (
            f"signal-to-noise (arXiv 2508.13144): {seed}; {ck}; spread of "
            f"{self.n_candidates} candidates' means {self.dispersion:.4g}"
        )


@cells_once()  # its cells and its summary's cells: computed once
def candidate_means(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.DataFrame:
    """Each candidate's mean on the study's seeds, where no pruner selected it
    (:func:`~tlmsearch.stats.deltas.pruner_selected`: neither censored nor, once anything was
    pruned, a survivor the pruner could have stopped): uniform's mean plus its mean paired
    delta (the block design's adjusted mean: on common seeds, its plain mean; on fewer, no
    seed's level leaks in). Uniform is at its own mean. With setting dimensions, "uniform" is
    the uniform of the candidate's own setting (each setting's uniform at its own mean, n its
    own seeds). Columns: key, mean, n (paired seeds).

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 3 + ["RUNNING"],
    ...                   "v": [2.0, 2.2, 1.9, 0.0]})
    >>> candidate_means(t, "v")["mean"].round(3).tolist()  # c: 2.1 - 0.1 (seed 0 only)
    [2.0, 2.1]
    """
    cells = trial_cells(trials, value, key)
    s = _summary_once(trials, value, key, None, LEVEL)
    base = baseline_means(cells)
    cols = [key, "mean", "n"]
    if not base or s.empty:
        return pd.DataFrame(columns=cols).astype({"mean": "float64", "n": "int64"})
    # with setting dimensions each setting has its own uniform (the baseline of that setting's
    # candidates): u_s over that setting's seeds, never pooled over settings
    per_setting: dict[str, list[float]] = {}
    for (setting, _), v in base.items():
        per_setting.setdefault(setting, []).append(v)
    setting_of = {cand: cell.setting for (cand, _), cell in cells.items()}
    selected = pruner_selected(cells)
    rows = []
    for r in s.itertuples(index=False):
        u = per_setting.get(setting_of[r[0]])
        if u is None or not (r.is_baseline or (r[0] not in selected and r.n_paired > 0)):
            continue
        u_s = float(np.mean(u))
        rows.append(
            (
                r[0],
                u_s if r.is_baseline else u_s + r.mean_delta,
                len(u) if r.is_baseline else r.n_paired,
            )
        )
    return as_dtypes(pd.DataFrame(rows, columns=cols), {"mean": "float64", "n": "int64"})


def signal_to_noise(
    means: Sequence[float],
    n_seeds: Sequence[int],
    noise: Noise | None,
    checkpoint: CheckpointNoise | None = None,
    *,
    why_checkpoint: str = "",
    baseline: bool = True,
) -> SignalToNoise:
    """Signal over (a) seed noise and (b) checkpoint noise, as arXiv 2508.13144 defines them.

    ``means``: the candidates' means (uniform included; :func:`candidate_means`), ``n_seeds``
    their paired seeds. SNR over seeds = signal / (noise.sd / |m̄|) = dispersion / noise.sd:
    the spread of the means in sds of *one* paired delta (their scale: one checkpoint's noise
    beside means). Even when every candidate is equal the means spread: by about
    d2(K) x sd / sqrt(2 n) (:func:`expected_range`; means over n seeds, a paired delta's sd
    is sqrt(2) x one model's), given as ``null_snr`` = d2(K) / sqrt(2 n). ``baseline``: False
    for a study without uniform trials (then n/a, and why).

    >>> s = signal_to_noise([2.0, 2.1, 1.9], [4, 4, 4], Noise(0.05, 6))
    >>> round(s.signal, 3), round(s.seed_snr, 1), round(s.null_snr, 2)  # 0.2 / 0.05
    (0.1, 4.0, 0.6)
    """
    m = np.asarray(means, dtype="float64")
    n = np.asarray(n_seeds, dtype="float64")
    ok = np.isfinite(m) & (n > 0)
    m, n = m[ok], n[ok]
    k = len(m)
    centre = float(m.mean()) if k else math.nan
    hmean = float(k / np.sum(1.0 / n)) if k else math.nan
    dispersion = float(np.ptp(m)) if k else math.nan
    signal = relative_dispersion(m)
    why_signal = why_seed = ""
    seed_sd = seed_snr = null = ck_snr = None
    df = 0
    if not baseline:  # every mean is uniform's plus a paired delta: nothing to measure
        why_signal = "no uniform baseline (search.baseline: false): the means pair with uniform"
    elif k < 2:
        why_signal = (
            "fewer than 2 candidates measured: uniform and those with a seed paired "
            "with it that no pruner selected"
        )
    elif not math.isfinite(signal):
        why_signal = "the candidates' mean is 0: no relative dispersion"
    if noise is not None and noise.df >= 1 and math.isfinite(noise.sd):
        seed_sd, df = float(noise.sd), int(noise.df)
    if seed_sd is None:
        why_seed = "no seed noise yet: needs 2 seeds of 2 candidates, uniform included"
    elif seed_sd == 0:
        why_seed = "the seed noise is exactly 0"
    if why_signal:
        why_seed = why_seed or why_signal
        why_checkpoint = why_checkpoint or why_signal
    if not why_signal and not why_seed and seed_sd:
        seed_snr = signal / (seed_sd / abs(centre))
        null = expected_range(k) / math.sqrt(2.0 * hmean)
    if checkpoint is None:
        why_checkpoint = why_checkpoint or (
            f"no complete trial has {CHECKPOINT_EVALS} evals with this metric"
        )
    elif checkpoint.sd == 0 or checkpoint.mean == 0:
        why_checkpoint = why_checkpoint or "the checkpoint noise is exactly 0"
    if not why_signal and checkpoint is not None and not why_checkpoint:
        ck_snr = signal / (checkpoint.sd / abs(checkpoint.mean))
    return SignalToNoise(
        k,
        hmean,
        centre,
        dispersion,
        None if why_signal else signal,
        seed_sd,
        df,
        seed_snr,
        null,
        checkpoint,
        ck_snr,
        why_signal,
        why_seed if seed_snr is None else "",
        why_checkpoint if ck_snr is None else "",
    )
