"""What LoRA fine-tuning changes in a training step: which weights train, and what the backward
pass no longer computes.

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022) freezes the
base weights W and trains W + B·A with A (r × d_in) and B (d_out × r) on the adapted GEMMs:

* **Parameters.** Trainable: r·(d_in + d_out) per adapted GEMM. The frozen base keeps its
  weights but needs no gradients and no optimizer state, so gradient buffers, the Adam state,
  the data-parallel gradient sync and the optimizer step cover the adapters only.
* **Backward.** A frozen GEMM computes only the input gradient (dX = dY·Wᵀ), not the weight
  gradient: its backward costs one forward instead of two, so weight GEMMs run 2 × forward per
  step instead of 3 ×; attention and scan cores (no weights) still run their full backward.
  MoE routed experts stay frozen.
* **Adapters.** The two thin GEMMs per adapted weight do few FLOPs (rank ≪ hidden) and are
  bound by HBM traffic: forward reads the input (d_in), writes and reads the rank-r product
  (negligible), writes B's output and adds it into the base output (read twice, write once:
  about 4·d_out); backward about twice that. Activations are stored as in training (the
  issue's stated model: the backward still needs each layer's inputs for the activation and
  adapter gradients).

Full fine-tuning trains every weight: the same work and memory per step as pre-training.
"""

from __future__ import annotations

import functools

import numpy as np

from advisor.core.model import ModelSpec
from advisor.perf.flops import Gemm, layer_gemms

#: Layer kinds whose GEMMs carry adapters, per `ParallelConfig.lora_targets`.
TARGET_KINDS = {"attention": ("attention",),
                "all-linear": ("attention", "mlp", "moe_dense", "mamba")}
ADAPTER_BACKWARD_TRAFFIC = 2.0
"""Backward HBM traffic of an adapter relative to its forward (input and weight gradients of two
thin GEMMs). placeholder: counted from the tensors each gradient reads and writes, not measured;
like the forward's d_in + 4·d_out elements per adapted GEMM."""


def _adapted(model: ModelSpec, targets: str) -> dict[str, tuple[Gemm, ...]]:
    gemms = layer_gemms(model)
    kinds = TARGET_KINDS[targets]
    out = {k: gemms[k] for k in kinds}
    if "moe_dense" in out:
        # The router stays frozen and full-rank (it is tiny and routes tokens, not features).
        out["moe_dense"] = tuple(g for g in out["moe_dense"] if g.n != model.num_experts)
    return out


_KINDS = ("attention", "mamba", "mlp", "moe_dense")


@functools.lru_cache(maxsize=1024)
def adapter_params_per_layer(model: ModelSpec, rank: int, targets: str) -> dict[str, float]:
    """Trainable parameters of one layer of each kind (attention, mamba, mlp, moe_dense)."""
    return _per_layer(model, targets, lambda g: rank * (g.k + g.n))


@functools.lru_cache(maxsize=1024)
def adapter_traffic_per_token(model: ModelSpec, targets: str) -> dict[str, float]:
    """Forward HBM elements per token of one layer of each kind's adapters, before TP (see the
    module docstring: d_in + 4·d_out per adapted GEMM)."""
    return _per_layer(model, targets, lambda g: g.k + 4.0 * g.n)


def _per_layer(model: ModelSpec, targets: str, per_gemm) -> dict[str, float]:
    out = dict.fromkeys(_KINDS, 0.0)
    for kind, gemms in _adapted(model, targets).items():
        out[kind] = sum(per_gemm(g) * g.count for g in gemms)
    return out


def stage_adapter_params(model: ModelSpec, layout, *, ranks: np.ndarray,
                         targets: np.ndarray) -> np.ndarray:
    """Trainable adapter parameters of each pipeline stage (configs × stages), before TP."""
    counts = (layout.num_attention, layout.num_mamba, layout.num_mlp, layout.num_moe)
    per_rank = _per_stage(counts, targets, lambda t: adapter_params_per_layer(model, 1, t))
    return np.asarray(ranks).reshape(-1, 1) * per_rank


def adapter_traffic_per_layer_token(model: ModelSpec, layers, *,
                                    targets: np.ndarray) -> np.ndarray:
    """Forward adapter HBM elements per token of each stage's layers (configs × stages), before
    TP; `layers` has per-stage counts `attention`, `mamba`, `mlp`, `moe` (1 × stages)."""
    counts = (layers.attention, layers.mamba, layers.mlp, layers.moe)
    return _per_stage(counts, targets, lambda t: adapter_traffic_per_token(model, t))


def _per_stage(counts: tuple, targets: np.ndarray, unit) -> np.ndarray:
    """Σ over layer kinds of (layers of that kind on each stage × `unit(target)[kind]`), for
    each configuration's target (configs × stages)."""
    targets = np.asarray(targets).reshape(-1, 1)
    counts = [np.asarray(c, dtype=float).reshape(1, -1) for c in counts]
    out = np.zeros((targets.shape[0], counts[0].shape[1]))
    for target in np.unique(targets):
        per_layer = unit(str(target))
        per_stage = sum(c * per_layer[kind] for c, kind in zip(counts, _KINDS, strict=True))
        out = np.where(targets == target, per_stage, out)
    return out


def is_lora(cols, n: int) -> np.ndarray:
    """Rows that fine-tune with LoRA (a column of `finetune`; absent = pre-training)."""
    values = cols.get("finetune")
    if values is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(values, dtype=object) == "lora"    # no copy to str: a C-level compare
