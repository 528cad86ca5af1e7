"""Plain-words explanation of one prediction: where the time goes, what is exposed, what limits
power, why it might throttle."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from advisor.catalog import with_conditions
from advisor.core.errors import AdvisorError
from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig, recompute_label, token_dispatcher
from advisor.core.platform import Platform
from advisor.core.space import validate
from advisor.perf.analytical import Breakdown, predict_config
from advisor.perf.thermal import chassis_for, inlet_temperature

LABELS = {
    "compute_s": "compute (GEMMs, attention, elementwise)",
    "recompute_s": "activation recompute",
    "tp_comm_s": "exposed tensor-parallel communication",
    "cp_comm_s": "exposed context-parallel ring exchange",
    "ep_comm_s": "expert-parallel all-to-all",
    "pp_comm_s": "pipeline send/recv",
    "dp_comm_s": "exposed data-parallel gradient/parameter sync",
    "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer step",
    "overhead_s": "kernel-launch overhead",
    "throttle_s": "clocks below maximum (power cap, thermal slowdown) on the straggler",
}


def _advice(component: str, prediction: Breakdown, platform: Platform, *,
            moe: bool = False, model: ModelSpec | None = None) -> str:
    """What would cut `component` for this layout (of a MoE model where `moe`): only the
    remedies that apply to it."""
    c = prediction.config
    domain = platform.nvlink_domain_size
    if component == "dp_comm_s":
        if c.dp_sharding == "full":
            return ("FSDP gathers every micro-batch: larger micro-batches, overlap, or the "
                    "distributed optimizer (dp_sharding optimizer) if memory allows")
        if not (c.overlap_grad_reduce and c.overlap_param_gather):
            return "turn on gradient-reduce/parameter-gather overlap or raise the global batch"
        return "raise the global batch (the sync is paid once per step) or lower dp"
    if component == "recompute_s":
        return ("use selective instead of full recompute if memory allows"
                if c.recompute == "full" else "turn recompute off if memory allows")
    if component == "throttle_s":
        return _throttle_advice(prediction, model, platform)
    remedies = {
        "tp_comm_s": [(c.tp > domain, f"keep TP inside the {domain}-GPU NVLink domain"),
                      (c.tp > 1, "lower tp"),
                      (c.sequence_parallel and not c.tp_comm_overlap,
                       "turn on TP communication overlap")],
        "cp_comm_s": [(c.tp * c.cp > domain,
                       f"keep tp × cp inside the {domain}-GPU NVLink domain"),
                      (c.cp > 1, "lower cp")],
        "ep_comm_s": [(not c.ep_comm_overlap and (c.pp == 1 or c.vp > 1)
                       and c.recompute != "full",
                       "overlap it with another micro-batch's compute (--ep-comm-overlap)"),
                      (c.ep * c.etp > domain and c.moe_dispatcher == "alltoall"
                       and platform.vendor == "nvidia",
                       "dispatch with DeepEP (--moe-dispatcher deepep: one network copy of a "
                       "token per remote node, not per remote expert)"),
                      (c.ep * c.etp > domain,
                       f"keep ep × etp inside the {domain}-GPU NVLink domain"),
                      (c.ep > 1, "lower ep (the all-to-all then spans fewer GPUs, each holding "
                                 "more experts)")],
        "pp_comm_s": [(c.pp > 1, "lower pp (TP+PP send/recv under-uses bandwidth)"),
                      (True, "raise mbs (fewer, larger messages)")],
        "bubble_s": [(True, "more micro-batches per step (smaller mbs or larger gbs)"),
                     (c.vp == 1, "interleaving (vp)"), (c.pp > 1, "lower pp")],
        "overhead_s": [(True, "larger micro-batches or CUDA graphs amortise launch costs"),
                       (moe, "a wider expert-parallel group: fewer experts per GPU, each "
                             "launching its own GEMMs")],
    }.get(component, [])
    applicable = [text for applies, text in remedies if applies]
    if not applicable:
        return f"nothing in this layout: the {LABELS[component]} it keeps is the least it can have"
    return ", ".join(applicable[:-1]) + (" or " if len(applicable) > 1 else "") + applicable[-1]


def _throttle_advice(prediction: Breakdown, model: ModelSpec | None,
                     platform: Platform) -> str:
    """What lowers the clocks' loss for this layout, each change predicted with it applied and
    named with its predicted gain; a change that does not raise throughput is not named."""
    gains = [f"{what} (+{gain:.1%} throughput)"
             for what, gain in checked_clock_remedies(prediction, model, platform) if gain > 0]
    if not gains:
        return ("nothing in this layout: its GEMMs ask for more than the limit allows, the "
                "ordinary state of a busy GPU, and no change tried here (micro-batch 1, less "
                "overlap, a cooler inlet, an uneven pipeline split) is predicted to help")
    return ", ".join(gains[:-1]) + (" or " if len(gains) > 1 else "") + gains[-1]


REMEDY_MIN_GAIN = 0.001
"""A remedy is named only if it is predicted to raise throughput by more than this (0.1 %: the
model's arithmetic, not a claim about noise)."""
COOLER_INLET_C = 5.0
"""How much cooler a \"cooler inlet\" remedy is tried at (a rear-door heat exchanger or a
cold-aisle setpoint change of a few degrees)."""


def checked_clock_remedies(prediction: Breakdown, model: ModelSpec | None,
                           platform: Platform) -> list[tuple[str, float]]:
    """(remedy, predicted throughput gain) for each change that may lower the clocks' loss of
    this layout, predicted by the analytical model with the change applied; only those above
    `REMEDY_MIN_GAIN`. Without the model, none (nothing can be checked)."""

    if model is None:
        return []
    c, p = prediction.config, prediction.power
    base = prediction.step.tokens_per_sec_per_gpu
    tries: list[tuple[str, ParallelConfig, Platform]] = []
    if c.mbs > 1:
        tries.append((f"micro-batch 1 instead of {c.mbs}", c.replace(mbs=1), platform))
    if c.tp_comm_overlap or c.overlap_grad_reduce or c.overlap_param_gather:
        tries.append(("no compute/communication overlap", c.replace(
            tp_comm_overlap=False, overlap_grad_reduce=False, overlap_param_gather=False),
            platform))
    if p.temp_rear_c > p.temp_front_c + 1.0:
        inlet = inlet_temperature(chassis_for(platform), platform) - COOLER_INLET_C
        tries.append((f"a {COOLER_INLET_C:.0f} °C cooler inlet ({inlet:.0f} °C)", c,
                      with_conditions(platform, inlet_c=inlet, given_by="a remedy")))
    if c.pp > 1:
        per = model.num_layers // c.pp
        for shift in (1, 2, 4):
            if per - shift >= 1:
                split = c.replace(first_stage_layers=per - shift, last_stage_layers=per - shift)
                tries.append((f"an uneven split with {per - shift} layers on the first and last "
                              f"stages", split, platform))
    out: dict[str, tuple[float, str]] = {}
    for what, after in predicted_changes(model, tries):
        if not after.memory.fits:
            continue
        gain = after.step.tokens_per_sec_per_gpu / base - 1.0
        key = "an uneven split" if what.startswith("an uneven split") else what
        if gain > REMEDY_MIN_GAIN and gain > _best(out, key):
            out[key] = (gain, what)     # of the uneven splits, the best
    return [(what, gain) for gain, what in sorted(out.values(), reverse=True)]


def _degraded_cause(prediction: Breakdown, model: ModelSpec, platform: Platform) -> str:
    """The biggest loss where degraded nodes set the pace (most of the clocks' loss is theirs):
    named as the cause, with what restoring their limit is predicted to give back."""
    p = prediction.power
    healthy = dataclasses.replace(platform, degraded_nodes=None, degraded_power_w=None)
    after = predict_config(model, healthy, prediction.config)
    gain = after.step.tokens_per_sec_per_gpu / prediction.step.tokens_per_sec_per_gpu - 1.0
    nodes = platform.degraded_nodes
    return (f"Biggest loss: {nodes} degraded node{'s' if nodes != 1 else ''} held at "
            f"{platform.degraded_power_w:.0f} W set{'s' if nodes == 1 else ''} the pace "
            f"({p.degraded_loss:.0%} of the step: the stage on "
            f"{'it' if nodes == 1 else 'them'} runs at the lower limit and the synchronous "
            f"step waits for it). To cut it: restore {'its' if nodes == 1 else 'their'} power "
            f"limit (+{gain:.1%} throughput with every node healthy) or run without "
            f"{'it' if nodes == 1 else 'them'} (recommend, given the same degraded nodes, "
            f"compares the job on the healthy ones).")


def predicted_changes(model: ModelSpec, tries: list[tuple[str, ParallelConfig, Platform]]
                      ) -> Iterator[tuple[str, Breakdown]]:
    """(what, the analytical prediction with it applied) for each change in `tries` (what,
    the changed layout, where it runs) that the configuration rules allow."""

    for what, config, where in tries:
        try:
            validate(config, model, where, num_gpus=config.world_size)
            yield what, predict_config(model, where, config)
        except AdvisorError:
            continue


def _best(found: dict, key: str) -> float:
    return found[key][0] if key in found else -1.0


DISPATCHER_WORDS = {"alltoall": "all-to-all dispatch", "deepep": "DeepEP dispatch"}


def _experts(c: ParallelConfig, model: ModelSpec, platform: Platform) -> str:
    """`, ep 32 (DeepEP dispatch, overlapped)` for a MoE layout: the dispatcher priced."""
    if not model.is_moe:
        return ""
    dispatcher = token_dispatcher(model, c, platform)
    if dispatcher == "none":
        return f", ep {c.ep}"
    overlap = ", overlapped" if c.ep_comm_overlap else ""
    return f", ep {c.ep} ({DISPATCHER_WORDS[dispatcher]}{overlap})"


def explain(prediction: Breakdown, model: ModelSpec, platform: Platform) -> list[str]:
    """Sentences, most important first."""
    c, s, p, m = prediction.config, prediction.step, prediction.power, prediction.memory
    lines = [
        f"{model.display_name or model.name} on {c.world_size} × {platform.display_name}: "
        f"tp {c.tp}, pp {c.pp}{f' (vp {c.vp})' if c.vp > 1 else ''}, dp {c.dp}"
        f"{f' (shards within groups of {c.shard_group})' if c.shard_replicas > 1 else ''}"
        f", cp {c.cp}"
        f"{_experts(c, model, platform)}, mbs {c.mbs}, gbs {c.gbs}, "
        f"{c.num_microbatches} micro-batches per step, {c.precision}, recompute "
        f"{recompute_label(c.recompute, c.recompute_modules)}.",
        f"Step {s.step_time_s:.2f} s → {s.tokens_per_sec_per_gpu:,.0f} tokens/s per GPU, "
        f"{s.tflops_per_gpu:,.0f} model TFLOP/s per GPU (MFU {s.mfu:.0%} of "
        f"{c.precision_class.upper()} peak).",
    ]
    parts = sorted(s.components().items(), key=lambda kv: -kv[1])
    shown = [f"{LABELS[k]} {v:.2f} s ({v / s.step_time_s:.0%})" for k, v in parts
             if v / s.step_time_s >= 0.01]
    lines.append("Where the time goes: " + "; ".join(shown) + ".")
    waste = [(k, v) for k, v in parts if k not in ("compute_s", "optimizer_s")
             and v / s.step_time_s >= 0.05]
    if waste and waste[0][0] == "throttle_s" and p.degraded_loss > (
            waste[0][1] / s.step_time_s - p.degraded_loss):
        lines.append(_degraded_cause(prediction, model, platform))
    elif waste:
        k, v = waste[0]
        lines.append(f"Biggest loss: {LABELS[k]} ({v / s.step_time_s:.0%} of the step). To cut "
                     f"it: {_advice(k, prediction, platform, moe=model.is_moe, model=model)}.")
    else:
        lines.append("Compute-bound: communication, bubble and overheads together stay under "
                     f"{sum(v for k, v in parts if k != 'compute_s') / s.step_time_s:.0%} "
                     "of the step.")
    lines.append(
        f"Memory: {m.total_bytes / 1e9:.1f} of {m.capacity_bytes / 1e9:.1f} GB on the heaviest "
        f"stage ({'fits' if m.fits else 'does NOT fit'}; weights {m.weights_bytes / 1e9:.1f}, "
        f"gradients {m.gradients_bytes / 1e9:.1f}, optimizer {m.optimizer_bytes / 1e9:.1f}, "
        f"activations {m.activations_bytes / 1e9:.1f} GB).")
    busy = (s.compute_s + s.recompute_s) / s.step_time_s
    limit = (f"the GEMM phases ask for {p.gemm_power_demand_w:.0f} W against a "
             f"{p.power_limit_w:.0f} W limit, so the power cap binds"
             if p.gemm_power_demand_w > p.power_limit_w else
             f"the GEMM phases draw {p.gemm_power_demand_w:.0f} W, under the "
             f"{p.power_limit_w:.0f} W limit")
    lines.append(
        f"Power: {p.avg_power_w:.0f} W average (never above the limit), {p.peak_power_w:.0f} W "
        f"peak per GPU (the highest 50 ms sample, which may pass the limit briefly); the GPUs "
        f"compute {busy:.0%} of the step and {limit}. {p.energy_j_per_token:.3f} J per token "
        f"on the GPU boards, {p.samples_per_mj:,.0f} samples per MJ.")
    lines.append(_throttle_line(p, platform, prediction))
    lines.append(
        "These are analytical predictions"
        + ("" if prediction.calibrated else f" with uncalibrated efficiencies ({platform.family} "
           "has no measured runs)")
        + "; the power model is fitted on measured A40/A100 power (datasets/reference/power) "
          "and an H200 probe (datasets/probes), the spreads between GPUs on 392 V100s "
          "(datasets/reference/thermal), and the chassis "
          "thermals are partly placeholders (advisor/catalog/chassis.toml) until campaigns "
          "measure them.")
    return lines


def _throttle_line(p, platform, prediction) -> str:
    """Name the mechanisms and the expected losses: bursts against the power cap, overlap
    heating, bubbles, the rear-slot straggler, the slowest of N GPUs, thermal slowdown."""

    chassis = chassis_for(platform)
    row = chassis.row[p.straggler_slot] if p.straggler_slot < chassis.num_slots else "front"
    mechanisms = []
    if p.gemm_power_demand_w > p.power_limit_w:
        mechanisms.append(
            f"the sustained compute bursts ask for {p.gemm_power_demand_w:.0f} W against the "
            f"{p.power_limit_w:.0f} W limit, so clocks drop to {p.min_clock_frac:.0%} of "
            f"maximum while they run ({p.throttle_risk_power:.0%} of the step): "
            f"{p.power_cap_loss:.1%} of the step")
    if p.straggler_loss > 0.0005:
        mechanisms.append(f"capped GPUs differ in speed and the synchronous step waits for the "
                          f"slowest of {prediction.config.world_size:,}: {p.straggler_loss:.1%}")
    if p.thermal_loss > 0.0005 or p.throttle_risk > 0.01:
        mechanisms.append(f"a {p.throttle_risk:.0%} chance that a GPU reaches the "
                          f"{platform.thermal_slowdown_c:.0f} °C slowdown point (inlet "
                          f"{inlet_temperature(chassis, platform):.0f} °C): "
                          f"{p.thermal_loss:.1%} expected")
    if p.degraded_loss > 0:
        mechanisms.append(f"{platform.degraded_nodes} degraded node(s) held at "
                          f"{platform.degraded_power_w:.0f} W slow the stage they hold: "
                          f"{p.degraded_loss:.1%}")
    if prediction.config.overlap_grad_reduce or prediction.config.tp_comm_overlap:
        mechanisms.append("overlapped communication adds its draw on top of the compute "
                          "(overlap heats)")
    bubble = prediction.step.bubble_s / prediction.step.step_time_s
    if bubble >= 0.1:
        mechanisms.append(f"the pipeline idles {bubble:.0%} of the step in its bubble, so the "
                          f"average ({p.avg_power_w:.0f} W) sits well below the bursts")
    position = (f"front GPUs about {p.temp_front_c:.0f} °C, rear GPUs about "
                f"{p.temp_rear_c:.0f} °C, bursts peak at {p.peak_temp_c:.0f} °C "
                f"({platform.cooling}-cooled, chassis {chassis.name})")
    straggler = (f"The pace is set by a {row}-slot GPU (slot {p.straggler_slot}) of stage "
                 f"{p.straggler_stage}"
                 + (": it breathes the front GPUs' exhaust, leaks more and keeps less of the "
                    "limit for its clock" if row == "rear" else "") + ".")
    head = f"Expected loss {p.throttle_loss:.1%} of throughput"
    if not mechanisms:
        return f"{head}: {position}. {straggler}"
    return f"{head}: {'; '.join(mechanisms)}; {position}. {straggler}"
