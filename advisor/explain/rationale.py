"""Why a recommended configuration: its knobs in a platform engineer's words, what the
alternatives trade, what the surrogate leaned on, and what to watch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from advisor.catalog import with_conditions
from advisor.core.knobs import LABEL, knob_values
from advisor.core.knobs import NAMES as KNOBS
from advisor.core.model import ModelSpec
from advisor.core.parallel import recompute_label, token_dispatcher
from advisor.core.platform import Platform
from advisor.core.space import config_from_row
from advisor.core.table import Table
from advisor.explain.bottlenecks import COOLER_INLET_C, predicted_changes
from advisor.perf.analytical import Breakdown, predict_config
from advisor.perf.thermal import chassis_for, inlet_temperature

Row = Mapping[str, object]
"""One configuration's values by column: a `Table.row`, a dict, or a pandas Series."""

SHARDING = {"none": "sharding none (plain data parallel)",
            "optimizer": "sharding optimizer (distributed optimizer, ZeRO-1)",
            "full": "sharding full (FSDP, ZeRO-3)"}
"""Prose for each `--dp-sharding` value: its name first, then what frameworks call it."""
NEAR_MEMORY_LIMIT = 0.05
"""Warn when less than this fraction of GPU memory is left: allocator fragmentation and uneven
MoE routing are not in the memory model."""
HIGH_THROTTLE_RISK = 0.3

#: Surrogate features → the knob or property a user recognises.
FEATURE_KNOBS = {
    "log2_tp": "TP", "tp_share": "TP", "tp_beyond_domain": "TP", "log2_etp": "ETP",
    "log2_pp": "PP", "pp_share": "PP", "bubble_share": "PP", "log2_vp": "VP",
    "microbatches_log2": "micro-batches per step", "log2_dp": "DP", "dp_share": "DP",
    "log2_cp": "CP", "cp_share": "CP", "log2_ep": "EP", "ep_share": "EP",
    "log2_mbs": "MBS", "log2_tokens_per_microbatch": "MBS", "recompute": "recompute",
    "recompute_share": "recompute", "dp_sharding": "sharding", "overlap": "overlap",
    "overhead_share": "MBS", "memory_headroom": "memory headroom", "precision": "precision",
    "log2_gbs": "global batch", "log2_seq_len": "sequence length", "log2_gpus": "GPU count",
}


def _layout(row: Row, model: ModelSpec, *, spaced: bool) -> list[str]:
    """The layout's sizes: `TP 8`, `PP 2 (VP 5)`, ... or tight: `TP8`, `PP2/VP5`, ..."""
    k = knob_values(row)
    gap = " " if spaced else ""

    def size(name: str, inner: str = "", inner_fmt: str = "") -> str:
        text = f"{name}{gap}{k[name.lower()]}"
        if inner and k[inner.lower()] > 1:
            text += inner_fmt.format(f"{inner}{gap}{k[inner.lower()]}")
        return text

    parts = [size("TP"), size("PP", "VP", " ({})" if spaced else "/{}"), size("DP")]
    if k["cp"] > 1:
        parts.append(size("CP"))
    if model.is_moe:
        parts.append(size("EP", "ETP", " {}" if spaced else "/{}"))
    parts.append(size("MBS"))
    return parts


def describe(row: Row, model: ModelSpec) -> str:
    """`TP 8 · PP 2 (VP 5) · DP 4 · MBS 1 · recompute none · distributed optimizer · overlap`."""
    k = knob_values(row)
    ep_overlap = ["EP all-to-all overlap"] if _ep_overlap(row) else []
    return " · ".join([*_layout(row, model, spaced=True), f"recompute {k['recompute']}",
                       SHARDING[k["dp_sharding"]] + _shard_group(row),
                       "overlap" if k["overlap"] else "no overlap", *ep_overlap])


def _shard_group(row: Row) -> str:
    """` within groups of 8` where hybrid sharding is on, else ""."""
    size = int(row.get("dp_shard_size", 0) or 0) if hasattr(row, "get") else 0
    return f" within groups of {size}" if size else ""


def _ep_overlap(row: Row) -> bool:
    value = row.get("ep_comm_overlap", False) if hasattr(row, "get") else False
    return bool(value)


def short(row: Row, model: ModelSpec) -> str:
    """`TP2 PP4/VP5 DP4 MBS1` (the layout; recompute, sharding and overlap go elsewhere)."""
    return " ".join(_layout(row, model, spaced=False))


def settings(row: Row) -> str:
    """`none·optimizer·ovl`: recompute, sharding (the `--dp-sharding` names), overlap (and
    `·ep-ovl` with the MoE all-to-all overlap)."""
    k = knob_values(row)
    return (f"{k['recompute']}·{k['dp_sharding']}"
            f"{'·ovl' if k['overlap'] else ''}{'·ep-ovl' if _ep_overlap(row) else ''}")


def layout_reasons(p: Breakdown, model: ModelSpec, platform: Platform) -> list[str]:
    """One phrase per knob that matters, with the step-time share it costs or saves."""
    c, s = p.config, p.step
    link = link_name(platform)
    domain = platform.nvlink_domain_size

    def pct(x: float) -> str:
        share = x / s.step_time_s
        return "<1%" if 0 < share < 0.005 else f"{share:.0%}"

    out = []
    if c.tp == 1:
        out.append("TP=1: no tensor-parallel all-reduce; each GPU holds whole layers")
    elif c.tp <= domain:
        out.append(f"TP={c.tp} keeps its all-reduce on {link} ({pct(s.tp_comm_s)} of the step "
                   f"exposed{' with overlap' if c.tp_comm_overlap else ''})")
    else:
        out.append(f"TP={c.tp} spans {c.tp // domain} {link} domains: all-reduce crosses the "
                   f"network ({pct(s.tp_comm_s)} of the step exposed)")
    if c.pp > 1:
        inter = f" interleaved over VP={c.vp}" if c.vp > 1 else ""
        out.append(f"PP={c.pp}{inter} costs a {pct(s.bubble_s)} bubble with "
                   f"{c.num_microbatches} micro-batches per step, and {pct(s.pp_comm_s)} "
                   f"in send/recv")
    if c.cp > 1:
        out.append(f"CP={c.cp} splits each {c.seq_len}-token sequence; the ring exchange "
                   f"leaves {pct(s.cp_comm_s)} exposed")
    if model.is_moe:
        dispatcher = token_dispatcher(model, c, platform)
        verb = (f"keeps the expert all-to-all inside one {link} domain" if c.ep * c.etp <= domain
                else "dispatches tokens across nodes with DeepEP (one network copy per node)"
                if dispatcher == "deepep" else "sends the expert all-to-all across nodes")
        out.append(f"EP={c.ep} {verb} ({pct(s.ep_comm_s)} of the step)")
    if c.dp * c.cp > 1:
        hybrid = (f" within groups of {c.shard_group} ({c.shard_replicas} replicas of each "
                  f"shard, all-reduced across them)" if c.shard_replicas > 1 else "")
        out.append(f"DP={c.dp} with {SHARDING[c.dp_sharding]}{hybrid}: gradient/parameter "
                   f"sync leaves "
                   f"{pct(s.dp_comm_s)} exposed"
                   f"{' behind overlap' if c.overlap_grad_reduce else ' (no overlap)'}")
    if c.recompute != "none":
        out.append(f"recompute {recompute_label(c.recompute, c.recompute_modules)} costs "
                   f"{pct(s.recompute_s)} of the step to fit "
                   f"{p.memory.total_bytes / 1e9:.0f} of {p.memory.capacity_bytes / 1e9:.0f} GB")
    else:
        out.append(f"no recompute: activations fit ({p.memory.total_bytes / 1e9:.0f} of "
                   f"{p.memory.capacity_bytes / 1e9:.0f} GB)")
    out.append(f"MBS={c.mbs}: {c.mbs * c.seq_len // c.cp:,} tokens per GPU per micro-batch, "
               f"{pct(s.overhead_s)} launch overhead")
    return out


def link_name(platform: Platform) -> str:
    return {"nvidia": "NVLink", "amd": "xGMI"}.get(platform.vendor.lower(), "shared-memory")


def _change(a: dict, b: dict) -> str:
    diffs = [f"{LABEL[k]}={_fmt(k, b[k])}" for k in KNOBS if a[k] != b[k]]
    return ", ".join(diffs) if diffs else "an equivalent layout"


def _fmt(knob: str, value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def tradeoff(pick: Row, other: Row, *, change: str | None = None) -> str:
    """`MBS=2 would add 1 % throughput for 9 % more peak power and higher thermal risk`
    (`change`: what differs, where the knobs do not say it)."""
    a, b = knob_values(pick), knob_values(other)

    def rel(col: str) -> float:
        return float(other[col]) / float(pick[col]) - 1.0

    tps, peak, energy = (rel("pred_tokens_per_sec_per_gpu"), rel("pred_peak_power_w"),
                         rel("pred_energy_j_per_token"))
    gain = (f"add {tps:.0%} throughput" if tps >= 0.005 else
            f"cost {-tps:.0%} throughput" if tps <= -0.005 else "match the throughput")
    costs = [f"{abs(peak):.0%} {'more' if peak > 0 else 'less'} peak power"
             if abs(peak) >= 0.005 else "", f"{abs(energy):.0%} "
             f"{'more' if energy > 0 else 'less'} energy per token"
             if abs(energy) >= 0.005 else ""]
    risk = float(other["pred_throttle_risk"]) - float(pick["pred_throttle_risk"])
    if abs(risk) >= 0.02:
        costs.append(f"{'higher' if risk > 0 else 'lower'} thermal risk "
                     f"({float(other['pred_throttle_risk']):.0%})")
    if float(other["pred_memory_gb"]) > float(pick["pred_memory_gb"]) * 1.05:
        costs.append(f"{float(other['pred_memory_gb']):.0f} GB per GPU")
    costs = [x for x in costs if x]
    tail = f" for {_join(costs)}" if costs else ""
    return f"{change or _change(a, b)} would {gain}{tail}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def neighbours(pick: Row, ranked: Table, limit: int = 3) -> list[dict]:
    """The runner-up, then the best configurations that differ from `pick` in one knob."""
    a = knob_values(pick)
    out = [ranked.row(1)] if len(ranked) > 1 else []
    seen = {tuple(knob_values(r).items()) for r in out} | {tuple(a.items())}
    for row in ranked.take(np.arange(1, min(len(ranked), 400))).rows():
        b = knob_values(row)
        if sum(a[k] != b[k] for k in KNOBS if k != "dp") == 1 and \
                tuple(b.items()) not in seen:
            seen.add(tuple(b.items()))
            out.append(row)
        if len(out) >= limit:
            break
    return out


MOE_KNOBS = ("EP", "ETP")


def contributions_in_words(contributions: Row, limit: int = 3, *,
                           moe: bool = True) -> str:
    """SHAP values of the surrogate's log(measured/analytical), grouped by knob; a dense model
    (`moe` False) has no EP or ETP to credit (their features sit at 1 for it)."""
    grouped: dict[str, float] = {}
    for feature, value in contributions.items():
        name = FEATURE_KNOBS.get(str(feature))
        if name and (moe or name not in MOE_KNOBS):
            grouped[name] = grouped.get(name, 0.0) + float(value)
    top = sorted(grouped.items(), key=lambda kv: -abs(kv[1]))[:limit]
    top = [(k, v) for k, v in top if abs(v) >= 0.005]
    if not top:
        return ""
    words = [f"{k} {'+' if v > 0 else '−'}{abs(v) * 100:.0f} %" for k, v in top]
    return ("measured runs correct the analytical throughput most for " + ", ".join(words)
            + " (surrogate SHAP contributions)")


RISK_MIN_DROP = 0.01
"""A thermal remedy is named only where it lowers the predicted risk by more than a point."""
LOWER_LIMIT_SHARE = 0.85
"""The lower power limit a thermal remedy tries: 85 % of the limit in force (within the range
the vendor's tool sets)."""


def thermal_remedies(row: Row, platform: Platform, model: ModelSpec) -> list[str]:
    """What lowers this layout's thermal risk: each change predicted with it applied (the
    analytical model), named with the risk it leaves and what it costs in throughput; a change
    that does not lower the risk is not named."""
    config = config_from_row(row)
    base = predict_config(model, platform, config)
    tries = []
    if config.mbs > 1:
        tries.append((f"micro-batch 1 instead of {config.mbs} (shorter bursts: Go et al. "
                      f"MICRO'25 finding 3)", config.replace(mbs=1), platform))
    if config.tp_comm_overlap or config.overlap_grad_reduce or config.overlap_param_gather:
        tries.append(("no compute/communication overlap (overlap heats: finding 4)",
                      config.replace(tp_comm_overlap=False, overlap_grad_reduce=False,
                                     overlap_param_gather=False), platform))
    low, _ = platform.power_limit_range_w
    limit = max(low, round(platform.limit_w * LOWER_LIMIT_SHARE / 10.0) * 10.0)
    if limit < platform.limit_w:
        tries.append((f"a {limit:.0f} W power limit", config,
                      with_conditions(platform, power_limit_w=limit, given_by="a remedy")))
    inlet = inlet_temperature(chassis_for(platform), platform) - COOLER_INLET_C
    tries.append((f"a {COOLER_INLET_C:.0f} °C cooler inlet ({inlet:.0f} °C)", config,
                  with_conditions(platform, inlet_c=inlet, given_by="a remedy")))
    out = []
    for what, after in predicted_changes(model, tries):
        if (base.memory.fits and not after.memory.fits) or (
                after.power.throttle_risk > base.power.throttle_risk - RISK_MIN_DROP):
            continue
        cost = after.step.tokens_per_sec_per_gpu / base.step.tokens_per_sec_per_gpu - 1.0
        out.append(f"{what} (risk {after.power.throttle_risk:.0%}, {cost:+.1%} throughput)")
    return out


def thermal_warning(row: Row, platform: Platform, model: ModelSpec) -> str:
    """The thermal risk in words, with the remedies that lower it for this layout."""
    remedies = thermal_remedies(row, platform, model)
    return (f"thermal risk {float(row['pred_throttle_risk']):.0%}: that likely a GPU of the job "
            f"reaches its {platform.thermal_slowdown_c:.0f} °C slowdown point and clocks down; "
            + (f"lowered by {'; '.join(remedies)}" if remedies else
               "no change tried here (micro-batch 1, no overlap, a lower power limit, a cooler "
               "inlet) is predicted to lower it"))


def warnings(row: Row, platform: Platform, model: ModelSpec, *,
             surrogate: bool = True) -> list[str]:
    out = []
    capacity_gb = platform.memory_capacity_bytes / 1e9
    headroom = 1.0 - float(row["pred_memory_gb"]) / capacity_gb
    if headroom < NEAR_MEMORY_LIMIT:
        out.append(f"near the memory limit: {float(row['pred_memory_gb']):.1f} of "
                   f"{capacity_gb:.1f} GB ({headroom:.0%} free); allocator fragmentation"
                   f"{' or uneven expert routing' if model.is_moe else ''} could run out of "
                   f"memory")
    if float(row["pred_throttle_risk"]) >= HIGH_THROTTLE_RISK:
        out.append(thermal_warning(row, platform, model))
    if not bool(row.get("pred_calibrated", True)):
        out.append(f"{platform.family} is uncalibrated: no measured run calibrated it, so "
                   f"throughput and MFU use the calibrated families' average efficiencies; "
                   f"treat the figures as a rough guide until a campaign measures it")
    if surrogate and bool(row.get("pred_extrapolation", False)):
        out.append("outside the measured data's support: the throughput band is wide and the "
                   "prediction leans on the analytical model"
                   if row.get("pred_source") == "surrogate" else
                   f"no measured runs of this model family on {platform.family}: analytical "
                   f"prediction, band from its cross-validated error")
    return out
