"""Fit the thermal constants on per-GPU V100 measurements and check the slowest-of-N formula.

    python benchmarks/thermal_validation.py            # every fitted figure, checks, subsets
    python benchmarks/thermal_validation.py --write    # ...and rewrite the values in
                                                       # advisor/catalog/thermal_fit.toml
    python benchmarks/thermal_validation.py --plots DIR    # ...and the figure (PNG) in DIR

Method and sources: `advisor/perf/thermal_fit.py` and the [sources] of thermal_fit.toml. The
checks printed besides the fit (other estimators of the same constants) are not shipped.
`--plots DIR` draws the fit's rows (`plots`, matplotlib): fitted against measured temperature per
run and slot, and the subset check's slowest GPU, predicted and measured, against N.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import _plots
import numpy as np
import pandas as pd

from advisor.perf import thermal_fit as tf
from advisor.perf.power_params import load_power_params

DEFAULT_REFERENCE = Path(__file__).resolve().parents[1] / "datasets" / "reference" / "thermal"
THERMAL_TOML = Path(__file__).resolve().parents[1] / "advisor" / "catalog" / "thermal_fit.toml"


def _format(value: object) -> str:
    if isinstance(value, (tuple, list, np.ndarray)):
        return "[" + ", ".join(_format(v) for v in value) + "]"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{float(value):.4g}"


def write_tables(tables: dict[str, dict[str, object]], path: Path = THERMAL_TOML) -> None:
    """Replace `key = ...` lines inside each [table] of the TOML, keeping everything else."""
    text = path.read_text(encoding="utf-8")
    for table, values in tables.items():
        match = re.search(rf"(?ms)^\[{table}\]\n(.*?)(?=^\[|\Z)", text)
        if match is None:
            raise SystemExit(f"{path}: no [{table}] table to update")
        body = match.group(1)
        for key, value in values.items():
            body, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {_format(value)}", body,
                                  count=1)
            if count != 1:
                raise SystemExit(f"{path}: no line '{key} = ...' in [{table}] to update")
        text = text[:match.start(1)] + body + text[match.end(1):]
    path.write_text(text, encoding="utf-8")


def within_slope(frame: pd.DataFrame, y: str, x: str, by: str) -> float:
    """Least-squares slope of y on x after removing each group's means (fixed effects)."""
    g = frame.groupby(by)
    dy, dx = frame[y] - g[y].transform("mean"), frame[x] - g[x].transform("mean")
    return float((dx * dy).sum() / (dx * dx).sum())


def temperature_checks(ref: tf.ThermalReference, folder: Path) -> None:
    t = ref.training
    per_workload = {w: tf.fit_temperature(f)[0][1] for w, f in t.groupby("workload")}
    means = t.groupby(["uuid", "workload"])[["mean_temp", "mean_pwr"]].mean().reset_index()
    both = means[means.groupby("uuid")["workload"].transform("nunique") == 2]
    medians = pd.concat([pd.read_csv(folder / f"v100_{w}_per_gpu.csv",
                                     usecols=["uuid", "device", "temp", "pwr"])
                         for w in ("bert", "resnet50")], ignore_index=True)
    medians = medians.rename(columns={"temp": "mean_temp", "pwr": "mean_pwr"})
    coef, sigma, _, _ = tf.fit_temperature(medians)
    print("  checks (not shipped):")
    print("    R per workload: " + ", ".join(f"{w} {r:.4f}" for w, r in per_workload.items())
          + " C/W")
    print(f"    R within GPU, BERT against ResNet-50 run means ({both.uuid.nunique()} GPUs in "
          f"both): {within_slope(both, 'mean_temp', 'mean_pwr', 'uuid'):.4f} C/W")
    print(f"    same OLS on the median columns (temp ~ pwr): R {coef[1]:.4f} C/W, offsets "
          f"{np.round(coef[2:], 2).tolist()} C, sigma_T {sigma:.2f} C (power medians land on "
          f"either mode of a bimodal trace)")


def node_checks(t: pd.DataFrame, pooled: tf.NodeSpread) -> None:
    """The node/GPU split per workload (its own OLS), and the figures before noise removal."""
    print("    node split, run-to-run noise kept / removed (C):")
    print(f"    {'':9} {'within node':>17} {'node level':>17} {'noise':>6} {'node-run':>9}  "
          f"nodes runs")
    per_workload = {w: tf.node_spread(f, tf.fit_temperature(f)[3])
                    for w, f in t.groupby("workload")}
    for name, s in {**per_workload, "pooled": pooled}.items():
        print(f"    {name:9} {s.sigma_gpu_raw_c:8.2f} / {s.sigma_gpu_c:5.2f} "
              f"{s.sigma_node_means_c:8.2f} / {s.sigma_node_c:5.2f} {s.sigma_noise_c:6.2f} "
              f"{s.sigma_node_run_c:9.2f}  {s.num_nodes:5d} {s.num_runs:4d}")


def plots(training: pd.DataFrame, sizes, predicted, measured, at_cap, folder: Path
          ) -> list[Path]:
    """The figure of `--plots`: each training run's mean temperature against the fit of part 1
    (a + R × mean power + the slot's offset), per slot, and part 3's subset check: the slowest
    of N GPUs against the median, predicted and measured (all GPUs and at-cap GPUs), against
    N."""
    coef, _, _, residual = tf.fit_temperature(training)
    measured_c = training["mean_temp"].to_numpy()
    slot = "slot " + training["device"].astype(int).astype(str)
    figures = _plots.Figures(folder)
    fig, axes = _plots.figure(2, width_in=11, height_in=6.2)
    sd = {s: float(np.std(residual[(slot == s).to_numpy()])) for s in sorted(slot.unique())}
    labels = {s: f"{s} ({int((slot == s).sum())}; residual SD {v:.1f} C)" for s, v in sd.items()}
    _plots.predicted_vs_measured(axes[0], measured_c, measured_c - residual, slot,
                                 unit="run-mean temperature (C)", labels=labels, log=False,
                                 band_pct=None, size=8, alpha=0.5)
    _plots.legend_below(axes[0], title="slot in the 4-GPU node (runs; residual SD)", ncol=2)
    axes[0].set_title(f"1. Temperature = a + R × power + slot offset: {len(training)} runs\n"
                      f"(R = {coef[1]:.4f} C/W; the scatter: GPU to GPU and run to run)",
                      fontsize=10)
    ax = axes[1]
    pct = {name: 100 * np.expm1(np.asarray(v)) for name, v in (
        ("predicted (sigma of the spread, E[max of N])", predicted),
        ("measured, all GPUs", measured), ("measured, GPUs at the cap", at_cap))}
    for (name, values), style in zip(pct.items(), ("-o", "--s", ":D"), strict=True):
        ax.plot(sizes, values, style, label=name, markersize=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sizes), [str(int(n)) for n in sizes])
    ax.set_xlabel("GPUs in the job, N")
    ax.set_ylabel("slowest of N against the median GPU (% more time)")
    ax.grid(True, alpha=0.3)
    _plots.legend_below(ax)
    ax.set_title("3. Slowest of N (4000 random subsets of the SGEMM fleet each)", fontsize=10)
    return [figures.save(fig, "thermal-fit-and-slowest",
                         f"Left: fitted against measured mean temperature of {len(training)} V100 "
                         f"training runs (a + R × power + slot offset), one colour per slot, "
                         f"with y = x. Right: how much slower the slowest of N GPUs is than the "
                         f"median, predicted from the fitted spread and measured on random "
                         f"subsets (all GPUs and at-cap GPUs), for N = "
                         f"{', '.join(str(int(n)) for n in sizes)}")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                        help="the thermal reference folder (default: datasets/reference/thermal)")
    parser.add_argument("--write", action="store_true", help="write the fit to thermal_fit.toml")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figure (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)
    if not args.reference.is_dir():
        print(f"error: {args.reference} not found; pass --reference", file=sys.stderr)
        return 2
    ref = tf.load_reference(args.reference)
    power = load_power_params()
    fit = tf.fit(ref, power=power)
    raw = pd.read_csv(args.reference / "v100_sgemm_per_gpu.csv", usecols=["temp", "freq", "pwr"])
    sgemm, t = ref.sgemm, ref.training
    log_time = tf.per_gpu_log_time(sgemm)
    log_at_cap = tf.per_gpu_log_time(sgemm, at_cap_only=True)
    capped = sgemm[sgemm["pwr"] > tf.CAP_MIN_W]

    print(f"SGEMM: {len(raw)} rows, {len(raw) - len(sgemm)} exact duplicates counted once, "
          f"{sgemm.uuid.nunique()} GPUs; training: {len(t)} runs, {t.uuid.nunique()} GPUs")
    print("1. Temperature = a + R * mean power + offset[device] (run means of BERT + ResNet-50)")
    print(f"  a = {fit.temp_intercept_c_v100:.2f} C, R = {fit.resistance_c_per_w_v100:.4f} C/W "
          f"= rise {fit.rise_at_limit_c_v100:.1f} C at the {tf.LIMIT_W_V100:.0f} W limit")
    print("  slot offsets (device 0-3) = "
          + ", ".join(f"{o:+.2f}" for o in fit.slot_offset_c) + " C; devices 1,3 minus 0,2 = "
          f"{fit.rear_minus_front_c:.2f} C = {fit.rear_preheat_share:.3f} of the front GPUs' "
          f"own rise")
    print(f"  sigma_T GPU-to-GPU at equal power and slot = {fit.temp_sigma_c:.2f} C (run-to-run "
          f"{fit.temp_run_sigma_c:.2f} C)")
    levels = tf.node_spread(t, tf.fit_temperature(t)[3])
    print(f"  split by node ({levels.num_nodes} nodes, {levels.num_runs} node-runs of "
          f"{tf.GPUS_PER_NODE} GPUs): within a node {fit.temp_sigma_gpu_c:.2f} C, node to node "
          f"{fit.temp_sigma_node_c:.2f} C; in quadrature "
          f"{np.hypot(fit.temp_sigma_gpu_c, fit.temp_sigma_node_c):.2f} C against sigma_T "
          f"{fit.temp_sigma_c:.2f} C")
    temperature_checks(ref, args.reference)
    node_checks(t, levels)

    dup_slope = np.polyfit(raw.temp[raw.pwr > tf.CAP_MIN_W],
                           np.log(raw.freq[raw.pwr > tf.CAP_MIN_W]), 1)[0]
    mhz = np.polyfit(capped.temp, capped.freq, 1)[0]
    within = within_slope(capped.assign(lf=np.log(capped.freq)), "lf", "temp", "uuid")
    median_c = float(capped.temp.median())
    print(f"2. Clock at the cap ({len(capped)} rows with pwr > {tf.CAP_MIN_W:.0f} W, "
          f"{capped.uuid.nunique()} GPUs, median {median_c:.0f} C)")
    print(f"  d ln(clock)/dT = {fit.clock_frac_per_c_at_cap:.3e} per C = "
          f"{fit.clock_frac_per_c_at_cap * 1000:.2f} % per 10 C ({mhz:.2f} MHz per C)")
    k0 = tf.leakage_from_clock_slope(fit.clock_frac_per_c_at_cap, delta_t_c=0.0,
                                     static_share=power.static_share,
                                     exponent=power.clock_power_exponent)
    print(f"  leakage k = {fit.leakage_per_c:.4e} per C (s = {power.static_share}, a = "
          f"{power.clock_power_exponent}, T0 = {power.leakage_reference_c} C, dT = "
          f"{median_c - power.leakage_reference_c:.0f} C; at dT = 0: {k0:.4e})")
    print(f"  checks: within-GPU {within:.3e} per C; duplicates kept (README) {dup_slope:.3e}")

    mad = 1.4826 * np.median(np.abs(log_time - np.median(log_time)))
    q05, q95 = np.quantile(log_time, [0.05, 0.95])
    print(f"3. GPU speed spread ({len(log_time)} GPUs; {len(log_time) - len(log_at_cap)} below "
          f"the cap)")
    print(f"  sigma ln(time), 5-95 % range = {fit.gpu_speed_sigma:.4f} (5th/95th percentile "
          f"{np.expm1(q05 - np.median(log_time)):+.2%}/{np.expm1(q95 - np.median(log_time)):+.2%})"
          f"; MAD {mad:.4f}; SD {np.std(log_time, ddof=1):.4f}; at-cap GPUs only "
          f"{tf.robust_sigma(log_at_cap):.4f}")
    print(f"  slowest GPU: {np.expm1(log_time.max() - np.median(log_time)):+.1%} against the "
          f"median")
    sizes = np.array(tf.SUBSET_SIZES)
    predicted = tf.expected_slowest(sizes, fit.gpu_speed_sigma)
    measured, at_cap = tf.subset_slowest(log_time), tf.subset_slowest(log_at_cap)
    print("  subset check (ln slowest - ln median; 4000 random subsets each):")
    print(f"  {'N':>5} {'E[max]':>7} {'predicted':>10} {'all GPUs':>9} {'ratio':>6} "
          f"{'at cap':>8} {'ratio':>6}")
    for n, p, m, c in zip(sizes, predicted, measured, at_cap, strict=True):
        print(f"  {n:5d} {p / fit.gpu_speed_sigma:7.3f} {p:10.4f} {m:9.4f} {m / p:6.2f} "
              f"{c:8.4f} {c / p:6.2f}")

    if args.write:
        fitted = {k: getattr(fit, k) for k in tf.FITTED}
        inputs = {"static_share": power.static_share,
                  "clock_power_exponent": power.clock_power_exponent,
                  "leakage_reference_c": power.leakage_reference_c,
                  "median_temp_at_cap_c": median_c, "limit_w_v100": tf.LIMIT_W_V100,
                  "num_sgemm_rows": len(sgemm), "num_sgemm_duplicate_rows": len(raw) - len(sgemm),
                  "num_sgemm_gpus": len(log_time),
                  "num_sgemm_gpus_below_cap": len(log_time) - len(log_at_cap),
                  "num_training_runs": len(t), "num_training_gpus": t.uuid.nunique(),
                  "num_training_nodes": levels.num_nodes,
                  "num_training_node_runs": levels.num_runs}
        subsets = {"num_gpus": tuple(int(n) for n in sizes), "predicted": predicted,
                   "measured_all": measured, "measured_at_cap": at_cap}
        write_tables({"fitted": fitted, "inputs": inputs, "subset_check": subsets})
        print(f"wrote {THERMAL_TOML}")
    if args.plots:
        for path in plots(t, sizes, predicted, measured, at_cap, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
