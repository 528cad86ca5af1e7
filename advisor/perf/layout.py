"""How a model's layers fall onto pipeline stages (and virtual stages)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from advisor.model import ModelSpec


@dataclass(frozen=True)
class StageLayout:
    """Per pipeline stage (arrays of length pp): what that stage's GPUs hold."""

    num_layers: np.ndarray
    num_attention: np.ndarray
    num_mamba: np.ndarray
    num_mlp: np.ndarray
    num_moe: np.ndarray
    dense_params: np.ndarray
    """Everything but routed experts, embeddings and output layer."""
    expert_params: np.ndarray
    embedding_params: np.ndarray
    output_params: np.ndarray
    """Output projection (a copy of the embedding when tied and pp > 1) plus MTP modules."""
    max_layer_dense_params: float
    max_layer_expert_params: float
    even: bool
    """Every virtual stage got the same number of layers."""


@functools.lru_cache(maxsize=4096)
def stage_layout(model: ModelSpec, pp: int, vp: int) -> StageLayout:
    """Split layers into pp·vp chunks as evenly as possible (earlier chunks take the spare
    layers); stage s runs chunks s, s+pp, s+2·pp, ... (Megatron's interleaved placement)."""
    counts = model.params
    num_chunks = pp * vp
    chunks = np.array_split(np.arange(model.num_layers), num_chunks)
    dense = np.asarray(counts.layers_dense)
    expert = np.asarray(counts.layers_expert)
    kinds = model.sublayers
    fields = {k: np.zeros(pp) for k in ("num_layers", "num_attention", "num_mamba", "num_mlp",
                                          "num_moe", "dense_params", "expert_params")}
    for c, layers in enumerate(chunks):
        s = c % pp
        fields["num_layers"][s] += len(layers)
        fields["dense_params"][s] += dense[layers].sum()
        fields["expert_params"][s] += expert[layers].sum()
        for i in layers:
            fields["num_attention"][s] += kinds[i].mixer == "attention"
            fields["num_mamba"][s] += kinds[i].mixer == "mamba"
            fields["num_mlp"][s] += kinds[i].ffn == "mlp"
            fields["num_moe"][s] += kinds[i].ffn == "moe"
    embedding = np.zeros(pp)
    embedding[0] = counts.embedding
    output = np.zeros(pp)
    # With pp > 1 the last stage keeps its own copy of a tied embedding (Megatron).
    output[-1] = counts.output or (counts.embedding if pp > 1 else 0.0)
    output[-1] += counts.final_norm
    # MTP modules sit on the last stage (Megatron-Core), each one more layer like the last.
    if model.num_mtp_layers:
        last = kinds[-1]
        fields["dense_params"][-1] += counts.mtp_dense
        fields["expert_params"][-1] += counts.mtp_expert
        fields["num_layers"][-1] += model.num_mtp_layers
        fields["num_attention"][-1] += model.num_mtp_layers * (last.mixer == "attention")
        fields["num_mlp"][-1] += model.num_mtp_layers * (last.ffn == "mlp")
        fields["num_moe"][-1] += model.num_mtp_layers * (last.ffn == "moe")
    sizes = {len(c) for c in chunks}
    return StageLayout(embedding_params=embedding, output_params=output,
                       max_layer_dense_params=float(dense.max()),
                       max_layer_expert_params=float(expert.max()),
                       even=len(sizes) == 1, **fields)
