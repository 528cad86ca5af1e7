"""How a model's layers fall onto pipeline stages (and virtual stages)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from advisor.core.model import ModelSpec

PIPELINE_EXTRA_LAYERS = (0, 1, 2)
"""Megatron can count the embedding and the loss as pipeline "layers"
(--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split), so a split
is even when layers + 0, 1 or 2 divides evenly."""


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


def splits_evenly(num_layers: int, num_chunks: int) -> bool:
    """The layers split into equal chunks, counting the embedding and the loss as layers where
    that helps (Megatron-Core's --account-for-embedding/loss-in-pipeline-split)."""
    return any((num_layers + extra) % num_chunks == 0 for extra in PIPELINE_EXTRA_LAYERS)


def even_chunk_layers(num_layers: int, num_chunks: int) -> list[int] | None:
    """Layers per (virtual) pipeline chunk of the even split Megatron-Core builds, in chunk
    order, or None where `splits_evenly` is false. Where the layers alone do not divide, the
    loss counts as a layer (--account-for-loss-in-pipeline-split: the last chunk one layer
    fewer) and then the embedding too (--account-for-embedding-in-pipeline-split: the first
    one fewer): 15/16/…/16/15 for Llama 3.1 405B's 126 layers on 8 (transformer_block.py,
    get_num_layers_to_build)."""
    for extra in PIPELINE_EXTRA_LAYERS:
        if (num_layers + extra) % num_chunks == 0:
            counts = [(num_layers + extra) // num_chunks] * num_chunks
            counts[-1] -= extra >= 1
            counts[0] -= extra == 2
            return counts
    return None


def end_stage_layers(num_layers: int, pp: int) -> tuple[int, int]:
    """(first, last) stage layers of the split advisor runs and prices where `pp` stages split
    the layers evenly in no way (`splits_evenly` false; 61 layers on PP 8): Megatron-Core's
    `--decoder-first/last-pipeline-num-layers`, with every middle stage at the fewest layers
    the deepest stage can hold (⌈layers / pp⌉, the even split's deepest), the rest on the two
    end stages and the fewer on the last (it also runs the output layer and the loss): 7/8/…/8/6
    for 61 on 8. (0, 0) where an even split exists."""
    if pp < 3 or splits_evenly(num_layers, pp):
        return 0, 0
    if pp > num_layers:
        raise ValueError(f"{pp} pipeline stages for {num_layers} layers: every stage needs one")
    middle = -(-num_layers // pp)
    while middle > 1 and num_layers - (pp - 2) * middle < 2:  # each end stage needs a layer
        middle -= 1
    ends = num_layers - (pp - 2) * middle
    return (ends + 1) // 2, ends // 2


def stage_layer_counts(num_layers: int, pp: int, *, first: int = 0,
                       last: int = 0) -> list[int]:
    """Layers per pipeline stage: even as Megatron-Core builds it (`even_chunk_layers`: the
    end stages one layer fewer where the embedding or loss counts as one), or Megatron's
    uneven split with `first` layers on the first stage and `last` on the last
    (`--decoder-first/last-pipeline-num-layers`; 0 = even share), the rest even in between.
    With neither given and no even split, `end_stage_layers`' split."""
    if pp == 1:
        return [num_layers]
    if not (first or last):
        even = even_chunk_layers(num_layers, pp)
        if even is not None:
            return even
        first, last = end_stage_layers(num_layers, pp)
    if pp == 2:
        first = first or num_layers - last
        last = last or num_layers - first
        return [first, last]
    middle_stages = pp - 2
    if first and last:
        middle = num_layers - first - last
    else:
        # One end given: the other end takes the middle stages' share (Megatron).
        share = (num_layers - (first or last)) // (pp - 1)
        first, last = first or share, last or share
        middle = num_layers - first - last
    per, spare = divmod(middle, middle_stages)
    return [first] + [per + (i < spare) for i in range(middle_stages)] + [last]


@functools.lru_cache(maxsize=4096)
def stage_layout(model: ModelSpec, pp: int, vp: int, *, first: int = 0,
                 last: int = 0) -> StageLayout:
    """Split layers into pp·vp chunks evenly as Megatron-Core does (`even_chunk_layers`: the
    first and last chunks one layer fewer where the embedding or loss counts as a layer), or
    unevenly with `first`/`last` layers on the first/last stage (`stage_layer_counts`; with
    neither and no even split, `end_stage_layers`'); stage s runs chunks s, s+pp, s+2·pp, ...
    (Megatron's interleaved placement), its layers spread evenly over its vp chunks. pp × vp
    with no even split and no uneven one given (no emitter writes it) splits as evenly as
    possible, earlier chunks taking the spare layers."""
    counts = model.params
    num_chunks = pp * vp
    even = None if first or last else even_chunk_layers(model.num_layers, num_chunks)
    if even is None and not (first or last) and vp == 1:  # the end stages take the difference
        first, last = end_stage_layers(model.num_layers, pp)
    if even is not None:
        bounds = np.cumsum([0, *even])
        chunks = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_chunks)]
    elif first or last:
        per_stage = stage_layer_counts(model.num_layers, pp, first=first, last=last)
        sizes = [len(c) for s in range(pp)
                 for c in np.array_split(np.arange(per_stage[s]), vp)]
        # chunk c = v·pp + s holds the v-th share of stage s
        chunk_sizes = [sizes[s * vp + v] for v in range(vp) for s in range(pp)]
        bounds = np.cumsum([0, *chunk_sizes])
        chunks = [np.arange(bounds[c], bounds[c + 1]) for c in range(num_chunks)]
    else:
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
