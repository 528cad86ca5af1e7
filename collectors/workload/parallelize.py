"""Lay a `Transformer` out on a `DeviceMesh` as a `ParallelConfig` says, and train it.

Order, as in torchtitan's `parallelize_llama`: split pipeline stages, tensor (and sequence)
parallelism, activation checkpointing, then data parallelism. Mapping of the knobs:

* `dp_sharding` `none` → `DistributedDataParallel`; `optimizer` → DDP plus torch's
  `ZeroRedundancyOptimizer` (ZeRO-1: optimizer states sharded over the dp group); `full` →
  FSDP2 `fully_shard` per block and per stage root (ZeRO-3). DDP is used for pure data
  parallelism only (torchtitan's rule): on a multi-dimensional mesh `none`/`optimizer` run as
  FSDP2 with `reshard_after_forward=False` (ZeRO-2, the nearest torch-native layout), because
  in torch 2.13 DDP rejects DTensor parameters (`c10d.broadcast_` has no sharding strategy)
  and DDP inside `Schedule1F1B` trips a reducer assertion when micro-batches = pp.
* `tp` → DTensor `ColwiseParallel` (wq, wk, wv, w1, w3) and `RowwiseParallel` (wo, w2,
  embedding), output projection column-wise; `sequence_parallel` adds `SequenceParallel` norms.
* `pp` → `torch.distributed.pipelining` with `Schedule1F1B` (vp 1) or
  `ScheduleInterleaved1F1B` (vp > 1; rank r holds stages r, r + pp, …), `gbs / (mbs·dp)`
  micro-batches; without pipelining the same micro-batches are gradient accumulation.
* `recompute` `selective` → checkpoint the attention core; `full` → checkpoint every block.
* `cp` > 1 and `ep` > 1 are refused (see `check_supported`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.utils.checkpoint import checkpoint

from advisor.core.model import ModelSpec
from advisor.core.parallel import PRECISIONS, ParallelConfig
from collectors.workload.model import Transformer, loss_fn


class UnsupportedConfig(ValueError):
    """A configuration the torch-native workload cannot run (the message says why)."""


class Checkpointed(nn.Module):
    """Recompute `inner` in the backward pass (non-reentrant activation checkpointing)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any) -> Any:
        # torch 2.13 still defaults to the reentrant variant and warns when use_reentrant is
        # omitted; the torch.utils.checkpoint docs recommend the non-reentrant one.
        return checkpoint(self.inner, *args, use_reentrant=False)


def check_supported(config: ParallelConfig, spec: ModelSpec, *, world_size: int,
                    device_type: str) -> None:
    """Raise `UnsupportedConfig` for what this workload cannot run, before any collective."""
    if config.cp > 1:
        raise UnsupportedConfig(
            f"cp ({config.cp}) > 1 is not supported: torch 2.13's context parallelism "
            f"(torch.distributed.tensor.experimental.context_parallel, ring attention over "
            f"SDPA) runs on GPUs only; use cp 1.")
    if config.ep > 1:
        raise UnsupportedConfig(f"ep ({config.ep}) > 1 is not supported: the workload builds "
                                f"dense models, which have no experts; use ep 1.")
    if config.world_size != world_size:
        raise UnsupportedConfig(f"tp × pp × cp × dp = {config.world_size} must equal the "
                                f"world size ({world_size}); launch that many processes.")
    if device_type == "cuda" and PRECISIONS[config.precision] not in ("bf16", "fp16"):
        raise UnsupportedConfig(f"precision {config.precision} needs FP8/FP4 training "
                                f"(Transformer Engine, torchao), which the workload does not "
                                f"implement; use bf16.")
    if spec.num_kv_heads % config.tp or spec.ffn_hidden_size % config.tp:
        raise UnsupportedConfig(f"tp ({config.tp}) must divide num_kv_heads "
                                f"({spec.num_kv_heads}) and ffn_hidden_size "
                                f"({spec.ffn_hidden_size}) of {spec.name}.")
    if config.pp * config.vp > spec.num_layers:
        raise UnsupportedConfig(f"pp × vp ({config.pp * config.vp}) stages need at least as "
                                f"many layers; {spec.name} has {spec.num_layers}.")
    if config.sequence_parallel and config.seq_len % config.tp:
        raise UnsupportedConfig(f"sequence_parallel splits seq_len ({config.seq_len}) over "
                                f"tp ({config.tp}); pick a multiple of tp.")


def build_mesh(config: ParallelConfig, device_type: str) -> DeviceMesh:
    """A mesh over the dimensions larger than one, outermost first (pp, dp, tp)."""
    dims = [(name, size) for name, size in (("pp", config.pp), ("dp", config.dp),
                                            ("tp", config.tp)) if size > 1] or [("dp", 1)]
    names, shape = zip(*dims, strict=True)
    return init_device_mesh(device_type, tuple(shape), mesh_dim_names=tuple(names))


def _sub(mesh: DeviceMesh, name: str) -> DeviceMesh | None:
    return mesh[name] if name in (mesh.mesh_dim_names or ()) else None


def stage_layers(num_layers: int, num_stages: int) -> list[tuple[int, int]]:
    """[first, end) layer ranges of each stage, as even as possible (earlier stages +1)."""
    base, extra = divmod(num_layers, num_stages)
    bounds, start = [], 0
    for s in range(num_stages):
        end = start + base + (s < extra)
        bounds.append((start, end))
        start = end
    return bounds


def apply_tp(model: Transformer, tp_mesh: DeviceMesh, *, sequence_parallel: bool) -> None:
    """Megatron-style tensor parallelism with DTensor (torchtitan's Llama plan)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    seq = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, Any] = {}
    if model.tok_embeddings is not None:
        plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.output is not None:
        plan["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
        if sequence_parallel:
            plan["norm"] = SequenceParallel()
    parallelize_module(model, tp_mesh, plan)
    for block in model.layers.values():
        block_plan: dict[str, Any] = {
            "attention": PrepareModuleInput(input_layouts=(seq, None),
                                            desired_input_layouts=(Replicate(), None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
            "feed_forward": PrepareModuleInput(input_layouts=(seq,),
                                               desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=seq),
            "feed_forward.w3": ColwiseParallel(),
        }
        if sequence_parallel:
            block_plan["attention_norm"] = SequenceParallel()
            block_plan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, block_plan)


def apply_ac(model: Transformer, mode: str) -> None:
    """`full`: recompute whole blocks; `selective`: recompute the attention core only."""
    for name, block in list(model.layers.items()):
        if mode == "full":
            model.layers[name] = Checkpointed(block)
        elif mode == "selective":
            block.attention.core = Checkpointed(block.attention.core)


def apply_fsdp(model: Transformer, dp_mesh: DeviceMesh, *, reshard_after_forward: bool,
               param_dtype: torch.dtype | None = None,
               reduce_dtype: torch.dtype | None = None) -> None:
    """FSDP2 per block, then the stage root (embedding, norm, output).

    FSDP2 reduces fp32 gradients with ReduceOp.AVG; pytorch#162338 reported gloo summing
    instead, but torch 2.13.0's gloo averages correctly (checked against a single-process
    reference, uneven shards included), so no SUM-and-divide workaround is applied.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # On GPU, gather parameters in 16 bits as torchtitan and Megatron do (half the traffic).
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, reshard_after_forward=reshard_after_forward,
                    mp_policy=mp_policy)
    fully_shard(model, mesh=dp_mesh, reshard_after_forward=reshard_after_forward,
                mp_policy=mp_policy)


@dataclass
class Trainer:
    """One rank's share of the model, its optimizer, and how a training step runs."""

    config: ParallelConfig
    mesh: DeviceMesh
    parts: list[nn.Module]
    """Model chunks on this rank (one, or vp pipeline stages), wrapped for data parallelism."""
    stage_ids: list[int]
    optimizer: torch.optim.Optimizer
    schedule: Any = None
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    device: torch.device = torch.device("cpu")
    losses: list[torch.Tensor] = field(default_factory=list)
    """Per step, on the device: reading them every step would synchronise the GPU."""
    num_steps: int = 0
    num_forwards: int = 0
    """Forward passes of model chunks so far. Pipelining adds one per stage in the first step
    (it runs a forward to infer shapes)."""
    last_step_forwards: int = 0
    """Forward passes in the last step: micro-batches × chunks on this rank."""

    def __post_init__(self) -> None:
        for part in self.parts:
            _inner(part).register_forward_pre_hook(self._count)

    def _count(self, *_: Any) -> None:
        self.num_forwards += 1

    def global_losses(self) -> list[float]:
        """Mean loss of each step so far over the whole global batch (collective)."""
        held = self.has_last and len(self.losses) == self.num_steps
        sums = torch.zeros(self.num_steps + 1, dtype=torch.float64, device=self.device)
        if held:
            sums[:-1] = torch.stack(self.losses).double()
            sums[-1] = 1.0
        dist.all_reduce(sums)  # dp shards differ; tp replicas and other stages add copies/0
        return (sums[:-1] / sums[-1]).tolist()

    @property
    def has_first(self) -> bool:
        return not self.stage_ids or 0 in self.stage_ids

    @property
    def has_last(self) -> bool:
        return not self.stage_ids or self.config.pp * self.config.vp - 1 in self.stage_ids

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        """One optimizer step over this dp rank's gbs / dp sequences."""
        before = self.num_forwards
        with self.autocast():
            if self.schedule is not None:
                self._pipeline_step(inputs, labels)
            else:
                self._accumulate(inputs, labels)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.num_steps += 1
        self.last_step_forwards = self.num_forwards - before

    def _pipeline_step(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        losses: list[torch.Tensor] = []
        kwargs: dict[str, Any] = {"target": labels, "losses": losses} if self.has_last else {}
        self.schedule.step(*([inputs] if self.has_first else []), **kwargs)
        if losses:
            self.losses.append(torch.stack(losses).detach().mean())

    def _accumulate(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        (model,), n = self.parts, self.config.num_microbatches
        total = torch.zeros((), device=self.device)
        for i, (x, y) in enumerate(zip(inputs.chunk(n), labels.chunk(n), strict=True)):
            # DDP: all-reduce once per step, as Megatron does; FSDP reduce-scatters each time.
            sync = i == n - 1 or not hasattr(model, "no_sync")
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = loss_fn(model(x), y) / n
                loss.backward()
            total += loss.detach()
        self.losses.append(total)


def build_trainer(spec: ModelSpec, config: ParallelConfig, *, device: torch.device,
                  seed: int) -> Trainer:
    """Build, lay out and initialise this rank's part of the model (collective: all ranks)."""
    device_type = device.type
    check_supported(config, spec, world_size=dist.get_world_size(), device_type=device_type)
    mesh = build_mesh(config, device_type)
    dp_mesh, tp_mesh, pp_mesh = _sub(mesh, "dp"), _sub(mesh, "tp"), _sub(mesh, "pp")
    num_stages = config.pp * config.vp
    pp_rank = pp_mesh.get_local_rank() if pp_mesh is not None else 0
    stage_ids = [pp_rank + k * config.pp for k in range(config.vp)] if config.pp > 1 else []
    bounds = stage_layers(spec.num_layers, num_stages)
    # Mixed precision on GPU only: CPUs run fp32 (bf16 matmuls are slow on CPUs without AMX,
    # and CPU rows are only compared with each other).
    dtype = _compute_dtype(config) if device_type == "cuda" else None
    use_fsdp = config.dp > 1 and (config.dp_sharding == "full" or config.tp * config.pp > 1)
    parts: list[nn.Module] = []
    for stage in stage_ids or [None]:
        with torch.device("meta"):
            part = Transformer(spec, seq_len=config.seq_len)
        if stage is not None:
            part.keep_stage(*bounds[stage])
        if tp_mesh is not None:
            apply_tp(part, tp_mesh, sequence_parallel=config.sequence_parallel)
        if config.recompute != "none":
            apply_ac(part, config.recompute)
        if use_fsdp:
            # ZeRO-3 reshards after forward; with pipelining that would all-gather again for
            # every micro-batch, so torchtitan keeps parameters (ZeRO-2) when pp > 1.
            reshard = config.dp_sharding == "full" and config.pp == 1
            apply_fsdp(part, dp_mesh, reshard_after_forward=reshard, param_dtype=dtype,
                       reduce_dtype=torch.float32 if config.grad_reduce_in_fp32 else dtype)
        part.init_weights(seed=seed, device=device)
        if config.dp > 1 and not use_fsdp:
            from torch.nn.parallel import DistributedDataParallel

            part = DistributedDataParallel(part, process_group=dp_mesh.get_group(),
                                           device_ids=[device] if device.type == "cuda"
                                           else None)
        parts.append(part)
    params = [p for part in parts for p in part.parameters()]
    if config.dp > 1 and not use_fsdp and config.dp_sharding == "optimizer":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer: torch.optim.Optimizer = ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, process_group=dp_mesh.get_group(),
            lr=1e-3)
    else:
        optimizer = torch.optim.AdamW(params, lr=1e-3)
    trainer = Trainer(config=config, mesh=mesh, parts=parts, stage_ids=stage_ids,
                      optimizer=optimizer, device=device)
    if dtype is not None:
        trainer.autocast = lambda: torch.autocast("cuda", dtype=dtype)
    if stage_ids:
        trainer.schedule = _schedule(parts, stage_ids, config, pp_mesh, device)
    return trainer


def _compute_dtype(config: ParallelConfig) -> torch.dtype:
    return torch.float16 if config.precision_class == "fp16" else torch.bfloat16


def _schedule(parts: list[nn.Module], stage_ids: list[int], config: ParallelConfig,
              pp_mesh: DeviceMesh, device: torch.device) -> Any:
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleInterleaved1F1B,
    )

    num_stages = config.pp * config.vp
    stages = [PipelineStage(part, stage, num_stages, device, group=pp_mesh.get_group())
              for part, stage in zip(parts, stage_ids, strict=True)]
    if config.vp == 1:
        return Schedule1F1B(stages[0], config.num_microbatches, loss_fn=loss_fn)
    return ScheduleInterleaved1F1B(stages, config.num_microbatches, loss_fn=loss_fn)


def _inner(part: nn.Module) -> nn.Module:
    """The model chunk inside a DDP wrapper (FSDP2 wraps in place)."""
    from torch.nn.parallel import DistributedDataParallel

    return part.module if isinstance(part, DistributedDataParallel) else part


def _optimizer_state_numel(optimizer: torch.optim.Optimizer) -> int:
    """Elements of optimizer state held on this rank (ZeRO keeps only its partition's)."""
    from torch.distributed.tensor import DTensor

    local = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's local one
    return sum((t.to_local() if isinstance(t, DTensor) else t).numel()
               for state in local.state.values() for t in state.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def describe(trainer: Trainer) -> dict[str, Any]:
    """What was built on this rank, from the objects themselves (tests check it)."""
    from torch.distributed.tensor import DTensor

    params = [p for part in trainer.parts for p in part.parameters()]
    placements = sorted({str(p.placements) for p in params if isinstance(p, DTensor)})
    layers = sorted(int(name) for part in trainer.parts for name in _inner(part).layers)
    return {
        "mesh": dict(zip(trainer.mesh.mesh_dim_names, trainer.mesh.shape, strict=True)),
        "wrappers": sorted({type(part).__name__ for part in trainer.parts}),
        "optimizer": type(trainer.optimizer).__name__,
        "schedule": type(trainer.schedule).__name__ if trainer.schedule else None,
        "stages": trainer.stage_ids,
        "layers": layers,
        "num_dtensor_params": sum(isinstance(p, DTensor) for p in params),
        "num_params": len(params),
        "placements": placements,
        "local_numel": sum((p.to_local() if isinstance(p, DTensor) else p).numel()
                           for p in params),
        "global_numel": sum(p.numel() for p in params),
        "optimizer_state_numel": _optimizer_state_numel(trainer.optimizer),
        "num_checkpointed": sum(isinstance(m, Checkpointed) for part in trainer.parts
                                for m in part.modules()),
        "num_microbatches": trainer.config.num_microbatches,
        "last_step_forwards": trainer.last_step_forwards,
    }
