"""``model`` and ``target``: the proxy and the full-scale model, and their architectures' options.

A causal LM whose layer l has an MLP of width widths[l]: a built-in architecture (:data:`ARCHS`),
a transformers family (``arch: hf`` with ``model.hf``) or a plugin (``package.module:build``).
Pure data and its own checks: an hf family's keys are checked against transformers (imported
only then); an hf or plugin model is built on the meta device by ``config/checks.py``, not here.
No torch, no ray.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from tlmsearch.config.limits import MAX_D_FF, MAX_D_MODEL, MAX_LAYERS, MAX_SEQ_LEN, MAX_VOCAB
from tlmsearch.constants import HF_SET_BY
from tlmsearch.errors import Strict, short
from tlmsearch.widths.candidate import Candidate, LayerPlan, plan


@dataclass(frozen=True)
class Arch:
    """A built-in architecture: what the config, the trial arrays and the HF export know of it.

    Its blocks are built by ``tlmsearch.models.ARCHITECTURES[name]`` and its parameters counted
    by ``tlmsearch.widths.budget.MIXERS[name]``; tests/test_models.py checks the three tables name
    the same architectures, so a new one is an entry here, its blocks and its count (and its
    options class, if it has options).
    """

    name: str
    doc: str
    # Where the per-layer width goes: "mlp" when only SwiGLU MLPs receive it (titans' memory MLP
    # and hope's CMS levels are checked in tlmsearch/train/parametrization.py);
    # train.parametrization: mup scales MLP widths only, so it refuses an architecture whose width
    # reaches anything else
    width_site: str = "mlp"
    # trial arrays fuse its trainings (tlmsearch.train.trial_array, vmap-safe)
    fusable: bool = False
    # its attention takes per-layer heads and key/value heads (model.layer_heads, n_kv_head,
    # a heads schedule: tlmsearch/widths/heads.py)
    heads: bool = False
    hf_family: str = ""  # the transformers family it exports as exactly (--format hf)


ARCH_SPECS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch(
            "transformer",
            "Llama-style pre-norm attention + SwiGLU",
            fusable=True,
            hf_family="llama",
            heads=True,
        ),
        Arch(
            "gated_attention",
            "attention with a sigmoid output gate (arXiv 2505.06708)",
            fusable=True,
            heads=True,
        ),
        Arch("titans", "a neural long-term memory layer (arXiv 2501.00663)"),
        Arch("hope_attention", "attention + continuum memory levels (Hope, arXiv 2512.24695)"),
    )
}
# the archs trial arrays fuse (tlmsearch.train.trial_array says why the others cannot)
FUSABLE_ARCHS = tuple(a.name for a in ARCH_SPECS.values() if a.fusable)
ARCHS = tuple(ARCH_SPECS)
# model.arch also takes "hf" (a transformers family, model.hf) or a plugin "package.module:build"
PLUGIN_ARCH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Bookkeeping keys of a saved config.json that say nothing about the model's shape.
HF_FILE_ONLY = ("architectures", "auto_map", "transformers_version", "_name_or_path", "dtype")
HF_FILE_ONLY += ("torch_dtype", "model_type")
WIDTH_SITES: dict[str, str] = {a.name: a.width_site for a in ARCH_SPECS.values()}


class GatedAttentionOptions(Strict):
    """Qiu et al. 2025 (arXiv 2505.06708): sigmoid gate on each head's attention output."""

    # elementwise: one gate per channel; headwise: one scalar per head
    gate: Literal["elementwise", "headwise"] = "elementwise"


class AttentionOptions(Strict):
    """What a heads schedule's ``heads.share`` keeps equal to uniform's when it moves capacity
    between attention and the MLPs (tlmsearch/widths/heads.py): the parameters of the blocks, or
    their training FLOPs per token at ``seq_len`` (attention's score FLOPs grow with heads and
    sequence length, so equal parameters are no longer equal FLOPs)."""

    # params: the blocks' parameters stay uniform's; flops: their training FLOPs per token
    hold: Literal["params", "flops"] = "params"
    # hold flops: the sequence length the FLOPs are counted at; a study fills in data.seq_len
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)


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
    # attention heads (of every layer, or the uniform reference of a heads schedule); the head
    # size d_model / n_head is fixed and must be even (RoPE)
    n_head: int = Field(ge=1, le=MAX_D_MODEL)
    # key/value heads (grouped-query attention): n_head / n_kv_head query heads share each;
    # None: n_kv_head = n_head (multi-head attention)
    n_kv_head: int | None = Field(None, ge=1, le=MAX_D_MODEL)
    # query heads per layer, each a multiple of n_head / n_kv_head (its key/value heads are
    # layer_heads[l] / that group). None: n_head in every layer. A heads schedule (heads.* in
    # the space) sets it per candidate; give it here only for one fixed layout of every model
    layer_heads: list[int] | None = Field(None, max_length=MAX_LAYERS)
    d_ff: int | None = Field(None, ge=1, le=MAX_D_FF)  # the uniform width; or give mlp_ratio
    mlp_ratio: float | None = Field(None, gt=0, le=64)  # d_ff = mlp_ratio * d_model, rounded
    multiple_of: int = Field(16, ge=1, le=MAX_D_FF)  # every per-layer width is a multiple of this
    vocab_size: int | None = Field(None, ge=2, le=MAX_VOCAB)  # None: from the data's tokenizer
    tie_embeddings: bool = True  # the LM head shares the embedding matrix
    rope_theta: float = Field(10000.0, gt=0)  # RoPE base
    norm_eps: float = Field(1e-5, gt=0)  # RMSNorm epsilon
    init_std: float = Field(0.02, gt=0)  # std of the normal init of weights
    attention: AttentionOptions = AttentionOptions()
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

    @model_validator(mode="before")
    @classmethod
    def _kv_from_file(cls, data: Any) -> Any:
        """A config.json's ``num_key_value_heads`` is the default of ``n_kv_head``: the family's
        grouped-query attention as its file has it (Llama-3.2's 8), unless n_kv_head is given
        (a file with as many as its attention heads is multi-head: n_kv_head stays None)."""
        if not isinstance(data, dict):
            return data
        hf = data.get("hf")
        if isinstance(hf, dict) and "num_key_value_heads" in hf:  # a study written before
            # n_kv_head: its inline key is n_kv_head (a run's frozen study.yaml stays readable)
            inline, hf = (
                hf["num_key_value_heads"],
                {k: v for k, v in hf.items() if k != "num_key_value_heads"},
            )
            if data.get("n_kv_head") not in (None, inline):
                raise ValueError(
                    f"hf.num_key_value_heads ({short(inline)}) and n_kv_head "
                    f"({short(data['n_kv_head'])}) differ: give model.n_kv_head only"
                )
            data = {**data, "hf": hf, "n_kv_head": inline}
        if data.get("n_kv_head") is not None:
            return data
        if not isinstance(hf, dict) or not isinstance(hf.get("config"), str):
            return data
        try:
            doc = json.loads(Path(hf["config"]).expanduser().read_text())
        except (OSError, RuntimeError, UnicodeDecodeError, ValueError):
            return data  # HFOptions says why
        kv = doc.get("num_key_value_heads") if isinstance(doc, dict) else None
        if not isinstance(kv, int) or isinstance(kv, bool) or kv < 1:
            return data
        if kv == doc.get("num_attention_heads"):
            return data  # multi-head attention, as n_kv_head None is
        heads = data.get("n_head")
        if isinstance(heads, int) and not isinstance(heads, bool) and heads % kv:
            raise ValueError(
                f"hf.config: {short(hf['config'])} has num_key_value_heads {kv}, which does not "
                f"divide n_head ({heads}); set model.n_kv_head to a divisor of n_head for this "
                "model"
            )
        return {**data, "n_kv_head": kv}

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
        self._heads()
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

    def _heads(self) -> None:
        kv = self.n_kv_head
        if kv is not None and self.n_head % kv:
            raise ValueError(
                f"n_kv_head ({kv}) must divide n_head ({self.n_head}): each key/value head "
                "serves the same number of query heads; set model.n_kv_head to a divisor"
            )
        spec = ARCH_SPECS.get(self.arch)
        if self.layer_heads is not None:
            if spec is None or not spec.heads:
                able = ", ".join(a.name for a in ARCH_SPECS.values() if a.heads)
                raise ValueError(
                    f"layer_heads: arch {self.arch} has the same heads in every layer; per-layer "
                    f"heads are built by {able}: remove layer_heads (and any heads.* dimension)"
                )
            if len(self.layer_heads) != self.n_layer:
                raise ValueError(
                    f"layer_heads has {len(self.layer_heads)} entries but n_layer is "
                    f"{self.n_layer}: give one per layer"
                )
            group = self.kv_group
            for i, h in enumerate(self.layer_heads):
                if not 1 <= h <= MAX_D_MODEL or h % group:
                    raise ValueError(
                        f"layer_heads[{i}] = {h}: each layer's heads must be a positive multiple "
                        f"of n_head / n_kv_head = {group} (at most {MAX_D_MODEL})"
                    )
        if kv is not None and self.arch != "hf" and (spec is None or not spec.heads):
            raise ValueError(
                f"n_kv_head: arch {self.arch} has multi-head attention only (grouped-query "
                f"attention: {', '.join(self.heads_archs)} or hf); remove n_kv_head"
            )

    @property
    def heads_archs(self) -> tuple[str, ...]:
        """The built-in archs that take per-layer heads (a heads schedule, ``layer_heads``)."""
        return tuple(a.name for a in ARCH_SPECS.values() if a.heads)

    @property
    def kv_group(self) -> int:
        """Query heads per key/value head (1: multi-head attention)."""
        return self.n_head // (self.n_kv_head or self.n_head)

    @property
    def heads(self) -> tuple[int, ...]:
        """Query heads per layer: ``layer_heads``, or ``n_head`` in every layer."""
        if self.layer_heads is None:
            return (self.n_head,) * self.n_layer
        return tuple(self.layer_heads)

    @property
    def kv_heads(self) -> tuple[int, ...]:
        """Key/value heads per layer (each layer's heads / :attr:`kv_group`)."""
        return tuple(h // self.kv_group for h in self.heads)

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

    def plan(self, candidate: Candidate | Mapping[str, Any]) -> LayerPlan:
        """``candidate``'s :class:`~tlmsearch.widths.candidate.LayerPlan` in this model: its
        exact-budget widths and heads and its depth profiles' multipliers."""
        return plan(self, candidate)

    def built_for(self, candidate: Candidate | Mapping[str, Any]) -> ModelConfig:
        """This model as ``candidate`` builds it: with its heads schedule's ``layer_heads``
        (itself when the candidate has no heads schedule)."""
        if Candidate.of(candidate).heads is None:
            return self
        return self.model_copy(update={"layer_heads": list(self.plan(candidate).heads)})


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
