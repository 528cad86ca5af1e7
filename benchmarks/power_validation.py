"""Fit the power model on measured GPU power and print how well it predicts each source held out.

    python benchmarks/power_validation.py            # fit, leave-one-source-out table
    python benchmarks/power_validation.py --write    # ...and write [fitted] and
                                                     # gemm_power_half_dim in power.toml
    python benchmarks/power_validation.py --plots DIR   # ...and the figures (PNG) in DIR

The shared parameters are fitted across chips (A40, A100); the H200 probe fits only the GEMM
shape's power half-dimension, at the cross-chip level, and is otherwise a held-out check: what
H200's own level would be, fitted on the probe alone, is printed beside the cross-chip one (see
`advisor/perf/power_fit.py` for why it is not used).

Sources and method: `advisor/perf/power_fit.py`. MAPE in-sample: every source in the fit;
held out: the other sources fit the parameters and this one is predicted. MLPerf node energy
(`advisor/perf/node_energy.py`) is never in the fit: its in-sample and held-out figures are the
same prediction (median over each system's 10 runs; host power modelled as stated there).

Then the power-limit response with one workload held out at a time (`workload_holdout_table`):
each (gpu, model) pipeline of the Zeus sweep, with its Perseus runs, leaves the fit and its
iteration time ratio (one point per limit) and per-stage average power are predicted; and the
shipped model's average-power error per limit of the sweeps (in-sample).

Then the peak sample (the highest 50 ms NVML reading, `peak_excursion` in power.toml): at the
700 W board limit against the H200 probe's capped kernels (`advisor/perf/peak_fit.py`) and the
H200 campaign's training runs; below a board limit no reference samples power, so for a
standard job the model's peak is printed with the range the parameter's bounds give.

`--plots DIR` draws the held-out predictions of the first table, point by point (`plots`,
matplotlib): average power and time ratios, predicted against measured, per source.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import _plots
import numpy as np
import pandas as pd

from advisor.perf.node_energy import load_runs, predict_runs, validation_rows
from advisor.perf.peak_fit import derived_peak_excursion, probe_peaks
from advisor.perf.power_fit import (
    FITTED,
    PROBE_CHIP,
    SOURCES,
    fit,
    fit_chip_power,
    limit_errors,
    load_reference,
    mape,
    predict_perseus,
    predict_probe,
    predict_profiles,
    predict_zeus,
    validation_table,
    workload_holdout_table,
)
from advisor.perf.power_params import load_power_params

DEFAULT_REFERENCE = Path(__file__).resolve().parents[1] / "datasets" / "reference" / "power"
CAMPAIGN = Path(__file__).resolve().parents[1] / "datasets" / "campaigns" / "h200-single.parquet"
STANDARD_JOB = {"model": "llama3-70b", "gpu": "h100", "num_gpus": 64, "seq_len": 8192,
                "gbs": 256, "tp": 4, "pp": 4, "mbs": 1}
"""The job whose peak below the board limit is printed (issue 47: Llama 3 70B, TP4 PP4, 64 H100,
`advisor predict`'s defaults otherwise)."""
LIMITS_W = (700, 600, 500, 420)
POWER_TOML = Path(__file__).resolve().parents[1] / "advisor" / "catalog" / "power.toml"


def write_fitted(values: dict[str, float], path: Path = POWER_TOML) -> None:
    """Replace the values of `values`' keys in power.toml, keeping everything else as it
    is."""
    text = path.read_text()
    for key, value in values.items():
        text, count = re.subn(rf"(?m)^{key} = [^#\n]*?(\s*#.*)?$", f"{key} = {value:.4g}\\1",
                              text, count=1)
        if count != 1:
            raise SystemExit(f"{path}: no line '{key} = ...' to update")
    path.write_text(text)


def print_workload_holdout(table: pd.DataFrame) -> None:
    """Render `workload_holdout_table` and the median over workloads of the held-out MAPE."""
    print("\npower limit, one workload held out at a time (MAPE, in-sample / held out)")
    print(f"{'gpu':15} {'model':18} {'limits':>6} {'points':>6} {'time ratio':>15} "
          f"{'avg power':>13} {'worst limit (time error)':>25}")
    for row in table.itertuples():
        print(f"{row.gpu:15} {row.model:18} {row.num_limits:6d} {row.num_power_points:6d} "
              f"{row.time_mape_in_sample:6.1f}% /{row.time_mape_held_out:5.1f}% "
              f"{row.power_mape_in_sample:4.1f}% /{row.power_mape_held_out:4.1f}% "
              f"{row.worst_limit_w:9.0f} W ({row.worst_time_error_pct:+6.1f}%)")
    print(f"median over {len(table)} workloads, held out: iteration time ratio "
          f"{table['time_mape_held_out'].median():.1f}%, average power "
          f"{table['power_mape_held_out'].median():.1f}% (in-sample "
          f"{table['time_mape_in_sample'].median():.1f}%, "
          f"{table['power_mape_in_sample'].median():.1f}%)")


def print_limit_errors(ref) -> None:
    """The shipped model's average-power error per Zeus limit (in-sample: the sweeps are in
    the fit), each limit below the 300 W maximum on its own line."""
    zeus = ref.zeus
    errors = limit_errors(load_power_params(), zeus).assign(gpu=zeus["gpu"].to_numpy())
    print("\naverage power per stage against the Zeus power limit (shipped model, in-sample: "
          "MAPE, median error)")
    for gpu, by_gpu in errors.groupby("gpu"):
        cells = []
        for limit, rows in by_gpu.groupby("limit_w"):
            e = rows["power_log_error"].to_numpy()
            cells.append(f"{limit:.0f} W {mape(e):.1f}% ({np.expm1(np.median(e)):+.1%})")
        print(f"  {gpu}: " + ", ".join(reversed(cells)))


def _with_excursion(value: float):
    """The model with `peak_excursion` = value (it moves the peak sample and nothing else)."""
    from unittest import mock

    params = load_power_params().replace(peak_excursion=value)
    return mock.patch("advisor.perf.power.load_power_params", lambda: params)


def _peaks(frame: pd.DataFrame, excursion: float) -> np.ndarray:
    from advisor.predict.rows import predict_frame

    with _with_excursion(excursion):
        return predict_frame(frame)["pred_peak_power_w"].to_numpy(float)


def campaign_excursion(path: Path = CAMPAIGN) -> tuple[float, float]:
    """(median error of the shipped peak, median implied `peak_excursion`) over the campaign's
    runs: the peak is linear in the parameter, so each run's value solves one equation."""
    frame = pd.read_parquet(path)
    frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    measured = frame["peak_power_w"].to_numpy(float)
    low, high = _peaks(frame, 0.0), _peaks(frame, 1.0)
    shipped = low + load_power_params().peak_excursion * (high - low)
    return (float(np.median(shipped / measured - 1)),
            float(np.median((measured - low) / (high - low))))


def print_peaks() -> None:
    """The peak sample at the board limit (probe, campaign) and below it (a standard job)."""
    shipped = load_power_params().peak_excursion
    table = probe_peaks()
    print(f"\npeak sample (highest 50 ms NVML reading) at the 700 W board limit; power.toml "
          f"peak_excursion = {shipped:g}\nH200 probe, capped kernels back to back (second half "
          f"of each phase; readings refresh every 100 ms):")
    print(f"  {'phase':20} {'readings':>8} {'mean W':>7} {'peak W':>7} {'model W':>8} "
          f"{'error':>7} {'implied':>8}")
    for r in table.itertuples():
        print(f"  {r.phase:20} {r.num_readings:8d} {r.mean_w:7.0f} {r.measured_peak_w:7.0f} "
              f"{r.model_peak_w:8.0f} {r.error:+7.1%} {r.excursion:8.2f}")
    probe = derived_peak_excursion(table)
    print(f"  median error {table['error'].median():+.1%}; implied peak_excursion {probe:.2f} "
          f"(median; {table['excursion'].min():.2f}-{table['excursion'].max():.2f})")
    error, campaign = campaign_excursion()
    print(f"H200 campaign, 16 training runs at 700 W (50 Hz samples): median error {error:+.1%}; "
          f"implied peak_excursion {campaign:.2f} (bursts after a step's gaps run uncapped for "
          f"their first ~60 ms, which steady capped load never shows)")
    print(f"bounds: {probe:.2f} (steady capped load) to {campaign:.2f} (training steps), the "
          f"two measurements at the board limit; {shipped:g} stays a placeholder between them")
    print("below the board limit: no reference samples power (Zeus sweeps: one NVML energy "
          "reading per iteration;\nV100 fleet: medians of samples at its 300 W board limit; "
          "MLPerf: node AC at 1 Hz), so the peak's error there is\nunmeasured; the controller's "
          "millisecond loop does not depend on the limit, so the share measured at 700 W is "
          "carried.")
    job = pd.DataFrame([STANDARD_JOB | {"power_limit_w": w} for w in LIMITS_W])
    at = {x: _peaks(job, x) for x in (probe, shipped, campaign)}
    print(f"{STANDARD_JOB['model']} TP{STANDARD_JOB['tp']} PP{STANDARD_JOB['pp']} on "
          f"{STANDARD_JOB['num_gpus']} {STANDARD_JOB['gpu'].upper()}: peak per GPU at "
          f"peak_excursion {shipped:g} (range over the bounds)")
    for i, limit in enumerate(LIMITS_W):
        lo, hi = sorted((at[probe][i], at[campaign][i]))
        print(f"  {limit} W limit: {at[shipped][i]:.0f} W ({lo:.0f}-{hi:.0f} W, "
              f"{lo / at[shipped][i] - 1:+.0%}/{hi / at[shipped][i] - 1:+.0%})")


def held_out_points(ref) -> pd.DataFrame:
    """Every point of `validation_table`'s held-out column: per source and target the
    measured value and the prediction of the fit without that source (the H200 probe: the
    cross-chip fit's, as the table's held-out column), one row per point."""
    full = fit(ref)
    parts = []

    def add(source: str, target: str, measured, predicted) -> None:
        parts.append(pd.DataFrame({"source": source, "target": target,
                                   "measured": np.asarray(measured, float),
                                   "predicted": np.asarray(predicted, float)}))

    for held in SOURCES:
        p = fit(ref, sources=tuple(s for s in SOURCES if s != held))
        if held == "perseus":
            add(held, "avg_power", ref.perseus["avg_power_w"], predict_perseus(p, ref.perseus))
        elif held == "stage_profiles":
            t, w = predict_profiles(p, ref.profiles)
            add(held, "time_ratio", ref.profiles["time_ratio"], t)
            add(held, "power", ref.profiles["power_w"], w)
        else:
            t, w = predict_zeus(p, ref.zeus)
            jobs = ~ref.zeus.duplicated(["gpu", "model", "limit_w"]).to_numpy()
            add(held, "iter_time_ratio", ref.zeus["iter_ratio"].to_numpy()[jobs], t[jobs])
            add(held, "avg_power", ref.zeus["avg_power_w"], w)
    if len(ref.probe):
        t, _ = predict_probe(full, ref.probe)
        add(f"{PROBE_CHIP}_probe", "time_ratio", ref.probe["time_ratio"], t)
    return pd.concat(parts, ignore_index=True)


def plots(ref, folder) -> list[Path]:
    """The figures of `--plots`: `held_out_points`, power and time ratio side by side, one
    colour per source (its legend gives the held-out MAPE the table prints), the largest drawn
    first so that the few points of a small source stay visible."""
    points = held_out_points(ref)
    figures = _plots.Figures(folder)
    fig, axes = _plots.figure(2, width_in=12, height_in=5.6)
    for ax, kind, unit in ((axes[0], "power", "average power per GPU (W)"),
                           (axes[1], "time", "time ratio (to full clock or 300 W)")):
        sel = points[points["target"].str.contains(kind)]
        group = sel["source"] + " " + sel["target"]
        log_error = np.log(sel["predicted"] / sel["measured"])
        labels = {g: f"{g} ({int((group == g).sum())}; MAPE {mape(log_error[group == g]):.1f} %)"
                  for g in group.unique()}
        _plots.predicted_vs_measured(ax, sel["measured"], sel["predicted"], group, unit=unit,
                                     labels=labels, log=False, size=10, alpha=0.45,
                                     order=group.value_counts().index.tolist())
        _plots.legend_below(ax, title="held out (points; MAPE)")
    fig.suptitle("Power model: each source predicted by the fit to the other sources (the H200 "
                 "probe: by the cross-chip fit)\nPerseus and Zeus: A40 and A100 PCIe; stage "
                 "profiles: A40 and A100 SXM; MLPerf node energy (2 systems) in the table only",
                 fontsize=10)
    return [figures.save(fig, "power-predicted-vs-measured",
                         "Predicted against measured average power (W) and time ratio, each "
                         "source held out (predicted by the fit to the others), one colour per "
                         "source and target, with the y = x and ±20 % lines")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE,
                        help="the power reference folder (default: datasets/reference/power)")
    parser.add_argument("--write", action="store_true", help="write the fit to power.toml")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figures (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args()
    if not args.reference.is_dir():
        print(f"error: {args.reference} not found; pass --reference", file=sys.stderr)
        return 2
    ref = load_reference(args.reference)
    table = validation_table(ref)
    mlperf = predict_runs(load_runs(args.reference))
    table = pd.concat([table, pd.DataFrame(validation_rows(mlperf))], ignore_index=True)
    print(f"{'source':46} {'target':22} {'points':>6} {'in-sample':>10} {'held out':>9}")
    for row in table.itertuples():
        print(f"{row.source:46} {row.target:22} {row.points:6d} {row.mape_in_sample:9.1f}% "
              f"{row.mape_held_out:8.1f}%")
    for r in mlperf:
        print(f"{r.system}: step {r.predicted_step_s:.3f} s predicted / {r.measured_step_s:.3f} "
              f"s measured; GPU {r.predicted_gpu_w:.0f} W predicted; host floor "
              f"{r.host_ac_w:.0f} W AC per node; node {r.predicted_node_w:.0f} / "
              f"{r.measured_node_w:.0f} W; {r.predicted_j_per_token:.3f} / "
              f"{r.measured_j_per_token:.3f} J per token")
    print_workload_holdout(workload_holdout_table(ref))
    print_limit_errors(ref)
    print_peaks()
    params = fit(ref)
    fitted = {k: getattr(params, k) for k in FITTED}
    print("fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in fitted.items()))
    half_dim = None
    if len(ref.probe):
        design = float(ref.probe["design_w"].iloc[0])
        own_w, own_half = fit_chip_power(params, ref.probe)
        _, half_dim = fit_chip_power(params, ref.probe, watts=params.busy_share * design)
        print(f"{PROBE_CHIP} probe: gemm_power_half_dim = {half_dim:.4g} at the cross-chip "
              f"level ({params.busy_share * design:.4g} W); fitted on the probe alone, "
              f"{PROBE_CHIP}'s level would be {own_w:.4g} W (half-dimension {own_half:.4g}), "
              f"not used")
    if args.write:
        write_fitted(fitted | ({"gemm_power_half_dim": half_dim} if half_dim else {}))
        print(f"wrote {POWER_TOML}")
    if args.plots:
        for path in plots(ref, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
