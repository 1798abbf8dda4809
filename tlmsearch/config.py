"""Study configuration: one validated, frozen object per study YAML.

``load_study(path, overrides)`` reads the YAML, applies ``--set a.b=value`` overrides (typed by
YAML, validated like the file), resolves the search space and checks that every candidate's
widths can be met for the proxy and the target model. Every problem becomes one line naming the
YAML path, the bad value and what is valid (:class:`tlmsearch.errors.ConfigError`).
No torch, no ray.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tlmsearch.errors import ConfigError, Strict, problems_from, read_yaml, short, unreadable
from tlmsearch.schedules import (
    MAX_D_FF,
    MAX_LAYERS,
    ScheduleError,
    WidthPlan,
    check_params,
    plan_from_params,
)
from tlmsearch.space import (
    MAX_CANDIDATES,
    UNIFORM,
    Scalar,
    SearchSpace,
    describe,
    find_space,
    is_flat,
    load_space,
    schedule_of,
    settings_of,
)

ARCHS = ("transformer", "gated_attention", "titans", "hope_attention")
# model.arch also takes "hf" (a transformers family, model.hf) or a plugin "package.module:build"
PLUGIN_ARCH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# The keys of a transformers config that ModelConfig's own fields set (model.hf must not).
HF_SET_BY = {
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "intermediate_size": "d_ff (and each layer's width from the schedule)",
    "vocab_size": "vocab_size (or the data's tokenizer)",
    "tie_word_embeddings": "tie_embeddings",
    "rms_norm_eps": "norm_eps",
    "initializer_range": "init_std",
    "rope_theta": "rope_theta",
    "head_dim": "d_model and n_head (head_dim = d_model // n_head)",
}
# Bookkeeping keys of a saved config.json that say nothing about the model's shape.
HF_FILE_ONLY = ("architectures", "auto_map", "transformers_version", "_name_or_path", "dtype")
HF_FILE_ONLY += ("torch_dtype", "model_type")
# Where each architecture puts the per-layer width: "mlp" when only SwiGLU MLPs receive it
# (titans' memory MLP and hope's CMS levels are checked in tlmsearch/parametrization.py and
# tests/test_parametrization.py). train.parametrization: mup scales MLP widths only, so it
# refuses an architecture whose width reaches anything else.
WIDTH_SITES: dict[str, str] = {arch: "mlp" for arch in ARCHS}
SAMPLERS = ("grid", "random", "tpe", "gp", "nsga2")
PRUNERS = (
    "median",
    "percentile",
    "successive_halving",
    "hyperband",
    "wilcoxon",
    "paired",
    "none",
)
# Metric name -> the direction that is better, used when an objective gives none.
METRICS: dict[str, str] = {
    "val_bpb": "minimize",
    "val_loss": "minimize",
    "val_ppl": "minimize",
    "train_loss": "minimize",
    "tokens_per_s": "maximize",
    "mfu": "maximize",
    "params": "minimize",
    "non_embedding_params": "minimize",
    "flops_per_token": "minimize",
    "wall_s": "minimize",
}

# The keys of every eval the trainer reports (the search's results and curves.parquet follow it).
EVAL_KEYS = (
    "tokens",
    "train_loss",
    "val_loss",
    "val_ppl",
    "val_bpb",
    "val_loss_raw",  # with train.eval_weights ema or lawa only: the raw weights' metrics
    "val_bpb_raw",
    "tokens_per_s",
    "mfu",
    "lr",
    "wall_s",
)
# The raw weights' metrics beside the averaged ones: in an eval only when the run averages.
RAW_EVAL_KEYS = ("val_loss_raw", "val_bpb_raw")

# Upper bounds on every size, checked when the YAML is read, before anything is allocated (a
# study with n_layer 2**63 made `tlmsearch validate` allocate until the machine ran out of
# memory). Generous, so that no real study meets them: MAX_LAYERS and MAX_D_FF (schedules.py)
# are 8x and 14x the largest public dense LMs; d_model 65,536 is 3.5x PaLM 540B's 18,432; a
# vocabulary of 2**21 is 8x Gemma's 262,144; 2**20 tokens of context is the longest trained
# today; 10**15 tokens is 25x the largest training runs (~40T).
MAX_D_MODEL = 2**16
MAX_VOCAB = 2**21
MAX_SEQ_LEN = 2**20
MAX_TOKENS = 10**15
MAX_SEED = 2**32 - 1  # numpy and Optuna seeds are 32-bit
MAX_WORKERS = 4096  # threads, CPUs, concurrent trials
MAX_RUNGS = 16  # proxy sizes in a ladder
# What a ladder rung may override: the proxy's size and how long it trains, nothing that changes
# the candidates or how they are searched and compared (pairing across rungs needs the same ones).
RUNG_SECTIONS = ("model", "train", "data")


# -------------------------------------------------------------------------------------------------
# Model


class GatedAttentionOptions(Strict):
    """Qiu et al. 2025 (arXiv 2505.06708): sigmoid gate on each head's attention output."""

    # elementwise: one gate per channel; headwise: one scalar per head
    gate: Literal["elementwise", "headwise"] = "elementwise"


class TitansOptions(Strict):
    """Behrouz et al. 2025 (arXiv 2501.00663): neural long-term memory written at test time."""

    memory_depth: int = Field(2, ge=2, le=16)  # layers of the memory MLP M
    memory_expansion: int = Field(2, ge=1, le=64)  # hidden width of M = expansion * head dim
    # tokens per parallel chunk (gradients at chunk start)
    chunk_size: int = Field(64, ge=1, le=MAX_SEQ_LEN)
    with_attention: bool = True  # MAL: the memory layer, then a causal attention layer
    max_lr: float = Field(0.01, gt=0)  # inner learning rate theta_t = max_lr * sigmoid(...)
    # torch.compile the memory recurrence too (else it runs eagerly inside a compiled model):
    # its compile took minutes even for one tiny layer on 2 CPU cores
    compile_memory: bool = False


class HopeOptions(Strict):
    """Nested Learning (arXiv 2512.24695): a continuum memory system of MLP levels."""

    levels: int = Field(2, ge=1, le=16)  # SwiGLU MLPs chained per layer, each of its width
    # level i's parameters take an optimizer step every periods[i] steps, with the gradient
    # summed over those steps (see tlmsearch/models/hope.py)
    periods: list[int] = Field(default_factory=lambda: [1, 4], max_length=16)

    @model_validator(mode="after")
    def _periods(self) -> HopeOptions:
        if len(self.periods) != self.levels:
            raise ValueError(
                f"periods needs one entry per level ({self.levels}), but got {self.periods}"
            )
        if any(not 1 <= p <= 2**20 for p in self.periods):
            raise ValueError(f"periods must all lie in [1, {2**20}], but got {self.periods}")
        return self


def _rope_keys(keys: dict[str, Any], *, from_file: bool) -> dict[str, Any]:
    """``rope_scaling`` (transformers 4's name, still read by transformers 5) as
    ``rope_parameters``: null is dropped, a dict (e.g. Llama 3's ``rope_type: llama3``) becomes
    ``rope_parameters`` as transformers converts it. ``model.rope_theta`` sets the theta: a
    file's ``rope_parameters.rope_theta`` is dropped, an inline one is an error."""
    keys = dict(keys)
    scaling = keys.pop("rope_scaling", None)
    if scaling is not None:
        if not isinstance(scaling, dict) or "rope_parameters" in keys:
            raise ValueError(
                "rope_scaling: give a dict (transformers' rope_parameters), and not both "
                "rope_scaling and rope_parameters"
            )
        keys["rope_parameters"] = scaling
    rope = keys.get("rope_parameters")
    if not isinstance(rope, dict):
        return keys
    # flat ({rope_type, rope_theta, ...}) or per layer type ({full_attention: {...}, ...})
    nested = [k for k, v in rope.items() if isinstance(v, dict)]
    has_theta = "rope_theta" in rope or any("rope_theta" in rope[k] for k in nested)
    if has_theta and not from_file:
        raise ValueError(
            "rope_parameters.rope_theta is set by model.rope_theta; remove it from model.hf"
        )
    rope = {k: v for k, v in rope.items() if k != "rope_theta"}
    for k in nested:
        rope[k] = {kk: vv for kk, vv in rope[k].items() if kk != "rope_theta"}
    keys["rope_parameters"] = rope
    return keys


class HFOptions(Strict):
    """``model.arch: hf``: a transformers family by ``model_type`` plus extra keys of its config,
    or a local ``config.json`` (read once here: its keys are kept inline, so the run's
    study.yaml needs no file). The shape keys come from ModelConfig (:data:`HF_SET_BY`).
    Which keys the family takes is checked against transformers with the model (models/hf.py)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    model_type: str | None = Field(None, min_length=1, max_length=100)  # llama, qwen2, mistral...
    config: str | None = Field(None, min_length=1, max_length=4096)  # a config.json path

    @model_validator(mode="before")
    @classmethod
    def _read_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("config"), str):
            return data
        try:
            path = Path(data["config"]).expanduser()
            doc = json.loads(path.read_text())
        except (OSError, RuntimeError, UnicodeDecodeError, ValueError) as err:
            raise ValueError(
                f"config: cannot read {short(data['config'])} as a config.json "
                f"({type(err).__name__}); give a path to a Hugging Face config.json"
            ) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("model_type"), str):
            raise ValueError(f"config: {short(data['config'])} has no model_type")
        if data.get("model_type") not in (None, doc["model_type"]):
            raise ValueError(
                f"model_type ({data['model_type']!r}) differs from {path}'s "
                f"({doc['model_type']!r}); remove one"
            )
        head_dim, heads = doc.get("head_dim"), doc.get("num_attention_heads")
        wide = isinstance(heads, int) and heads > 0 and head_dim is not None
        if wide and head_dim != doc.get("hidden_size", 0) // heads:
            raise ValueError(
                f"config: {short(data['config'])} has head_dim {head_dim}, not hidden_size "
                f"// num_attention_heads; model.d_model // model.n_head sets head_dim: "
                "arch hf cannot build attention wider or narrower than d_model"
            )
        kept = {k: v for k, v in doc.items() if k not in HF_SET_BY and k not in HF_FILE_ONLY}
        kept = _rope_keys(kept, from_file=True)
        extra = {k: v for k, v in data.items() if k not in ("config", "model_type")}
        return {"model_type": doc["model_type"], **kept, **extra}

    @model_validator(mode="before")
    @classmethod
    def _rope(cls, data: Any) -> Any:
        return _rope_keys(data, from_file=False) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _keys(self) -> HFOptions:
        if self.model_type is None:
            raise ValueError("give model_type (e.g. llama, qwen2, mistral) or config: a path")
        for key in self.model_extra or {}:
            if key in HF_SET_BY:
                raise ValueError(
                    f"{key} is set by model.{HF_SET_BY[key]}; remove it from model.hf"
                )
        return self


class ModelConfig(Strict):
    """A causal LM whose layer l has a SwiGLU MLP of width widths[l]."""

    # one of ARCHS (transformer, gated_attention, titans, hope_attention), "hf" (with model.hf),
    # or a plugin "package.module:build" (docs/models.md)
    arch: str = Field("transformer", max_length=300)
    hf: HFOptions | None = None  # arch hf: the transformers family and its extra config keys
    n_layer: int = Field(ge=1, le=MAX_LAYERS)  # layers; the schedule gives each its MLP width
    d_model: int = Field(ge=1, le=MAX_D_MODEL)  # residual stream width
    # attention heads; d_model / n_head must be even (RoPE)
    n_head: int = Field(ge=1, le=MAX_D_MODEL)
    d_ff: int | None = Field(None, ge=1, le=MAX_D_FF)  # the uniform width; or give mlp_ratio
    mlp_ratio: float | None = Field(None, gt=0, le=64)  # d_ff = mlp_ratio * d_model, rounded
    multiple_of: int = Field(16, ge=1, le=MAX_D_FF)  # every per-layer width is a multiple of this
    vocab_size: int | None = Field(None, ge=2, le=MAX_VOCAB)  # None: from the data's tokenizer
    tie_embeddings: bool = True  # the LM head shares the embedding matrix
    rope_theta: float = Field(10000.0, gt=0)  # RoPE base
    norm_eps: float = Field(1e-5, gt=0)  # RMSNorm epsilon
    init_std: float = Field(0.02, gt=0)  # std of the normal init of weights
    gated_attention: GatedAttentionOptions = GatedAttentionOptions()
    titans: TitansOptions = TitansOptions()
    hope: HopeOptions = HopeOptions()

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        if v in ARCHS or v == "hf" or PLUGIN_ARCH.match(v):
            return v
        raise ValueError(
            f"not one of {', '.join(ARCHS)}, hf (a transformers family: model.hf), or a "
            "plugin 'package.module:build'"
        )

    @model_validator(mode="after")
    def _external(self) -> ModelConfig:
        if (self.arch == "hf") != (self.hf is not None):
            raise ValueError(
                "model.hf is read only with model.arch: hf; remove model.hf"
                if self.hf is not None
                else "model.arch: hf needs model.hf: {model_type: llama} (or config: a path)"
            )
        if self.arch == "hf":
            _check_family(self.hf)
        return self

    @model_validator(mode="after")
    def _shape(self) -> ModelConfig:
        if self.d_model % self.n_head:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})"
            )
        if (self.d_model // self.n_head) % 2:
            raise ValueError(
                f"head size d_model / n_head = {self.d_model // self.n_head} must be even (RoPE)"
            )
        if self.d_ff is not None and self.mlp_ratio is not None:
            raise ValueError("give d_ff or mlp_ratio, not both")
        width = self.d_ff_uniform
        if width > MAX_D_FF:  # mlp_ratio * d_model, rounded up to a multiple_of
            raise ValueError(
                f"d_ff = mlp_ratio * d_model = {width} is above {MAX_D_FF}; lower mlp_ratio "
                "or multiple_of"
            )
        if width % self.multiple_of:
            lo = max(self.multiple_of, width // self.multiple_of * self.multiple_of)
            raise ValueError(
                f"d_ff ({width}) must be a multiple of multiple_of ({self.multiple_of}); "
                f"try d_ff: {lo} or {lo + self.multiple_of}"
            )
        return self

    @property
    def d_ff_uniform(self) -> int:
        """The uniform per-layer width whose total every schedule keeps."""
        if self.d_ff is not None:
            return self.d_ff
        ratio = 4.0 if self.mlp_ratio is None else self.mlp_ratio
        return max(1, round(ratio * self.d_model / self.multiple_of)) * self.multiple_of

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def plan(self, candidate: Mapping[str, Any]) -> WidthPlan:
        """This model's exact-budget widths for a candidate's schedule parameters."""
        return plan_from_params(
            schedule_of(candidate),
            n_layer=self.n_layer,
            d_ff=self.d_ff_uniform,
            multiple_of=self.multiple_of,
        )


def _check_family(opts: HFOptions) -> None:
    """model.hf's model_type is a transformers causal LM family and its keys are that family's
    config fields (transformers takes unknown keys silently). Imports transformers (and torch)."""
    import dataclasses
    import difflib

    try:
        from transformers import CONFIG_MAPPING
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:
        raise ValueError(
            "model.arch: hf needs transformers (>= 5): pip install 'tlmsearch[hf]'"
        ) from None

    family = opts.model_type
    if family not in CONFIG_MAPPING or family not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        close = difflib.get_close_matches(str(family), MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, 3)
        hint = f"did you mean {', '.join(close)}?" if close else "e.g. llama, qwen2, mistral"
        raise ValueError(
            f"model.hf.model_type: {short(family)} is not a transformers causal LM family; " + hint
        )
    cls = CONFIG_MAPPING[family]
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else None
    for key in opts.model_extra or {}:
        if fields is not None and key not in fields:
            close = difflib.get_close_matches(key, fields, 3)
            hint = f"did you mean {', '.join(close)}?" if close else "check its spelling"
            raise ValueError(f"model.hf.{key}: not a key of {cls.__name__}; {hint}")
    try:
        cls(**copy.deepcopy(opts.model_extra or {}))  # it fills rope_parameters in place
    except Exception as err:  # transformers' own check names the key
        text = " ".join(str(err).split())
        raise ValueError(f"model.hf: {cls.__name__} refuses these keys: {text[:300]}") from None


# -------------------------------------------------------------------------------------------------
# Data and training


class TokenizerConfig(Strict):
    # bpe: trained on the train split; bytes: 256; file: path (a tokenizer.json); hf: path (a
    # local Hugging Face tokenizer folder)
    kind: Literal["bpe", "bytes", "file", "hf"] = "bpe"
    vocab_size: int = Field(8192, ge=257, le=MAX_VOCAB)  # bpe only
    # kind: file -> a tokenizer.json; kind: hf -> a local Hugging Face tokenizer directory
    # (AutoTokenizer.from_pretrained, offline)
    path: str | None = None

    @model_validator(mode="after")
    def _path(self) -> TokenizerConfig:
        if self.kind == "file" and not self.path:
            raise ValueError("kind: file needs path: a tokenizer.json")
        if self.kind == "hf" and not self.path:
            raise ValueError(
                "kind: hf needs path: a local Hugging Face tokenizer directory (the folder "
                "save_pretrained wrote, with tokenizer.json or vocab files)"
            )
        return self


# A source may name its kind before a colon ('jsonl:shards/'); without one, the kind comes from
# the file's suffix (tlmsearch/data/records.py). Two letters at least, so 'C:' stays a path.
SOURCE_KINDS = ("text", "jsonl", "parquet", "csv", "datasets")
_SOURCE_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9_]+):(?!//)(.*)$", re.DOTALL)


def split_source(source: str) -> tuple[str | None, str]:
    """``'jsonl:a/b'`` -> ``('jsonl', 'a/b')``; ``'a/b.jsonl'`` -> ``(None, 'a/b.jsonl')``."""
    m = _SOURCE_PREFIX.match(source)
    if m is None:
        return None, source
    return m.group(1), m.group(2)


def _known_source_kind(source: str) -> str:
    kind, path = split_source(source)
    if kind is not None and kind not in SOURCE_KINDS:
        raise ValueError(
            f"{kind!r} before the colon is not a source kind; give one of "
            f"{', '.join(SOURCE_KINDS)} (e.g. 'jsonl:shards/'), or write './{source}' for a file "
            "whose name has a colon"
        )
    if kind is not None and not path:
        raise ValueError(f"'{kind}:' names no path; give e.g. '{kind}:data/'")
    return source


Source = Annotated[str, AfterValidator(_known_source_kind)]


class DataConfig(Strict):
    # 'classics' (built in, from packages), text files / folders, token files (.bin, .npy),
    # records (.jsonl, .jsonl.gz, .parquet, .csv files or folders of them) or a local `datasets`
    # folder (save_to_disk); 'kind:path' names the kind (docs/data.md)
    sources: list[Source] = Field(default_factory=lambda: ["classics"], min_length=1)
    # the column (or JSON key) that holds a record's text
    text_field: str = Field("text", min_length=1, max_length=256)
    tokenizer: TokenizerConfig = TokenizerConfig()
    token_vocab_size: int | None = Field(None, ge=2, le=MAX_VOCAB)  # token files without sidecar
    seq_len: int = Field(256, ge=8, le=MAX_SEQ_LEN)  # tokens per training and val sequence
    val_tokens: int = Field(65536, ge=1, le=2**32)  # held in memory as one array
    cache_dir: str | None = None  # default: $TLMSEARCH_CACHE or ~/.cache/tlmsearch

    @field_validator("sources", mode="before")
    @classmethod
    def _one_source(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class TrainConfig(Strict):
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
    # A resumable checkpoint (tlmsearch/checkpoints.py) at the first eval at or after every this
    # many tokens; None: none (a resumed trial then trains again from zero).
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
    # running minimum, or a val loss after the warm-up is still ln V (tlmsearch/divergence.py).
    divergence_nats: float = Field(1.5, gt=0)
    # PyTorch's transparent huge pages for CPU tensors (THP_MEM_ALLOC_ENABLE, read once per
    # process): +10-20% tokens/s at the quickstart size on this CPU (benchmarks/trainer.py).
    thp: bool = True
    # The weights the val metrics come from (tlmsearch/averaging.py): raw (the last step's), ema
    # (an exponential moving average) or lawa (the mean of the last lawa_k checkpoints, arXiv
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
    # 2203.03466; tlmsearch/parametrization.py), so widths are compared free of the LR confound.
    parametrization: Literal["standard", "mup"] = "standard"

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


# -------------------------------------------------------------------------------------------------
# Search, objectives, storage, Ray


class RacingConfig(Strict):
    """Racing seeds (tlmsearch/racing.py): a candidate gets its next seed only while its paired
    delta is not yet separated from the reference at ``confidence``."""

    max_seeds: int | None = Field(None, ge=1, le=1000)  # None: every seed of search.seeds
    confidence: float = Field(0.95, gt=0.5, lt=1)  # separated at this level, over every look
    # uniform: screen vs uniform; best: race the incumbent
    against: Literal["uniform", "best"] = "uniform"
    # The seed noise of paired deltas (in the objective's units) assumed until some candidate
    # has two seeds; None: nothing separates on one seed before then.
    prior_sd: float | None = Field(None, gt=0, le=1e6)
    # Seeds of one candidate that may run at once: 1 waits for each seed's verdict; more keep
    # trial slots busy when few candidates are left racing (at the risk of an unneeded seed).
    parallel_seeds: int = Field(1, ge=1, le=1000)


class SearchConfig(Strict):
    sampler: Literal[SAMPLERS] = "grid"  # grid, random, tpe, gp or nsga2 (Optuna)
    sampler_seed: int = Field(0, ge=0, le=MAX_SEED)  # the sampler's RNG seed
    # median, percentile, successive_halving, hyperband, wilcoxon, paired, none
    pruner: Literal[PRUNERS] = "median"
    # the pruner's settings, e.g. {patience: 3, margin_sds: 2.5}
    pruner_options: dict[str, float | int | bool] = Field(default_factory=dict)
    # No pruning before this many tokens (never inside the LR warm-up); default: the longer of
    # the warm-up and a quarter of train.tokens.
    grace_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    # candidates to sample (grid: the whole grid)
    n_trials: int | None = Field(None, ge=1, le=MAX_CANDIDATES)
    # trials at once (fewer if Ray's CPUs fit fewer)
    concurrency: int = Field(2, ge=1, le=MAX_WORKERS)
    # every candidate trains once per seed, paired
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, max_length=1000)
    baseline: bool = True  # evaluate the uniform baseline first, once per seed
    racing: RacingConfig | None = None  # race seeds instead of running every seed
    # A trial lost to the system (worker killed, node lost, out of memory) is started again this
    # many times; the uniform baseline once more. An exception or a divergence is never retried.
    max_retries: int = Field(1, ge=0, le=10)
    # sampler grid over exactly these candidates (uniform added first with baseline) instead of
    # the space's grid: what a ladder's promote mode gives an upper rung (search/ladder.py)
    candidates: list[dict[str, Scalar]] | None = Field(
        None, min_length=1, max_length=MAX_CANDIDATES
    )
    # Trained weights kept in the run dir (tlmsearch/checkpoints.py): none; final (every completed
    # trial's final weights); best (at the end of the run only those of the uniform baseline and
    # the best candidates); all (final weights and every intermediate checkpoint).
    keep_weights: Literal["none", "final", "best", "all"] = "none"

    @model_validator(mode="after")
    def _pruner_options(self) -> SearchConfig:
        # Checked here, not only when the pruner is built, so `validate` (which imports no
        # optuna) refuses them too; the names are checked by search/samplers.make_pruner.
        opts = self.pruner_options
        for key, v in opts.items():
            if isinstance(v, bool):
                raise ValueError(f"pruner_options.{key}: {v!r} is a boolean; give a number")
        if self.pruner == "paired":
            patience = opts.get("patience", 2)
            if int(patience) != patience or patience < 1:
                raise ValueError(
                    f"pruner_options.patience must be an integer >= 1, not {patience}"
                )
            if opts.get("margin_sds", 2.5) < 0:
                raise ValueError(
                    f"pruner_options.margin_sds must be >= 0, not {opts['margin_sds']}"
                )
            if "prior_sd" in opts and not opts["prior_sd"] > 0:
                raise ValueError(f"pruner_options.prior_sd must be > 0, not {opts['prior_sd']}")
        return self

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if any(not 0 <= s <= MAX_SEED for s in v):
            raise ValueError(f"seeds must lie in [0, {MAX_SEED}]")
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, but got {short(v)}")
        return v


class Objective(Strict):
    # what the search ranks candidates by
    metric: Literal[tuple(METRICS)] = "val_bpb"  # type: ignore[valid-type]
    direction: Literal["minimize", "maximize"] | None = None  # None: the metric's natural one
    # The smallest difference from uniform worth finding, in the metric's units (e.g. 0.01 for
    # val_bpb): `tlmsearch plan` sizes the seeds to separate it, `validate` warns when the
    # study's seeds cannot (tlmsearch/power.py).
    min_effect: float | None = None

    @field_validator("min_effect")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and not v > 0:
            raise ValueError(
                "must be > 0: the smallest difference from uniform you care about, in the "
                "metric's units (e.g. 0.01 for val_bpb)"
            )
        return v

    @property
    def sense(self) -> str:
        return self.direction or METRICS[self.metric]


class StorageConfig(Strict):
    runs_dir: str = "runs"  # where run dirs go (shared storage on a cluster)
    # None: SQLite in the run dir; 'journal': a journal file there; or a URL (postgresql://...)
    optuna: str | None = None


class RayConfig(Strict):
    address: str | None = None  # None: an embedded local Ray on loopback
    # What one trial reserves in all: with several workers, workers_per_trial x the per-worker
    # resources (one is derived from the other; both given, they must agree).
    cpus_per_trial: float = Field(1.0, gt=0, le=MAX_WORKERS)
    # A trial trains on CUDA when this is > 0 (the GPU Ray assigned it), else on CPUs, GPU node
    # or not. At most 1 (a trial uses one GPU); a fraction shares one: 0.25 runs 4 trials on it.
    gpus_per_trial: float = Field(0.0, ge=0, le=MAX_WORKERS)
    # Data-parallel workers of one trial (Ray Train; gloo on CPU, NCCL on GPU). The global batch
    # (train.batch_tokens) does not depend on it, so neither does a trial's result.
    workers_per_trial: int = Field(1, ge=1, le=MAX_WORKERS)
    cpus_per_worker: float | None = Field(None, gt=0, le=MAX_WORKERS)  # None: per trial / N
    gpus_per_worker: float | None = Field(None, ge=0, le=MAX_WORKERS)  # None: per trial / N
    # How a trial's workers are placed on nodes (a Ray placement group strategy)
    worker_placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    # size of the embedded Ray (default: all cores)
    num_cpus: int | None = Field(None, ge=1, le=MAX_WORKERS)
    # This driver's address when joining a cluster (None: Ray picks it). The embedded Ray is
    # always on 127.0.0.1, the one address Ray listens on alone (search/cluster.py); a loopback
    # value is accepted there (run dirs before this change froze 127.0.0.2), any other is an error.
    node_ip: str | None = None
    shared_path: str | None = None  # prepared data on storage every node can read
    reuse_actors: bool = True  # ~3x faster trial start on small trials (measured)

    @model_validator(mode="after")
    def _workers(self) -> RayConfig:
        n, given = self.workers_per_trial, self.model_fields_set
        for kind in ("cpus", "gpus"):
            trial, worker = f"{kind}_per_trial", f"{kind}_per_worker"
            # derived once, while validating (the object is frozen from then on)
            if getattr(self, worker) is None:
                object.__setattr__(self, worker, getattr(self, trial) / n)
            elif trial not in given:
                object.__setattr__(self, trial, getattr(self, worker) * n)
            elif not math.isclose(getattr(self, trial), getattr(self, worker) * n):
                raise ValueError(
                    f"ray.{trial} ({getattr(self, trial):g}) is not ray.workers_per_trial "
                    f"({n}) x ray.{worker} ({getattr(self, worker):g}); give one of them"
                )
        if n == 1 and self.gpus_per_trial > 1:
            raise ValueError(
                f"ray.gpus_per_trial ({self.gpus_per_trial:g}): a one-worker trial trains on one "
                "GPU: use 1, a fraction such as 0.25 to run 4 trials on each GPU, or "
                "workers_per_trial: N with gpus_per_worker: 1 to train one trial on N GPUs"
            )
        gpus = self.gpus_per_worker or 0.0
        if n > 1 and gpus not in (0.0, 1.0):
            raise ValueError(
                f"ray.gpus_per_worker ({gpus:g}) must be 0 or 1 with workers_per_trial {n} "
                "(a worker trains on one GPU of its own, NCCL between them); set "
                "gpus_per_worker: 1, or workers_per_trial: 1 to share GPUs between trials"
            )
        return self


# -------------------------------------------------------------------------------------------------
# The study


@dataclass(frozen=True)
class Training:
    """One proxy model to train per seed: ``candidate`` and the ones with its exact widths."""

    candidate: dict[str, Any]
    stands_for: tuple[dict[str, Any], ...]  # the other candidates with these proxy widths
    widths: tuple[int, ...]

    @property
    def all(self) -> list[dict[str, Any]]:
        return [self.candidate, *self.stands_for]


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a study and its run dir, or None when it can."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        return None
    return "use letters, digits, '_', '-' or '.', at most 64 (it names the run dir)"


class StatsConfig(Strict):
    """How the study's decisions are made (tlmsearch/evidence.py): every "separated" and
    "supported" and the verdict hold their error rate over a stated family."""

    # the comparisons of every candidate with uniform: holm (family-wise error), bh (false
    # discovery rate, Benjamini-Hochberg) or none (per comparison; the sentences say so)
    family: Literal["holm", "bh", "none"] = "holm"
    level: float = Field(0.95, gt=0.5, lt=1)  # 1 - the error rate of each decision


# -------------------------------------------------------------------------------------------------
# Experiment trackers (tlmsearch/search/tracking.py): Ray Tune's own logger callbacks

# tracker -> (the module it needs, the pip extra that installs it)
TRACKER_PACKAGES = {
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboardX", "tensorboard"),
}
# A tracking URI: a scheme (sqlite:, file:, http:, https:, postgresql:, databricks...), as MLflow
# reads it; a bare path would be MLflow's file store in the current directory, not the run dir.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S*|databricks")


class MlflowTracking(Strict):
    # None: sqlite:///RUN_DIR/mlflow.db, a file in the run dir (MLflow's local store); nothing
    # leaves the machine unless this names a server (http://host:5000)
    uri: str | None = Field(None, min_length=1, max_length=2000)
    experiment: str | None = Field(None, min_length=1, max_length=500)  # None: the study's name

    @field_validator("uri")
    @classmethod
    def _a_uri(cls, v: str | None) -> str | None:
        if v is not None and not _URI.fullmatch(v):
            raise ValueError(
                "not a tracking URI; give sqlite:///abs/path/mlflow.db, "
                "http://host:5000, or leave it out for a SQLite file in the run dir"
            )
        return v


class WandbTracking(Strict):
    project: str | None = Field(None, min_length=1, max_length=128)  # None: the study's name
    entity: str | None = Field(None, min_length=1, max_length=128)  # None: W&B's default
    # offline: runs are written under `dir` only (`wandb sync DIR/wandb/offline-run-*` uploads
    # them later); online sends them to the W&B server as they run
    mode: Literal["offline", "online"] = "offline"
    dir: str | None = Field(None, min_length=1, max_length=4096)  # None: the run dir

    @field_validator("project", "entity")
    @classmethod
    def _slug(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
            raise ValueError("W&B names take letters, digits, '_', '-' and '.' only")
        return v


class TrackingConfig(Strict):
    """Each trial a tracker run (its curve at step = tokens, its candidate, widths and seed),
    the seeds of a candidate grouped, and a study run with the verdict and best.yaml at the end.
    Every tracker is off unless named; ``mlflow: true`` turns one on with its defaults."""

    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None
    # event files in each Ray trial folder (RUN_DIR/ray/session-N/trial_*): tensorboard --logdir
    tensorboard: bool = False

    @field_validator("mlflow", "wandb", mode="before")
    @classmethod
    def _on_when_true(cls, v: Any) -> Any:
        """``mlflow: true`` is ``mlflow: {}`` (on, every default); ``false`` is off."""
        if isinstance(v, bool):
            return {} if v else None
        return v

    def enabled(self) -> list[str]:
        """The trackers turned on, by name: ``['mlflow', 'tensorboard']``."""
        on = {"mlflow": self.mlflow is not None, "wandb": self.wandb is not None}
        on["tensorboard"] = self.tensorboard
        return [name for name in TRACKER_PACKAGES if on[name]]


def tracking_problems(cfg: StudyConfig) -> list[str]:
    """A tracker turned on whose package is not installed (found without importing it, so
    ``validate`` stays fast)."""
    from importlib.util import find_spec

    problems = []
    for name in cfg.tracking.enabled():
        module, extra = TRACKER_PACKAGES[name]
        if find_spec(module) is None:
            problems.append(
                f"tracking.{name}: the {module} package is not installed; "
                f"pip install 'tlmsearch[{extra}]', or remove tracking.{name}"
            )
    return problems


class StudyConfig(Strict):
    name: str  # names the study and its run dir: letters, digits, _ - . (<= 64)
    description: str = ""  # free text, shown in the report
    space: SearchSpace
    model: ModelConfig
    target: ModelConfig | None = None  # the full-scale model the proxy stands for
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    search: SearchConfig = SearchConfig()
    objectives: list[Objective] = Field(default_factory=lambda: [Objective()], min_length=1)
    storage: StorageConfig = StorageConfig()
    ray: RayConfig = RayConfig()
    stats: StatsConfig = StatsConfig()
    tracking: TrackingConfig = TrackingConfig()  # MLflow, W&B, TensorBoard: off by default
    # Fidelity across scales (search/ladder.py, tlmsearch/fidelity.py): proxy sizes, each a
    # mapping of model / train / data overrides applied to this study, smallest compute first.
    ladder: list[dict[str, Any]] | None = Field(None, min_length=2, max_length=MAX_RUNGS)
    # all: every candidate at every rung; promote: a rung's promote_top best (and uniform) go up
    ladder_mode: Literal["all", "promote"] = "all"
    # ladder_mode promote: candidates each rung sends up
    promote_top: int | None = Field(None, ge=1, le=MAX_CANDIDATES)

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        problem = name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> StudyConfig:
        self._check_study()
        problem = self._settings_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _check_study(self) -> None:
        """The study-level checks of one config, setting dimensions aside (ValueError)."""
        explicit = self.search.candidates is not None
        if explicit and self.search.sampler != "grid":
            raise ValueError(
                f"search.candidates lists the candidates of a grid, but search.sampler is "
                f"{self.search.sampler}; set search.sampler: grid or remove search.candidates"
            )
        if self.search.sampler == "grid" and not self.space.finite and not explicit:
            raise ValueError(
                "search.sampler is grid but the space is continuous: use random, tpe, gp or "
                "nsga2, or give every float dimension a step"
            )
        if len(self.objectives) > 1 and self.search.pruner != "none":
            raise ValueError(
                f"search.pruner ({self.search.pruner}) cannot prune several objectives; "
                "set search.pruner: none, or keep one objective"
            )
        racing = self.search.racing
        if racing is not None:
            if len(self.objectives) > 1:
                raise ValueError("search.racing races one objective; keep one, or remove racing")
            if not self.search.baseline:
                raise ValueError(
                    "search.racing measures candidates against the uniform baseline of each "
                    "seed; set search.baseline: true"
                )
            if self.space.settings:
                raise ValueError(
                    "search.racing races candidates against one uniform per seed, but the space "
                    f"has setting dimensions ({', '.join(self.space.settings)}), each with its "
                    "own uniform control; remove racing (run every seed) or the setting "
                    "dimensions"
                )
            if racing.max_seeds is not None and racing.max_seeds > len(self.search.seeds):
                raise ValueError(
                    f"search.racing.max_seeds ({racing.max_seeds}) exceeds the seeds listed in "
                    f"search.seeds ({len(self.search.seeds)}); list more seeds or lower it"
                )
        self._ladder_fields()
        site = WIDTH_SITES.get(self.model.arch)
        if self.train.parametrization == "mup" and site != "mlp":
            builtin = ", ".join(a for a, s in WIDTH_SITES.items() if s == "mlp")
            why = (
                f"supports only the built-in architectures ({builtin}) today, not model.arch "
                f"{self.model.arch}"
                if site is None  # arch: hf or a plugin
                else f"scales MLP hidden widths, but model.arch {self.model.arch} puts the "
                f"per-layer width into {site}"
            )
            raise ValueError(
                f"train.parametrization: 'mup' {why}; set train.parametrization: standard"
            )
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"objectives repeat a metric: {metrics}")
        seqs, n = self.train.step_sequences(self.data.seq_len), self.ray.workers_per_trial
        if seqs % n:
            raise ValueError(
                f"ray.workers_per_trial ({n}) must divide the {seqs} sequences of a step "
                f"(train.batch_tokens {self.train.batch_tokens} / data.seq_len "
                f"{self.data.seq_len}); e.g. train.batch_tokens: "
                f"{-(-seqs // n) * n * self.data.seq_len}"
            )
        chunk = self.model.titans.chunk_size
        if self.model.arch == "titans" and chunk >= self.data.seq_len:
            # Tokens read the memory written by earlier chunks only (tlmsearch/models/titans.py).
            raise ValueError(
                f"model.titans.chunk_size ({chunk}) must be below data.seq_len "
                f"({self.data.seq_len}), or the memory is never written; "
                f"try chunk_size: {max(1, self.data.seq_len // 4)}"
            )

    def _settings_problem(self) -> str | None:
        """Why the space's setting dimensions (``train.lr``) cannot be searched, or None."""
        from tlmsearch.settings import combination_problem, settings_problem

        problem = settings_problem(self)
        if problem:
            return problem
        for i, cand in enumerate(self.search.candidates or []):  # a ladder's promoted ones
            why = combination_problem(self, settings_of(cand)) if settings_of(cand) else None
            if why:
                return f"search.candidates[{i}]: its settings are not a valid study ({why})"
        if self.space.settings and self.search.pruner == "paired":
            return (
                "search.pruner: paired compares a trial with its seed's uniform, but each "
                f"setting ({', '.join(self.space.settings)}) has a uniform of its own; use "
                "median, percentile, wilcoxon or none"
            )
        return None

    def _ladder_fields(self) -> None:
        if self.ladder is None:
            if self.ladder_mode != "all" or self.promote_top is not None:
                raise ValueError("ladder_mode and promote_top need a ladder: list its rungs")
            return
        if self.ladder_mode == "promote" and self.promote_top is None:
            raise ValueError(
                "promote_top: ladder_mode promote needs it: how many of a rung's best "
                "candidates go up to the next (uniform always goes up)"
            )
        if self.ladder_mode == "all" and self.promote_top is not None:
            raise ValueError("promote_top is read in ladder_mode: promote only; remove it")

    # -- derived ------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int | None:
        """The proxy's vocabulary: the model's, else the tokenizer's (None until data is read)."""
        if self.model.vocab_size is not None:
            return self.model.vocab_size
        tok = self.data.tokenizer
        return 256 if tok.kind == "bytes" else tok.vocab_size if tok.kind == "bpe" else None

    def data_for_run(self) -> DataConfig:
        """The data section as a run prepares it: with ``ray.shared_path`` and no
        ``data.cache_dir``, the prepared arrays live on the shared path every node reads."""
        if self.ray.shared_path and not self.data.cache_dir:
            return self.data.model_copy(update={"cache_dir": self.ray.shared_path})
        return self.data

    def candidates(self) -> list[dict[str, Any]]:
        """The grid (finite space) with the uniform baseline first, or the corners (continuous)."""
        if self.search.candidates is not None:
            cands = [dict(c) for c in self.search.candidates]
        else:
            cands = self.space.grid() if self.space.finite else self.space.corners()
        if self.search.baseline:
            # A candidate with a flat profile (blocks' uniform preset, linear 1 -> 1) is the
            # baseline at every scale: with the same seed it would train the same model again.
            layers = [self.model.n_layer] + ([self.target.n_layer] if self.target else [])
            # the uniform control at every setting value the candidates take (train.lr x ...):
            # a taper is compared with uniform at its own setting
            settings: list[dict[str, Any]] = []
            for c in cands:
                if settings_of(c) not in settings:
                    settings.append(settings_of(c))
            controls = [{**UNIFORM, **s} for s in settings or [{}]]
            cands = controls + [c for c in cands if not is_flat(c, layers)]
        return cands

    def for_candidate(self, candidate: Mapping[str, Any]) -> StudyConfig:
        """This study as ``candidate``'s trial trains it: its settings (``train.lr``) applied.

        >>> cfg = study_from_mapping({"name": "s", "model": {"n_layer": 2, "d_model": 32,
        ...     "n_head": 2}, "space": {"dimensions": {"shape": {"type": "fixed",
        ...     "value": "cosine"}, "train.lr": {"type": "categorical", "choices": [0.001]}}}})
        >>> cfg.for_candidate({"shape": "cosine", "train.lr": 0.001}).train.lr
        0.001
        """
        settings = settings_of(candidate)
        if not settings:
            return self
        sections: dict[str, dict[str, Any]] = {}
        for name, value in settings.items():
            section, _, field = name.partition(".")
            sections.setdefault(section, {})[field] = value
        update = {}
        for section, fields in sections.items():
            current = getattr(self, section)
            data = {**current.model_dump(mode="json", exclude_none=True), **fields}
            update[section] = type(current).model_validate(data)
        # Only the changed sections and the study-level checks: the space (unchanged) is not
        # validated again, nor the space's other setting values against this candidate's.
        out = self.model_copy(update=update)
        out._check_study()
        return out

    def target_for(self, candidate: Mapping[str, Any]) -> ModelConfig | None:
        """The target model with ``candidate``'s model settings (``model.rope_theta``) applied:
        a value found at proxy scale is the value the full-scale model is exported with."""
        fields = {
            name.partition(".")[2]: value
            for name, value in settings_of(candidate).items()
            if name.startswith("model.")
        }
        if self.target is None or not fields:
            return self.target
        data = self.target.model_dump(mode="json", exclude_none=True)
        return ModelConfig.model_validate({**data, **fields})

    def rung(self, index: int) -> StudyConfig:
        """The study of ladder rung ``index``: this one with the rung's overrides, no ladder."""
        if not self.ladder or not 0 <= index < len(self.ladder):
            raise IndexError(f"no ladder rung {index}")
        return study_from_mapping(rung_mapping(self.to_dict(), self.ladder[index]))

    def trainings(self) -> list[Training]:
        """:meth:`candidates` grouped by their proxy width vector, in the same order.

        Candidates whose schedules round to the same proxy widths (blocks boundaries at 4 layers,
        linear 2.0/1.5 and 1.333/1.0) would train the same model on the same seed: each vector
        trains once per seed, and its trial records every candidate it stands for.
        """
        groups: dict[tuple[tuple[int, ...], str], list[dict[str, Any]]] = {}
        for cand in self.candidates():  # the same widths at another setting is another model
            setting = json.dumps(settings_of(cand), sort_keys=True)
            groups.setdefault((self.model.plan(cand).widths, setting), []).append(cand)
        return [Training(cands[0], tuple(cands[1:]), widths)
                for (widths, _), cands in groups.items()]  # fmt: skip

    @property
    def race_seeds(self) -> int:
        """Seeds a candidate may get: racing's max_seeds, else every seed of search.seeds."""
        racing = self.search.racing
        n = len(self.search.seeds)
        return n if racing is None or racing.max_seeds is None else racing.max_seeds

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_none=True)
        if self.ladder is None:  # study.yaml of a plain study says nothing of ladders
            out.pop("ladder_mode")
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# -------------------------------------------------------------------------------------------------
# Loading


def parse_override(text: str) -> tuple[list[str], Any]:
    """``search.pruner=none`` -> (['search', 'pruner'], 'none'); the value is typed by YAML."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in path):
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. search.pruner=none")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except (ValueError, RecursionError) as err:  # a 5000-digit integer, [[[[...]]]]
        why = unreadable(err)
        raise ConfigError(f"--set {short(text)}: the value cannot be read: {why}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: i + 1])
                raise ConfigError(f"--set {text!r}: {where} is {short(child)}, not a section")
            node = child
        node[path[-1]] = value
    return data


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        found = path.is_file()
    except OSError:  # e.g. a name too long for the file system
        found = False
    if not found:
        raise ConfigError(f"study file not found: {path}")
    data = read_yaml(path)
    if data is None:
        raise ConfigError(
            "the file is empty; a study needs at least name, space and model "
            "(see studies/quickstart.yaml)",
            source=str(path),
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"(top level): expected a mapping of sections (name, space, model, ...), "
            f"but got a {type(data).__name__}",
            source=str(path),
        )
    return data


def study_from_mapping(
    data: Mapping[str, Any], base: Path | None = None, source: str | None = None
) -> StudyConfig:
    """Validate a study given as a mapping (``space`` may name a file under ``base``)."""
    data = dict(data)
    space = data.get("space")
    if isinstance(space, str):
        try:
            data["space"] = load_space(find_space(space, base)).model_dump(mode="json")
        except ConfigError as err:
            raise ConfigError([f"space: {p}" for p in err.problems], source) from None
    try:
        cfg = StudyConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(problems_from(err, model=StudyConfig), source) from None
    problems = check_widths(cfg) + _data_problems(cfg) + tracking_problems(cfg)
    if not problems:
        problems = external_problems(cfg)
    if not problems and cfg.ladder:
        problems = ladder_problems(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: nested mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def rung_mapping(study: Mapping[str, Any], rung: Mapping[str, Any]) -> dict[str, Any]:
    """A ladder study's mapping -> one rung's: the rung's overrides merged in, no ladder."""
    base = {k: v for k, v in study.items() if k not in ("ladder", "ladder_mode", "promote_top")}
    return _merge(base, rung)


def ladder_problems(cfg: StudyConfig) -> list[str]:
    """Each rung, applied to the study, must be a valid study with the same candidates.

    A rung may change model, train and data only: a different space, search, objectives or
    seeds would break the pairing of candidates across rungs that fidelity measures. A rung
    whose model changes which candidates exist (a profile flat at one depth and not at another)
    is refused for the same reason.
    """
    problems: list[str] = []
    want = [json.dumps(c, sort_keys=True) for c in cfg.candidates()]
    for i, rung in enumerate(cfg.ladder or []):
        where = f"ladder[{i}]"
        bad = [k for k in rung if k not in RUNG_SECTIONS]
        if bad:
            problems.append(
                f"{where}.{bad[0]}: a rung may override {', '.join(RUNG_SECTIONS)} only "
                "(the candidates, search and objectives stay those of the study, so rungs pair)"
            )
            continue
        wrong = [k for k, v in rung.items() if not isinstance(v, Mapping)]
        if wrong:
            problems.append(
                f"{where}.{wrong[0]}: {short(rung[wrong[0]])} is not a mapping of "
                f"{wrong[0]} fields, e.g. {{model: {{d_model: 64}}}}"
            )
            continue
        try:
            sub = StudyConfig.model_validate(rung_mapping(cfg.to_dict(), rung))
        except ValidationError as err:
            problems += problems_from(err, prefix=where, model=StudyConfig)
            continue
        more = check_widths(sub) + _data_problems(sub)
        if more:
            problems += [f"{where}: {p}" for p in more]
            continue
        got = [json.dumps(c, sort_keys=True) for c in sub.candidates()]
        if got != want:
            lost = sorted(set(want) - set(got)) or sorted(set(got) - set(want))
            problems.append(
                f"{where}.model: at n_layer {sub.model.n_layer} the candidates differ from the "
                f"study's (e.g. {lost[0]} is flat at one size and not the other), so rungs "
                "cannot be paired; keep n_layer or drop that candidate from the space"
            )
    return problems


def load_study(path: str | Path, overrides: Sequence[str] = ()) -> StudyConfig:
    """Read, override, validate. Raises :class:`ConfigError` with one line per problem."""
    path = Path(path)
    data = _read_yaml(path)
    try:
        data = apply_overrides(data, overrides)
    except ConfigError as err:
        raise ConfigError(err.problems, str(path)) from None
    return study_from_mapping(data, base=path.parent, source=str(path))


def external_problems(cfg: StudyConfig) -> list[str]:
    """An hf or plugin model is built once on the meta device (models/external.py): an import
    or protocol failure is a problem of the study, not of its first trial."""
    problems = []
    for section, model in [("model", cfg.model), ("target", cfg.target)]:
        if model is None or model.arch in ARCHS:
            continue
        from tlmsearch.models.counting import check_external

        try:
            check_external(model)
        except ConfigError as err:
            problems += [re.sub(r"^model\.", f"{section}.", p) for p in err.problems]
    return problems


def _data_problems(cfg: StudyConfig) -> list[str]:
    """An objective the data cannot measure would train every trial and then fail them all."""
    if not any(o.metric == "val_bpb" for o in cfg.objectives):
        return []
    if not all(src.lower().endswith((".bin", ".npy")) for src in cfg.data.sources):
        return []  # text always knows its bytes (and keeps torch-free validation fast)
    from tlmsearch.data.tokens import val_bytes_problem

    problem = val_bytes_problem(cfg.data.sources, cfg.data.tokenizer.kind)
    return [f"objectives: {problem}"] if problem else []


def check_widths(cfg: StudyConfig) -> list[str]:
    """Every grid (or corner) candidate must give valid widths for the proxy and the target."""
    problems = []
    for cand in cfg.candidates():
        try:
            check_params(cand.get("shape"), schedule_of(cand))
        except ScheduleError as err:
            hint = ""
            if "is not a parameter of shape" in err.message:
                hint = (
                    f"; give {err.field} a `when: {{shape: [...]}}` naming the shapes that read it"
                )
            return [f"space: candidate {json.dumps(cand, sort_keys=True)}: {err}{hint}"]
    models = [("model", cfg.model)] + ([("target", cfg.target)] if cfg.target else [])
    for section, model in models:
        for cand in cfg.candidates():
            try:
                model.plan(cand)
            except ScheduleError as err:
                problems.append(
                    f"space: candidate {describe(cand)} cannot be met for {section} "
                    f"(n_layer={model.n_layer}, d_ff={model.d_ff_uniform}, "
                    f"multiple_of={model.multiple_of}): {err}"
                )
                break
    return problems
