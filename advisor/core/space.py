"""The space of valid parallel configurations for a job, and the rules that define it.

`validate` checks one configuration against the model and platform and says which rule failed;
`space_table` lists every configuration that passes, as a `Table` whose columns are the
`ParallelConfig` fields (so the memory and performance models can score it vectorised);
`enumerate_space` gives the same as a DataFrame.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.errors import ConfigError
from advisor.core.frameworks import (
    EAGER_BLOCKS,
    PP_WITH_FSDP,
    canonical_framework,
    find_framework,
)
from advisor.core.interleaving import group_sizes, interleaving_error, uses_torch_pipelining
from advisor.core.model import ModelSpec
from advisor.core.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    DP_SHARDING,
    PARALLEL_FIELDS,
    PRECISIONS,
    Job,
    ParallelConfig,
    dispatcher_name,
    divisors,
    invalid_config_rows,
    recompute_modules_name,
)
from advisor.core.platform import Platform
from advisor.core.table import Table
from advisor.perf.layout import PIPELINE_EXTRA_LAYERS, end_stage_layers, stage_layer_counts
from advisor.perf.layout import splits_evenly as layers_split_evenly

if TYPE_CHECKING:
    import pandas as pd



def _fmt(values: list[int], limit: int = 10) -> str:
    more = ", ..." if len(values) > limit else ""
    return "{" + ", ".join(map(str, values[:limit])) + more + "}"


def tp_choices(model: ModelSpec) -> list[int]:
    """Tensor-parallel sizes the model's heads allow (before the GPU count)."""
    limit = model.num_attention_heads
    return [t for t in divisors(limit) if _tp_error(model, t) is None]


def _tp_error(model: ModelSpec, tp: int) -> str | None:
    if model.num_attention_heads % tp:
        return f"num_attention_heads ({model.num_attention_heads})"
    if not model.is_mla and model.num_kv_heads % tp:
        return f"num_kv_heads ({model.num_kv_heads}) (Megatron splits query groups over TP)"
    if model.mamba_num_heads and model.mamba_num_heads % tp:
        return f"mamba_num_heads ({model.mamba_num_heads})"
    if model.mamba_num_heads and max(model.mamba_num_groups, 1) % tp:
        return f"mamba_num_groups ({model.mamba_num_groups})"
    return None


def splits_evenly(model: ModelSpec, num_chunks: int) -> bool:
    """The layers (counting embedding/loss stages if needed) split into equal chunks."""
    return layers_split_evenly(model.num_layers, num_chunks)


def vp_allowed(model: ModelSpec, pp: int, vp: int) -> bool:
    """vp divides the layers per pipeline stage (counting embedding/loss stages if needed)."""
    return vp == 1 or (pp > 1 and splits_evenly(model, pp * vp))


def vp_choices(model: ModelSpec, pp: int) -> list[int]:
    """Every vp that splits the layers per stage evenly (1 when there is no pipeline)."""
    most = (model.num_layers + max(PIPELINE_EXTRA_LAYERS)) // pp
    return [v for v in range(1, most + 1) if vp_allowed(model, pp, v)]


def config_notes(config: ParallelConfig, model: ModelSpec, platform: Platform) -> list[str]:
    """Things that are allowed but worth a warning."""
    notes = []
    if model.is_moe and config.etp > config.tp:
        notes.append(f"etp {config.etp} > tp {config.tp}: unusual; Megatron recipes use etp 1")
    if config.tp > platform.nvlink_domain_size:
        notes.append(f"tp {config.tp} spans more than one NVLink domain "
                     f"({platform.nvlink_domain_size} GPUs): TP traffic crosses the network")
    if model.num_layers % (config.pp * config.vp):
        if splits_evenly(model, config.pp * config.vp):
            notes.append(f"{model.num_layers} layers split evenly over pp×vp = "
                         f"{config.pp * config.vp} only when the embedding and loss count as "
                         f"layers (--account-for-embedding/loss-in-pipeline-split)")
        elif config.vp == 1 and not config.uneven:
            first, last = end_stage_layers(model.num_layers, config.pp)
            counts = stage_layer_counts(model.num_layers, config.pp)
            notes.append(f"{model.num_layers} layers do not split evenly over pp {config.pp}: "
                         f"advisor prices and emits {first} layers on the first stage, "
                         f"{counts[1]} on each middle one and {last} on the last "
                         f"(--decoder-first/last-pipeline-num-layers {first} {last})")
        elif not config.uneven:
            notes.append(f"{model.num_layers} layers do not split evenly over pp×vp = "
                         f"{config.pp * config.vp}: no emitter writes it; use vp in "
                         f"{_fmt(vp_choices(model, config.pp))}")
    return notes




def validate(config: ParallelConfig, model: ModelSpec, platform: Platform, *,
             num_gpus: int | None = None, framework: str = "megatron") -> list[str]:
    """Raise `ConfigError` naming the broken rule; return warnings for allowed oddities. Rules
    that depend on the framework (FSDP with pipelining) follow `framework`'s (any spelling
    `advisor.core.frameworks` accepts; another is refused with the list)."""
    framework = canonical_framework(framework)
    name = model.name
    if num_gpus is not None and config.world_size != num_gpus:
        raise ConfigError(f"tp × pp × cp × dp = {config.tp} × {config.pp} × {config.cp} × "
                          f"{config.dp} = {config.world_size}, but the job has {num_gpus} GPUs; "
                          f"set dp = {num_gpus // max(config.tp * config.pp * config.cp, 1)}"
                          if num_gpus % (config.tp * config.pp * config.cp) == 0 else
                          f"tp × pp × cp ({config.tp * config.pp * config.cp}) must divide the "
                          f"job's {num_gpus} GPUs.")
    what = _tp_error(model, config.tp)
    if what:
        raise ConfigError(f"tp ({config.tp}) must divide {what} of {name}; try tp in "
                          f"{_fmt(tp_choices(model))}.")
    if config.pp > model.num_layers:
        raise ConfigError(f"pp ({config.pp}) exceeds the {model.num_layers} layers of {name}.")
    if config.pp * config.vp > model.num_layers + max(PIPELINE_EXTRA_LAYERS):
        ok = vp_choices(model, config.pp)
        raise ConfigError(f"pp × vp ({config.pp} × {config.vp}) exceeds the {model.num_layers} "
                          f"layers of {name} (plus embedding and loss stages): every virtual "
                          f"stage needs a layer; try vp in {_fmt(ok)}.")
    if config.uneven:
        check_uneven(config, model)
    interleaving = interleaving_error(config.num_microbatches, config.pp, config.vp, framework)
    if interleaving:
        raise ConfigError(interleaving)
    if config.sequence_parallel and (config.seq_len // config.cp) % config.tp:
        raise ConfigError(f"with sequence parallelism, seq_len / cp ({config.seq_len // config.cp})"
                          f" must be divisible by tp ({config.tp}).")
    if not model.is_moe and (config.ep > 1 or config.etp > 1):
        raise ConfigError(f"ep ({config.ep}) and etp ({config.etp}) apply to MoE models; {name} "
                          f"is dense: use ep 1 and etp 1.")
    if model.is_moe:
        if model.num_experts % config.ep:
            raise ConfigError(f"ep ({config.ep}) must divide the {model.num_experts} experts of "
                              f"{name}; try ep in {_fmt(divisors(model.num_experts))}.")
        dense_group = config.tp * config.cp * config.dp
        if dense_group % (config.ep * config.etp):
            raise ConfigError(
                f"ep × etp ({config.ep} × {config.etp}) must divide tp × cp × dp ({dense_group}): "
                f"Megatron folds expert parallelism into the GPUs of one pipeline stage.")
    modules = recompute_modules_error(config.recompute_modules, config.precision, model)
    if modules:
        raise ConfigError(modules)
    if config.ep_comm_overlap and _ep_overlap_mtp_error(model, config.pp):
        raise ConfigError(_ep_overlap_mtp_error(model, config.pp))
    why = dispatcher_error(config.moe_dispatcher, platform)
    if why:
        raise ConfigError(why)
    if config.torch_compile and framework not in EAGER_BLOCKS:
        raise ConfigError(compile_error(framework))
    if config.dp_sharding == "full" and config.pp > 1 and framework not in PP_WITH_FSDP:
        raise ConfigError(f"dp_sharding full (FSDP) with pp ({config.pp}) > 1 is not supported "
                          f"by {framework} (Megatron-FSDP does not pipeline); use dp_sharding "
                          f"optimizer, pp 1, or a framework that runs FSDP2 with pipelining "
                          f"({', '.join(PP_WITH_FSDP)}).")
    if not platform.supports(config.precision_class):
        raise ConfigError(f"{platform.name} has no {config.precision_class} tensor cores for "
                          f"{config.precision}.")
    return config_notes(config, model, platform)


def compile_error(framework: str) -> str:
    """Why `framework` takes no torch_compile (it is not one of `EAGER_BLOCKS`)."""
    return (f"torch_compile applies to {' and '.join(EAGER_BLOCKS)} (--compile.enable fuses "
            f"the kernels of its eager PyTorch blocks); {framework} is modelled with its fused "
            f"kernels and no compile switch (Megatron-Core: Transformer Engine and Apex): "
            f"leave torch_compile off, or set framework {' or '.join(EAGER_BLOCKS)}.")


def dispatcher_error(dispatcher: str, platform: Platform) -> str | None:
    """Why `platform` cannot run MoE token `dispatcher`, or None."""
    if dispatcher == "deepep" and platform.vendor != "nvidia":
        return (f"moe_dispatcher deepep runs on NVIDIA GPUs (DeepEP and HybridEP use "
                f"NVSHMEM over NVLink); {platform.name} dispatches with RCCL's all-to-all: use "
                f"alltoall or auto.")
    return None


def invalid_rows(model: ModelSpec, platform: Platform, cols, *,
                 framework: str = "megatron") -> np.ndarray:
    """`validate`'s rules over a table of configurations at once (`cols`: one array per
    `ParallelConfig` field, optional `num_gpus`): True where `validate` would raise. Rows with
    an uneven pipeline split are checked one by one (their rules walk the stages)."""
    tp, pp, cp, dp = (np.asarray(cols[k]) for k in ("tp", "pp", "cp", "dp"))
    ep, etp, vp, mbs, gbs = (np.asarray(cols[k]) for k in ("ep", "etp", "vp", "mbs", "gbs"))
    seq = np.asarray(cols["seq_len"])
    bad = invalid_config_rows(cols)
    if "num_gpus" in cols:  # the layout must use the job's GPUs, no more and no fewer
        gpus = np.asarray(cols["num_gpus"], dtype=float)
        bad |= ~np.isfinite(gpus) | (tp * pp * cp * dp != gpus)
    for t in np.unique(tp[tp >= 1]):
        if _tp_error(model, int(t)):
            bad |= tp == t
    bad |= (pp > model.num_layers) | (pp * vp > model.num_layers + max(PIPELINE_EXTRA_LAYERS))
    microbatches = gbs // np.maximum(mbs * dp, 1)
    bad |= (vp > 1) & (group_sizes(microbatches, pp, torch_pipelining=uses_torch_pipelining(
        framework)) == 0)
    if "sequence_parallel" in cols:
        bad |= np.asarray(cols["sequence_parallel"], dtype=bool) & (
            (seq // np.maximum(cp, 1)) % np.maximum(tp, 1) != 0)
    if model.is_moe:
        bad |= (model.num_experts % np.maximum(ep, 1) != 0) | (
            (tp * cp * dp) % np.maximum(ep * etp, 1) != 0)
    else:
        bad |= (ep > 1) | (etp > 1)
    if "moe_dispatcher" in cols:
        named = np.asarray(cols["moe_dispatcher"]).astype(str)
        for d in np.unique(named):
            if dispatcher_error(str(d), platform):
                bad |= named == d
    if "ep_comm_overlap" in cols and model.num_mtp_layers:
        overlap_pp = np.asarray(cols["ep_comm_overlap"], dtype=bool)
        bad |= overlap_pp & ((model.num_mtp_layers > 1) | (pp == 1))
    if "recompute_modules" in cols:
        named = np.asarray(cols["recompute_modules"]).astype(str)
        precision = np.asarray(cols.get("precision", np.full(len(named), "bf16"))).astype(str)
        for m, p in {(m, p) for m, p in zip(named, precision, strict=True)
                     if m != DEFAULT_RECOMPUTE_MODULES}:
            if recompute_modules_error(m, p, model):
                bad |= (named == m) & (precision == p)
    known = find_framework(framework)
    if known is None:   # `validate` says why: the framework is not one advisor models
        bad |= True
    else:
        if "dp_sharding" in cols and known not in PP_WITH_FSDP:
            bad |= (np.asarray(cols["dp_sharding"]) == "full") & (pp > 1)
        if "torch_compile" in cols and known not in EAGER_BLOCKS:
            bad |= np.asarray(cols["torch_compile"], dtype=bool)
    if "precision" in cols:
        for precision in np.unique(np.asarray(cols["precision"]).astype(str)):
            if precision in PRECISIONS and not platform.supports(PRECISIONS[precision]):
                bad |= np.asarray(cols["precision"]).astype(str) == precision
    uneven = np.flatnonzero(~bad & ((np.asarray(cols.get("first_stage_layers", 0)) > 0)
                                    | (np.asarray(cols.get("last_stage_layers", 0)) > 0)))
    for i in uneven:
        try:
            check_uneven(ParallelConfig(**{k: _plain(cols[k][i]) for k in PARALLEL_FIELDS
                                           if k in cols}), model)
        except ConfigError:
            bad[i] = True
    return bad


def _ep_overlap_mtp_error(model: ModelSpec, pp: int) -> str | None:
    """Megatron-Core's multi-token-prediction rules for `ep_comm_overlap`."""
    if model.num_mtp_layers > 1:
        return (f"ep_comm_overlap runs with at most one MTP layer; {model.name} has "
                f"{model.num_mtp_layers}: turn it off.")
    if model.num_mtp_layers == 1 and pp == 1:
        return (f"ep_comm_overlap with {model.name}'s MTP layer needs pp > 1 (Megatron-Core); "
                f"raise pp or turn it off.")
    return None


def recompute_modules_error(modules: str, precision: str, model: ModelSpec) -> str | None:
    """Why Megatron-Core (`TransformerConfig.__post_init__`, 0.16) refuses selective recompute
    of `modules` (canonical names) for `model` at `precision`, or None."""
    names = set(str(modules).split())
    if "mla_up_proj" in names and not model.is_mla:
        return (f"recompute_modules mla_up_proj needs multi-latent attention; {model.name} has "
                f"none: drop mla_up_proj.")
    moe_only = sorted(names & {"moe_act", "moe", "shared_experts"})
    if moe_only and not model.is_moe:
        return (f"recompute_modules {' '.join(moe_only)} recompute MoE layers; {model.name} "
                f"is dense: use core_attn, layernorm or mlp.")
    if "shared_experts" in names and not model.num_shared_experts:
        return (f"recompute_modules shared_experts: {model.name} has no shared experts; drop "
                f"shared_experts.")
    if precision == "fp8" and names & {"moe_act", "layernorm"}:
        return ("recompute_modules moe_act and layernorm do not work with fp8 delayed scaling "
                "(Megatron-Core refuses them); use precision fp8-cs, or drop them.")
    return None


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def check_uneven(config: ParallelConfig, model: ModelSpec) -> None:
    """Megatron-Core's rules for `--decoder-first/last-pipeline-num-layers`: every stage keeps
    at least one layer, the middle stages split the rest evenly, and with a virtual pipeline
    every stage's layers split evenly over its vp chunks."""
    first, last, pp = config.first_stage_layers, config.last_stage_layers, config.pp
    rest = model.num_layers - first - last
    middle = pp - 2
    if rest < max(middle, 0) or (pp == 2 and first and last and rest):
        raise ConfigError(f"first_stage_layers + last_stage_layers ({first} + {last}) leave "
                          f"{rest} of {model.name}'s {model.num_layers} layers for "
                          f"{max(middle, 0)} middle stage(s); every stage needs a layer and all "
                          f"layers need a stage.")
    counts = stage_layer_counts(model.num_layers, pp, first=first, last=last)
    if min(counts) < 1 or sum(counts) != model.num_layers:
        raise ConfigError(f"the split {counts} of {model.name}'s {model.num_layers} layers over "
                          f"pp {pp} leaves a stage empty; lower first/last_stage_layers.")
    if middle > 0 and len(set(counts[1:-1])) > 1:
        raise ConfigError(f"the middle stages must split the remaining {sum(counts[1:-1])} "
                          f"layers evenly over {middle} stages (Megatron-Core); got "
                          f"{counts[1:-1]}: change first/last_stage_layers.")
    if config.vp > 1 and any(c % config.vp for c in counts):
        raise ConfigError(f"with vp {config.vp}, every stage's layers {counts} must split "
                          f"evenly over its {config.vp} virtual stages.")


def enumerate_space(job: Job, *, pins: dict[str, object] | None = None,
                    framework: str = "megatron") -> pd.DataFrame:
    """`space_table` as a DataFrame."""
    return space_table(job, pins=pins, framework=framework).to_frame()


def space_table(job: Job, *, pins: dict[str, object] | None = None,
                framework: str = "megatron") -> Table:
    """Every valid `ParallelConfig` for `job`, one row each (columns = `ParallelConfig` fields).

    Knobs enumerated: tp, cp, pp, vp, ep, etp (1 or tp), mbs (every divisor of gbs/dp),
    recompute (selective recompute of other modules than the attention core only where
    `recompute_modules` is pinned), dp_sharding, and overlap (all communication-overlap flags
    on, or all off); vp > 1 only where `framework`'s interleaved schedule runs the micro-batches
    per step (`advisor.core.interleaving`: Megatron-Core's groups of pp or more by default;
    torch.distributed.pipelining's equal rounds for TorchTitan and the other FSDP2 frameworks,
    which refuse the rest at their first step).
    Sequence parallelism is on whenever tp > 1 (what Megatron/NeMo recipes do). `pins` fixes
    any field to one value. One extra column, `tp_beyond_nvlink`, flags tp larger than the
    platform's NVLink domain.
    """
    pins = _checked_pins(pins or {})
    model, n = job.model, job.num_gpus
    torch_pp = uses_torch_pipelining(canonical_framework(framework))

    def pick(name: str, values: list) -> list:
        return [v for v in values if v == pins[name]] if name in pins else values

    blocks: list[dict[str, np.ndarray]] = []
    for tp in pick("tp", [t for t in divisors(n) if _tp_error(model, t) is None]):
        for cp in pick("cp", divisors(n // tp)):
            if cp > 1 and job.seq_len % (2 * cp):
                continue
            if tp > 1 and (job.seq_len // cp) % tp:
                continue
            for pp in pick("pp", [p for p in divisors(n // (tp * cp)) if p <= model.num_layers]):
                dp = n // (tp * cp * pp)
                if job.gbs % dp or ("dp" in pins and pins["dp"] != dp):
                    continue
                shardings = list(DP_SHARDING) if dp * cp > 1 else ["none"]
                if pp > 1:
                    shardings = [s for s in shardings if s != "full"]
                block = _block(tp=tp, cp=cp, pp=pp, dp=dp, gbs=job.gbs, torch_pp=torch_pp,
                               vps=pick("vp", vp_choices(model, pp)),
                               experts=_expert_layouts(model, tp=tp, dense_group=tp * cp * dp),
                               mbs=pick("mbs", divisors(job.gbs // dp)),
                               recompute=_recompute_choices(pins),
                               shardings=pick("dp_sharding", shardings))
                if block is not None:
                    blocks.append(block)
    if not blocks:
        table = Table({k: np.empty(0, dtype=object) for k in PARALLEL_FIELDS})
    else:
        columns = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
        rows = len(columns["tp"])
        for name, value in (("gbs", job.gbs), ("seq_len", job.seq_len),
                            ("precision", job.precision), ("grad_reduce_in_fp32", False),
                            ("attention", "flash"), ("torch_compile", False),
                            ("ep_comm_overlap", False),
                            ("moe_dispatcher", "auto"), ("dp_shard_size", 0),
                            ("first_stage_layers", 0),
                            ("last_stage_layers", 0), ("finetune", job.finetune),
                            ("lora_rank", job.lora_rank), ("lora_targets", job.lora_targets)):
            columns[name] = _constant(value, rows)
        # Sequence parallelism whenever tp > 1 (what Megatron/NeMo recipes do).
        columns["sequence_parallel"] = columns["tp"] > 1
        table = Table({k: columns[k] for k in PARALLEL_FIELDS})
    # Not enumerated: pinning sets them, on the layouts that can run them.
    fixed = {knob: pins[knob] for knob in ("grad_reduce_in_fp32", "attention", "ep_comm_overlap",
                                           "moe_dispatcher", "dp_shard_size") if knob in pins}
    table = table.with_columns(fixed)
    if fixed:
        table = table.take(~invalid_config_rows(table))
    for name, value in pins.items():
        table = table.take(table[name] == value)
    # Allowed but flagged: TP collectives then cross the scale-out network every layer.
    return table.with_columns(
        {"tp_beyond_nvlink": table["tp"] > job.platform.nvlink_domain_size})


def _recompute_choices(pins: dict[str, object]) -> list[tuple[str, str]]:
    """(recompute, recompute_modules) pairs to enumerate, in the knob's order (least memory
    saved first), less what `pins` rules out. Selective recompute of other modules is searched
    only where pinned (`recompute_modules`): the default rungs keep the search as wide as the
    frameworks' defaults."""
    choices = [("none", DEFAULT_RECOMPUTE_MODULES), ("selective", DEFAULT_RECOMPUTE_MODULES),
               ("full", DEFAULT_RECOMPUTE_MODULES)]
    if "recompute" in pins:
        choices = [c for c in choices if c[0] == pins["recompute"]]
    if "recompute_modules" in pins:
        modules = pins["recompute_modules"]
        choices = ([("selective", modules)] if modules != DEFAULT_RECOMPUTE_MODULES
                   else [c for c in choices if c[1] == modules])
    return choices


def _block(*, tp: int, cp: int, pp: int, dp: int, gbs: int, vps: list[int],
           experts: list[tuple[int, int]], mbs: list[int], recompute: list[tuple[str, str]],
           shardings: list[str], torch_pp: bool = False) -> dict[str, np.ndarray] | None:
    """The configurations of one (tp, cp, pp) split, as columns: every combination of vp,
    (ep, etp), mbs, recompute, sharding and overlap (all communication-overlap switches on, or
    all off) in that nesting order, less overlap-on rows with nothing to overlap and vp > 1
    where the interleaved schedule (Megatron-Core's, or torch.distributed.pipelining's where
    `torch_pp`) cannot run the micro-batches per step."""
    choices = (vps, experts, mbs, recompute, shardings, (True, False))
    if not all(choices):
        return None
    index = np.indices([len(c) for c in choices]).reshape(len(choices), -1)
    vp = np.asarray(vps)[index[0]]
    expert = np.asarray(experts).reshape(-1, 2)[index[1]]
    micro = np.asarray(mbs)[index[2]]
    sharding = _objects(shardings)[index[4]]
    overlap = np.array([True, False])[index[5]]
    grad = overlap & (dp * cp > 1)
    param = grad & (sharding != "none")
    tpo = overlap & (tp > 1)
    keep = ~(overlap & ~(grad | param | tpo))          # nothing to overlap: same as off
    # Interleaving as Megatron-Core runs it (at least pp micro-batches per step, in groups of
    # pp or, where that leaves a short last group, the larger group the emitters set), or as
    # torch.distributed.pipelining's ScheduleInterleaved1F1B does (max(1, M // pp) rounds that
    # must divide M): `advisor.core.interleaving`.
    keep &= ~((vp > 1) & (group_sizes(gbs // (micro * dp), pp, torch_pipelining=torch_pp) == 0))
    rows = int(keep.sum())
    return {"tp": np.full(rows, tp), "pp": np.full(rows, pp), "dp": np.full(rows, dp),
            "cp": np.full(rows, cp), "ep": expert[keep, 0], "etp": expert[keep, 1],
            "vp": vp[keep], "mbs": micro[keep],
            "recompute": _objects([r for r, _ in recompute])[index[3]][keep],
            "recompute_modules": _objects([m for _, m in recompute])[index[3]][keep],
            "dp_sharding": sharding[keep],
            "overlap_grad_reduce": grad[keep], "overlap_param_gather": param[keep],
            "tp_comm_overlap": tpo[keep]}


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _constant(value: object, rows: int) -> np.ndarray:
    return (_objects([value] * rows) if isinstance(value, str)
            else np.full(rows, value))


_JOB_FIELDS = ("gbs", "seq_len", "precision", "finetune", "lora_rank", "lora_targets")
"""Fields every configuration of a job shares: set on the `Job`, never pinned."""
_BOOL_FIELDS = tuple(f.name for f in dataclasses.fields(ParallelConfig) if f.type == "bool")


def _checked_pins(pins: dict[str, object]) -> dict[str, object]:
    """Pins with the field's type; job-level fields belong on the `Job`, not in pins."""
    out: dict[str, object] = {}
    for name, value in pins.items():
        if name in _JOB_FIELDS:
            raise ConfigError(f"{name} is part of the job, not a knob: set it on the Job "
                              f"(--{name.replace('_', '-')}).")
        if name not in PARALLEL_FIELDS:
            raise ConfigError(f"cannot pin {name!r}; pinnable: "
                              f"{', '.join(f for f in PARALLEL_FIELDS if f not in _JOB_FIELDS)}.")
        if name in _BOOL_FIELDS:
            out[name] = bool(value)
        elif name in ("recompute", "dp_sharding", "attention"):
            out[name] = str(value).lower()
        elif name == "recompute_modules":
            out[name] = recompute_modules_name(value)
        elif name == "moe_dispatcher":
            out[name] = dispatcher_name(value)
        else:
            try:
                out[name] = int(value)  # type: ignore[call-overload]
            except (TypeError, ValueError):
                raise ConfigError(f"{name} must be a whole number, got {value!r}.") from None
    modules = out.get("recompute_modules", DEFAULT_RECOMPUTE_MODULES)
    if modules != DEFAULT_RECOMPUTE_MODULES and out.get("recompute", "selective") != "selective":
        raise ConfigError(f"recompute_modules {modules!r} applies only to recompute selective "
                          f"(recompute is pinned to {out['recompute']}); drop one of the two.")
    return out


def _expert_layouts(model: ModelSpec, *, tp: int, dense_group: int) -> list[tuple[int, int]]:
    if not model.is_moe:
        return [(1, 1)]
    out = []
    for etp in sorted({1, tp}):
        for ep in divisors(model.num_experts):
            if dense_group % (ep * etp) == 0:
                out.append((ep, etp))
    return out


def config_from_row(row: pd.Series | dict) -> ParallelConfig:
    """A validated `ParallelConfig` from one row of an `enumerate_space` table."""
    values = {k: row[k] for k in PARALLEL_FIELDS if k in row}
    for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vp", "mbs", "gbs", "seq_len",
              "first_stage_layers", "last_stage_layers", "lora_rank"):
        if k in values:
            values[k] = int(values[k])
    for k in ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather",
              "tp_comm_overlap", "ep_comm_overlap"):
        if k in values:
            values[k] = bool(values[k])
    return ParallelConfig(**values)
