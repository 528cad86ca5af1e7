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
    columns = _feature_columns(model, platform, c, table, framework=framework,
                               software=software)
    x = np.empty((n, len(FEATURES)))
    for j, name in enumerate(FEATURES):
        x[:, j] = columns[name]
    return x


def _feature_columns(model: ModelSpec, platform: Platform, c: Columns,
                     table: Mapping[str, np.ndarray], *, framework: np.ndarray | str,
                     software: np.ndarray | str) -> dict[str, np.ndarray | float]:
    """Each of `FEATURES` for the configurations `c`: an array, or one number shared by all
    (the model's and the platform's)."""
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
    return {name: np.asarray(out[name], dtype=float) for name in FEATURES}


ANALYTICAL_FEATURES = ("microbatches_log2", "log_analytical_tokens_s", "analytical_mfu",
                       "bubble_share", "tp_share", "cp_share", "ep_share", "pp_share",
                       "dp_share", "recompute_share", "overhead_share", "memory_headroom",
                       "gemm_utilization")
"""The features read from the analytical model's answer (`TABLE_COLUMNS`); the others follow
from the configuration, the model, the platform and the software alone."""


BOX_KEYS = ("tp", "pp", "vp", "ep")
"""`feature_boxes` gives each combination of these its own box: the surrogate's bound over
all of a space's layouts at once is about twice the largest ratio any of them gets."""
AT_MOST_NOMINAL = ("log_analytical_tokens_s", "analytical_mfu", "bubble_share", "tp_share",
                   "cp_share", "ep_share", "pp_share", "dp_share", "recompute_share",
                   "overhead_share")
"""Analytical features the power model can only lower: rates (a longer step) and each
component's share of the step (the same component over a longer step)."""


def feature_boxes(model: ModelSpec, platform: Platform, c: Columns,
                  nominal: Mapping[str, np.ndarray], *, framework: str = "megatron",
                  software: np.ndarray | str = ""
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(each row's box, low, high, may be missing: boxes × FEATURES) for the configurations
    `c`, from their analytical step at full clock (`nominal`: `step.nominal_arrays`, with the
    memory model's `total_bytes` and `capacity_bytes` where known). Every row's
    `feature_matrix` lies in its box (one per combination of `BOX_KEYS`): the configuration,
    model, platform and software features and the micro-batch count and GEMM utilization are
    the row's own; the power model can only lower the rates and shares (`AT_MOST_NOMINAL`),
    so those run from -inf to the nominal ones; without memory the headroom is unbounded. The
    surrogate's largest answer over a box bounds its rows'."""
    n = num_rows(c)
    table = {k: nominal.get(k, np.full(n, np.nan)) for k in TABLE_COLUMNS}
    with np.errstate(invalid="ignore", divide="ignore"):
        columns = _feature_columns(model, platform, c, table, framework=framework,
                                   software=software)
    code = np.zeros(n, dtype=np.int64)
    for key in BOX_KEYS:
        values = c[key].astype(np.int64)
        if n and values.max() >= 2 ** 15:   # 15 bits each fit four in an int64
            values = np.unique(values, return_inverse=True)[1].ravel()
        code = code * 2 ** 15 + values
    order = np.argsort(code, kind="stable")
    first = np.r_[True, np.diff(code[order]) != 0]
    starts = np.flatnonzero(first)
    box = np.empty(n, dtype=np.int64)
    box[order] = np.cumsum(first) - 1
    shape = (len(starts), len(FEATURES))
    low, high = np.empty(shape), np.empty(shape)
    missing, never = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for j, name in enumerate(FEATURES):
        values = columns[name]
        if values.ndim == 0 or not n:     # one value for every row (the model's, say)
            low[:, j] = high[:, j] = values if values.ndim == 0 else np.nan
            missing[:, j] = never[:, j] = np.isnan(low[0, j]) if len(starts) else False
            continue
        part = values[order]
        low[:, j] = np.fmin.reduceat(part, starts)      # fmin/fmax skip NaN
        high[:, j] = np.fmax.reduceat(part, starts)
        gaps = np.isnan(part)
        if gaps.any():
            missing[:, j] = np.logical_or.reduceat(gaps, starts)
            never[:, j] = np.logical_and.reduceat(gaps, starts)
    # A feature no row of a box has: NaN bounds (only the missing branch); one a rate or
    # share leaves undefined (a step of zero): anything.
    names = np.array(FEATURES)
    undefined = never & np.isin(names, AT_MOST_NOMINAL)
    low[:, np.isin(names, AT_MOST_NOMINAL)] = -np.inf
    if "total_bytes" not in nominal:
        undefined[:, names == "memory_headroom"] = True
    low[undefined], high[undefined], missing[undefined] = -np.inf, np.inf, True
    return box, low, high, missing


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
    """Features, the analytical prediction (at the run's software release: the trees learn
    what the release trend leaves) and the measured value for every reference row."""
    import pandas as pd

    from advisor.learn.fit import release_factor

    parts = [feats.assign(analytical=table["tokens_per_sec_per_gpu"].to_numpy())
             for _, feats, table in reference_groups(ref, calibration)]
    out = pd.concat(parts).loc[ref.rows.index]
    out["analytical"] *= release_factor(ref.rows, calibration)
    out["measured"] = ref.rows["measured"]
    return out
