"""Score the analytical model on vTrain's 1,440 single-node A100 runs (many layouts of the same
jobs) and its 109 multi-node runs (four GPT models on 64-512 A100s): MAPE of the iteration time,
Kendall τ per job, and top-1 regret.

Two scores: zero-shot (the Ampere calibration from published runs, nothing from vTrain), and
cross-validated, where the framework's host overhead — which the published runs cannot give,
and which dominates these small models — is fitted on the jobs of the other hidden size.

The runs (vTrain README, `datasets/reference/vtrain/README.md`): GPT models with hidden 1024 or
2048, 16 heads, 12-24 layers, sequence 1024, vocabulary 50257, on one 8-GPU A100 SXM node;
Megatron-DeepSpeed with fp16, full activation recompute, the 1F1B schedule, no gradient bucketing
(so no overlap of the data-parallel all-reduce) and no distributed optimizer. A100 80 GB assumed,
as the publishers' simulator does. Attention is taken as unfused (Megatron-DeepSpeed's default
core attention: batched GEMMs and a fused softmax; the README names no flash attention).
Gradients are reduced in FP16: Megatron's `--accumulate-allreduce-grads-in-fp32` is off by
default for FP16 training, and vTrain's own simulator counts 2 bytes per gradient
(`src/predictor.py`, `ParamInfo(elem_size=2)`).

The multi-node runs share a cluster whose network is not a DGX A100's: vTrain's configs for them
(`config/validation/multi/*.json`) give `inter_node_bandwidth` 800, "total bandwidth of
inter-node communication in Gbps" per 8-GPU node (`src/config.py`), and its simulator prices one
pipeline transfer at a quarter of it (`_compute_p2p_latency`: bandwidth / 4), i.e. four 200 Gb/s
HDR NICs per node: 12.5 GB/s per GPU where the catalog's DGX A100 has eight (25 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_platform
from advisor.core.model import ModelSpec
from advisor.core.platform import Platform, platform_from_dict
from advisor.perf.calibration import Calibration, FrameworkEfficiency, load_calibration
from advisor.perf.step import step_table

COLUMNS = {"# GPUs": "num_gpus", "global batch": "gbs", "micro batch": "mbs",
           "hidden size": "hidden", "attention heads": "heads", "# layers": "layers",
           "sequence length": "seq_len", "tensor parallelism": "tp",
           "data parallelism": "dp", "pipeline parallelism": "pp",
           "iteration time (ms)": "measured_ms"}
DROPOUT = 0.1
"""Attention and hidden dropout of the runs: Megatron-DeepSpeed's GPT defaults
(`--attention-dropout`, `--hidden-dropout` 0.1), which vTrain's own model of the runs keeps
(VIA-Research/vTrain `src/model/gpt_modeling.py`: `torch.nn.Dropout(attention_dropout_prob)` on
the attention probabilities, `bias_dropout_add_fused_train(..., 0.1)` after attention and the
MLP)."""
JOB = ("num_gpus", "hidden", "layers", "gbs")
"""A job: the same model and global batch on the same GPUs; its rows are layouts of it."""


def gpt_spec(hidden: int, heads: int, layers: int, seq_len: int) -> ModelSpec:
    """The GPT-2-style models vTrain ran (Megatron GPT: learned positions, LayerNorm, GELU MLP
    of 4h, biases, tied embeddings, vocabulary 50257 as the README states)."""
    return ModelSpec(name=f"vtrain-gpt-h{hidden}-l{layers}", num_layers=layers,
                     hidden_size=hidden, ffn_hidden_size=4 * hidden, num_attention_heads=heads,
                     num_kv_heads=heads, vocab_size=50257, max_seq_len=seq_len,
                     tied_embeddings=True, gated_mlp=False, position_embedding="learned",
                     norm="layernorm", attention_bias=True, mlp_bias=True)


def load_vtrain(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, encoding="utf-8-sig").rename(columns=COLUMNS)
    missing = set(COLUMNS.values()) - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)}")
    return frame


FRAMEWORK = "megatron-deepspeed"
"""Eager PyTorch 2.0 with Megatron-DeepSpeed's kernels: no published run calibrates its host
(launch) overhead, which dominates these small models at high TP; see `cross_validated`."""


VTRAIN_NICS_PER_NODE = 4
VTRAIN_NIC_BANDWIDTH_BYTES_PER_S = 25e9
"""The multi-node cluster's network (module docstring): 800 Gb/s per node over four NICs,
200 Gb/s = 25e9 B/s each."""


def vtrain_cluster() -> Platform:
    """The A100 80 GB of the catalog with the network of vTrain's multi-node cluster (same
    name, so the same chassis and power model)."""
    base = load_platform("a100")
    data = {k: v for k, v in base.to_dict().items() if v is not None}
    data.pop("inter_node_bandwidth_bytes_per_s")        # derived from the NICs
    source = ("vTrain config/validation/multi/*.json: inter_node_bandwidth 800 Gb/s per 8-GPU "
              "node; src/predictor.py prices a pipeline transfer at bandwidth / 4 (four 200 Gb/s "
              "HDR NICs)")
    data.update(num_nics_per_node=VTRAIN_NICS_PER_NODE,
                nic_bandwidth_bytes_per_s=VTRAIN_NIC_BANDWIDTH_BYTES_PER_S,
                sources={**base.sources, "num_nics_per_node": source,
                         "nic_bandwidth_bytes_per_s": source})
    return platform_from_dict(data, path=Path("vtrain-cluster"))


def vtrain_configs(part: pd.DataFrame) -> pd.DataFrame:
    """`ParallelConfig` columns for vTrain rows (the settings the README states)."""
    return pd.DataFrame({
        "tp": part["tp"], "pp": part["pp"], "dp": part["dp"], "cp": 1, "ep": 1, "etp": 1,
        "vp": 1, "mbs": part["mbs"], "gbs": part["gbs"], "seq_len": part["seq_len"],
        "precision": "fp16", "recompute": "full", "dp_sharding": "none",
        "sequence_parallel": False, "overlap_grad_reduce": False,
        "overlap_param_gather": False, "tp_comm_overlap": False,
        "grad_reduce_in_fp32": False, "attention": "unfused", "dropout": DROPOUT},
        index=part.index)


def predict_vtrain(frame: pd.DataFrame, calibration: Calibration | None = None, *,
                   platform: Platform | None = None) -> pd.Series:
    """Predicted iteration time (ms) per row, on `platform` (the catalog's A100 80 GB; pass
    `vtrain_cluster()` for the multi-node runs)."""
    platform = platform or load_platform("a100")
    out = pd.Series(np.nan, index=frame.index)
    for model, part, configs in vtrain_groups(frame):
        table = step_table(model, platform, configs, calibration=calibration,
                           framework=FRAMEWORK)
        out.loc[part.index] = table["step_time_s"].to_numpy() * 1e3
    return out


def vtrain_groups(frame: pd.DataFrame):
    """(model, rows, `ParallelConfig` columns) for each GPT model vTrain ran."""
    for (hidden, heads, layers, seq), part in frame.groupby(["hidden", "heads", "layers",
                                                              "seq_len"]):
        yield gpt_spec(int(hidden), int(heads), int(layers), int(seq)), part, vtrain_configs(part)


def fit_host_overhead(frame: pd.DataFrame, calibration: Calibration) -> float:
    """The one constant the published runs cannot give: Megatron-DeepSpeed's host time per
    layer per micro-batch, fitted (log-error least squares) to the rows given."""
    from scipy.optimize import minimize_scalar

    measured = np.log(frame["measured_ms"].to_numpy())

    def loss(log_overhead: float) -> float:
        cal = _with_host(calibration, float(np.exp(log_overhead)))
        return float(np.sum((np.log(predict_vtrain(frame, cal).to_numpy()) - measured) ** 2))

    best = minimize_scalar(loss, bounds=(np.log(1e-5), np.log(2e-2)), method="bounded",
                           options={"xatol": 1e-3})
    return float(np.exp(best.x))


def _with_host(calibration: Calibration, overhead: float) -> Calibration:
    return calibration.with_frameworks(
        calibration.frameworks | {FRAMEWORK: FrameworkEfficiency(layer_overhead_s=overhead)})


def cross_validated(frame: pd.DataFrame, calibration: Calibration | None = None
                    ) -> tuple[pd.Series, dict[int, float]]:
    """Predictions where the host overhead is fitted on the jobs of the other hidden size
    (two folds: 1024 and 2048), so no row is predicted with a constant fitted to its own
    model. Returns the predictions and the overhead each fold used."""
    calibration = calibration or load_calibration()
    out = pd.Series(np.nan, index=frame.index)
    used = {}
    for hidden in sorted(frame["hidden"].unique()):
        test = frame["hidden"] == hidden
        overhead = fit_host_overhead(frame[~test], calibration)
        used[int(hidden)] = overhead
        out.loc[test] = predict_vtrain(frame[test], _with_host(calibration, overhead))
    return out, used


@dataclass(frozen=True)
class VtrainScore:
    rows: int
    mape_pct: float
    median_ape_pct: float
    jobs: int
    median_kendall_tau: float
    mean_kendall_tau: float
    median_top1_regret_pct: float
    mean_top1_regret_pct: float


def score_vtrain(frame: pd.DataFrame, predicted_ms: pd.Series) -> tuple[VtrainScore,
                                                                         pd.DataFrame]:
    """Summary and per-job table (rows, τ, top-1 regret %, MAPE and the median of measured /
    predicted)."""
    ape = (predicted_ms / frame["measured_ms"] - 1.0).abs() * 100
    jobs = []
    for key, part in frame.groupby(list(JOB)):
        if len(part) < 2:
            continue
        pred = predicted_ms.loc[part.index]
        tau, regret, _ = _order(pred.to_numpy(), part["measured_ms"].to_numpy())
        jobs.append((*key, len(part), tau, regret, ape.loc[part.index].mean(),
                     (part["measured_ms"] / pred).median()))
    per_job = pd.DataFrame(jobs, columns=[*JOB, "layouts", "kendall_tau", "top1_regret_pct",
                                          "mape_pct", "median_ratio"])
    score = VtrainScore(rows=len(frame), mape_pct=float(ape.mean()),
                        median_ape_pct=float(ape.median()), jobs=len(per_job),
                        median_kendall_tau=float(per_job["kendall_tau"].median()),
                        mean_kendall_tau=float(per_job["kendall_tau"].mean()),
                        median_top1_regret_pct=float(per_job["top1_regret_pct"].median()),
                        mean_top1_regret_pct=float(per_job["top1_regret_pct"].mean()))
    return score, per_job


STEP_TERMS = {"compute": ("compute_s", "recompute_s"), "tp_comm": ("tp_comm_s",),
              "pp_comm": ("pp_comm_s",), "dp_comm": ("dp_comm_s",), "bubble": ("bubble_s",),
              "optimizer": ("optimizer_s",), "overhead": ("overhead_s",),
              "throttle": ("throttle_s",)}
"""The exposed parts of a step (`step_table` columns), which add up to its time; recompute
goes with compute (under full recompute it is a fixed share of it)."""


def reweighted_terms(frame: pd.DataFrame, calibration: Calibration | None = None, *,
                     platform: Platform | None = None) -> pd.DataFrame:
    """How much of each job's measured order the model's own mechanisms can carry: per job,
    non-negative weights on the step's terms (`STEP_TERMS`: compute with its recompute, each
    communication, bubble, optimizer, host wait, throttle), fitted to that job's own measured
    times (least squares on the relative error, so weights of one reproduce the model), and
    the Kendall τ and top-1 regret of the reweighted times. An in-sample fit with as many free
    weights as terms, not a prediction: where even it leaves τ low, the measured order turns
    on effects none of the terms carries, whatever their size (noise, placement, kernels
    the model does not price), and no rescaling of a mechanism would recover it.

    Returns one row per job: `JOB`, layouts, the model's τ, regret and relative RMS error,
    the reweighted ones, and the weights."""
    from scipy.optimize import nnls

    platform = platform or load_platform("a100")
    rows = []
    for model, part, configs in vtrain_groups(frame):
        table = step_table(model, platform, configs, calibration=calibration,
                           framework=FRAMEWORK)
        for key, job in part.groupby(list(JOB)):
            if len(job) < 2:
                continue
            terms = np.column_stack([table.loc[job.index, list(cols)].sum(axis=1)
                                     for cols in STEP_TERMS.values()]) * 1e3
            measured = job["measured_ms"].to_numpy()
            used = terms.any(axis=0)
            weights = np.zeros(len(STEP_TERMS))
            weights[used], _ = nnls(terms[:, used] / measured[:, None], np.ones(len(job)))
            rows.append((*key, len(job), *_order(terms.sum(axis=1), measured),
                         *_order(terms @ weights, measured), *weights.round(3)))
    names = [f"{score}_{kind}" for kind in ("model", "reweighted")
             for score in ("kendall_tau", "top1_regret_pct", "rms_error_pct")]
    return pd.DataFrame(rows, columns=[*JOB, "layouts", *names,
                                       *(f"w_{term}" for term in STEP_TERMS)])


def equal_work_twins(frame: pd.DataFrame, predicted_ms: pd.Series) -> pd.DataFrame:
    """Pairs of runs of one job whose GPUs do the same GEMM and attention work: the layout
    (tp, dp, mbs) and its wide twin (2·tp, dp/2, 2·mbs) at the same pipeline depth and global
    batch. Both run the same number of micro-batches, each GPU multiplying the same tokens by
    the same share of the weights and computing the same number of attention heads, with the
    same kernels launched; the wide twin's replicated elementwise work (LayerNorm, dropout,
    residual: not split by TP without sequence parallelism) doubles and its TP all-reduce
    carries twice the bytes over twice the GPUs. All it saves is once per step: its gradient
    all-reduce and optimizer carry half the parameters each, which the predicted ratio
    includes. A measured ratio far below the predicted one is an effect of the runs that no
    priced mechanism carries.

    Returns one row per pair: the job (`JOB`), pp, the narrow twin's tp, dp and mbs, and the
    wide / narrow ratio of the iteration time, measured and predicted."""
    keyed = frame.assign(predicted_ms=predicted_ms).set_index(
        [*JOB, "pp", "tp", "dp", "mbs"])[["measured_ms", "predicted_ms"]]
    keyed = keyed[~keyed.index.duplicated()]
    rows = []
    for key, narrow in keyed.iterrows():
        *job, pp, tp, dp, mbs = key
        wide = (*job, pp, 2 * tp, dp // 2, 2 * mbs)
        if dp % 2 == 0 and wide in keyed.index:
            rows.append((*key, keyed.at[wide, "measured_ms"] / narrow["measured_ms"],
                         keyed.at[wide, "predicted_ms"] / narrow["predicted_ms"]))
    return pd.DataFrame(rows, columns=[*JOB, "pp", "tp", "dp", "mbs", "measured_ratio",
                                       "predicted_ratio"])


def _order(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """Kendall τ, top-1 regret (%) and relative RMS error (%) of predicted against measured."""
    from scipy.stats import kendalltau

    regret = (measured[np.argmin(predicted)] / measured.min() - 1.0) * 100
    rms = float(np.sqrt(np.mean((predicted / measured - 1.0) ** 2)) * 100)
    return float(kendalltau(predicted, measured).statistic), float(regret), rms
