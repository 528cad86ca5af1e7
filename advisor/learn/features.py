"""Features the surrogates learn from: the configuration, the model, the platform, the software,
and the analytical model's own breakdown (what it thinks limits the step)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.model import ModelSpec
from advisor.core.parallel import PRECISIONS
from advisor.core.platform import Platform
from advisor.perf.analytical import analytical_table
from advisor.perf.calibration import Calibration
from advisor.perf.columns import Columns, config_columns, num_rows, per_value
from advisor.perf.flops import sublayer_counts

if TYPE_CHECKING:
    import pandas as pd

    from advisor.learn.fit import Reference

FAMILIES = ("ampere", "hopper", "blackwell", "cdna2", "cdna3")
FRAMEWORKS = ("megatron", "llm-foundry", "torchtitan", "megatron-deepspeed")
PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp8": 1, "fp4": 2}

FEATURES = (
    # configuration
    "log2_tp", "log2_pp", "log2_dp", "log2_cp", "log2_ep", "log2_etp", "log2_vp", "log2_mbs",
    "log2_gbs", "log2_seq_len", "log2_gpus", "recompute", "dp_sharding", "precision",
    "overlap", "tp_beyond_domain", "microbatches_log2",
    # model
    "log10_params", "log10_active", "hidden", "layers", "moe", "experts", "top_k",
    "mamba_share", "mla",
    # platform
    "family", "log10_peak_flops", "hbm_tb_s", "nvlink_domain", "nvlink_gb_s", "network_gb_s",
    # software
    "framework", "release",
    # the analytical model's view
    "log_analytical_tokens_s", "analytical_mfu", "bubble_share", "tp_share", "cp_share",
    "ep_share", "pp_share", "dp_share", "recompute_share", "overhead_share", "memory_headroom",
    "gemm_utilization", "log2_tokens_per_microbatch",
)


def release_number(text: str) -> float:
    """`25.09` → 25.09, `26.04.01` → 26.0401; NaN where unknown (the trees treat it as missing)."""
    parts = str(text).strip().split(".")
    try:
        major = float(parts[0]) + float(parts[1]) / 100.0
    except (ValueError, IndexError):
        return float("nan")
    return major + (float(parts[2]) / 10_000.0 if len(parts) > 2 and parts[2].isdigit() else 0.0)


def group_features(model: ModelSpec, platform: Platform, configs: pd.DataFrame,
                   table: pd.DataFrame, *, framework: np.ndarray | str = "megatron",
                   software: np.ndarray | str = "") -> pd.DataFrame:
    """Features for configurations of one model on one platform; `table` is their
    `analytical_table` (aligned)."""
    import pandas as pd

    table_cols = {k: table[k].to_numpy() for k in TABLE_COLUMNS}
    x = feature_matrix(model, platform, config_columns(configs), table_cols,
                       framework=framework, software=software)
    return pd.DataFrame(x, columns=list(FEATURES), index=configs.index)


TABLE_COLUMNS = ("step_time_s", "num_microbatches", "tokens_per_sec_per_gpu", "mfu", "bubble_s",
                 "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "recompute_s",
                 "overhead_s", "total_bytes", "capacity_bytes", "gemm_utilization")
"""The `analytical_table` columns the features read."""


def feature_matrix(model: ModelSpec, platform: Platform, c: Columns,
                   table: Mapping[str, np.ndarray], *, framework: np.ndarray | str = "megatron",
                   software: np.ndarray | str = "") -> np.ndarray:
    """`group_features` as a (configurations × FEATURES) array, from arrays."""
    n = num_rows(c)
    gpus = c["tp"] * c["pp"] * c["cp"] * c["dp"]
    step = table["step_time_s"]
    params = model.params
    kinds = sublayer_counts(model)
    framework = np.broadcast_to(np.asarray(framework, dtype=object), (n,))
    software = np.broadcast_to(np.asarray(software, dtype=object), (n,))
    out = {
        "log2_tp": np.log2(c["tp"]), "log2_pp": np.log2(c["pp"]), "log2_dp": np.log2(c["dp"]),
        "log2_cp": np.log2(c["cp"]), "log2_ep": np.log2(c["ep"]), "log2_etp": np.log2(c["etp"]),
        "log2_vp": np.log2(c["vp"]), "log2_mbs": np.log2(c["mbs"]),
        "log2_gbs": np.log2(c["gbs"]), "log2_seq_len": np.log2(c["seq_len"]),
        "log2_gpus": np.log2(gpus.astype(float)),
        "recompute": _codes(c["recompute"], {"none": 0, "selective": 1, "full": 2}),
        "dp_sharding": _codes(c["dp_sharding"], {"none": 0, "optimizer": 1, "full": 2}),
        "precision": per_value(c["precision"], lambda p: PRECISION_CODES[PRECISIONS[p]]),
        "overlap": (c["overlap_grad_reduce"].astype(int) + c["overlap_param_gather"].astype(int)
                    + c["tp_comm_overlap"].astype(int)),
        "tp_beyond_domain": (c["tp"] > platform.nvlink_domain_size).astype(int),
        "microbatches_log2": np.log2(table["num_microbatches"]),
        "log10_params": np.log10(params.total), "log10_active": np.log10(params.active),
        "hidden": model.hidden_size, "layers": model.num_layers, "moe": int(model.is_moe),
        "experts": model.num_experts, "top_k": model.moe_top_k,
        "mamba_share": kinds.mamba / len(model.sublayers),
        "mla": int(model.is_mla),
        "family": FAMILIES.index(platform.family) if platform.family in FAMILIES else -1,
        "log10_peak_flops": np.log10(platform.peak_flops("bf16")),
        "hbm_tb_s": platform.hbm_bandwidth_bytes_per_s / 1e12,
        "nvlink_domain": platform.nvlink_domain_size,
        "nvlink_gb_s": platform.intra_domain_bandwidth_bytes_per_s / 1e9,
        "network_gb_s": platform.inter_node_bandwidth_bytes_per_s / 1e9,
        "framework": per_value(np.asarray(framework, dtype=str),
                               lambda f: FRAMEWORKS.index(f) if f in FRAMEWORKS else -1),
        "release": per_value(np.asarray(software, dtype=str), release_number),
        "log_analytical_tokens_s": np.log(table["tokens_per_sec_per_gpu"]),
        "analytical_mfu": table["mfu"],
        "bubble_share": table["bubble_s"] / step,
        "tp_share": table["tp_comm_s"] / step,
        "cp_share": table["cp_comm_s"] / step,
        "ep_share": table["ep_comm_s"] / step,
        "pp_share": table["pp_comm_s"] / step,
        "dp_share": table["dp_comm_s"] / step,
        "recompute_share": table["recompute_s"] / step,
        "overhead_share": table["overhead_s"] / step,
        "memory_headroom": 1.0 - table["total_bytes"] / table["capacity_bytes"],
        "gemm_utilization": table["gemm_utilization"],
        "log2_tokens_per_microbatch": np.log2(c["mbs"] * c["seq_len"] / c["cp"]),
    }
    x = np.empty((n, len(FEATURES)))
    for j, name in enumerate(FEATURES):
        x[:, j] = np.asarray(out[name], dtype=float)
    return x


ANALYTICAL_FEATURES = ("microbatches_log2", "log_analytical_tokens_s", "analytical_mfu",
                       "bubble_share", "tp_share", "cp_share", "ep_share", "pp_share",
                       "dp_share", "recompute_share", "overhead_share", "memory_headroom",
                       "gemm_utilization")
"""The features read from the analytical model's answer (`TABLE_COLUMNS`); the others follow
from the configuration, the model, the platform and the software alone."""


def feature_box(model: ModelSpec, platform: Platform, c: Columns, *,
                framework: str = "megatron", software: np.ndarray | str = ""
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, may be missing) per feature over the configurations `c`, without running the
    analytical model: its features are unbounded (-inf, inf) and may be missing. Every row's
    `feature_matrix` lies in this box, so the surrogate's largest answer over it bounds theirs."""
    n = num_rows(c)
    unknown = {k: np.full(n, np.nan) for k in TABLE_COLUMNS}
    with np.errstate(invalid="ignore", divide="ignore"):
        x = feature_matrix(model, platform, c, unknown, framework=framework, software=software)
    nan = np.isnan(x)
    missing = nan.any(axis=0)
    known = np.where(nan, np.inf, x).min(axis=0)
    low = np.where(nan.all(axis=0), np.nan, known)
    high = np.where(nan.all(axis=0), np.nan, np.where(nan, -np.inf, x).max(axis=0))
    free = np.isin(np.array(FEATURES), ANALYTICAL_FEATURES)
    low[free], high[free], missing[free] = -np.inf, np.inf, True
    return low, high, missing


def _codes(values: np.ndarray, codes: dict[str, int]) -> np.ndarray:
    """`codes[value]` for every value, NaN for values not in `codes` (as `Series.map`)."""
    values = np.asarray(values, dtype=object)
    out = np.full(len(values), np.nan)
    for value, code in codes.items():     # a comparison per code: no Python loop over rows
        out[values == value] = code
    return out


def reference_groups(ref: Reference, calibration: Calibration
                     ) -> Iterator[tuple[Platform, pd.DataFrame, pd.DataFrame]]:
    """Per group of reference rows sharing model, platform and framework: the platform, the
    rows' features and their `analytical_table` (both indexed like `ref.rows`)."""
    for (model_key, platform_key), (idx, configs) in ref.groups.items():
        model, platform = ref.model(model_key), ref.platform(platform_key)
        for framework, rows in ref.rows.loc[idx].groupby("framework"):
            part = configs.loc[rows.index].drop(columns="framework")
            table = analytical_table(model, platform, part, calibration=calibration,
                                     framework=framework)
            yield platform, group_features(model, platform, part, table, framework=framework,
                                           software=rows["software"].to_numpy()), table


def reference_features(ref: Reference, calibration: Calibration) -> pd.DataFrame:
    """Features, the analytical prediction and the measured value for every reference row."""
    import pandas as pd

    parts = [feats.assign(analytical=table["tokens_per_sec_per_gpu"].to_numpy())
             for _, feats, table in reference_groups(ref, calibration)]
    out = pd.concat(parts).loc[ref.rows.index]
    out["measured"] = ref.rows["measured"]
    return out
