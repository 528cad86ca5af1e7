"""Thermal constants fitted on per-GPU V100 measurements, and the slowest-of-N GPU formula.

Reference: `datasets/reference/thermal` (Sinha et al., SC'22; TACC Longhorn, four per node):

* **Temperature:** ``temp = a + R·power + offset[device]`` on the run means (`mean_temp`,
  `mean_pwr`) of the training runs. Means, not medians: a first-order thermal response is linear,
  so the mean temperature of a run follows its mean power, while the median of a power trace that
  alternates between compute and input stalls lands on either mode (BERT: medians 170 W on
  devices 1 and 3 against 145 W on 0 and 2; means 155 W against 151 W).
* **Node and GPU levels of that spread:** each training run holds the four GPUs of one node
  (`ts`, `cabinet`, `node`), so the residual splits into a node level and a GPU-within-node
  level, run-to-run noise removed (`node_spread`).
* **Clock at the cap:** ``d ln(clock)/dT`` on SGEMM rows above 290 W (limit 300 W), and the
  leakage coefficient that reproduces it (`leakage_from_clock_slope`).
* **GPU-to-GPU speed:** σ of ln(per-GPU median SGEMM kernel time); the slowest of N GPUs is
  slower than the median one by σ·E[max of N standard normals] (`expected_slowest`).

The SGEMM file repeats 2,284 rows verbatim: counted once. Import: numpy only; fitting: pandas.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.errors import CatalogError
from advisor.perf.power_params import PowerParams, load_power_params
from advisor.perf.variability import max_of_normals, slowest_of

if TYPE_CHECKING:
    import pandas as pd


LIMIT_W_V100 = 300.0
"""Power limit of the V100 SXM2 (NVIDIA V100 datasheet); SGEMM's median draw is 297 W."""
CAP_MIN_W = 290.0
"""SGEMM rows drawing more than this sit at the power cap (README method)."""
SUBSET_SIZES = (4, 16, 64, 256)
GPUS_PER_NODE = 4
"""Longhorn: four V100 per node (`device` 0-3); every training run in the files holds all four."""


@dataclass(frozen=True)
class ThermalFit:
    """The fitted constants (`advisor/catalog/thermal_fit.toml`). Names ending `_v100` hold only
    for V100 in Longhorn's nodes; the rest are forms and relative spreads that carry over."""

    temp_intercept_c_v100: float
    """a: temperature extrapolated to zero power on device 0 (near the inlet air)."""
    resistance_c_per_w_v100: float
    """R: steady temperature rise per watt of mean board power."""
    rise_at_limit_c_v100: float
    """R · 300 W: the rise above a of a GPU drawing the V100 limit."""
    slot_offset_c: tuple[float, ...]
    """Per device 0-3, temperature above device 0 at equal power."""
    rear_minus_front_c: float
    """Mean offset of devices 1 and 3 minus that of devices 0 and 2."""
    rear_preheat_share: float
    """rear_minus_front_c / (R · mean power of devices 0, 2): chassis.toml's `preheat_share`."""
    temp_sigma_c: float
    """GPU-to-GPU σ of temperature at equal power and slot (run-to-run noise removed)."""
    temp_run_sigma_c: float
    """Run-to-run σ of one GPU's temperature at equal power."""
    temp_sigma_gpu_c: float
    """GPU-to-GPU σ within one node at equal power and slot (run-to-run noise removed)."""
    temp_sigma_node_c: float
    """Node-to-node σ of a node's own level (run-to-run noise and its four GPUs' sampling
    spread removed); temp_sigma_node_c² + temp_sigma_gpu_c² ≈ temp_sigma_c²."""
    clock_frac_per_c_at_cap: float
    """d ln(SM clock)/dT at the power cap: fractional clock change per °C (negative)."""
    leakage_per_c: float
    """k in static(T) = static·(1 + k·(T − T0)) that reproduces the clock slope at the cap."""
    gpu_speed_sigma: float
    """σ of ln(per-GPU median kernel time) across GPUs (robust, from the 5-95 % range)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    carry_over: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


FITTED = tuple(f.name for f in fields(ThermalFit) if f.name not in ("sources", "carry_over"))


@functools.cache
def load_thermal_fit() -> ThermalFit:
    """The shipped constants; every fitted key needs a source and a carry-over note."""
    import tomllib

    path = "thermal_fit.toml"
    text = resources.files("advisor.catalog").joinpath(path).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    values, sources, carry = (data.get(t, {}) for t in ("fitted", "sources", "carry_over"))
    if set(values) != set(FITTED):
        raise CatalogError(f"{path} [fitted]: expected keys {', '.join(sorted(FITTED))}; got "
                           f"{', '.join(sorted(values))}.")
    for key, table in ((k, t) for k in FITTED for t in ("sources", "carry_over")):
        if not str(data.get(table, {}).get(key, "")).strip():
            raise CatalogError(f"{path}: {key} has no entry in [{table}].")
    try:
        kw = {k: tuple(float(x) for x in v) if k == "slot_offset_c" else float(v)
              for k, v in values.items()}
    except (TypeError, ValueError) as e:
        raise CatalogError(f"{path} [fitted]: not a number ({e}).") from None
    return ThermalFit(**kw, sources=sources, carry_over=carry)


def expected_max_normal(num: int | np.ndarray) -> np.ndarray:
    """E[max of `num` iid standard normals] (0 at n = 1), from
    `advisor.perf.variability.max_of_normals`: within 2e-6 of exact up to n = 1000, 2e-4 at
    n = 1e6 (its normal CDF, Abramowitz & Stegun 7.1.26, bounds the far tail)."""
    return max_of_normals(_gpu_counts(num))[0]


def expected_slowest(num_gpus: int | np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """Expected fractional slowdown of the slowest of `num_gpus` GPUs relative to the median GPU,
    when ln(time) is normal across GPUs with σ `sigma`: σ·E[max of N]. (It is the log-ratio x;
    the fraction e^x − 1 exceeds it by about x²/2: 0.08 points at x = 4 %.)"""
    return slowest_of(_gpu_counts(num_gpus), np.asarray(sigma, dtype=float))


def _gpu_counts(num: int | np.ndarray) -> np.ndarray:
    n = np.asarray(num, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n < 1):
        raise ValueError(f"num_gpus must be at least 1; got {n[(n < 1) | ~np.isfinite(n)][:3]}.")
    return n


def leakage_from_clock_slope(clock_frac_per_c: float, *, static_share: float,
                             exponent: float, delta_t_c: float) -> float:
    """The leakage coefficient k that makes a power-capped GPU's clock fall as measured.

    At the cap L (fixed), busy power is static·(1 + k·ΔT) + D·φ^a with static = s·L, so
    D·φ^a = L·(1 − s − s·k·ΔT). Differentiating L = const in T:
        0 = s·L·k + a·D·φ^(a−1)·dφ/dT,
    so the measured slope g = d ln φ/dT = −s·k / (a·(1 − s − s·k·ΔT)). Solving for k:
        k = −g·a·(1 − s) / (s·(1 − g·a·ΔT)).
    At ΔT = 0 (the reference temperature) this is k = −g·a·(1 − s)/s.

    Args:
        clock_frac_per_c: g, measured d ln(clock)/dT at the cap (negative).
        static_share: s, static power as a share of the limit (power.toml).
        exponent: a, dynamic power ∝ clock^a (power.toml).
        delta_t_c: T − T0 at which g was measured (median SGEMM temperature − reference).

    Returns:
        k, per °C.
    """
    g, a, s = clock_frac_per_c, exponent, static_share
    return -g * a * (1.0 - s) / (s * (1.0 - g * a * delta_t_c))


@dataclass(frozen=True)
class ThermalReference:
    """The three files, reduced to the columns the fits use."""

    sgemm: pd.DataFrame
    """uuid, perf (ms), freq (MHz), temp (°C), pwr (W); duplicates dropped."""
    training: pd.DataFrame
    """workload, uuid, device, mean_temp (°C), mean_pwr (W), ts (run start, s), cabinet, node."""


def load_reference(folder: Path) -> ThermalReference:
    """Read `v100_{sgemm,bert,resnet50}_per_gpu.csv` from `folder`."""
    import pandas as pd

    sgemm = pd.read_csv(folder / "v100_sgemm_per_gpu.csv").drop_duplicates()
    cols = ["uuid", "device", "mean_temp", "mean_pwr", "ts", "cabinet", "node"]
    training = pd.concat([pd.read_csv(folder / f"v100_{w}_per_gpu.csv", usecols=cols)
                          .assign(workload=w) for w in ("bert", "resnet50")], ignore_index=True)
    return ThermalReference(sgemm=sgemm[["uuid", "perf", "freq", "temp", "pwr"]],
                            training=training)


def _random_effects(values: pd.Series, keys: pd.Series) -> tuple[float, float]:
    """One-way random-effects ANOVA (method of moments, unbalanced groups): the between-group
    variance component (may come out negative) and the within-group mean square."""
    groups = values.groupby(keys)
    size, mean = groups.size(), groups.mean()
    num, num_groups = len(values), len(size)
    within = float(((values - groups.transform("mean")) ** 2).sum() / (num - num_groups))
    n_bar = (num - (size ** 2).sum() / num) / (num_groups - 1)
    between = float((size * (mean - values.mean()) ** 2).sum() / (num_groups - 1))  # mean square
    return (between - within) / n_bar, within


def fit_temperature(training: pd.DataFrame) -> tuple[np.ndarray, float, float, np.ndarray]:
    """OLS of mean_temp on [1, mean_pwr, device 1, 2, 3]: coefficients, between-GPU and
    run-to-run σ of the residual (one-way random-effects ANOVA by uuid), residuals."""
    import pandas as pd

    dev = training["device"].to_numpy()
    design = np.column_stack([np.ones(len(dev)), training["mean_pwr"].to_numpy()]
                             + [(dev == k).astype(float) for k in (1, 2, 3)])
    y = training["mean_temp"].to_numpy()
    coef = np.linalg.lstsq(design, y, rcond=None)[0]
    res = y - design @ coef
    between, within = _random_effects(pd.Series(res), training["uuid"].reset_index(drop=True))
    return coef, math.sqrt(max(between, 0.0)), math.sqrt(within), res


@dataclass(frozen=True)
class NodeSpread:
    """The temperature residual split into node and GPU-within-node levels (`node_spread`)."""

    sigma_gpu_c: float
    """σ_G: GPU-to-GPU within a node, run-to-run noise removed."""
    sigma_node_c: float
    """σ_U: a node's own level, run-to-run noise and σ_G²/4 removed."""
    sigma_gpu_raw_c: float
    """Spread among the four GPUs of one node in one run, × sqrt(4/3) (σ_G² + σ_E²)."""
    sigma_node_means_c: float
    """Plain standard deviation of the node-run means (σ_U² + σ_V² + (σ_G² + σ_E²)/4)."""
    sigma_noise_c: float
    """σ_E: one GPU's run-to-run noise relative to its node's other GPUs."""
    sigma_node_run_c: float
    """Run-to-run σ of a node's mean: sqrt(σ_V² + σ_E²/4)."""
    num_nodes: int
    num_runs: int


def node_spread(training: pd.DataFrame, res: np.ndarray) -> NodeSpread:
    """Split the residual of `fit_temperature` into a node level and a GPU-within-node level.

    Each run holds the four GPUs of one node (grouped by workload, `ts`, `cabinet`, `node`), so
    the residual of GPU i of node k in run t is modelled as U_k + V_kt + G_i + E_it: the node's
    persistent level (σ_U), its run-to-run shift (σ_V), the GPU's persistent deviation within
    the node (σ_G) and noise (σ_E). Each node's runs form a complete runs × GPUs table, so a
    two-way ANOVA without interaction, pooled over nodes, gives σ_E² (residual mean square)
    and σ_G² = (SS_gpu − df_gpu·σ_E²) / Σ_k 3·T_k (T_k runs of node k). One-way ANOVA of the
    node-run means by node gives the persistent part of a node's mean, σ_U² + σ_G²/4, and
    σ_U² follows. Both files are pooled: a node measured under both workloads is one node.
    """
    n = GPUS_PER_NODE
    node = training["cabinet"].astype(str) + "-" + training["node"].astype(str)
    run = training["workload"].astype(str) + "-" + training["ts"].astype(str) + "-" + node
    gpu = node + "-" + training["device"].astype(str)    # the slot: nested in its node
    frame = training.assign(res=res, node_id=node, run=run, gpu=gpu).reset_index(drop=True)
    per_run = frame.groupby("run")["device"].agg(["size", "nunique"])
    if ((per_run["size"] != n) | (per_run["nunique"] != n)).any():
        raise ValueError(f"every run must hold the {n} GPUs of one node once each")
    run_mean = frame.groupby("run")["res"].transform("mean")
    gpu_mean = frame.groupby("gpu")["res"].transform("mean")
    node_mean = frame.groupby("node_id")["res"].transform("mean")
    runs = frame.groupby("node_id")["run"].nunique().to_numpy()
    cells = float((n - 1) * runs.sum())
    noise = float(((frame["res"] - run_mean - gpu_mean + node_mean) ** 2).sum()
                  / ((n - 1) * (runs - 1)).sum())
    gpu_var = (float(((gpu_mean - node_mean) ** 2).sum()) - len(runs) * (n - 1) * noise) / cells
    means = frame.groupby(["node_id", "run"], as_index=False)["res"].mean()
    node_var, run_var = _random_effects(means["res"], means["node_id"])
    return NodeSpread(
        sigma_gpu_c=math.sqrt(max(gpu_var, 0.0)),
        sigma_node_c=math.sqrt(max(node_var - max(gpu_var, 0.0) / n, 0.0)),
        sigma_gpu_raw_c=math.sqrt(float(((frame["res"] - run_mean) ** 2).sum()) / cells),
        sigma_node_means_c=float(means["res"].std()), sigma_noise_c=math.sqrt(noise),
        sigma_node_run_c=math.sqrt(run_var), num_nodes=len(runs), num_runs=len(means))


def clock_slope(sgemm: pd.DataFrame) -> float:
    """d ln(freq)/d temp over SGEMM rows at the power cap (pooled least squares)."""
    capped = sgemm[sgemm["pwr"] > CAP_MIN_W]
    return float(np.polyfit(capped["temp"], np.log(capped["freq"]), 1)[0])


def per_gpu_log_time(sgemm: pd.DataFrame, *, at_cap_only: bool = False) -> np.ndarray:
    """ln of each GPU's median kernel time (ms), one value per uuid; with `at_cap_only`, only
    the GPUs whose median draw is at the power cap (the others run hot and below it)."""
    per_gpu = sgemm.groupby("uuid")[["perf", "pwr"]].median()
    if at_cap_only:
        per_gpu = per_gpu[per_gpu["pwr"] > CAP_MIN_W]
    return np.log(per_gpu["perf"].to_numpy())


def robust_sigma(log_time: np.ndarray) -> float:
    """σ from the 5-95 % range: (q95 − q5) / (2 · 1.645), the standard normal's 95th
    percentile (insensitive to the 1 % of GPUs that run hot below the power cap)."""
    q05, q95 = np.quantile(log_time, [0.05, 0.95])
    return float((q95 - q05) / (2.0 * 1.6448536269514722))


def subset_slowest(log_time: np.ndarray, sizes=SUBSET_SIZES, *, draws: int = 4000,
                   seed: int = 0) -> np.ndarray:
    """Mean over `draws` random subsets of N GPUs (without replacement) of the slowest GPU's
    ln-time above the median GPU of all, per N in `sizes`."""
    order = np.random.default_rng(seed).random((draws, len(log_time))).argsort(axis=1)
    median = np.median(log_time)
    return np.array([(log_time[order[:, :n]].max(axis=1) - median).mean() for n in sizes])


def fit(ref: ThermalReference, *, power: PowerParams | None = None) -> ThermalFit:
    """Every constant from the measurements; the power model's static share s, exponent a and
    reference temperature T0 (`power`, default power.toml) turn the clock slope into k."""
    if power is None:
        power = load_power_params()
    coef, sigma_gpu, sigma_run, res = fit_temperature(ref.training)
    levels = node_spread(ref.training, res)
    offsets = (0.0, *(float(c) for c in coef[2:]))
    rear = (offsets[1] + offsets[3] - offsets[0] - offsets[2]) / 2.0
    front_w = ref.training.loc[ref.training["device"].isin((0, 2)), "mean_pwr"].mean()
    slope = clock_slope(ref.sgemm)
    capped_temp = float(ref.sgemm.loc[ref.sgemm["pwr"] > CAP_MIN_W, "temp"].median())
    k = leakage_from_clock_slope(slope, static_share=power.static_share,
                                 exponent=power.clock_power_exponent,
                                 delta_t_c=capped_temp - power.leakage_reference_c)
    return ThermalFit(
        temp_intercept_c_v100=float(coef[0]), resistance_c_per_w_v100=float(coef[1]),
        rise_at_limit_c_v100=float(coef[1]) * LIMIT_W_V100, slot_offset_c=offsets,
        rear_minus_front_c=rear, rear_preheat_share=rear / (float(coef[1]) * front_w),
        temp_sigma_c=sigma_gpu, temp_run_sigma_c=sigma_run,
        temp_sigma_gpu_c=levels.sigma_gpu_c, temp_sigma_node_c=levels.sigma_node_c,
        clock_frac_per_c_at_cap=slope,
        leakage_per_c=k, gpu_speed_sigma=robust_sigma(per_gpu_log_time(ref.sgemm)))
