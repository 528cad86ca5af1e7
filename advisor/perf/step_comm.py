"""Communication of one training step before any overlap: per micro-batch and pipeline stage
the tensor-parallel collectives, the context-parallel ring (and Mamba-2's all-to-alls), the
expert all-to-alls and the pipeline send/recv; per step the data-parallel gradient and
parameter collectives. `step` decides how much of it compute hides (its docstring states the
model).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.model import ModelSpec
from advisor.core.platform import Platform
from advisor.perf.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    EP_DISPATCH,
    REDUCE_SCATTER,
    RING_ALLREDUCE,
    SEND_RECV,
    CollectiveModel,
)
from advisor.perf.layout import StageLayout
from advisor.perf.recompute import Recompute
from advisor.perf.step_compute import ACT, StageLayers


@dataclass(frozen=True)
class StageComm:
    """One micro-batch's communication on every pipeline stage, none of it hidden yet
    (configurations × stages, seconds)."""

    tp_s: np.ndarray
    """Tensor/sequence-parallel collectives forward, backward and in a full recompute."""
    cp_ring_s: np.ndarray
    """Ring-attention K/V passes (they can hide under the attention kernels)."""
    cp_mamba_s: np.ndarray | float
    """Mamba-2 context-parallel all-to-alls (nothing runs beside them); 0.0 without Mamba."""
    ep_s: np.ndarray
    """Expert-parallel dispatch and combine all-to-alls."""
    pp_s: np.ndarray
    """Pipeline send/recv of the boundary activations, each way."""
    tp_dgrad_s: np.ndarray
    """One layer block's backward input-gradient reduce of its column-parallel input
    projection (all-reduce, or reduce-scatter with sequence parallelism; configurations × 1),
    part of `tp_s`: Megatron issues it asynchronously and computes the weight gradient
    meanwhile (`step`)."""


@dataclass(frozen=True)
class DataParallel:
    """Each stage's parameter shards and data-parallel collectives, per step (configurations ×
    stages)."""

    dense_params: np.ndarray
    """Parameters per GPU other than routed experts' (after TP)."""
    expert_params: np.ndarray
    """Routed-expert parameters per GPU (after EP and expert TP)."""
    dense_group: np.ndarray
    """GPUs the dense gradients are synchronised over (dp·cp)."""
    expert_group: np.ndarray
    """GPUs the expert gradients are synchronised over (1 on a stage without routed experts)."""
    reduce_scatter_s: np.ndarray
    all_gather_s: np.ndarray
    all_reduce_s: np.ndarray
    """The gradient reduce-scatter, the parameter all-gather and the gradient all-reduce."""


def micro_batch_comm(model: ModelSpec, platform: Platform, coll: CollectiveModel,
                     layers: StageLayers, *, pp: int, vp: int, rows: np.ndarray,
                     tp: np.ndarray, cp: np.ndarray, dp: np.ndarray, ep: np.ndarray,
                     etp: np.ndarray, sp: np.ndarray, recompute: Recompute,
                     dispatcher: np.ndarray | None = None) -> StageComm:
    """Communication of one micro-batch of `rows` token rows per GPU, for configurations given
    as column vectors (configurations × 1): tp, cp, dp, ep, etp, sp (sequence parallel),
    recompute (what the backward recomputes: a recomputed module's forward collectives run
    again), dispatcher (`ParallelConfig.moe_dispatcher`; None: auto on every row)."""
    domain = platform.nvlink_domain_size
    h = model.hidden_size
    na, nm, nl, nmoe = layers.attention, layers.mamba, layers.mlp, layers.moe
    last = layers.last
    mtp = model.num_mtp_layers

    # ---- tensor parallel -----------------------------------------------------------------
    act_bytes = rows * h * ACT             # one micro-batch's hidden states (full sequence)
    tp_in = tp <= domain
    tp_local = np.minimum(tp, domain)
    scatter = coll.time(REDUCE_SCATTER, act_bytes, tp, tp_in, platform, tp_local)
    allreduce = coll.time(RING_ALLREDUCE, act_bytes, tp, tp_in, platform, tp_local)
    pair = np.where(sp, coll.time(ALL_GATHER, act_bytes, tp, tp_in, platform, tp_local)
                    + scatter, allreduce)
    # Backward, the column-parallel input projection's input gradient is reduced (scattered
    # with SP) while its weight gradient computes (`step` hides it).
    dgrad = np.where(sp, scatter, allreduce)
    # Per layer block: all-gather + reduce-scatter forward, again backward (and again in a full
    # recompute). Shared experts and latent projections are TP-split like an MLP; routed
    # experts with etp > 1 gather/scatter over the expert-TP group instead. The embedding
    # (reduce-scatter forward, all-gather backward) and each output layer (all-gather forward,
    # reduce-scatter backward) cost one pair, and are not recomputed.
    moe_shared_tp = 1.0 if (model.num_shared_experts or model.moe_latent_size) else 0.0
    if nmoe.any():
        etp_in = etp <= domain
        etp_local = np.minimum(etp, domain)
        etp_pair = (coll.time(ALL_GATHER, act_bytes, etp, etp_in, platform, etp_local)
                    + coll.time(REDUCE_SCATTER, act_bytes, etp, etp_in, platform, etp_local))
    else:
        etp_pair = 0.0                     # no MoE layer: nmoe · etp_pair is 0 either way
    layer_comm = (na + nm + nl + nmoe * moe_shared_tp) * pair + nmoe * etp_pair
    edge_comm = (last * (1 + mtp) + (np.arange(pp) == 0)[None, :]) * pair
    tp_raw = 2.0 * layer_comm + edge_comm
    is_full, whole_moe = recompute.full, recompute.module("moe")
    tp_re = np.where(is_full, layer_comm, 0.0) + (
        np.where(recompute.module("mlp"), nl * pair, 0.0)
        + np.where(whole_moe, nmoe * (moe_shared_tp * pair + etp_pair), 0.0)
        + np.where(recompute.module("shared_experts") & ~whole_moe,
                   nmoe * pair * (1.0 if model.num_shared_experts else 0.0), 0.0))
    tp_all = tp_raw + tp_re

    # ---- context parallel (ring attention) ---------------------------------------------------
    kv_bytes = rows * (model.kv_dim + model.v_dim) * ACT / tp
    cp_in = tp * cp <= domain
    step = coll.time(SEND_RECV, kv_bytes, np.full_like(cp, 2.0), cp_in, platform)
    cp_per_layer = np.where(cp > 1, (cp - 1) * step * (1 + 2), 0.0)  # fwd K/V, bwd K/V + dK/dV
    cp_re = np.where(is_full | recompute.module("core_attn"), (cp - 1) * step, 0.0)
    cp_raw = na * (cp_per_layer + np.where(cp > 1, cp_re, 0.0))
    if model.mamba_num_heads:
        # Mamba-2 context parallelism (Megatron-Core) swaps sequence for heads with an
        # all-to-all before the conv/scan (x, B, C, dt) and back after it (y), forward and
        # backward (and in a full recompute); nothing runs beside it.
        groups_state = 2 * max(model.mamba_num_groups, 1) * model.mamba_state_dim
        swap_bytes = rows * (2 * model.mamba_inner_size + groups_state
                             + model.mamba_num_heads) * ACT / tp
        swap = coll.time(ALL_TO_ALL, swap_bytes, cp, cp_in, platform)
        mamba_cp = nm * swap * (2.0 + np.where(is_full, 1.0, 0.0))
    else:
        mamba_cp = 0.0

    # ---- expert parallel (all-to-all) -------------------------------------------------------
    if model.is_moe:
        width = model.moe_latent_size or h
        token_bytes = rows / tp * width * ACT  # one copy of the GPU's tokens
        k = model.moe_top_k
        group = ep * etp
        inside = group <= domain
        # DeepEP (`parallel.token_dispatcher`: auto across NVIDIA domains, or named) sends a
        # token over the network once per distinct remote domain among its k experts, then
        # fans it out over NVLink. An all-to-all (NCCL's, named alltoall; RCCL's on AMD)
        # sends every remote copy.
        domains = np.maximum(group / domain, 1.0)
        dedup = dedup_dispatch(platform, dispatcher, len(tp))
        remote = np.where(inside, 0.0, np.where(dedup, (domains - 1) * domain_hit(model, domains),
                                                k * (1 - 1 / domains)))
        local = k * np.where(inside, 1.0, 1.0 / domains)
        forwarded = np.where(dedup, remote, 0.0)
        a2a_in = coll.time(ALL_TO_ALL, token_bytes * (local + forwarded), ep, True, platform)
        a2a_net = np.where(inside, 0.0, coll.time(EP_DISPATCH, token_bytes * remote, 2.0,
                                                  False, platform))
        a2a = np.maximum(a2a_in, a2a_net)
        # Dispatch and combine, forward and backward; again forward where the MoE layer is
        # recomputed (full, or selective `moe`).
        ep_raw = nmoe * a2a * (4.0 + np.where(is_full | whole_moe, 2.0, 0.0))
    else:
        ep_raw = np.zeros((len(tp), pp))

    # ---- pipeline send/recv -----------------------------------------------------------------
    if pp > 1:
        # Each TP rank sends its 1/tp shard: with sequence parallelism the activation is
        # already sharded; without it Megatron scatters before the send and all-gathers after.
        boundary = act_bytes / tp
        pp_in = tp * cp * dp * pp <= domain
        p2p = coll.time(SEND_RECV, boundary, np.full_like(tp, 2.0), pp_in, platform)
        gather = np.where((tp > 1) & ~sp, coll.time(ALL_GATHER, act_bytes, tp, tp_in, platform,
                                                    tp_local), 0.0)
        pp_raw = 2.0 * vp * (p2p + gather) * np.ones((1, pp))
    else:
        pp_raw = np.zeros((len(tp), pp))
    return StageComm(tp_s=tp_all, cp_ring_s=cp_raw, cp_mamba_s=mamba_cp, ep_s=ep_raw,
                     pp_s=pp_raw, tp_dgrad_s=dgrad)


def dedup_dispatch(platform: Platform, dispatcher: np.ndarray | None, n: int) -> np.ndarray:
    """Per configuration (n × 1): whether its MoE dispatcher sends a token across the network
    once per remote domain (DeepEP) rather than once per remote expert (all-to-all)."""
    auto = np.full((n, 1), platform.vendor == "nvidia")
    if dispatcher is None:
        return auto
    named = np.asarray(dispatcher).astype(str).reshape(n, 1)
    return np.where(named == "auto", auto, named == "deepep")


def domain_hit(model: ModelSpec, domains: np.ndarray) -> np.ndarray:
    """The probability that one token's top-k experts include one on a given domain of an
    expert group spread over `domains` domains (experts evenly routed; contiguous blocks of
    experts per domain, as Megatron-Core places them). Group-limited routing
    (`moe_router_num_groups`, DeepSeek-V3's node-limited routing) caps it: the token's experts
    come from `moe_router_group_topk` of the groups, so a domain is hit only through a chosen
    group that lies on it (each chosen group holding at least one of the k experts)."""
    k = model.moe_top_k
    free = 1 - (1 - 1 / domains) ** k
    groups, chosen = model.moe_router_num_groups, model.moe_router_group_topk
    if not groups:
        return free
    from math import comb

    def whole_groups(d: float) -> float:
        per = groups / d                     # groups on each domain (d <= groups)
        if per != int(per):
            return 1.0
        return 1 - comb(groups - int(per), chosen) / comb(groups, chosen)

    values, where = np.unique(domains, return_inverse=True)
    limited = np.array([whole_groups(d) if d <= groups else
                        chosen / groups * (1 - (1 - groups / d) ** (k / chosen))
                        for d in values])[where].reshape(np.shape(domains))
    return np.minimum(free, limited)


def data_parallel(layout: StageLayout, platform: Platform, coll: CollectiveModel, *,
                  tp: np.ndarray, cp: np.ndarray, dp: np.ndarray, ep: np.ndarray,
                  etp: np.ndarray, precision: np.ndarray, grad_bytes: np.ndarray,
                  trainable: np.ndarray | None = None,
                  shard: np.ndarray | None = None) -> DataParallel:
    """The data-parallel collectives of one step on every stage: gradients of `grad_bytes`
    per parameter, parameters gathered at 16 bits (8 with MXFP8's `precision`); tp, cp, dp,
    ep, etp as column vectors (configurations × 1). `trainable` (configurations × stages,
    before TP) replaces the stage's parameters where only some train (LoRA adapters: the
    frozen base and its experts sync nothing). `shard` (configurations × 1; None: dp·cp) is
    the ranks each shard spans under hybrid sharding: the gradients reduce-scatter and the
    parameters all-gather inside a shard group, and the groups all-reduce their shard (its
    time is in `reduce_scatter_s`).

    Each sync is priced as one collective per stage, not per bucket: cutting it into Megatron's
    buckets or FSDP's per-layer units, each paying the ring latency fitted on 2-8 GPUs
    (α₁ per hop) extrapolated to hundreds of ranks, made the held-out published runs worse
    (llm-foundry's FSDP on up to 512 H100s scales nearly flat, which a per-layer latency of
    milliseconds contradicts), and no table measures collectives across nodes at scale."""
    domain = platform.nvlink_domain_size
    if trainable is None:
        dense_params = (layout.dense_params + layout.embedding_params + layout.output_params)[
            None, :] / tp
        expert_params = layout.expert_params[None, :] / (ep * etp)
    else:
        dense_params = trainable / tp
        expert_params = np.zeros_like(dense_params)
    dp_group = dp * cp
    # A stage without routed experts (a dense model, or MoE's dense first layers) has no expert
    # gradients to sync: a group of one costs nothing, where the latency of an empty collective
    # over the expert-data-parallel group would otherwise be charged.
    edp_group = np.where(expert_params > 0, np.maximum(dp * cp * tp / (ep * etp), 1.0), 1.0)
    dp_in = tp * cp * dp <= domain
    dp_local = np.clip(domain // (tp * 1.0), 1.0, dp_group)   # dp·cp group has stride tp
    edp_local = np.clip(domain // (ep * etp * 1.0), 1.0, edp_group)
    param_bytes = np.where(precision[:, None] == "mxfp8", 1.0, ACT)
    # Hybrid sharding: shard groups of `shard` consecutive data-parallel ranks, `replicas` of
    # them; one shard's replicas lie tp·shard GPUs apart.
    group = dp_group if shard is None else np.minimum(shard, dp_group)
    replicas = dp_group / group
    e_group = np.maximum(edp_group / replicas, 1.0)
    in_group = tp * cp * group <= domain
    local = np.clip(domain // (tp * 1.0), 1.0, group)
    e_local = np.clip(domain // (ep * etp * 1.0), 1.0, e_group)
    replica_local = np.clip(domain // (tp * cp * group * 1.0), 1.0, replicas)
    rs = (coll.time(REDUCE_SCATTER, dense_params * grad_bytes, group, in_group, platform,
                    local)
          + coll.time(REDUCE_SCATTER, expert_params * grad_bytes, e_group, in_group,
                      platform, e_local)
          + coll.time(RING_ALLREDUCE, (dense_params / group + expert_params / e_group)
                      * grad_bytes, replicas, dp_in, platform, replica_local))
    ag = (coll.time(ALL_GATHER, dense_params * param_bytes, group, in_group, platform,
                    local)
          + coll.time(ALL_GATHER, expert_params * param_bytes, e_group, in_group,
                      platform, e_local))
    ar = (coll.time(RING_ALLREDUCE, dense_params * grad_bytes, dp_group, dp_in, platform,
                    dp_local)
          + coll.time(RING_ALLREDUCE, expert_params * grad_bytes, edp_group, dp_in,
                      platform, edp_local))
    return DataParallel(dense_params=dense_params, expert_params=expert_params,
                        dense_group=dp_group, expert_group=edp_group, reduce_scatter_s=rs,
                        all_gather_s=ag, all_reduce_s=ar)
