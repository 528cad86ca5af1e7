"""Node energy per token of the MLPerf Training runs that logged node power
(`datasets/reference/power/mlperf_power.csv`), predicted by the step and power models.

What is predicted: the GPUs' step time and average power of the submitted layout (Llama-2-70B
LoRA fine-tuning, `advisor/perf/finetune.py`), from the catalog platform and the power
parameters fitted on the other sources (A40/A100 GPU power: MLPerf is never in the fit, so every
figure here is held out).

What is modelled, not predicted — the host: CPUs, memory, fans, NICs, NVSwitches and the power
supplies' loss. Node AC power is

    host_ac + num_gpus × gpu_avg_w / conversion_eff

with `conversion_eff` as the submission logs it (0.96 Dell, 0.94 Lenovo) and `host_ac` the
node's lowest reading inside the run (evaluation pauses, GPUs near idle) less its GPUs at their
catalog idle power: a measured floor of the rest of the node, which under training load draws
somewhat more (CPU and fans), so the host share is a lower bound.

Measured energy per token: the node mean over the logged training blocks (evaluation excluded)
× nodes / (logged samples/s × sequence length; MLPerf pads every sample to 8,192 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

#: MLPerf `gpu` field -> catalog platform.
PLATFORMS = {"h100-sxm-80gb": "h100", "b200-sxm-180gb": "b200"}
#: MLPerf `benchmark` -> catalog model and the job's fine-tuning (MLPerf llama2_70b_lora:
#: LoRA rank 16 on the attention projections, frozen base).
BENCHMARKS = {"llama2_70b_lora": ("llama2-70b", "lora", 16, "attention")}


@dataclass(frozen=True)
class NodeEnergy:
    """One system's runs, measured (median over runs) and predicted."""

    system: str
    num_gpus: int
    runs: int
    host_ac_w: float
    measured_step_s: float
    predicted_step_s: float
    measured_node_w: float
    predicted_node_w: float
    predicted_gpu_w: float
    measured_j_per_token: float
    predicted_j_per_token: float


def _precision(text: str) -> str:
    """`fp8 (fp8 attention)` -> fp8: the GEMM recipe (FP8 dot-product attention is priced at
    the 16-bit attention peak, so those runs' attention is predicted slower than it ran)."""
    return str(text).split()[0].lower()


def load_runs(folder: Path) -> pd.DataFrame:
    """The successful MLPerf runs with node power that advisor can express."""
    frame = pd.read_csv(folder / "mlperf_power.csv")
    ok = (frame["status"] == "success") & frame["gpu"].isin(PLATFORMS) & frame[
        "benchmark"].isin(BENCHMARKS)
    return frame[ok].reset_index(drop=True)


def predict_runs(runs: pd.DataFrame) -> list[NodeEnergy]:
    """Measured and predicted figures per system (one layout per system in the file)."""
    from advisor import catalog
    from advisor.core.parallel import make_config, make_job
    from advisor.perf.analytical import predict_config

    out = []
    for system, group in runs.groupby("system", sort=True):
        r = group.iloc[0]
        model_name, finetune, rank, targets = BENCHMARKS[r["benchmark"]]
        model = catalog.load_model(model_name)
        platform = catalog.load_platform(PLATFORMS[r["gpu"]])
        gpus = int(r["num_nodes"]) * int(r["gpus_per_node"])
        job = make_job(model, platform, num_gpus=gpus, seq_len=int(r["seq_len"]),
                       gbs=int(r["gbs"]), precision=_precision(r["precision"]), finetune=finetune,
                       lora_rank=rank, lora_targets=targets)
        config = make_config(job, tp=int(r["tp"]), pp=int(r["pp"]), cp=int(r["cp"]),
                             mbs=int(r["mbs"]))
        pred = predict_config(model, platform, config)
        per_node = int(r["gpus_per_node"])
        eff = group["conversion_eff"].astype(float).to_numpy()
        host = group["node_min_power_w"].to_numpy(float) - per_node * platform.idle_power_w / eff
        gpu_w = pred.power.avg_power_w
        node_w = host + per_node * gpu_w / eff
        tokens_per_step = job.gbs * job.seq_len
        step_measured = job.gbs / group["avg_throughput_samples_per_s"].to_numpy(float)
        nodes = int(r["num_nodes"])
        measured = (group["node_avg_power_train_blocks_w"].to_numpy(float) * nodes
                    * step_measured / tokens_per_step)
        predicted = node_w * nodes * pred.step.step_time_s / tokens_per_step
        out.append(NodeEnergy(
            system=str(system), num_gpus=gpus, runs=len(group),
            host_ac_w=float(np.median(host)), measured_step_s=float(np.median(step_measured)),
            predicted_step_s=float(pred.step.step_time_s),
            measured_node_w=float(np.median(group["node_avg_power_train_blocks_w"])),
            predicted_node_w=float(np.median(node_w)), predicted_gpu_w=float(gpu_w),
            measured_j_per_token=float(np.median(measured)),
            predicted_j_per_token=float(np.median(predicted))))
    return out


def validation_rows(results: list[NodeEnergy]) -> list[dict]:
    """Rows for the power validation table: absolute percentage error per system and target
    (never fitted: in-sample and held out are the same figure)."""
    rows = []
    for r in results:
        label = f"mlperf {r.system} ({r.num_gpus} GPUs)"
        for target, measured, predicted in (
                ("node energy per token", r.measured_j_per_token, r.predicted_j_per_token),
                ("node average power", r.measured_node_w, r.predicted_node_w),
                ("step time", r.measured_step_s, r.predicted_step_s)):
            error = abs(predicted / measured - 1.0) * 100
            rows.append({"source": label, "target": target, "points": r.runs,
                         "mape_in_sample": error, "mape_held_out": error})
    return rows
