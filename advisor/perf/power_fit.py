"""Fit the power model's free parameters on measured GPU power, and hold each source out.

Sources (`datasets/reference/power`, read its README):

* `perseus` — Perseus (SOSP'24) all-max-frequency plans: per-GPU NVML energy of every pipeline
  stage of GPT-3/BLOOM/BERT/T5 pipelines on A40 and A100 PCIe, with each stage's measured forward
  and backward time. The timeline comes from those times (busy = forward + backward, the rest of
  the iteration waiting), so this source checks the phase powers, not the step model.
* `stage_profiles` — GPT-3 175B / BLOOM stage forward and backward time and power against a
  locked SM clock (A100 SXM, A40): the DVFS relations time(f) and power(f).
* `zeus_power_limit` — the same pipelines under one GPU power limit from 300 W down (Zeus):
  iteration time and per-GPU power against the limit, predicted from the 300 W step's timeline
  (itself capped where the demand exceeds 300 W; see `predict_zeus`).
* `h200_probe` — one H200 at its 700 W limit (`datasets/probes/h200-power`, this project's own
  measurement with `collectors/power_probe.py`): bf16 GEMMs of three shapes and fused attention
  back to back, each kernel's capped time against its time at full clock (cold, before the cap
  acts) and the SM clock the cap left (`load_probe`). It measures one chip and one kind of
  load, so it sets none of the shared parameters (carrying its clock to every chip made H100
  predictions 3 points worse) and not H200's level either: fitted on the probe alone, H200's
  best-fed GEMM would draw about 1,300 W at full clock, which predicted two other measurements
  of the same chip worse than the cross-chip level (922 W) does: the H200 campaign's throughput
  7.0 % off (3.8 %; its capped clock 6.8 % low against 6.2 % high) and H200's MLPerf runs 20 %
  too slow (13 %). It fits only the GEMM shape's power half-dimension,
  at the cross-chip level (`fit_chip_power`), and is a held-out check of that level.
  `Platform.gemm_power_w` carries a site's own probe of its chips.

Each source's error is the mean absolute percentage error (MAPE) of its targets. The fit minimises
the sum over sources of their mean squared log errors (each source weighs the same), with a
weak pull towards the placeholder values so that a parameter no remaining source constrains
(when one is held out) stays where it was rather than drifting.

`workload_holdout_table` holds out one workload at a time instead: one (gpu, model) pipeline of
the Zeus sweep, with every row measured on it (see `without_workload`), to judge the power-limit
response on a job the fit has never seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.perf.power_params import PowerParams, load_power_params

FITTED = PowerParams.FITTED
BOUNDS = {"busy_share": (0.6, 1.6), "wait_share": (0.05, 0.8), "static_share": (0.05, 0.6),
          "clock_power_exponent": (1.0, 6.0), "clock_bound_share": (0.3, 1.0)}
PRIOR = {"busy_share": 1.05, "wait_share": 0.35, "static_share": 0.25,
         "clock_power_exponent": 2.5, "clock_bound_share": 0.85}
"""Where the fit starts and what it is pulled towards: a 700 W H100 drawing a little over its
limit in large GEMMs, a third of it waiting, dynamic power ∝ f^2.5 (P ∝ C·V²·f with voltage
rising with clock), compute mostly clock-bound (placeholders from before any fit)."""
PRIOR_WEIGHT = 0.02
"""Pull towards the placeholder values, in log units per parameter (weak: a few percent)."""
LIMIT_W = {"a40": 300.0, "a100-pcie-80gb": 300.0}
"""Power limits: NVIDIA's specifications (A40 and A100 PCIe 80 GB: 300 W); also the highest
limit NVML allowed in the Zeus sweeps (datasets/reference/power README)."""
DESIGN_W = {"a40": 300.0, "a100-pcie-80gb": 400.0}
"""What the silicon is built to draw, against which the shares are fitted: the part's own limit,
except A100 PCIe, which caps the GA100 die of the A100 SXM4 (400 W, NVIDIA A100 datasheet) at
300 W. The products' shares are of their SXM/OAM limits (tdp_w), which are their design power."""
SOURCES = ("perseus", "stage_profiles", "zeus_power_limit")
"""The cross-chip sources the shared parameters are fitted on."""
DEFAULT_PROBE = Path(__file__).resolve().parents[2] / "datasets" / "probes" / "h200-power"
PROBE_CHIP = "h200"
"""The catalog platform the bundled probe measured (device.json: NVIDIA H200, 700 W)."""
PROBE_SHAPES = {"gemm8192": (8192, 8192, 8192), "gemm4096": (4096, 4096, 4096),
                "gemm8192x1024": (8192, 8192, 1024)}
"""(m, n, k) of the probe's GEMMs (`collectors/power_probe.py`)."""
PROBE_KERNELS = {"continuous": ("gemm8192", "gemm"), "kind-gemm4096": ("gemm4096", "gemm"),
                 "kind-gemm8192x1024": ("gemm8192x1024", "gemm"),
                 "kind-attention": ("attention", "attention")}
"""Probe phase -> (kernel, kind): the kernels that run long enough back to back to be capped
(the 2048³ GEMM leaves launch gaps; the copy never reaches the limit)."""
BASE_LIMIT_W = 300.0
"""The Zeus sweeps' reference step: the highest limit NVML allowed (datasets/reference/power)."""


@dataclass(frozen=True)
class PowerReference:
    """The measurements, reduced to what the fit predicts."""

    perseus: pd.DataFrame
    """One row per (job, stage): busy_s, iter_s, limit_w, avg_power_w (median over plans)."""
    profiles: pd.DataFrame
    """One row per (model, gpu, stage, instruction, clock): clock_frac, time_ratio, power_w,
    power_at_max_w, limit_w (NaN where not stated)."""
    zeus: pd.DataFrame
    """One row per (job, limit, stage): busy_s and iter_s at 300 W, limit_w, iter_ratio,
    avg_power_w."""
    probe: pd.DataFrame
    """One row per probe kernel: kind (gemm/attention), utilization (speed at full clock over
    the best-fed GEMM's), time_ratio (capped over full clock), clock_frac, limit_w, design_w."""


def read_probe(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """A power probe's kernels, NVML samples and device facts, as `collectors/power_probe.py`
    wrote them."""
    import json

    return (pd.read_csv(folder / "kernels.csv.gz"), pd.read_csv(folder / "samples.csv.gz"),
            json.loads((folder / "device.json").read_text()))


def settled_half(kernels: pd.DataFrame, samples: pd.DataFrame, phase: str, begin: float,
             end: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A probe phase's kernels and NVML samples in its second half, where the cap has settled."""
    half = begin + (end - begin) / 2
    return (kernels[(kernels.phase == phase) & (kernels.start_s >= half)],
            samples[(samples.timestamp_s >= half) & (samples.timestamp_s < end)])


def load_probe(folder: Path) -> pd.DataFrame:
    """Reduce a power probe (`collectors/power_probe.py`) to its capped kernels: the second half
    of each phase (the cap settled) against the kernel's cold time (full clock)."""
    kernels, samples, facts = read_probe(folder)
    spans = {name: (begin, end) for name, begin, end in facts["spans"]}
    cold = facts["warm_kernel_s"]
    flop = kernels.groupby("phase")["flop"].first()
    best = flop["continuous"] / cold["gemm8192"]
    rows = []
    for phase, (kernel, kind) in PROBE_KERNELS.items():
        begin, end = spans[phase]
        settled, s = settled_half(kernels, samples, phase, begin, end)
        m, n, k = PROBE_SHAPES.get(kernel, (8192, 8192, 8192))
        rows.append({"kernel": kernel, "kind": kind, "m": m, "n": n, "k": k,
                     "utilization": flop[phase] / cold[kernel] / best,
                     "time_ratio": float(settled.duration_s.median()) / cold[kernel],
                     "clock_frac": float(s.sm_clock_mhz.mean()) / facts["max_sm_clock_mhz"],
                     "limit_w": facts["power_limit_w"], "design_w": facts["power_limit_w"]})
    return pd.DataFrame(rows)


def phase_table(kernels: pd.DataFrame, samples: pd.DataFrame, facts: dict) -> pd.DataFrame:
    """Per probe phase, its second half (settled): speed (TFLOP/s; TB/s for the copy), mean SM
    clock, NVML instantaneous and 1-s average power, temperature, share of samples capped."""
    rows = []
    for name, begin, end in facts["spans"]:
        k, s = settled_half(kernels, samples, name, begin, end)
        moved = k.flop.sum() if k.flop.sum() else k.bytes.sum()
        rows.append({"phase": name, "speed": moved / k.duration_s.sum() / 1e12 if len(k) else
                     np.nan, "sm_mhz": s.sm_clock_mhz.mean(),
                     "inst_w": s.power_instant_w.mean(), "max_inst_w": s.power_instant_w.max(),
                     "avg_w": s.power_avg_w.mean(), "temp_c": s.gpu_temp_c.mean(),
                     "capped": s.throttle_power.astype(float).mean()})
    return pd.DataFrame(rows).set_index("phase")


def kernel_ratios(table: pd.DataFrame, facts: dict) -> dict[str, float]:
    """The kernel power ratios of `power.toml` this probe measures, through the fitted curve:
    memory_ratio, the HBM-bound copy's draw at full clock (never capped) over the best-fed
    GEMM's full-clock demand (the chip's gemm_power_w); attention_ratio, fused attention's
    full-clock demand static + (limit − static) / φ^a (φ: the clock the cap left it) over the
    same."""
    from advisor.catalog import load_platform

    p = load_power_params()
    design = limit = float(facts["power_limit_w"])
    busy = p.best_gemm_w(load_platform(PROBE_CHIP))
    static = p.static_share * design
    phi = table.loc["kind-attention", "sm_mhz"] / facts["max_sm_clock_mhz"]
    attention = static + (limit - static) / phi ** p.clock_power_exponent
    return {"memory_ratio": float(table.loc["kind-copy", "avg_w"]) / busy,
            "attention_ratio": float(attention / busy)}


def load_reference(folder: Path, probe: Path | None = DEFAULT_PROBE) -> PowerReference:
    """Read and reduce the three per-GPU sources in `folder` (`datasets/reference/power`) and the
    power probe in `probe` (the checkout's H200 one by default; left out where there is none,
    as in an installed wheel)."""
    perseus = pd.read_csv(folder / "perseus_runs.csv")
    runs = perseus[perseus["plan_kind"] == "all_max_frequency"].copy()
    runs["busy_s"] = runs["fwd_time_s"] + runs["bwd_time_s"]
    keys = ["gpu", "model", "stage"]
    per_stage = runs.groupby(keys, as_index=False)[
        ["busy_s", "iter_time_s", "avg_power_w"]].median()
    per_stage = per_stage.rename(columns={"iter_time_s": "iter_s"})
    per_stage["limit_w"] = per_stage["gpu"].map(LIMIT_W)
    per_stage["design_w"] = per_stage["gpu"].map(DESIGN_W)

    prof = pd.read_csv(folder / "gpt3_stage_profiles.csv")
    group = ["model", "gpu", "stage", "instruction"]
    top = prof.loc[prof.groupby(group)["frequency_mhz"].idxmax(),
                   group + ["frequency_mhz", "time_s", "power_w"]]
    prof = prof.merge(top, on=group, suffixes=("", "_max"))
    prof["clock_frac"] = prof["frequency_mhz"] / prof["frequency_mhz_max"]
    prof["time_ratio"] = prof["time_s"] / prof["time_s_max"]
    prof["power_at_max_w"] = prof["power_w_max"]
    prof["limit_w"] = prof["gpu"].map(LIMIT_W)        # A100 SXM: not stated (NaN)
    prof["design_w"] = prof["gpu"].map(DESIGN_W)
    prof = prof[prof["clock_frac"] < 1.0]

    zeus = pd.read_csv(folder / "zeus_power_limit.csv")
    zeus = zeus[(zeus["server_scheduler"] == "ZeusGlobalPowerLimit") & (zeus["dp"] == 1)
                & (zeus["tp"] == 1)].copy()
    zeus["busy_s"] = zeus["fwd_time_s"] + zeus["bwd_time_s"]
    steps = zeus.groupby(["gpu", "model", "power_limit_w", "stage"], as_index=False)[
        ["busy_s", "iter_time_s", "avg_power_w"]].median()
    base = steps[steps["power_limit_w"] == BASE_LIMIT_W].drop(
        columns=["power_limit_w", "avg_power_w"])
    steps = steps[steps["power_limit_w"] < BASE_LIMIT_W].merge(
        base, on=["gpu", "model", "stage"], suffixes=("", "_300"))
    job_iter = steps.groupby(["gpu", "model", "power_limit_w"])["iter_time_s"].transform("max")
    job_base = steps.groupby(["gpu", "model", "power_limit_w"])["iter_time_s_300"].transform("max")
    steps["iter_ratio"] = job_iter / job_base
    steps = steps.rename(columns={"busy_s_300": "busy300_s", "iter_time_s_300": "iter300_s",
                                  "power_limit_w": "limit_w"})
    steps["design_w"] = steps["gpu"].map(DESIGN_W)
    return PowerReference(perseus=per_stage, profiles=prof, zeus=steps,
                          probe=load_probe(probe) if probe is not None
                          and (probe / "device.json").exists() else pd.DataFrame())


def predict_perseus(p: PowerParams, d: pd.DataFrame) -> np.ndarray:
    """Per-stage average power from the stage's measured busy and waiting time."""
    limit, design = d["limit_w"].to_numpy(), d["design_w"].to_numpy()
    busy = np.minimum(p.busy_share * design, limit)
    wait = np.minimum(p.wait_share * design, limit)
    b, it = d["busy_s"].to_numpy(), d["iter_s"].to_numpy()
    return (b * busy + np.maximum(it - b, 0.0) * wait) / it


def predict_profiles(p: PowerParams, d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(time ratio, power) against clock: t(φ)/t(1) = β/φ + 1 − β; power = static +
    (demand − static)·φ^a, where the limit is known capped at it, else scaled to the measured
    power at maximum clock."""
    phi = d["clock_frac"].to_numpy()
    time_ratio = p.slowdown(phi)
    limit = d["limit_w"].to_numpy()
    at_max = d["power_at_max_w"].to_numpy()
    # Unknown limit: the demand is what the GPU drew at full clock.
    scale = np.where(np.isnan(limit), at_max / p.busy_share, d["design_w"].to_numpy())
    static = p.static_share * scale
    demand = p.busy_share * scale
    power = p.busy_power(static, demand, phi)
    power = np.where(np.isnan(limit), power, np.minimum(power, np.nan_to_num(limit, nan=1e9)))
    return time_ratio, power


def predict_zeus(p: PowerParams, d: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(iteration time ratio per job, per-stage average power) under a power limit, from the
    300 W step's timeline: busy power capped at the limit lowers the clock, which stretches
    compute; the slowest stage's stretch sets the pipeline.

    The 300 W step is itself a capped step wherever the demand exceeds 300 W (A100 PCIe: the
    GA100 die's design power is 400 W), so its measured busy time is the full-clock time
    already stretched by slowdown(φ₃₀₀). A limit's busy time is that time times
    slowdown(φ_limit) / slowdown(φ₃₀₀), and the ratio is iteration(limit) / iteration(300 W),
    both modelled (comparing against an unthrottled 300 W step overstates every stretch).
    """
    tdp = d["design_w"].to_numpy()
    limit = d["limit_w"].to_numpy()
    demand = p.busy_share * tdp
    static = p.static_share * tdp
    phi = p.capped_clock(static, demand, limit)          # 1 where the demand fits
    phi_base = p.capped_clock(static, demand, BASE_LIMIT_W)
    busy = d["busy300_s"].to_numpy()
    stretched = busy * p.slowdown(phi) / p.slowdown(phi_base)
    frame = d.assign(extra=stretched - busy)
    job = ["gpu", "model", "limit_w"]
    extra = frame.groupby(job)["extra"].transform("max").to_numpy()
    base = frame.groupby(job)["iter300_s"].transform("max").to_numpy()
    iteration = base + extra
    busy_w = np.minimum(p.busy_power(static, demand, phi), limit)
    wait_w = np.minimum(p.wait_share * tdp, limit)
    power = (stretched * busy_w + np.maximum(iteration - stretched, 0.0) * wait_w) / iteration
    return iteration / base, power


def predict_probe(p: PowerParams, d: pd.DataFrame,
                  best_w: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(time ratio, clock fraction) of kernels run back to back at the limit: demand as
    `power.phase_demand` draws it for GEMMs of that utilization or fused attention, from the
    chip's best-fed GEMM power `best_w` (None: the cross-chip `busy_share` × design)."""
    design = d["design_w"].to_numpy()
    phi = p.capped_clock(p.static_share * design, probe_demand(p, d, best_w),
                         d["limit_w"].to_numpy())
    return p.slowdown(phi), phi


def probe_demand(p: PowerParams, d: pd.DataFrame, best_w: float | None = None) -> np.ndarray:
    """Full-clock demand (W) of each probe kernel, as `power.phase_demand` draws it (see
    `predict_probe`)."""
    design = d["design_w"].to_numpy()
    best = p.busy_share * design if best_w is None else np.full(len(d), best_w)
    shape = p.gemm_power_shape(d["m"].to_numpy(float), d["n"].to_numpy(float),
                               d["k"].to_numpy(float))
    gemm = p.gemm_demand(design, d["utilization"].to_numpy() * shape, best)
    return np.where(d["kind"].to_numpy() == "attention", best * p.attention_ratio, gemm)


def probe_errors(p: PowerParams, probe: pd.DataFrame,
                 best_w: float | None = None) -> dict[str, np.ndarray]:
    """Log errors (predicted / measured) of the probe's capped time and clock."""
    t, phi = predict_probe(p, probe, best_w)
    return {"time_ratio": np.log(t / probe["time_ratio"].to_numpy()),
            "clock": np.log(phi / probe["clock_frac"].to_numpy())}


def fit_chip_power(p: PowerParams, probe: pd.DataFrame, *, watts: float | None = None
                   ) -> tuple[float, float]:
    """The probed chip's best-fed GEMM power at full clock (W) and the GEMM shape's power
    half-dimension (`PowerParams.gemm_power_half_dim`): least squares on the probe's log
    errors with every shared parameter as fitted across chips. With `watts` the level is held
    there (the cross-chip busy_share × design power) and only the shape is fitted."""
    from scipy.optimize import least_squares

    design = float(probe["design_w"].iloc[0])

    def errors(x: np.ndarray) -> np.ndarray:
        level, half_dim = (watts, x[0]) if watts is not None else (x[0], x[1])
        shaped = p.replace(gemm_power_half_dim=float(half_dim))
        return np.concatenate(list(probe_errors(shaped, probe, level).values()))

    if watts is not None:
        result = least_squares(errors, [p.gemm_power_half_dim], bounds=([1.0], [8192.0]))
        return float(watts), float(result.x[0])
    result = least_squares(errors, [p.busy_share * design, p.gemm_power_half_dim],
                           bounds=([0.5 * design, 1.0], [3.0 * design, 8192.0]))
    return float(result.x[0]), float(result.x[1])


def source_errors(p: PowerParams, ref: PowerReference) -> dict[str, dict[str, np.ndarray]]:
    """Log errors (predicted / measured) per cross-chip source and target."""
    out: dict[str, dict[str, np.ndarray]] = {}
    out["perseus"] = {"avg_power": np.log(predict_perseus(p, ref.perseus)
                                          / ref.perseus["avg_power_w"].to_numpy())}
    t, w = predict_profiles(p, ref.profiles)
    out["stage_profiles"] = {
        "time_ratio": np.log(t / ref.profiles["time_ratio"].to_numpy()),
        "power": np.log(w / ref.profiles["power_w"].to_numpy())}
    t, w = predict_zeus(p, ref.zeus)
    jobs = ~ref.zeus.duplicated(["gpu", "model", "limit_w"]).to_numpy()
    out["zeus_power_limit"] = {
        "iter_time_ratio": np.log(t[jobs] / ref.zeus["iter_ratio"].to_numpy()[jobs]),
        "avg_power": np.log(w / ref.zeus["avg_power_w"].to_numpy())}
    return out


def fit(ref: PowerReference, *, sources: tuple[str, ...] = SOURCES,
        start: PowerParams | None = None) -> PowerParams:
    """Least-squares fit of the `FITTED` parameters on `sources`, from `PRIOR` (the fixed
    parameters taken from `start`, default the shipped ones)."""
    from scipy.optimize import least_squares

    start = (start or load_power_params()).replace(**PRIOR)
    prior = np.array([PRIOR[k] for k in FITTED])
    lo = np.array([BOUNDS[k][0] for k in FITTED])
    hi = np.array([BOUNDS[k][1] for k in FITTED])

    def params(x: np.ndarray) -> PowerParams:
        return start.replace(**dict(zip(FITTED, x.tolist(), strict=True)))

    def residuals(x: np.ndarray) -> np.ndarray:
        errors = source_errors(params(x), ref)
        parts = []
        for name in sources:
            for values in errors.get(name, {}).values():
                parts.append(values / np.sqrt(len(values) * len(errors[name])))
        parts.append(PRIOR_WEIGHT * np.log(x / prior))
        return np.concatenate(parts)

    result = least_squares(residuals, np.clip(prior, lo, hi), bounds=(lo, hi), x_scale="jac")
    return params(result.x)


def mape(log_errors: np.ndarray) -> float:
    return float(np.mean(np.abs(np.expm1(log_errors))) * 100)


def validation_table(ref: PowerReference) -> pd.DataFrame:
    """Per source and target: MAPE with every source in the fit (in-sample) and with the source
    held out (the others fit, this one predicted), and the number of points."""
    full = fit(ref)
    rows = []
    for held in [s for s in SOURCES if s in source_errors(full, ref)]:
        held_params = fit(ref, sources=tuple(s for s in SOURCES if s != held))
        inside = source_errors(full, ref)[held]
        outside = source_errors(held_params, ref)[held]
        for target, values in inside.items():
            rows.append({"source": held, "target": target, "points": len(values),
                         "mape_in_sample": mape(values),
                         "mape_held_out": mape(outside[target])})
    if len(ref.probe):
        # In sample: the chip's own GEMM power; held out: what a chip no probe measured gets.
        chip_w, half_dim = fit_chip_power(full, ref.probe)
        inside = probe_errors(full.replace(gemm_power_half_dim=half_dim), ref.probe, chip_w)
        outside = probe_errors(full, ref.probe)
        for target, values in inside.items():
            rows.append({"source": f"{PROBE_CHIP}_probe", "target": target,
                         "points": len(values), "mape_in_sample": mape(values),
                         "mape_held_out": mape(outside[target])})
    return pd.DataFrame(rows)


def workloads(ref: PowerReference) -> list[tuple[str, str]]:
    """The (gpu, model) pipelines of the Zeus power-limit sweep in the fit, sorted.

    The 3D (dp 2, tp 2) GPT-3 6.7B job is not one: `load_reference` keeps pure pipelines only.
    """
    pairs = ref.zeus[["gpu", "model"]].drop_duplicates()
    return sorted(pairs.itertuples(index=False, name=None))


def without_workload(ref: PowerReference, gpu: str, model: str) -> PowerReference:
    """`ref` less every row measured on the (gpu, model) workload.

    That is its Zeus power-limit steps (the held-out targets) and its Perseus all-max-frequency
    runs (the same job on the same GPUs, clocks unlocked). Stage profiles are dropped where model
    and GPU match exactly, which none does: they are GPT-3 175B / BLOOM 176B stages, on A40 and
    A100 SXM (not PCIe), i.e. other jobs that share a family and a GPU with some workloads.
    """
    def keep(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[(frame["gpu"] != gpu) | (frame["model"] != model)]

    return PowerReference(perseus=keep(ref.perseus), profiles=keep(ref.profiles),
                          zeus=keep(ref.zeus), probe=ref.probe)


def limit_errors(p: PowerParams, zeus: pd.DataFrame) -> pd.DataFrame:
    """Log errors (predicted / measured) of one workload's Zeus steps under `p`.

    Returns:
        One row per (limit, stage): limit_w, time_log_error (the job's iteration time ratio,
        the same on every stage of a limit) and power_log_error (the stage's average power).
    """
    time_ratio, power_w = predict_zeus(p, zeus)
    return pd.DataFrame({
        "limit_w": zeus["limit_w"].to_numpy(),
        "time_log_error": np.log(time_ratio / zeus["iter_ratio"].to_numpy()),
        "power_log_error": np.log(power_w / zeus["avg_power_w"].to_numpy())})


def holdout_row(inside: pd.DataFrame, outside: pd.DataFrame) -> dict[str, float]:
    """One workload's figures from its `limit_errors` in-sample (`inside`) and held out."""
    per_limit = outside.groupby("limit_w")["time_log_error"].first()
    worst = per_limit.abs().idxmax()
    return {"num_limits": len(per_limit), "num_power_points": len(outside),
            "time_mape_in_sample": mape(inside.groupby("limit_w")["time_log_error"].first()),
            "time_mape_held_out": mape(per_limit.to_numpy()),
            "power_mape_in_sample": mape(inside["power_log_error"].to_numpy()),
            "power_mape_held_out": mape(outside["power_log_error"].to_numpy()),
            "worst_limit_w": float(worst),
            "worst_time_error_pct": float(np.expm1(per_limit[worst]) * 100)}


def workload_holdout_table(ref: PowerReference) -> pd.DataFrame:
    """Power-limit response, one workload held out at a time.

    For each (gpu, model) of `workloads`, fit on `without_workload` and predict the workload's
    iteration time ratio under each limit (one point per limit) and each stage's average power
    (one per limit and stage); the in-sample figures use the fit on everything.

    Returns:
        One row per workload: gpu, model, num_limits, num_power_points, time and power MAPE
        (%) in-sample and held out, the limit with the largest held-out time error
        (worst_limit_w) and that error, signed (worst_time_error_pct; > 0: predicted slower).
    """
    full = fit(ref)
    rows = []
    for gpu, model in workloads(ref):
        zeus = ref.zeus[(ref.zeus["gpu"] == gpu) & (ref.zeus["model"] == model)]
        held = fit(without_workload(ref, gpu, model))
        rows.append({"gpu": gpu, "model": model,
                     **holdout_row(limit_errors(full, zeus), limit_errors(held, zeus))})
    return pd.DataFrame(rows)
