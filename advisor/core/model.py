"""`ModelSpec`: the shape of a decoder-only LLM, and its parameter counts.

Parameter counting follows the tensors a Megatron/Hugging Face implementation allocates:
embeddings, per-layer attention (GQA or MLA), dense or MoE MLPs (SwiGLU = 3 matrices), Mamba-2
mixers for hybrid stacks, norms and biases. It is tested against the authors' published counts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from advisor.core import limits
from advisor.core.errors import CatalogError

_LIMITS = {"num_layers": limits.LAYERS, "num_dense_layers": limits.LAYERS,
           "num_mtp_layers": limits.LAYERS, "num_sliding_window_layers": limits.LAYERS,
           "moe_layer_freq": limits.LAYERS, "vocab_size": limits.VOCABULARY,
           "num_experts": limits.EXPERTS, "moe_top_k": limits.EXPERTS,
           "num_shared_experts": limits.EXPERTS, "max_seq_len": limits.SEQUENCE,
           "sliding_window": limits.SEQUENCE}
"""Each int field's bound (`limits.WIDTH` for the others: widths, heads, ranks)."""


@dataclass(frozen=True)
class Sublayer:
    """One pipeline-splittable layer: a token mixer and/or a feed-forward block."""

    mixer: str | None
    """`attention`, `mamba`, or None."""
    ffn: str | None
    """`mlp`, `moe`, or None."""


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts in parameters (not bytes)."""

    total: float
    """As the authors count it: everything except multi-token-prediction modules."""
    active: float
    """Used per token: routed experts count top-k of num_experts."""
    embedding: float
    """Input embedding (plus learned positions)."""
    output: float
    """Output projection; 0 when tied to the embedding."""
    layers_dense: tuple[float, ...]
    """Per layer: all but the routed experts (attention, MLP, shared experts, norms, router)."""
    layers_expert: tuple[float, ...]
    """Per layer: the routed experts."""
    final_norm: float
    mtp_dense: float
    """Multi-token-prediction modules without their routed experts (not in `total`)."""
    mtp_expert: float
    """The routed experts of the multi-token-prediction modules (not in `total`)."""

    @property
    def mtp(self) -> float:
        return self.mtp_dense + self.mtp_expert


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer (dense, GQA, MoE, MLA, or hybrid Mamba-2)."""

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    vocab_size: int
    max_seq_len: int
    display_name: str = ""
    family: str = ""
    aliases: tuple[str, ...] = ()
    head_dim: int = 0
    """0 = hidden_size / num_attention_heads."""
    tied_embeddings: bool = False
    gated_mlp: bool = True
    position_embedding: str = "rope"
    norm: str = "rmsnorm"
    attention_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    num_experts: int = 0
    moe_top_k: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0
    moe_layer_freq: int = 1
    num_dense_layers: int = 0
    moe_latent_size: int = 0
    moe_router_num_groups: int = 0
    """Group-limited routing (DeepSeek-V3's node-limited routing): the experts fall into this
    many equal groups, and each token's top-k come from `moe_router_group_topk` of them; 0 =
    unlimited (Megatron-Core `--moe-router-num-groups`, HF config `n_group`)."""
    moe_router_group_topk: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    num_mtp_layers: int = 0
    layer_pattern: str = ""
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state_dim: int = 0
    mamba_num_groups: int = 0
    mamba_conv_kernel: int = 0
    sliding_window: int = 0
    num_sliding_window_layers: int = 0
    rope_theta: float = 0.0
    """RoPE base frequency; 0 when the catalog does not say (emitters keep the framework's)."""
    published_total_params: float = 0.0
    published_active_params: float = 0.0
    published_params_nominal: bool = False
    """The published count is only the size in the model's name (rounded), not an exact count."""
    published_active_excludes_embedding: bool = False
    """The authors' active count leaves out the input-embedding lookup."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    path: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        where = self.path or self.name
        for key in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                    "vocab_size", "max_seq_len"):
            if getattr(self, key) <= 0:
                raise CatalogError(f"{where}: {key} must be positive, got {getattr(self, key)}.")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int":
                value = _whole(f"{where}: {f.name}", value)
                object.__setattr__(self, f.name, value)
            if f.type == "float" and not math.isfinite(value):
                raise CatalogError(f"{where}: {f.name} must be a finite number, got {value}.")
            if f.type in ("int", "float") and value < 0:
                raise CatalogError(f"{where}: {f.name} must not be negative, got {value}.")
        for f in dataclasses.fields(self):
            if f.type == "int":
                limits.check_most(f"{where}: {f.name}", getattr(self, f.name),
                                  _LIMITS.get(f.name, limits.WIDTH), error=CatalogError)
        if not self.is_mla and not self.head_dim and self.hidden_size % self.num_attention_heads:
            raise CatalogError(f"{where}: num_attention_heads ({self.num_attention_heads}) must "
                               f"divide hidden_size ({self.hidden_size}) for a whole head "
                               f"dimension; set head_dim when the heads are not "
                               f"hidden_size / heads wide.")
        if not self.is_mla and self.num_attention_heads % self.num_kv_heads:
            raise CatalogError(f"{where}: num_kv_heads ({self.num_kv_heads}) must divide "
                               f"num_attention_heads ({self.num_attention_heads}).")
        if self.num_experts:
            if not 0 < self.moe_top_k <= self.num_experts:
                raise CatalogError(f"{where}: moe_top_k must be in 1..num_experts "
                                   f"({self.num_experts}), got {self.moe_top_k}.")
            if self.moe_ffn_hidden_size <= 0:
                raise CatalogError(f"{where}: an MoE model needs moe_ffn_hidden_size.")
            groups, chosen = self.moe_router_num_groups, self.moe_router_group_topk
            if bool(groups) != bool(chosen) or (groups and (
                    self.num_experts % groups or chosen > groups)):
                raise CatalogError(f"{where}: group-limited routing needs moe_router_num_groups "
                                   f"dividing num_experts ({self.num_experts}) and "
                                   f"1 <= moe_router_group_topk <= it (got {groups} and "
                                   f"{chosen}); set both or neither.")
        if self.layer_pattern:
            bad = set(self.layer_pattern) - set("M*-E")
            if bad:
                raise CatalogError(f"{where}: layer_pattern has unknown letters "
                                   f"{''.join(sorted(bad))}; use M (Mamba-2), * (attention), "
                                   f"- (MLP), E (MoE).")
            if len(self.layer_pattern) != self.num_layers:
                raise CatalogError(f"{where}: layer_pattern has {len(self.layer_pattern)} letters "
                                   f"but num_layers is {self.num_layers}.")
            if "E" in self.layer_pattern and not self.num_experts:
                raise CatalogError(f"{where}: layer_pattern has MoE layers (E) but num_experts "
                                   f"is 0.")
            if "M" in self.layer_pattern and not (self.mamba_num_heads and self.mamba_head_dim
                                                  and self.mamba_state_dim):
                raise CatalogError(f"{where}: layer_pattern has Mamba layers (M); set "
                                   f"mamba_num_heads, mamba_head_dim and mamba_state_dim.")
        for key in ("position_embedding", "norm"):
            allowed = {"position_embedding": {"rope", "learned", "alibi", "none"},
                       "norm": {"rmsnorm", "layernorm"}}[key]
            if getattr(self, key) not in allowed:
                raise CatalogError(f"{where}: {key} = {getattr(self, key)!r}; use one of "
                                   f"{', '.join(sorted(allowed))}.")
        if self.params.total > limits.PARAMETERS:
            raise CatalogError(f"{where}: {self.params.total:.3g} parameters is beyond "
                               f"advisor's limit of {limits.PARAMETERS:.0e} (1,000 times the "
                               f"largest published models).")

    # ---- shape helpers -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads."""
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.attention_head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (= value, except MLA) heads after expansion."""
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_kv_heads * self.attention_head_dim

    @property
    def v_dim(self) -> int:
        if self.is_mla:
            return self.num_attention_heads * self.v_head_dim
        return self.kv_dim

    @property
    def mamba_inner_size(self) -> int:
        return self.mamba_num_heads * self.mamba_head_dim

    @property
    def shared_ffn_size(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.moe_ffn_hidden_size

    @cached_property
    def sublayers(self) -> tuple[Sublayer, ...]:
        """The layers a pipeline splits, in order."""
        if self.layer_pattern:
            kinds = {"M": Sublayer("mamba", None), "*": Sublayer("attention", None),
                     "-": Sublayer(None, "mlp"), "E": Sublayer(None, "moe")}
            return tuple(kinds[c] for c in self.layer_pattern)
        return tuple(Sublayer("attention", "moe" if self._is_moe_layer(i) else "mlp")
                     for i in range(self.num_layers))

    def _is_moe_layer(self, index: int) -> bool:
        if not self.is_moe or index < self.num_dense_layers:
            return False
        return (index + 1) % max(self.moe_layer_freq, 1) == 0

    @property
    def num_moe_layers(self) -> int:
        return sum(s.ffn == "moe" for s in self.sublayers)

    # ---- parameter counts ----------------------------------------------------------------
    def _norm_params(self, width: int) -> int:
        return width * (2 if self.norm == "layernorm" else 1)

    def attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            heads = self.num_attention_heads
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk_head
            else:
                q = h * heads * qk_head
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))
            out = heads * self.v_head_dim * h
            return q + kv + out
        qkv = h * (self.q_dim + 2 * self.kv_dim)
        out = self.q_dim * h
        bias = 0
        if self.attention_bias or self.qkv_bias:
            bias += self.q_dim + 2 * self.kv_dim
        if self.attention_bias:
            bias += h
        return qkv + out + bias

    def _mlp_params(self, ffn: int, width: int | None = None) -> int:
        h = width or self.hidden_size
        mats = 3 if self.gated_mlp else 2
        bias = (ffn * (2 if self.gated_mlp else 1) + h) if self.mlp_bias else 0
        return mats * h * ffn + bias

    def mamba_params(self) -> int:
        h, d_inner = self.hidden_size, self.mamba_inner_size
        groups_state = 2 * max(self.mamba_num_groups, 1) * self.mamba_state_dim
        in_proj = h * (2 * d_inner + groups_state + self.mamba_num_heads)
        conv_channels = d_inner + groups_state
        conv = conv_channels * (max(self.mamba_conv_kernel, 1) + 1)  # weights + bias
        per_head = 3 * self.mamba_num_heads  # A_log, D, dt_bias
        return in_proj + conv + per_head + d_inner + d_inner * h  # + gated norm + out_proj

    def moe_params(self) -> tuple[int, int]:
        """(non-routed part: router, shared experts, latent projections; one routed expert)."""
        h = self.hidden_size
        width = self.moe_latent_size or h
        latent = 2 * h * self.moe_latent_size if self.moe_latent_size else 0
        shared = self.num_shared_experts * self._mlp_params(self.shared_ffn_size)
        router = h * self.num_experts
        return router + shared + latent, self._mlp_params(self.moe_ffn_hidden_size, width)

    @cached_property
    def params(self) -> ParamCounts:
        h = self.hidden_size
        embedding = self.vocab_size * h
        if self.position_embedding == "learned":
            embedding += self.max_seq_len * h
        output = 0 if self.tied_embeddings else self.vocab_size * h
        dense: list[float] = []
        expert: list[float] = []
        active_layers = 0.0
        moe_shared, one_expert = self.moe_params() if self.is_moe else (0, 0)
        for sub in self.sublayers:
            d, e, a = 0, 0, 0
            if sub.mixer == "attention":
                d += self.attention_params() + self._norm_params(h)
            elif sub.mixer == "mamba":
                d += self.mamba_params() + self._norm_params(h)
            if sub.ffn == "mlp":
                d += self._mlp_params(self.ffn_hidden_size) + self._norm_params(h)
            elif sub.ffn == "moe":
                d += moe_shared + self._norm_params(h)
                e += self.num_experts * one_expert
                a += self.moe_top_k * one_expert
            dense.append(float(d))
            expert.append(float(e))
            active_layers += d + a
        final_norm = self._norm_params(h)
        total = embedding + output + sum(dense) + sum(expert) + final_norm
        active = embedding + output + active_layers + final_norm
        # DeepSeek-V3 MTP module: 2 norms, a 2h->h projection, one transformer layer like the
        # last; embedding and output head are shared with the main model (DeepSeek-V3 §2.2).
        mtp_dense = self.num_mtp_layers * (2 * h * h + 3 * self._norm_params(h) + dense[-1])
        mtp_expert = self.num_mtp_layers * expert[-1]
        return ParamCounts(total=total, active=active, embedding=float(embedding),
                           output=float(output), layers_dense=tuple(dense),
                           layers_expert=tuple(expert), final_norm=float(final_norm),
                           mtp_dense=float(mtp_dense), mtp_expert=float(mtp_expert))

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("path",)}
        d["aliases"] = list(self.aliases)
        d["total_params"] = self.params.total
        d["active_params"] = self.params.active
        return d


MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec)}


def _whole(what: str, value: object) -> int:
    """`value` as an int; a fraction (4096.5), a bool or a string is a catalog error."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise CatalogError(f"{what} must be a whole number, got {value!r}.")
