"""Thermal-aware pipeline placement: an uneven layer split that takes work off the stage that
sets the pipeline's pace, proposed only where the model predicts a gain.

A synchronous pipeline runs at its slowest stage (`advisor/perf/power.py`): the stage whose GPUs
sit in rear slots and clock lower, or the one that also carries the output layer and loss, or
the first with the embedding. Go et al. (MICRO 2025, finding 5) moved layers between stages
this way — Llama3-70B PP4 21/19 gained about 4 % samples/MJ, GPT3-175B PP8 13/11 lost about
7 % — so a split is worth proposing only when the model, stage by stage, says so.

    from advisor.search.placement import propose_placement
    best = propose_placement(model, platform, config, objective="throughput")
    best.config        # the ParallelConfig with first/last_stage_layers set (or None: no gain)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig
from advisor.core.platform import Platform
from advisor.perf.calibration import Calibration
from advisor.perf.layout import stage_layer_counts
from advisor.search.objective import LOSS_BOUNDS, POWER_BOUNDS, Constraints, node_host_w

MAX_SHIFT = 4
"""Layers moved at most from the even share at either end: the findings moved one or two, and a
larger shift only moves the bottleneck to the receiving stage."""
MIN_GAIN = 0.005
"""The smallest predicted gain worth proposing (0.5 %): below it the change is within the
model's own noise between neighbouring layouts."""
METRICS = {"throughput": "tokens/s per GPU", "energy": "samples per MJ",
           "balanced": "tokens/s × samples per MJ",
           "cost": "tokens/s per GPU (one platform, one price)"}
"""What the proposal improves, per objective (`advisor.search.objective.OBJECTIVES`)."""


@dataclass(frozen=True)
class Placement:
    """A proposed uneven split of one configuration, with its predicted effect (analytical)."""

    config: ParallelConfig
    """The configuration with `first_stage_layers` / `last_stage_layers` set."""
    layers_before: tuple[int, ...]
    """Layers per stage of the even split."""
    layers_after: tuple[int, ...]
    metric: str
    """What improves (`METRICS`)."""
    gain: float
    """Relative improvement of `metric` (0.012 = +1.2 %)."""
    straggler_before: str
    """The GPU that set the pace before, in words."""
    straggler_after: str

    def describe(self) -> str:
        before = "/".join(map(str, self.layers_before))
        after = "/".join(map(str, self.layers_after))
        return (f"uneven split {after} layers (was {before}): {self.gain:+.1%} {self.metric}; "
                f"the pace was set by {self.straggler_before}, now by {self.straggler_after}")

    def to_dict(self) -> dict:
        return {"first_stage_layers": self.config.first_stage_layers,
                "last_stage_layers": self.config.last_stage_layers,
                "layers_per_stage": list(self.layers_after),
                "layers_per_stage_even": list(self.layers_before), "metric": self.metric,
                "gain": self.gain, "straggler_before": self.straggler_before,
                "straggler_after": self.straggler_after, "source": "analytical"}


def candidate_splits(model: ModelSpec, config: ParallelConfig) -> list[ParallelConfig]:
    """Every uneven split within `MAX_SHIFT` layers of the even share at either end that
    Megatron-Core can build (`advisor.core.space.validate`'s rules), the even split excluded."""
    from advisor.core.space import check_uneven

    if config.pp < 2:
        return []
    even = stage_layer_counts(model.num_layers, config.pp)
    base = config.replace(first_stage_layers=0, last_stage_layers=0)
    out, seen = [], {tuple(even)}
    for first in range(even[0] - MAX_SHIFT, even[0] + MAX_SHIFT + 1):
        for last in range(even[-1] - MAX_SHIFT, even[-1] + MAX_SHIFT + 1):
            if first < 1 or last < 1:
                continue
            candidate = base.replace(first_stage_layers=first, last_stage_layers=last)
            try:
                check_uneven(candidate, model)
            except ConfigError:
                continue
            counts = tuple(stage_layer_counts(model.num_layers, config.pp, first=first,
                                              last=last))
            if counts not in seen:
                seen.add(counts)
                out.append(candidate)
    return out


def _metric(table: dict[str, np.ndarray], objective: str) -> np.ndarray:
    tps = np.array(table["tokens_per_sec_per_gpu"], dtype=float)
    per_mj = np.array(table["samples_per_mj"], dtype=float)
    return {"throughput": tps, "energy": per_mj, "balanced": tps * per_mj, "cost": tps}[objective]


def _allowed(table: dict[str, np.ndarray], constraints: Constraints, *, num_gpus: int,
             platform: Platform) -> np.ndarray:
    ok = np.asarray(table["fits"], dtype=bool) & (
        np.asarray(table["total_bytes"], dtype=float)
        <= np.asarray(table["capacity_bytes"], dtype=float) * (1.0 - constraints.memory_margin))
    for name, (violation, _) in POWER_BOUNDS.items():
        limit = getattr(constraints, name)
        if limit is None:
            continue
        column = "peak_power_w" if violation == "peak_power_w" else "avg_power_w"
        power = np.asarray(table[column], dtype=float)
        if violation == "job_power_w":
            power = power * num_gpus
        elif violation == "node_power_w":
            power = power * min(num_gpus, platform.num_gpus_per_node) + node_host_w(platform)
        ok &= power <= limit
    if constraints.max_throttle_risk is not None:
        ok &= np.asarray(table["throttle_risk"], dtype=float) <= constraints.max_throttle_risk
    for name, (column, _) in LOSS_BOUNDS.items():
        if getattr(constraints, name) is not None:
            ok &= np.asarray(table[column], dtype=float) <= getattr(constraints, name)
    return ok


def straggler_words(model: ModelSpec, platform: Platform, config: ParallelConfig,
                    stage: int, slot: int) -> str:
    """'stage 3 of 4 (20 layers + output layer), rear slot 5' and the like."""
    from advisor.perf.thermal import chassis_for

    counts = stage_layer_counts(model.num_layers, config.pp, first=config.first_stage_layers,
                                last=config.last_stage_layers)
    extras = []
    if stage == 0:
        extras.append("embedding")
    if stage == config.pp - 1:
        extras.append("output layer")
    what = f"{counts[stage]} layers" + "".join(f" + {e}" for e in extras)
    row = chassis_for(platform).row[slot]
    return f"stage {stage} of {config.pp} ({what}) in {row} slot {slot}"


def propose_placement(model: ModelSpec, platform: Platform, config: ParallelConfig, *,
                      objective: str = "throughput", constraints: Constraints | None = None,
                      calibration: Calibration | None = None,
                      min_gain: float = MIN_GAIN) -> Placement | None:
    """The uneven split of `config` that the analytical model predicts best for `objective`,
    if it beats the even split by at least `min_gain` and meets `constraints`; else None."""
    from advisor.perf.analytical import analytical_arrays
    from advisor.perf.columns import columns_of, full_length

    if objective not in METRICS:
        raise ConfigError(f"objective {objective!r} is unknown; use one of "
                          f"{', '.join(METRICS)}.")
    candidates = candidate_splits(model, config)
    if not candidates:
        return None
    even = config.replace(first_stage_layers=0, last_stage_layers=0)
    configs = (even, *candidates)
    table = full_length(analytical_arrays(model, platform, columns_of(configs),
                                          calibration=calibration), len(configs))
    values = _metric(table, objective)
    allowed = _allowed(table, constraints or Constraints(), num_gpus=config.world_size,
                       platform=platform)
    values[1:] = np.where(allowed[1:], values[1:], -np.inf)
    best = int(np.argmax(values[1:])) + 1
    gain = values[best] / values[0] - 1.0
    if not np.isfinite(gain) or gain < min_gain:
        return None
    chosen = candidates[best - 1]

    def straggler(i: int, c: ParallelConfig) -> str:
        return straggler_words(model, platform, c, int(table["straggler_stage"][i]),
                               int(table["straggler_slot"][i]))

    return Placement(
        config=chosen,
        layers_before=tuple(stage_layer_counts(model.num_layers, config.pp)),
        layers_after=tuple(stage_layer_counts(model.num_layers, config.pp,
                                              first=chosen.first_stage_layers,
                                              last=chosen.last_stage_layers)),
        metric=METRICS[objective], gain=float(gain), straggler_before=straggler(0, even),
        straggler_after=straggler(best, chosen))
