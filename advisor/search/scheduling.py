"""The two shapes research schedulers consume, built on `Predictor`.

* Gavel (Narayanan et al., OSDI'20) wants a throughput matrix: for a job type, the throughput on
  each GPU type at each allocation size. `throughput_table` gives it, using the best
  configuration advisor finds at each GPU count.
* Pollux / Sia (Qiao et al., OSDI'21; Jayaram Subramanya et al., SOSP'23) want a goodput model
  they can evaluate over candidate allocations: `SpeedupFunction(num_nodes, num_replicas)`,
  vectorised, per GPU type, where replicas are data-parallel copies of the model-parallel group
  the nodes are split into.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from advisor.catalog import load_model, load_platform
from advisor.core.knobs import TABLE_ORDER
from advisor.core.parallel import make_job

SUMMARY = TABLE_ORDER
"""A best configuration's knobs as `best_configurations` reports them."""


def best_configurations(predictor, model_name: str, platform_name: str, num_gpus: int, *,
                        seq_len: int | None = None, gbs: int | None = None,
                        precision: str = "bf16", pins: dict | None = None,
                        objective: str = "throughput", risk: str = "expected") -> pd.DataFrame:
    """Every configuration of the job that fits in memory, predicted, best first — ranked
    exactly as `advisor recommend` ranks them (`recommend.recommend`); empty where none fits."""
    from advisor.core.errors import AdvisorError
    from advisor.search.recommend import Infeasible, recommend

    model, platform = load_model(model_name), load_platform(platform_name)
    job = make_job(model, platform, num_gpus=num_gpus, seq_len=seq_len, gbs=gbs,
                   precision=precision)
    try:
        rec = recommend(job, objective=objective, risk=risk, pins=pins, top=1,
                        predictor=predictor)
    except Infeasible:
        return pd.DataFrame()
    except AdvisorError as e:  # a pin no layout allows (dp = replicas that do not divide)
        if "is not valid" in str(e):
            return pd.DataFrame()
        raise
    return rec.ranked


def throughput_table(predictor, model_name: str, platforms: list[str], gpu_counts: list[int],
                     **job) -> pd.DataFrame:
    """Gavel's matrix: one row per (platform, GPU count) with the best configuration's total
    tokens/s, its p10/p90, per-GPU throughput, the layout, and the source of the prediction.
    Counts with no configuration that fits get NaN throughput."""
    rows = []
    for platform in platforms:
        for gpus in gpu_counts:
            ranked = best_configurations(predictor, model_name, platform, gpus, **job)
            row = {"platform": platform, "num_gpus": gpus}
            if ranked.empty:
                rows.append(row | {"tokens_per_sec": np.nan})
                continue
            best = ranked.iloc[0]
            per_gpu = float(best["pred_tokens_per_sec_per_gpu"])
            rows.append(row | {
                "tokens_per_sec": per_gpu * gpus, "tokens_per_sec_per_gpu": per_gpu,
                "tokens_per_sec_p10": float(best["pred_tokens_per_sec_per_gpu_p10"]) * gpus,
                "tokens_per_sec_p90": float(best["pred_tokens_per_sec_per_gpu_p90"]) * gpus,
                "avg_power_w": float(best["pred_avg_power_w"]),
                "source": best["pred_source"],
                # False: no measured run calibrated the platform family (MI250 today); its
                # figures borrow other families' efficiencies.
                "calibrated": bool(best["pred_calibrated"]),
                "config": {k: best[k] for k in SUMMARY}})
    return pd.DataFrame(rows)


@dataclass
class SpeedupFunction:
    """Throughput (tokens/s) and speedup over the smallest allocation, as a vectorised function
    of (num_nodes, num_replicas) for one model on one GPU type. Allocations with no fitting
    configuration give 0."""

    predictor: object
    model_name: str
    platform_name: str
    job: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False)

    def throughput(self, num_nodes, num_replicas) -> np.ndarray:
        nodes = np.asarray(num_nodes, dtype=int)
        replicas = np.asarray(num_replicas, dtype=int)
        nodes, replicas = np.broadcast_arrays(nodes, replicas)
        out = np.zeros(nodes.shape)
        for idx in np.ndindex(nodes.shape):
            out[idx] = self._one(int(nodes[idx]), int(replicas[idx]))
        return out

    def __call__(self, num_nodes, num_replicas) -> np.ndarray:
        """Speedup relative to one node with one replica (Pollux's normalisation)."""
        base = self._one(1, 1)
        if not base > 0:
            base = max(self._one(n, 1) for n in (1, 2, 4, 8)) or 1.0
        return self.throughput(num_nodes, num_replicas) / base

    def _one(self, nodes: int, replicas: int) -> float:
        key = (nodes, replicas)
        if key not in self._cache:
            gpn = load_platform(self.platform_name).num_gpus_per_node
            gpus = nodes * gpn
            value = 0.0
            if nodes >= 1 and replicas >= 1 and gpus % replicas == 0:
                ranked = best_configurations(self.predictor, self.model_name,
                                             self.platform_name, gpus,
                                             pins={"dp": replicas}, **self.job)
                if not ranked.empty:
                    value = float(ranked.iloc[0]["pred_tokens_per_sec_per_gpu"]) * gpus
            self._cache[key] = value
        return self._cache[key]
