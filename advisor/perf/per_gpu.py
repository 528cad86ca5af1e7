"""Every GPU of one configuration: where it sits (node, slot, row), which pipeline stage it runs,
and its predicted power, temperature, clock and throttling — what `advisor predict --per-gpu`
prints and `--plot` draws."""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig
from advisor.core.platform import Platform
from advisor.perf.calibration import Calibration
from advisor.perf.columns import config_columns
from advisor.perf.step import DEFAULT_FRAMEWORK, step_detail

MAX_GPUS = 65_536
"""Beyond this a per-GPU table is too long to be useful; callers get a clear refusal."""
COLUMNS = ("rank", "node", "slot", "row", "stage", "avg_power_w", "peak_power_w",
           "steady_temp_c", "peak_temp_c", "clock_frac", "throttle_frac_power",
           "throttle_frac_thermal", "straggler")


def per_gpu_table(model: ModelSpec, platform: Platform, config: ParallelConfig, *,
                  calibration: Calibration | None = None,
                  framework: str = DEFAULT_FRAMEWORK) -> pd.DataFrame:
    """One row per GPU in Megatron's rank order (tp fastest, then cp, dp, pp)."""
    world = config.world_size
    if world > MAX_GPUS:
        raise ValueError(f"{world} GPUs: a per-GPU table stops at {MAX_GPUS:,}")
    cols = config_columns(pd.DataFrame([config.to_dict()]))
    detail = step_detail(model, platform, cols, calibration=calibration, framework=framework)
    gpus = detail["gpus"]
    slots, k = gpus.slots, gpus.chassis.num_slots
    per_stage = config.tp * config.cp * config.dp
    rank = np.arange(world)
    stage = rank // per_stage
    slot = rank % k
    # The modelled entry of each GPU: the one of its stage in the same slot.
    entry = np.zeros(world, dtype=int)
    for s in range(config.pp):
        lookup = {int(slots.slot[0, s, i]): i for i in range(slots.slot.shape[2])
                  if slots.valid[0, s, i]}
        mine = stage == s
        entry[mine] = [lookup[int(j)] for j in slot[mine]]

    def take(values: np.ndarray) -> np.ndarray:
        return values[0][stage, entry]

    mb = take(gpus.microbatch_s)
    table = pd.DataFrame({
        "rank": rank, "node": rank // platform.num_gpus_per_node, "slot": slot,
        "row": np.asarray(gpus.chassis.row)[slot], "stage": stage,
        "avg_power_w": take(gpus.avg_power_w), "peak_power_w": take(gpus.peak_power_w),
        "steady_temp_c": take(gpus.steady_temp_c), "peak_temp_c": take(gpus.peak_temp_c),
        "clock_frac": take(gpus.clock_frac),
        "throttle_frac_power": take(gpus.throttle_frac_power),
        "throttle_frac_thermal": take(gpus.throttle_frac_thermal),
    })
    table["straggler"] = mb >= mb.max() - 1e-12
    return table
