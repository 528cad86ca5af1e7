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
iteration time ratio (one point per limit) and per-stage average power are predicted.

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
from advisor.perf.power_fit import (
    FITTED,
    PROBE_CHIP,
    SOURCES,
    fit,
    fit_chip_power,
    load_reference,
    mape,
    predict_perseus,
    predict_probe,
    predict_profiles,
    predict_zeus,
    validation_table,
    workload_holdout_table,
)

DEFAULT_REFERENCE = Path(__file__).resolve().parents[1] / "datasets" / "reference" / "power"
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
