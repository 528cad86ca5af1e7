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

from advisor.model import ModelSpec
from advisor.perf.flops import Gemm, layer_gemms

#: Layer kinds whose GEMMs carry adapters, per `ParallelConfig.lora_targets`.
TARGET_KINDS = {"attention": ("attention",),
                "all-linear": ("attention", "mlp", "moe_dense", "mamba")}
ADAPTER_BACKWARD_TRAFFIC = 2.0
"""Backward HBM traffic of an adapter relative to its forward (input and weight gradients of two
thin GEMMs)."""


def _adapted(model: ModelSpec, targets: str) -> dict[str, tuple[Gemm, ...]]:
    gemms = layer_gemms(model)
    kinds = TARGET_KINDS[targets]
    out = {k: gemms[k] for k in kinds}
    if "moe_dense" in out:
        # The router stays frozen and full-rank (it is tiny and routes tokens, not features).
        out["moe_dense"] = tuple(g for g in out["moe_dense"] if g.n != model.num_experts)
    return out


@functools.lru_cache(maxsize=1024)
def adapter_params_per_layer(model: ModelSpec, rank: int, targets: str) -> dict[str, float]:
    """Trainable parameters of one layer of each kind (attention, mamba, mlp, moe_dense)."""
    out = {"attention": 0.0, "mamba": 0.0, "mlp": 0.0, "moe_dense": 0.0}
    for kind, gemms in _adapted(model, targets).items():
        out[kind] = sum(rank * (g.k + g.n) * g.count for g in gemms)
    return out


@functools.lru_cache(maxsize=1024)
def adapter_traffic_per_token(model: ModelSpec, targets: str) -> dict[str, float]:
    """Forward HBM elements per token of one layer of each kind's adapters, before TP (see the
    module docstring: d_in + 4·d_out per adapted GEMM)."""
    out = {"attention": 0.0, "mamba": 0.0, "mlp": 0.0, "moe_dense": 0.0}
    for kind, gemms in _adapted(model, targets).items():
        out[kind] = sum((g.k + 4.0 * g.n) * g.count for g in gemms)
    return out


def stage_adapter_params(model: ModelSpec, layout, *, ranks: np.ndarray,
                         targets: np.ndarray) -> np.ndarray:
    """Trainable adapter parameters of each pipeline stage (configs × stages), before TP."""
    ranks = np.asarray(ranks).reshape(-1, 1)
    targets = np.asarray(targets).reshape(-1, 1)
    out = np.zeros((ranks.shape[0], len(layout.num_layers)))
    for target in np.unique(targets):
        unit = adapter_params_per_layer(model, 1, str(target))
        per_rank = (layout.num_attention * unit["attention"] + layout.num_mamba * unit["mamba"]
                    + layout.num_mlp * unit["mlp"] + layout.num_moe * unit["moe_dense"])
        out = np.where(targets == target, ranks * per_rank[None, :], out)
    return out


def adapter_traffic_per_layer_token(model: ModelSpec, layers, *,
                                    targets: np.ndarray) -> np.ndarray:
    """Forward adapter HBM elements per token of each stage's layers (configs × stages), before
    TP; `layers` has per-stage counts `attention`, `mamba`, `mlp`, `moe` (1 × stages)."""
    targets = np.asarray(targets).reshape(-1, 1)
    out = np.zeros((targets.shape[0], np.shape(layers.attention)[-1]))
    for target in np.unique(targets):
        unit = adapter_traffic_per_token(model, str(target))
        per_stage = (layers.attention * unit["attention"] + layers.mamba * unit["mamba"]
                     + layers.mlp * unit["mlp"] + layers.moe * unit["moe_dense"])
        out = np.where(targets == target, per_stage, out)
    return out


def is_lora(cols, n: int) -> np.ndarray:
    """Rows that fine-tune with LoRA (a column of `finetune`; absent = pre-training)."""
    values = cols.get("finetune") if hasattr(cols, "get") else None
    if values is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(values).astype(str) == "lora"
