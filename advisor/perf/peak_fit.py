"""The peak-sample model against the H200 power probe.

`advisor.perf.power` says the highest 50 ms NVML sample of a GPU held at its power limit reads
the limit plus `peak_excursion` of the demand above it (the controller reacts within
milliseconds, so a sample still sees part of what the kernel would draw uncapped). The probe
(`datasets/probes/h200-power`, `collectors/power_probe.py`) ran kernels back to back at the
700 W limit and read NVML's instantaneous power every 10 ms; the driver refreshes that reading
every 100 ms, so a 20 Hz poller (one sample per 50 ms window) sees every reading, and a phase's
highest 50 ms sample is its highest reading. Per capped phase (`PROBE_KERNELS`, the second half,
where the cap has settled) this module sets that highest reading beside the model's, and the
share of the model's demand above the limit it implies: `peak_excursion` under steady capped
load at the board limit. No reference samples power below a board limit (the Zeus sweeps keep
one NVML energy reading per iteration), so below it the parameter is carried, not measured.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from advisor.perf.power_fit import (
    DEFAULT_PROBE,
    PROBE_CHIP,
    PROBE_KERNELS,
    load_probe,
    probe_demand,
    read_probe,
    settled_half,
)
from advisor.perf.power_params import PowerParams, load_power_params


def probe_peaks(folder: Path = DEFAULT_PROBE, params: PowerParams | None = None
                ) -> pd.DataFrame:
    """Per capped probe phase: the highest 50 ms sample measured and modelled.

    Returns:
        One row per phase: phase, kernel, limit_w, num_readings (distinct 100 ms readings in
        the settled half), mean_w (their mean), measured_peak_w (the highest), demand_w (the
        model's full-clock demand for the kernel, at the cross-chip level, as `predict_probe`
        has it), model_peak_w (limit + peak_excursion × (demand − limit)), error (model /
        measured − 1) and excursion (the measured (peak − limit) / (demand − limit)).
    """
    from advisor import catalog

    p = params or load_power_params()
    kernels, samples, facts = read_probe(folder)
    spans = {name: (begin, end) for name, begin, end in facts["spans"]}
    probe = load_probe(folder)
    demand = probe_demand(p, probe, p.best_gemm_w(catalog.load_platform(PROBE_CHIP)))
    rows = []
    for (phase, (kernel, _)), demand_w in zip(PROBE_KERNELS.items(), demand, strict=True):
        _, s = settled_half(kernels, samples, phase, *spans[phase])
        readings = s.power_instant_w[s.power_instant_w.diff() != 0]
        limit = float(facts["power_limit_w"])
        peak = float(readings.max())
        model = limit + p.peak_excursion * max(demand_w - limit, 0.0)
        rows.append({"phase": phase, "kernel": kernel, "limit_w": limit,
                     "num_readings": len(readings), "mean_w": float(readings.mean()),
                     "measured_peak_w": peak, "demand_w": float(demand_w),
                     "model_peak_w": model, "error": model / peak - 1,
                     "excursion": (peak - limit) / max(demand_w - limit, 1e-9)})
    return pd.DataFrame(rows)


def derived_peak_excursion(table: pd.DataFrame) -> float:
    """`peak_excursion` as the probe measures it: the median over its capped phases of the
    share of the modelled demand above the limit that the highest sample reads, to two
    decimals. It measures steady capped load only: a training step's bursts after gaps run
    uncapped for their first ~60 ms and read higher (`benchmarks/power_validation.py` sets
    this beside the H200 campaign's training runs)."""
    return round(float(np.median(table["excursion"])), 2)
