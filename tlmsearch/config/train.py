"""``train``: how each proxy run trains: its token budget, batch, optimizer, LR schedule,
precision, evaluation, checkpoints, weight averaging and parametrization.

Pure data and its own cross-field checks; ``tlmsearch/train/runtime.py`` and ``trainer.py`` act on
it. No torch, no ray.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from tlmsearch.config.limits import MAX_TOKENS, MAX_WORKERS
from tlmsearch.errors import Strict
from tlmsearch.widths.profiles import MULT_RANGE
from tlmsearch.widths.schedules import MAX_LAYERS


class SurrogateConfig(Strict):
    """A parametric blackbox of learning curves (``tlmsearch/search/execution/blackbox.py``): a
    trial's val_loss at t tokens of T is ``final + effect(c) + seed_sd z_s + noise_sd(c) z_cs +
    amplitude ((t/T)^-alpha - 1) + eval_sd z_cst``. With ``fit`` the fields left null are fitted
    to that stored run's complete trials; without it they take the defaults below."""

    fit: str | None = None  # a finished run dir to fit the fields left null to
    final: float | None = None  # uniform's mean final val_loss (nats); default 3.0
    # A candidate's effect (nats) without a fit: offset (uniform: 0) + curvature x the squared
    # distance of its numeric params from optimum. default 0: every candidate ties uniform
    offset: float | None = None
    curvature: float | None = None  # the effect's nats per squared unit from optimum; 0
    optimum: dict[str, float] = Field(default_factory=dict)  # best params, e.g. {r_start: 1.5}
    seed_sd: float | None = Field(None, ge=0)  # sd of a seed's shared effect (nats); 0.01
    noise_sd: float | None = Field(None, ge=0)  # sd of a (candidate, seed)'s own noise; 0.01
    # homoscedastic: noise_sd for every candidate, the noise model the statistics assume;
    # heteroscedastic: noise_sd x exp(spread z_c) per candidate and x baseline_noise for uniform
    noise: Literal["homoscedastic", "heteroscedastic"] = "homoscedastic"
    spread: float = Field(0.5, ge=0, le=5)  # heteroscedastic: log-sd of a candidate's noise
    baseline_noise: float = Field(2.0, gt=0, le=100)  # heteroscedastic: uniform's noise factor
    amplitude: float | None = Field(None, ge=0)  # how far above its end a curve starts; 1.0
    alpha: float | None = Field(None, gt=0, le=10)  # the curve's power-law decay; 0.5
    eval_sd: float | None = Field(None, ge=0)  # each eval's own jitter (nats); 0.002
    bytes_per_token: float | None = Field(None, gt=0)  # val_bpb = val_loss / ln2 / this; 1.0
    seed: int = Field(0, ge=0, le=2**32 - 1)  # the surrogate's random stream

    RENAMED: ClassVar[Mapping[str, str]] = {"control_noise": "baseline_noise"}


class SimulateConfig(Strict):
    """``train.backend: simulate``: trials train nothing; each reports a stored or a surrogate
    curve through the real driver (Ray Tune, the sampler, storage, pruner and race)."""

    # a finished run dir whose stored curves are replayed, looked up by (candidate, seed): a
    # tabular blackbox
    run: str | None = None
    surrogate: SurrogateConfig | None = None  # a parametric blackbox instead of run
    # a simulated trial's wall time: this many seconds of sleep per eval (0: as fast as the
    # driver goes)
    seconds_per_eval: float = Field(0.0, ge=0, le=3600)

    @model_validator(mode="after")
    def _one(self) -> SimulateConfig:
        if (self.run is None) == (self.surrogate is None):
            raise ValueError(
                "give exactly one of run (a finished run dir whose curves are replayed) and "
                "surrogate (a parametric model of curves, e.g. {fit: RUN_DIR})"
            )
        return self


class TrainConfig(Strict):
    # torch trains every trial; simulate trains nothing: each trial reports the curve of
    # train.simulate's blackbox through the real driver (docs/running.md, "Replay")
    backend: Literal["torch", "simulate"] = "torch"
    simulate: SimulateConfig | None = None  # the blackbox of backend simulate
    tokens: int = Field(1_000_000, ge=1, le=MAX_TOKENS)  # the run's length: a token budget
    batch_tokens: int = Field(4096, ge=1, le=2**30)  # tokens per optimizer step
    # sequences per forward pass (accumulation fills up)
    micro_batch_size: int = Field(16, ge=1, le=2**16)
    # validation windows per forward pass at an eval (no gradients: room for more than the
    # micro batch); None: the micro batch (each worker's, on several)
    eval_batch_size: int | None = Field(None, ge=1, le=2**16)
    lr: float = Field(3e-3, gt=0)  # peak learning rate (AdamW)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)  # final lr / peak lr
    lr_schedule: Literal["cosine", "wsd"] = "cosine"  # cosine decay, or wsd (warmup-stable-decay)
    decay_fraction: float = Field(0.2, gt=0, le=1)  # wsd: share of the run spent decaying
    warmup_tokens: int = Field(50_000, ge=0, le=MAX_TOKENS)  # linear LR warm-up
    weight_decay: float = Field(0.1, ge=0)  # AdamW's, on matrices and embeddings
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's
    grad_clip: float = Field(1.0, ge=0)  # 0 disables clipping
    eval_every_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)  # None: 8 evals per run
    # A resumable checkpoint (tlmsearch/train/checkpoints.py) at the first eval at or after every
    # this many tokens; None: none (a resumed trial then trains again from zero).
    checkpoint_every_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    # auto: bf16 autocast where the hardware has it, else fp32
    dtype: Literal["auto", "bf16", "fp32"] = "auto"
    # torch.compile; auto: on a CPU from 2M tokens, on CUDA when a run takes >= 3 min eager
    compile: Literal["auto", "on", "off"] = "auto"
    threads: int | None = Field(None, ge=1, le=MAX_WORKERS)  # None: the trial's CPU allotment
    # Attention kernel of training steps (scaled_dot_product_attention's backend): default is
    # torch's own choice (flash on a CPU); auto takes math on a CPU when seq_len <= 256, where
    # its backward is faster (a whole step 1.1-1.45x at seq_len 128), else default.
    attention: Literal["auto", "default", "math"] = "auto"
    # The run ends as diverged when its smoothed training loss rises this many nats above its
    # running minimum, or a val loss after the warm-up is still ln V
    # (tlmsearch/train/divergence.py).
    divergence_nats: float = Field(1.5, gt=0)
    # PyTorch's transparent huge pages for CPU tensors (THP_MEM_ALLOC_ENABLE, read once per
    # process): +10-20% tokens/s at the quickstart size on this CPU (benchmarks/trainer.py).
    thp: bool = True
    # The weights the val metrics come from (tlmsearch/train/averaging.py): raw (the last step's),
    # ema (an exponential moving average) or lawa (the mean of the last lawa_k checkpoints, arXiv
    # 2306.03241). With ema or lawa the raw weights' val_loss_raw and val_bpb_raw are kept beside.
    eval_weights: Literal["raw", "ema", "lawa"] = "raw"
    # ema: tokens over which an old step's weight halves; None: a tenth of tokens.
    ema_half_life_tokens: float | None = None
    # lawa: checkpoints averaged, and tokens between them; None: tokens / (4 * lawa_k), so the
    # average spans the last quarter of the run.
    lawa_k: int = Field(5, le=10_000)
    lawa_every_tokens: int | None = Field(None, le=MAX_TOKENS)  # see lawa_k
    # standard: one Adam LR and init for every MLP width; mup: each MLP's down projection gets
    # LR, init std / m and weight decay x m, m = its width / the uniform d_ff (muP, arXiv
    # 2203.03466; tlmsearch/train/parametrization.py), so widths are compared free of the LR
    # confound.
    parametrization: Literal["standard", "mup"] = "standard"
    # Depth profiles (tlmsearch/widths/profiles.py): layer i's LR is lr x lr_profile[i] (its
    # init std x init_profile[i]) on lr_profile_part of its block: block, mlp or down (the MLP's
    # down projection), composed with muP's own multipliers. A candidate's lr.* / init.* keys
    # set them for its trial; given here, every candidate (uniform too) trains with it. None: x1.
    lr_profile: list[float] | None = Field(None, min_length=1, max_length=MAX_LAYERS)  # x lr
    lr_profile_part: Literal["block", "mlp", "down"] = "mlp"  # where lr_profile applies
    init_profile: list[float] | None = Field(None, min_length=1, max_length=MAX_LAYERS)  # x std
    init_profile_part: Literal["block", "mlp", "down"] = "mlp"  # where init_profile applies
    # The token embedding's and the output layer's LR over train.lr (one matrix when
    # model.tie_embeddings: then give embedding_lr_mult only, or equal values); muP's advantage
    # under AdamW is reported to come mostly from them (Everett et al., arXiv 2407.05872).
    embedding_lr_mult: float = Field(1.0, ge=MULT_RANGE[0], le=MULT_RANGE[1])  # x lr, embedding
    head_lr_mult: float = Field(1.0, ge=MULT_RANGE[0], le=MULT_RANGE[1])  # x lr, output layer

    @field_validator("lr_profile", "init_profile")
    @classmethod
    def _multipliers(cls, v: list[float] | None) -> list[float] | None:
        lo, hi = MULT_RANGE
        for i, x in enumerate(v or []):
            if not (math.isfinite(x) and lo <= x <= hi):
                raise ValueError(
                    f"[{i}] is {x!r}: each layer's multiplier must lie in [{lo:g}, {hi:g}]; "
                    "e.g. [1.5, 1.0, 0.5] for three layers"
                )
        return v

    @field_validator("ema_half_life_tokens")
    @classmethod
    def _half_life(cls, v: float | None) -> float | None:
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise ValueError(
                "an EMA half-life must be a positive number of tokens; give e.g. a tenth of "
                "train.tokens, or null for that default"
            )
        return v

    @field_validator("lawa_k")
    @classmethod
    def _lawa_k(cls, v: int) -> int:
        if v < 2:
            raise ValueError(
                "LAWA averages at least 2 checkpoints (1 is the raw weights); use 2 or more, "
                "or eval_weights: raw"
            )
        return v

    @field_validator("lawa_every_tokens")
    @classmethod
    def _lawa_every(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("the spacing of LAWA checkpoints must be >= 1 token, or null")
        return v

    @property
    def ema_half_life(self) -> float:
        """The EMA's half-life in tokens (``ema_half_life_tokens``, default a tenth of tokens)."""
        return self.ema_half_life_tokens or self.tokens / 10

    @property
    def lawa_spacing(self) -> int:
        """Tokens between LAWA checkpoints (``lawa_every_tokens``, default tokens/(4 k))."""
        return self.lawa_every_tokens or max(1, self.tokens // (4 * self.lawa_k))

    @model_validator(mode="after")
    def _backend(self) -> TrainConfig:
        if self.backend == "simulate" and self.simulate is None:
            raise ValueError(
                "backend simulate needs simulate: {run: RUN_DIR} (replay stored curves) or "
                "simulate: {surrogate: {...}}"
            )
        if self.backend == "torch" and self.simulate is not None:
            raise ValueError("simulate is given but backend is torch; set backend: simulate")
        return self

    @model_validator(mode="after")
    def _fits(self) -> TrainConfig:
        if not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1) (Adam), but got {list(self.betas)}")
        if self.warmup_tokens >= self.tokens:
            raise ValueError(
                f"warmup_tokens ({self.warmup_tokens}) must be below tokens ({self.tokens})"
            )
        every = self.checkpoint_every_tokens
        if every is not None and every < self.eval_interval:
            raise ValueError(
                f"checkpoint_every_tokens ({every:,}) is below the eval interval "
                f"({self.eval_interval:,} tokens): checkpoints are taken at evals, so at most one "
                f"per eval; set it to {self.eval_interval:,} or more, or null for none"
            )
        span = self.lawa_k * self.lawa_spacing
        if self.eval_weights == "lawa" and span > self.tokens:
            raise ValueError(
                f"lawa_k * lawa_every_tokens ({self.lawa_k} x {self.lawa_spacing:,} = {span:,}) "
                f"exceeds tokens ({self.tokens:,}): the run would end before it holds lawa_k "
                f"checkpoints; lower lawa_every_tokens to {self.tokens // self.lawa_k:,} or less"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        # Run dirs written before divergence_nats froze divergence_factor into study.yaml;
        # they must still resume and export (the rule it set is gone, see divergence.py).
        if isinstance(data, dict) and "divergence_factor" in data:
            data = {k: v for k, v in data.items() if k != "divergence_factor"}
        return data

    @field_validator("compile", mode="before")
    @classmethod
    def _yaml_bool(cls, v: Any) -> Any:
        # YAML 1.1 reads a bare on/off (also from --set train.compile=off) as a boolean.
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    def process_env(self) -> dict[str, str]:
        """Environment a training process needs before torch allocates its first tensor."""
        return {"THP_MEM_ALLOC_ENABLE": "1"} if self.thp else {}

    def step_sequences(self, seq_len: int) -> int:
        """Sequences of ``seq_len`` tokens per optimizer step (``batch_tokens``, at least one)."""
        return max(1, self.batch_tokens // seq_len)

    @property
    def eval_interval(self) -> int:
        return self.eval_every_tokens or max(1, self.tokens // 8)
