"""Tables, sentences and JSON for `recommend` and `compare`."""

from __future__ import annotations

import math

from rich import box
from rich.console import Console
from rich.table import Table as RichTable

from advisor.cli.common import POWER_SEMANTICS
from advisor.core.parallel import finetune_label
from advisor.core.table import Table
from advisor.explain.rationale import describe, settings, short
from advisor.perf.money import electricity_usd_per_kwh
from advisor.perf.thermal import chassis_for, inlet_temperature
from advisor.search.compare import Comparison
from advisor.search.engine import PRUNE_SHARE
from advisor.search.recommend import Choice, Recommendation
from advisor.search.why_not import LayoutVerdict

FRONT_ROWS = 8
"""Rows of a Pareto front shown in the terminal (JSON and --plot get all of it)."""


def _band(p) -> str:
    return (f"{p.tokens_per_sec_per_gpu:,.0f}\n"
            f"{p.tokens_per_sec_per_gpu_p10:,.0f}–"
            f"{p.tokens_per_sec_per_gpu_p90:,.0f}")


def _training(job) -> str:
    """`, LoRA rank 16 (attention)` for a fine-tuning job (every header and table title says
    what is trained), "" for pre-training."""
    what = finetune_label(job)
    return f", {what}" if what else ""


def _headline(rec: Recommendation, seconds: float) -> str:
    j = rec.job
    search = ("exhaustive search" if rec.engine == "exhaustive" else
              f"Optuna, {rec.num_trials} trials this run in study {rec.study_name}")
    limits = rec.constraints.describe()
    if j.platform.power_limit_w is not None:
        limits.append(f"GPU power limit {j.platform.limit_w:.0f} W"
                      + (" (chosen by the search)" if rec.limit_tradeoff else ""))
    if j.platform.inlet_c is not None:
        limits.append(f"inlet {j.platform.inlet_c:.0f} °C")
    if j.platform.degraded_nodes:
        limits.append(f"{j.platform.degraded_nodes} node(s) degraded to "
                      f"{j.platform.degraded_power_w:.0f} W")
    pins = ", ".join(f"{k}={v}" for k, v in rec.pins.items())
    return (f"{j.model.display_name or j.model.name} on {j.num_gpus} × "
            f"{j.platform.display_name}, seq {j.seq_len}, gbs {j.gbs}, {j.precision}"
            f"{_training(j)}; objective "
            f"{rec.objective}{'; ' + '; '.join(limits) if limits else ''}"
            f"{'; pinned ' + pins if pins else ''}.\n"
            f"{rec.num_valid:,} valid configurations{' tried' if rec.engine == 'optuna' else ''}"
            f", {rec.num_fit:,} fit in memory, "
            + (f"{rec.num_fit - rec.num_pruned:,} could reach {PRUNE_SHARE:.0%} of the best one's "
               f"throughput "
               f"(a bound rules out the rest), " if rec.num_pruned else "")
            + f"{rec.num_feasible:,} meet the constraints ({search}, {seconds:.1f} s)."
            + (f"\nMemory: {j.platform.capacity_note()}." if j.platform.capacity_note() else ""))


def print_recommendation(console: Console, rec: Recommendation, *, seconds: float,
                         layout: LayoutVerdict | None = None) -> None:
    console.print(_headline(rec, seconds))
    capacity = rec.job.platform.memory_capacity_bytes / 1e9
    table = RichTable(title=f"Recommended configurations{_training(rec.job)}",
                      title_justify="left",
                      box=box.SIMPLE_HEAD)
    for col in ("#", "configuration", "tok/s/GPU\np10–p90", "MFU", "GB\n(free)",
                "W avg\npeak 50ms", "J/tok\n$/Mtok", "exp. loss\ncap/N/heat", "thermal\nrisk"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for c in rec.choices:
        p = c.prediction
        free = 1 - p.memory_gb / capacity
        row = c.config.to_dict()
        table.add_row(str(c.rank), f"{short(row, rec.job.model)}\n{settings(row)}", _band(p),
                      f"{p.mfu:.0%}", f"{p.memory_gb:.0f}\n({free:.0%})",
                      f"{p.avg_power_w:.0f}\n{p.peak_power_w:.0f}",
                      f"{p.energy_j_per_token:.2f}\n{_usd(p.usd_per_million_tokens)}",
                      f"−{p.breakdown.power.throttle_loss:.1%}\n"
                      f"{p.breakdown.power.loss_split()}", _risk(p.throttle_risk))
    console.print(table)
    sources = sorted({c.prediction.source for c in rec.choices})
    console.print(f"Throughput from the {' and '.join(sources)} model; power and thermal "
                  f"analytical.", style="dim")
    console.print(power_legend(rec.job.platform, rec.job.num_gpus), style="dim")
    for note in rec.ranking:
        console.print(note, style="dim")
    if rec.degraded is not None:
        console.print("\nDegraded nodes: " + rec.degraded.describe(),
                      style="yellow" if rec.degraded.leave_out else None)
    if layout is not None:
        console.print("\nWhy not this layout? " + layout.describe(rec.job.model))
    for c in rec.choices:
        _print_choice(console, c)
    if rec.tradeoffs:
        console.print("\nTrade-offs against #1:", style="bold")
        for line in rec.tradeoffs:
            console.print(f"  • {line}")
    _print_limits(console, rec)
    _print_front(console, rec.power_front, "pred_peak_power_w", "peak W", rec)
    _print_front(console, rec.energy_front, "pred_energy_j_per_token", "J/token", rec)


def _usd(value: float) -> str:
    return "n/a" if value != value else f"${value:.3f}"


def _risk(probability: float) -> str:
    """A probability as a person reads it: "<1%" rather than a misleading "0%"."""
    if probability < 0.005:
        return "<1%" if probability > 0.0005 else "0%"
    return f"{probability:.0%}"


def power_legend(platform, num_gpus: int) -> str:
    """What the power and loss columns mean, for this platform and room."""
    chassis = chassis_for(platform)
    inlet = inlet_temperature(chassis, platform)
    return (f"W avg: mean draw per GPU over the step (never above the {platform.limit_w:.0f} W "
            f"limit); peak 50ms: the highest 50 ms NVML instantaneous sample, which may pass "
            f"the limit briefly. Expected loss, a share of the step on the GPU that sets the "
            f"pace: cap = clocks below maximum under the power limit (ordinary for a busy GPU), "
            f"N = waiting for the slowest of {num_gpus:,} GPUs (speeds differ by GPU), heat = "
            f"thermal slowdown weighted by its probability. Thermal risk: the probability that "
            f"a GPU reaches its {platform.thermal_slowdown_c:.0f} °C slowdown point, "
            f"inlet {inlet:.0f} °C ({chassis.name}). J/tok: energy per token at the wall (each "
            f"GPU with its share of the node's host, × PUE {platform.pue or 1:g}); $/Mtok: "
            f"dollars per million tokens, {_gpu_hour(platform)} and "
            f"${electricity_usd_per_kwh(platform):.3g}/kWh.")


def _gpu_hour(platform) -> str:
    return ("no GPU-hour price (--gpu-hour-price)" if platform.gpu_hour_usd is None else
            f"${platform.gpu_hour_usd:.2f} per GPU-hour")


def _print_choice(console: Console, c: Choice) -> None:
    console.print(f"\n#{c.rank} {c.summary}", style="bold")
    console.print("  " + "; ".join(c.reasons) + ".")
    if c.contributions:
        console.print(f"  Learned: {c.contributions}.")
    if c.placement:
        console.print(f"  placement: {c.placement.describe()} (analytical).", style="cyan")
    for w in c.warnings:
        console.print(f"  warning: {w}.", style="yellow")


def _print_limits(console: Console, rec: Recommendation) -> None:
    """#1 across the power limits the search tried: the time–energy trade-off."""
    if not rec.limit_tradeoff:
        return
    board = rec.limit_tradeoff[0]
    table = RichTable(title=f"#1 across GPU power limits (the {rec.objective} objective "
                      f"searched them; set with nvidia-smi -pl / amd-smi set --power-cap)"
                      f"{_training(rec.job)}",
                      title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("limit W", "tok/s/GPU", "J/token", "W avg", "time", "energy"):
        table.add_column(col, justify="right")
    chosen = rec.job.platform.limit_w
    for point in rec.limit_tradeoff:
        table.add_row(f"{point.power_limit_w:.0f}{' ✓' if point.power_limit_w == chosen else ''}",
                      f"{point.tokens_per_sec_per_gpu:,.0f}",
                      f"{point.energy_j_per_token:.3f}", f"{point.avg_power_w:.0f}",
                      f"{point.step_time_s / board.step_time_s - 1:+.1%}",
                      f"{point.energy_j_per_token / board.energy_j_per_token - 1:+.1%}")
    console.print(table)


def _print_front(console: Console, front: Table, cost: str, label: str,
                 rec: Recommendation) -> None:
    if len(front) < 2:
        return
    if len(front) > FRONT_ROWS:  # evenly along the front, both ends kept
        picks = sorted({round(i * (len(front) - 1) / (FRONT_ROWS - 1)) for i in range(FRONT_ROWS)})
        front = front.take(picks)
    fmt = "{:.3f}" if "energy" in cost else "{:.0f}"
    table = RichTable(title=f"Pareto front: throughput against {label}{_training(rec.job)}",
                      title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("layout", "recompute·sharding", "tokens/s/GPU", label):
        table.add_column(col, justify="right" if col in ("tokens/s/GPU", label) else "left")
    for row in front.rows():
        table.add_row(short(row, rec.job.model), settings(row),
                      f"{row['pred_tokens_per_sec_per_gpu']:,.0f}", fmt.format(row[cost]))
    console.print(table)


def _clean(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _front_json(front: Table, cost: str, model) -> list[dict]:
    return [{"configuration": describe(r, model),
             "tokens_per_sec_per_gpu": _clean(r["pred_tokens_per_sec_per_gpu"]),
             cost.removeprefix("pred_"): _clean(r[cost])} for r in front.rows()]


def _inlet(platform) -> float:
    return inlet_temperature(chassis_for(platform), platform)


def recommendation_json(rec: Recommendation, *, launch: str | None, emitter: str | None,
                        seconds: float, launch_note: str = "",
                        layout: LayoutVerdict | None = None) -> dict:
    j = rec.job
    return {
        "model": j.model.name, "platform": j.platform.name, "num_gpus": j.num_gpus,
        "seq_len": j.seq_len, "gbs": j.gbs, "precision": j.precision,
        "training": finetune_label(j) or "pre-training",
        "objective": rec.objective, "risk": rec.risk, "ranking": rec.ranking,
        "constraints": rec.constraints.__dict__, "pins": rec.pins,
        "power_limit_w": j.platform.limit_w, "inlet_c": _inlet(j.platform),
        "power_semantics": POWER_SEMANTICS,
        "engine": rec.engine, "num_valid": rec.num_valid, "num_fit": rec.num_fit,
        "num_feasible": rec.num_feasible, "num_pruned": rec.num_pruned,
        "num_trials": rec.num_trials,
        "study_name": rec.study_name, "seconds": round(seconds, 3),
        "choices": [{
            "rank": c.rank, "summary": c.summary, "config": c.config.to_dict(),
            "predicted": {k: _clean(v) for k, v in c.prediction.values().items()},
            "breakdown_s": c.prediction.breakdown.step.components(), "reasons": c.reasons,
            "warnings": c.warnings, "contributions": c.contributions,
            "throttle_loss": c.prediction.breakdown.power.throttle_loss,
            "expected_loss": c.prediction.breakdown.power.losses(),
            "thermal_risk": c.prediction.throttle_risk,
            "power_limit_w": c.prediction.breakdown.power.power_limit_w,
            "placement": c.placement.to_dict() if c.placement else None}
            for c in rec.choices],
        "tradeoffs": rec.tradeoffs,
        "power_limit_tradeoff": [p.to_dict() for p in rec.limit_tradeoff],
        "degraded_nodes": rec.degraded.to_dict() if rec.degraded else None,
        "pareto_peak_power": _front_json(rec.power_front, "pred_peak_power_w", j.model),
        "pareto_energy": _front_json(rec.energy_front, "pred_energy_j_per_token", j.model),
        "launch": ({"framework": emitter, "command": launch, "note": launch_note} if launch
                   else None),
        "layout": None if layout is None else {
            "layout": layout.layout, "rank": layout.rank, "exact_rank": layout.exact_rank,
            "rank_at_least": layout.at_least, "gap": layout.gap, "why": layout.why,
            "configuration": (None if layout.best_variant is None else
                              describe(layout.best_variant, j.model)),
            "tokens_per_sec_per_gpu": (None if layout.best_variant is None else _clean(
                layout.best_variant["pred_tokens_per_sec_per_gpu"]))},
    }


def print_comparison(console: Console, result: Comparison) -> None:
    m = result.model
    training = _training(result.sides[0].recommendation.job)
    console.print(f"{m.display_name or m.name}, seq {result.seq_len}, gbs {result.gbs}"
                  f"{training}; objective {result.objective}.")
    table = RichTable(title=f"Best configuration per side{training}", title_justify="left",
                      box=box.SIMPLE_HEAD)
    for col in ("side and configuration", "tok/s job\nper GPU", "MFU", "J/tok",
                "$/Mtok\n($/GPU-h)", "W /node, GPUs\nonly: avg·peak", "slowest\nGPU",
                "thermal\nrisk", "comm\n+bubble"):
        table.add_column(col, justify="left" if col.startswith("side") else "right",
                         no_wrap=col.startswith("side"))
    for s in result.sides:
        p = s.best.prediction
        row = s.best.config.to_dict()
        table.add_row(f"{s.label}{' ✓ best' if s is result.winner else ''}\n"
                      f"{short(row, m)}\n{settings(row)}",
                      f"{s.tokens_per_sec:,.0f}\n{s.tokens_per_sec_per_gpu:,.0f}",
                      f"{p.mfu:.0%}", f"{s.energy_j_per_token:.3f}",
                      ("n/a" if s.usd_per_million_tokens is None else
                       f"{s.usd_per_million_tokens:.2f}\n({s.gpu_hour_usd:.2f})"),
                      f"{p.avg_power_w * s.gpus_per_node:,.0f}\n{s.peak_power_per_node_w:,.0f}",
                      f"−{s.straggler_loss:.1%}", _risk(p.throttle_risk), f"{s.comm_share:.0%}")
    console.print(table)
    console.print("Verdict:", style="bold")
    for line in result.verdict:
        console.print(f"  • {line}")


def comparison_json(result: Comparison) -> dict:
    return {
        "model": result.model.name, "seq_len": result.seq_len, "gbs": result.gbs,
        "power_semantics": POWER_SEMANTICS,
        "training": finetune_label(result.sides[0].recommendation.job) or "pre-training",
        "objective": result.objective, "winner": result.winner.label,
        "verdict": result.verdict,
        "sides": [{
            "label": s.label, "platform": s.platform.name, "num_gpus": s.num_gpus,
            "summary": s.best.summary, "config": s.best.config.to_dict(),
            "tokens_per_sec": s.tokens_per_sec, "tokens_per_sec_per_gpu": s.tokens_per_sec_per_gpu,
            "energy_j_per_token": s.energy_j_per_token,
            "gpu_hour_usd": s.gpu_hour_usd, "usd_per_million_tokens": s.usd_per_million_tokens,
            "peak_power_per_node_gpus_w": s.peak_power_per_node_w,
            "throttle_risk": s.best.prediction.throttle_risk,
            "avg_power_per_node_gpus_w": s.best.prediction.avg_power_w * s.gpus_per_node,
            "straggler_loss": s.straggler_loss,
            "expected_loss": s.best.prediction.breakdown.power.losses(),
            "comm_share": s.comm_share, "reasons": s.best.reasons,
            "warnings": s.best.warnings} for s in result.sides],
    }
