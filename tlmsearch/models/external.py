"""Models built by code that is not ours: a Hugging Face family (``arch: hf``, models/hf.py) or
a plugin (``arch: "package.module:build"``), wrapped into the CausalLM protocol.

The plugin protocol (docs/models.md)::

    def build(model_cfg: ModelConfig, widths: list[int], vocab_size: int) -> nn.Module

returns a module whose ``forward(idx)`` maps (B, T) token ids to (B, T, vocab_size) logits and
whose ``mlp_layers()`` lists one ``(norm, mlp)`` pair per layer, in depth order: ``mlp``'s
output is added to the residual stream that ``norm`` reads (``x = x + mlp(norm(x))``), and the
MLP of layer l has hidden width widths[l]. ``build`` runs under a torch generator seeded by the
trial's seed, then every matrix is redrawn keyed by (seed, parameter name) (common random
numbers; MLP hidden units by index where a matrix shows the layer's width on one side) and
biases are zeroed, so candidates of a seed share the weights they have in common; other
vectors (norm gains) are kept as built and must not depend on the widths. Parameters and
FLOPs are counted on the model built on the meta device (build must not read tensor values:
no ``.item()``).

>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(arch="plugin_model:build", n_layer=2, d_model=32, n_head=2, d_ff=64)
>>> build_plugin(cfg, [96, 32], vocab_size=256).widths   # tests/plugin_model.py on the path
(96, 32)
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tlmsearch.errors import ConfigError
from tlmsearch.models.common import keyed_normal, keyed_normal_

if TYPE_CHECKING:  # config checks these models at validation (check_external): no import back
    from tlmsearch.config import ModelConfig

PLUGIN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function

# (norm, mlp) of one layer: the MLP's output is added to the stream its norm reads
Site = tuple[nn.Module, nn.Module]


class ExternalLM(nn.Module):
    """``inner`` in the CausalLM protocol: ``forward(idx)`` float logits (B, T, V), keyed
    init, ``param_groups``, ``before_optimizer_step``, and ``mlp_sites()`` for the analysis.

    ``sites``: one (norm, mlp) per layer; ``unit_dims``: parameter name in ``inner`` -> the
    dimension that indexes MLP hidden units; ``head``: the LM head module (FLOPs);
    ``attention_flops(seq_len)``: per token, or None to measure on the meta device.
    """

    def __init__(
        self,
        inner: nn.Module,
        sites: Sequence[Site],
        widths: Sequence[int],
        *,
        init_std: float,
        seed: int,
        unit_dims: Mapping[str, int],
        head: nn.Module | None = None,
        attention_flops: Callable[[int], int] | None = None,
    ) -> None:
        super().__init__()
        self.inner = inner
        self.widths = tuple(int(w) for w in widths)
        # plain lists and tuples: the modules are registered once, inside inner
        self._sites = list(sites)
        self._head = [head] if head is not None else []
        self._attention_flops = attention_flops
        if not any(p.is_meta for p in inner.parameters()):  # counting builds skip the draws
            self.init_weights(init_std, seed, unit_dims)

    @torch.no_grad()
    def init_weights(self, std: float, seed: int, unit_dims: Mapping[str, int]) -> None:
        """Every matrix and embedding N(0, std), keyed by (seed, name in ``inner``), MLP hidden
        units by index (``keyed_normal_``); biases zero; other vectors (norm gains) stay as
        built, which must not depend on the widths. A module's own ``init_extra(std, normal_)``
        then runs, as in CausalLM."""
        for name, p in self.inner.named_parameters():  # tied weights appear once
            if p.ndim >= 2:
                keyed_normal_(p, std, seed=seed, name=name, unit_dim=unit_dims.get(name))
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        normal_ = keyed_normal(self.inner, seed)
        for module in self.inner.modules():
            if hasattr(module, "init_extra"):
                module.init_extra(std, normal_)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        return self.inner(idx)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.logits(idx).float()

    def before_optimizer_step(self, step: int) -> None:
        """The inner model's, when it has one (see CausalLM.before_optimizer_step)."""
        hook = getattr(self.inner, "before_optimizer_step", None)
        if callable(hook):
            hook(step)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups as CausalLM's: decay on ndim >= 2, none on vectors and scalars."""
        decay, no_decay = [], []
        for p in self.parameters():
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    def mlp_sites(self) -> list[tuple[int, int, nn.Module, nn.Module]]:
        """``(layer, level, norm, mlp)`` per layer, as :func:`tlmsearch.analysis.mlp_sites`."""
        return [(layer, 0, norm, mlp) for layer, (norm, mlp) in enumerate(self._sites)]


# -------------------------------------------------------------------------------------------------
# Plugins


def load_plugin(spec: str) -> Callable[..., Any]:
    """The function ``spec`` ("package.module:build") names; a ConfigError naming model.arch
    when it does not import or is not callable."""
    if not PLUGIN.match(spec):
        raise ConfigError(f"model.arch: {spec!r} is not a plugin 'package.module:function'")
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # a plugin's own import error is the user's to see, by name
        raise ConfigError(
            f"model.arch: plugin module {module_name!r} failed to import "
            f"({type(err).__name__}: {err}); check the name and that it is on PYTHONPATH"
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(
            f"model.arch: {module_name} has no function {attr!r}; name its build function "
            "after the colon"
        )
    return fn


def protocol_error(spec: str, what: str) -> ConfigError:
    return ConfigError(
        f"model.arch: plugin {spec!r} {what}; see the plugin protocol in docs/models.md"
    )


def build_plugin(
    model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int, *, seed: int = 0
) -> ExternalLM:
    """The plugin's model with MLP width widths[l] in layer l, checked and wrapped."""
    spec = model_cfg.arch
    fn = load_plugin(spec)
    with torch.random.fork_rng(devices=[]):  # the global generator is left as it was
        torch.manual_seed(seed)
        try:
            inner = fn(model_cfg, [int(w) for w in widths], vocab_size)
        except ConfigError:
            raise
        except Exception as err:
            raise protocol_error(spec, f"raised {type(err).__name__}: {err}") from None
    if not isinstance(inner, nn.Module):
        raise protocol_error(spec, f"returned a {type(inner).__name__}, not a torch nn.Module")
    layers = getattr(inner, "mlp_layers", None)
    if not callable(layers):
        raise protocol_error(spec, "returned a module without mlp_layers()")
    sites = list(layers())
    owned = {id(m) for m in inner.modules()}
    if len(sites) != model_cfg.n_layer or not all(
        isinstance(s, tuple) and len(s) == 2 and all(id(m) in owned for m in s) for s in sites
    ):
        raise protocol_error(
            spec,
            f"mlp_layers() must list {model_cfg.n_layer} (norm, mlp) pairs of its own modules "
            f"(one per layer), but got {len(sites)} entries",
        )
    names = {id(m): n for n, m in inner.named_modules()}
    unit_dims = {}
    for (_, mlp), width in zip(sites, widths, strict=True):
        for n, p in mlp.named_parameters():
            if p.ndim == 2 and (p.shape[0] == width) != (p.shape[1] == width):
                unit_dims[f"{names[id(mlp)]}.{n}"] = 0 if p.shape[0] == width else 1
    heads = [
        m for m in inner.modules() if isinstance(m, nn.Linear) and m.out_features == vocab_size
    ]
    return ExternalLM(
        inner,
        sites,
        widths,
        init_std=model_cfg.init_std,
        seed=seed,
        unit_dims=unit_dims,
        head=heads[-1] if heads else None,
    )
