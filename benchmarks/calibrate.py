"""Calibrate the analytical model and print its honest error.

    python benchmarks/calibrate.py                # fit, leave-one-source-out table, vTrain
    python benchmarks/calibrate.py --write        # ...and write advisor/catalog/calibration.toml
    python benchmarks/calibrate.py --no-loso      # skip the (minutes-long) cross-validation
    python benchmarks/calibrate.py --no-mlperf    # published runs only
    python benchmarks/calibrate.py --gate         # only the refit gate (about 6 minutes)
    python benchmarks/calibrate.py --gate --plots DIR   # ...and its figures (PNG) in DIR
    python benchmarks/calibrate.py --no-loso --plots DIR   # the in-sample fit's figures

The refit gate (`advisor.learn.gate`): every run with cross-validation prints leave-one-series-out
error per platform family × precision × dense/MoE beside the baseline recorded in
`benchmarks/baselines/loso_series_cells.json`, and exits 1 when a cell of 10 or more rows got
worse by more than 1 point, unless `--accept "why"` says why (the reason goes in the commit);
`--update-baseline` records this run as the new baseline. `--plots DIR` draws the gate's
held-out predictions (`gate_plots`, matplotlib): predicted against measured per series, the
error by GPU count, and the share of runs inside the analytical p10-p90 band; without `--gate`
also the first two for the in-sample fit (`fit-*.png`).

Fits (1) the collective α–β constants to vTrain's NCCL all-reduce tables and (2) each platform
family's efficiencies to `datasets/reference/published_runs.csv` and the MLPerf Training
submissions advisor can express (`datasets/reference/mlperf/mlperf_runs.csv`; MI300X/MI325X make
`cdna3` a calibrated family) (MAP: least squares on
log(predicted/measured) with a log-normal prior around the literature values). Reports error of
tokens/s/GPU under leave-one-source-out cross-validation (refit without each source, predict it;
the MLPerf submissions are one source, so that fold is the error on a source never seen)
overall and per source, platform, model family and precision, Kendall τ within groups sharing
model, platform and GPU count, the MLPerf rows held out by round, and the vTrain single-node
and multi-node scores (MAPE, τ per job, top-1 regret; the multi-node runs on their cluster's
network, `vtrain.vtrain_cluster`, with nothing fitted to them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import sys
from pathlib import Path

import _plots
import numpy as np
import pandas as pd
from _checkout import head

from advisor.catalog import load_platform
from advisor.data.mlperf import mlperf_runs
from advisor.learn import gate
from advisor.learn.bands import KIND_METRIC, Z90, analytical_log_sds
from advisor.learn.fit import (
    MLPERF_SOURCE,
    error_table,
    fit_all,
    kendall_by_group,
    leave_one_source_out,
    load_reference,
    predict_held_out,
    predict_reference,
)
from advisor.learn.stack import MIN_KIND_ROWS, StackSpreads
from advisor.perf.calibration import FIT_PARAMETERS, FrameworkEfficiency, load_calibration
from advisor.perf.collectives import fit_collectives, read_nccl_tests_table
from advisor.perf.vtrain import FRAMEWORK as VTRAIN_FRAMEWORK
from advisor.perf.vtrain import (
    cross_validated,
    equal_work_twins,
    fit_host_overhead,
    load_vtrain,
    predict_vtrain,
    reweighted_terms,
    score_vtrain,
    vtrain_cluster,
)

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "datasets" / "reference"
TARGET = ROOT / "advisor" / "catalog" / "calibration.toml"
BASELINE = ROOT / "benchmarks" / "baselines" / "loso_series_cells.json"
WIDTH_IN_BAND = 8.5
"""The band-coverage figure's width (in): room for the series' names beside their bars."""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _print(title: str, table: pd.DataFrame) -> None:
    print(f"\n## {title}\n")
    print(table.to_string())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write calibration.toml")
    parser.add_argument("--no-loso", action="store_true", help="skip cross-validation")
    parser.add_argument("--reference", type=Path, default=REFERENCE_DIR / "published_runs.csv")
    parser.add_argument("--mlperf", type=Path, default=REFERENCE_DIR / "mlperf" / "mlperf_runs.csv")
    parser.add_argument("--no-mlperf", action="store_true", help="published runs only")
    parser.add_argument("--vtrain", type=Path, default=REFERENCE_DIR / "vtrain")
    parser.add_argument("--gate", action="store_true",
                        help="only the refit gate: leave-one-series-out cells against the "
                             "baseline")
    parser.add_argument("--accept", metavar="WHY", default="",
                        help="let a gated cell get worse, for this reason (say it in the commit)")
    parser.add_argument("--update-baseline", action="store_true",
                        help=f"record this run's cells in {BASELINE.relative_to(ROOT)}")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also draw the in-sample fit's predictions and (with the "
                             "cross-validation) the refit gate's held-out ones into DIR (PNG; "
                             "needs matplotlib)")
    args = parser.parse_args()
    if args.gate and args.no_loso:
        parser.error("--gate runs the cross-validation that --no-loso skips")

    base = load_calibration()
    tables = [read_nccl_tests_table(p)
              for p in sorted((args.vtrain / "allreduce_a100").glob("AR_GPU*_LUT.csv"))]
    coll = fit_collectives(tables, load_platform("a100"))
    print(f"collectives: {coll['fit_points']} NCCL points, fit MAPE {coll['fit_mape_pct']:.2f} %"
          f" (median {coll['fit_median_ape_pct']:.2f} %): alpha0 {coll['alpha0_s'] * 1e6:.1f} us,"
          f" alpha1 {coll['alpha1_s'] * 1e6:.2f} us/hop, efficiency "
          f"{coll['domain_efficiency']:.3f}, group penalty {coll['domain_group_penalty']:.3f}")
    import dataclasses

    base = dataclasses.replace(base, collectives=dataclasses.replace(
        base.collectives, **{k: coll[k] for k in ("alpha0_s", "alpha1_s", "domain_efficiency",
                                                   "domain_group_penalty")}))

    if not args.no_mlperf:
        _, skipped = mlperf_runs(args.mlperf)
        print(f"MLPerf: {len(skipped)} submissions not expressible "
              f"({skipped['why'].str.split('(').str[0].str.strip().value_counts().to_dict()})")
    ref = load_reference(args.reference, None if args.no_mlperf else args.mlperf)
    mlperf = (ref.rows["source"] == MLPERF_SOURCE).to_numpy()
    print(f"reference: {len(ref.rows)} runs used, {len(ref.skipped)} skipped "
          f"({ref.skipped['why'].str.split(';').str[0].value_counts().to_dict()})")
    if args.gate:
        return _gate(ref, base, args)
    fitted = fit_all(ref, base.with_families({}))
    for family, eff in fitted.families.items():
        print(f"  {family}: " + ", ".join(f"{k} {getattr(eff, k):.4g}" for k in FIT_PARAMETERS))
    rows = ref.rows
    in_sample = predict_reference(ref, fitted)
    _print("in-sample error (tokens/s/GPU, %)", error_table(rows, in_sample, None))
    if args.plots:
        for path in gate_plots(rows, in_sample, None, args.plots, prefix="fit", how=IN_SAMPLE):
            print(f"wrote {path}", file=sys.stderr)

    vtrain = load_vtrain(args.vtrain / "ground_truth_single.csv")
    zero, _ = score_vtrain(vtrain, predict_vtrain(vtrain, fitted))
    cv_pred, host = cross_validated(vtrain, fitted)
    score, _ = score_vtrain(vtrain, cv_pred)
    host_all = fit_host_overhead(vtrain, fitted)
    print(f"\n## vTrain single-node A100 ({score.rows} runs, {score.jobs} jobs; ampere "
          f"calibration from published runs)\n")
    for label, s in (("zero-shot (nothing from vTrain)", zero),
                     ("host overhead cross-validated by hidden size "
                      f"({', '.join(f'{k}: {v * 1e3:.2f} ms' for k, v in host.items())})",
                      score)):
        print(f"{label}: MAPE {s.mape_pct:.1f} %, median APE {s.median_ape_pct:.1f} %, Kendall "
              f"tau per job median {s.median_kendall_tau:.2f} (mean {s.mean_kendall_tau:.2f}), "
              f"top-1 regret median {s.median_top1_regret_pct:.1f} % (mean "
              f"{s.mean_top1_regret_pct:.1f} %)")
    print("peer analytical model (Calculon): 38.9 % MAPE, tau 0.48")

    metrics = {"in_sample_mape_pct": float(error_table(rows, in_sample, None)["mape"].iloc[0]),
               "vtrain_zero_shot_mape_pct": zero.mape_pct,
               "vtrain_zero_shot_median_tau": zero.median_kendall_tau,
               "vtrain_cv_mape_pct": score.mape_pct,
               "vtrain_cv_median_tau": score.median_kendall_tau,
               "vtrain_cv_median_top1_regret_pct": score.median_top1_regret_pct}
    fitted = fitted.with_frameworks(fitted.frameworks | {
        VTRAIN_FRAMEWORK: FrameworkEfficiency(layer_overhead_s=host_all)})
    metrics.update(_vtrain_multi(args.vtrain / "ground_truth_multi.csv", fitted))
    status = 0
    if not args.no_loso:
        loso = leave_one_source_out(ref, base.with_families({}))
        _print("leave-one-source-out error (tokens/s/GPU, %)", error_table(rows, loso, None))
        for by in ("source", "platform", "model_family", "precision", "framework"):
            _print(f"... by {by}", error_table(rows, loso, by))
        tau = kendall_by_group(rows, loso)
        print(f"\nKendall tau (LOSO predictions) within {len(tau)} groups sharing model, platform "
              f"and GPU count (>= 3 runs): median {tau['tau'].median():.2f}, mean "
              f"{tau['tau'].mean():.2f}")
        table = error_table(rows, loso, None)
        metrics.update(loso_mape_pct=float(table["mape"].iloc[0]),
                       loso_median_ape_pct=float(table["median_ape"].iloc[0]),
                       loso_median_tau=float(tau["tau"].median()))
        # Whole publication series held out: the error on a software stack never seen (what
        # the Predictor's analytical band is sized by), per cell against the baseline.
        status, series_pred = _gate(ref, base, args, with_status=True)
        series = error_table(rows, series_pred, None)
        metrics.update(loso_series_mape_pct=float(series["mape"].iloc[0]),
                       loso_series_median_ape_pct=float(series["median_ape"].iloc[0]),
                       **series_band_metrics(rows, series_pred))
        if mlperf.any():
            held = rows[mlperf]
            _print("MLPerf submissions held out together (tokens/s/GPU, %)",
                   error_table(held, loso[mlperf], None))
            for by in ("family", "model", "platform", "framework"):
                _print(f"... by {by}", error_table(held, loso[mlperf], by))
            table = error_table(held, loso[mlperf], None)
            metrics.update(mlperf_held_out_mape_pct=float(table["mape"].iloc[0]),
                           mlperf_held_out_median_ape_pct=float(table["median_ape"].iloc[0]))
            by_round = pd.concat([predict_held_out(ref, base.with_families({}), r, by="round")
                                  for r in sorted(held["round"].unique())])
            _print("MLPerf held out one round at a time (the others and the published runs "
                   "fitted)", error_table(held, by_round.loc[held.index], "round"))
            _print("... by family", error_table(held, by_round.loc[held.index], "family"))
        # Whole platform families held out: a family predicted from the others' efficiencies,
        # as an uncalibrated one (AMD) is (what the Predictor's band for it is sized by).
        family_out = leave_one_source_out(ref, base.with_families({}), by="family")
        family = error_table(rows, family_out, None)
        _print("leave-one-family-out error (tokens/s/GPU, %)", family)
        _print("... by family", error_table(rows, family_out, "family"))
        metrics.update(lofo_mape_pct=float(family["mape"].iloc[0]),
                       lofo_median_ape_pct=float(family["median_ape"].iloc[0]))

    if status and args.write:
        print("\nnot written: the refit gate failed (see above); --accept \"why\" to write anyway")
        return status
    if args.write and args.no_loso:
        # A refit without the cross-validation (minutes, not the hour it takes): the held-out
        # figures (and the bands and stack prior sized by them) are carried from the last full
        # run, and the file says so; `--gate` checks the held-out error of the new model.
        carried = {k: v for k, v in base.metrics.items() if k not in metrics}
        metrics = {**metrics, **carried}
        base = dataclasses.replace(base, sources={**base.sources, "carried_metrics": (
            f"{', '.join(carried)}: carried from the last run of benchmarks/calibrate.py with "
            f"its cross-validation; the families were refitted on "
            f"{dt.date.today().isoformat()} with --no-loso (python benchmarks/calibrate.py "
            f"--gate gives the held-out error of the model as it is)")})
    elif args.write:    # a full run computes every held-out figure: nothing is carried
        base = dataclasses.replace(base, sources={k: v for k, v in base.sources.items()
                                                  if k != "carried_metrics"})
    if args.write:
        _write(fitted, base, coll, metrics, args.reference,
               None if args.no_mlperf else args.mlperf)
        print(f"\nwrote {TARGET.relative_to(ROOT)}")
    return status


def series_band_metrics(rows: pd.DataFrame, predicted: pd.Series) -> dict[str, float]:
    """What the bands are sized by, from the leave-one-series-out predictions: the 80th
    percentile of |log(predicted / measured)| (the analytical p10-p90 band's half-width), for
    all runs and for dense and MoE runs apart (the half-widths the Predictor uses), and
    the split of that error into a shift shared by one stack (a series on one platform), one
    shared by a model's runs on it, and the scatter of single runs, for dense and for MoE runs,
    and how much that scatter differs by stack (`advisor.learn.stack`: the prior of a team's
    stack calibration, fitted to runs other than LoRA fine-tuning, as these are)."""
    error = np.abs(np.log(predicted / rows["measured"]))
    out = {"loso_series_p80_abs_log_error": round(float(np.quantile(error, 0.8)), 4)}
    # Dense and MoE runs each size their own band (`advisor.learn.bands.KIND_METRIC`), where
    # there are enough of them.
    moe = rows["moe"].astype(bool).to_numpy()
    for flag, key in KIND_METRIC.items():
        if (moe == flag).sum() >= MIN_KIND_ROWS:
            out[key] = round(float(np.quantile(error[moe == flag], 0.8)), 4)
    trained = rows["finetune"] != "lora"    # as `advisor train --stack` fits (no LoRA runs)
    rows, predicted = rows[trained], predicted[trained]
    spreads = StackSpreads.of(rows["measured"], predicted,
                              rows["series"] + " | " + rows["platform"], rows["model"],
                              rows["moe"].astype(bool))
    for kind, spread in (("", spreads.dense), ("_moe", spreads.moe)):
        out.update({f"stack{kind}_{level}_log_sd": round(getattr(spread, level), 4)
                    for level in ("between", "model", "run")})
    out["stack_scale_dof"] = round(spreads.dof, 3)
    return out


def band_half_widths(calibration, rows: pd.DataFrame) -> pd.Series:
    """Per row, the half-width in log tokens/s of the analytical p10-p90 band the Predictor
    gives it (`advisor.learn.bands.analytical_log_sd` of its kind, dense or MoE, times Z90)."""
    return pd.Series(analytical_log_sds(calibration, rows["moe"].astype(bool)) * Z90,
                     index=rows.index)


def band_coverage(rows: pd.DataFrame, predicted: pd.Series,
                  half_width: pd.Series) -> pd.DataFrame:
    """Share of runs (%) inside predicted × exp(±half-width), overall and per platform family
    and kind (dense, MoE), with the half-width."""
    inside = (np.abs(np.log(predicted / rows["measured"])) <= half_width).astype(float) * 100
    kind = np.where(rows["moe"].astype(bool), "moe", "dense")
    frame = pd.DataFrame({"inside": inside, "half_width": half_width,
                          "family": rows["family"], "kind": kind})
    table = pd.concat([frame.assign(family="all", kind=""), frame]).groupby(
        ["family", "kind"]).agg(rows=("inside", "size"), inside_pct=("inside", "mean"),
                                half_width=("half_width", "mean"))
    return table.round({"inside_pct": 1, "half_width": 3})


def _gate(ref, base, args, *, with_status: bool = False):
    """Leave-one-series-out error per cell (family × precision × dense/MoE) against the
    recorded baseline; the exit status (1: a gated cell got worse and no `--accept`), and with
    `with_status` the held-out predictions too."""
    predicted = leave_one_source_out(ref, base.with_families({}), by="series")
    cells = gate.cell_table(ref.rows, predicted)
    _print("leave-one-series-out error (tokens/s/GPU, %) by family x precision x dense/MoE "
           "(signed median > 0: predicted too fast)", cells)
    _print("... by GPU count (the job's, held out the same way)",
           gate.scale_table(ref.rows, predicted))
    half_width = band_half_widths(base, ref.rows)
    _print("... inside the analytical p10-p90 band (%; half-width in log tokens/s per kind, "
           "from the last refit's held-out error)", band_coverage(ref.rows, predicted,
                                                                  half_width))
    if args.plots:
        for path in gate_plots(ref.rows, predicted, half_width, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    status = 0
    if args.baseline.exists():
        before, meta = gate.read_baseline(args.baseline)
        comparison = gate.compare(before, cells)
        _print(f"refit gate: against the baseline of {meta.get('commit', '?')} "
               f"({meta.get('note', '')}); a cell of >= {gate.MIN_ROWS} rows may not rise by "
               f"more than {gate.TOLERANCE_PCT:g} point", comparison.drop(
                   columns=["rows_before"]).round(1))
        worse = gate.regressions(comparison)
        if worse and not args.accept:
            print("\nREFIT GATE FAILED — cells worse than the baseline:\n  " + "\n  ".join(worse)
                  + "\nState the reason with --accept \"why\" (and in the commit), or fix it.")
            status = 1
        elif worse:
            print(f"\nrefit gate: {len(worse)} cell(s) worse, accepted: {args.accept}")
        else:
            print("\nrefit gate: passed")
    else:
        print(f"\nrefit gate: no baseline at {args.baseline}; --update-baseline records one")
    if args.update_baseline:
        gate.write_baseline(args.baseline, cells, commit=head(),
                            note=args.accept or "leave-one-series-out, benchmarks/calibrate.py")
        print(f"recorded the baseline in {args.baseline}")
    return (status, predicted) if with_status else status

def _series_label(series: str) -> str:
    """A publication series as a legend names it: without the dangling `Table` or `&` its
    title was cut at."""
    words = series.split()
    while words and words[-1] in ("Table", "Tables", "&"):
        words.pop()
    return " ".join(words).rstrip("'")


HELD_OUT = ("Leave-one-series-out", "Held-out error",
            "each publication series held out whole, refitted on the others, predicted")
IN_SAMPLE = ("In sample", "In-sample error", "every run fitted at once, each predicted by that fit")
"""How `gate_plots` names its predictions: title, error's name, how they were made."""


def gate_plots(rows: pd.DataFrame, predicted: pd.Series, half_width: pd.Series | None,
               folder: Path, *, prefix: str = "gate",
               how: tuple[str, str, str] = HELD_OUT) -> list[Path]:
    """The refit gate's figures from its leave-one-series-out predictions: predicted against
    measured tokens/s/GPU per publication series, the signed error per GPU-count bin (the
    bins of `gate.scale_table`), and the share of runs inside the analytical p10-p90 band
    (predicted × exp(±`half_width`), per row: `band_half_widths`, dense and MoE runs each
    their own) per platform family and kind and per series. With `how=IN_SAMPLE` and no
    `half_width`, the first two for the in-sample fit (`<prefix>-*.png`)."""
    predicted = predicted.reindex(rows.index)
    ok = predicted.notna().to_numpy() & rows["measured"].gt(0).to_numpy()
    rows, predicted = rows[ok], predicted[ok]
    measured = rows["measured"]
    series = rows["series"].map(_series_label)
    figures = _plots.Figures(folder)
    title, error, held = how
    ratio = predicted / measured
    ape = (ratio - 1).abs() * 100
    order = series.value_counts().index.tolist()
    labels = {s: f"{s} ({int((series == s).sum())}; MAPE {ape[series == s].mean():.0f} %)"
              for s in order}
    fig, (ax,) = _plots.figure(width_in=8, height_in=8.4)
    _plots.predicted_vs_measured(ax, measured, predicted, series, order=order, labels=labels,
                                 unit="tokens/s per GPU")
    _plots.legend_below(ax, title="publication series (runs; MAPE)", ncol=2)
    ax.set_title(f"{title}: {held}\n{len(rows)} runs, MAPE {ape.mean():.1f} %, "
                 f"median {ape.median():.1f} %", fontsize=10)
    paths = [figures.save(fig, f"{prefix}-predicted-vs-measured",
                          f"Predicted against measured tokens/s per GPU (log-log) of {len(rows)} "
                          f"runs, {held}, one colour and marker per publication series, with "
                          f"the y = x and ±20 % lines")]

    edges = list(gate.GPU_COUNT_BINS)
    bin_labels = [f"{lo}-{hi - 1}" if hi < 10**9 else f"{lo}+"
                  for lo, hi in zip(edges, edges[1:], strict=False)]
    bins = pd.cut(rows["num_gpus"], edges, right=False, labels=bin_labels).astype(str)
    fig, (ax,) = _plots.figure(height_in=4.8)
    _plots.box_by_bin(ax, (ratio - 1) * 100, bins, order=bin_labels,
                      ylabel="predicted / measured − 1 (%)")
    ax.set_xlabel("GPUs in the job (runs)")
    ax.set_title(f"{error} by GPU count ({held})\n> 0: predicted too fast; box "
                 "p25-p75 with the median, whiskers p10-p90, each run a dot", fontsize=10)
    paths.append(figures.save(fig, f"{prefix}-error-by-gpus",
                              f"{error} of tokens/s per GPU (predicted / measured − 1, %) by the "
                              f"job's GPU count, {held}: median, p25-p75 box, p10-p90 whiskers "
                              f"and every run"))

    if half_width is not None:
        half_width = half_width.reindex(rows.index)
        inside = np.abs(np.log(ratio)) <= half_width
        kind = np.where(rows["moe"].astype(bool), "MoE", "dense")
        cell = rows["family"] + " " + kind
        cells = cell.value_counts().index.tolist()
        widths = ", ".join(f"{k} exp(±{half_width[kind == k].iloc[0]:.3f})"
                           for k in ("dense", "MoE") if (kind == k).any())
        fig, axes = _plots.figure(2, width_in=WIDTH_IN_BAND, height_in=7.2, stacked=True,
                                  ratios=(len(cells), len(order)))
        _plots.coverage_bars(axes[0], inside, cell, promise=0.8, order=cells,
                             ylabel="platform family and kind")
        _plots.coverage_bars(axes[1], inside, series, promise=0.8, order=order,
                             ylabel="publication series")
        axes[0].set_xlabel("")
        axes[0].set_title(f"Runs inside the analytical p10-p90 band with each publication "
                          f"series held out whole: {inside.mean():.0%} of {len(rows)}\nband = "
                          f"predicted × {widths}: the 80th percentile\nof these runs' "
                          f"|log error| per kind at the last refit (so about 80 % of each kind "
                          f"by construction; the split is not)", fontsize=10)
        paths.append(figures.save(fig, f"{prefix}-band-coverage",
                                  f"Share of runs whose measured tokens/s per GPU lies inside the "
                                  f"analytical p10-p90 band (predicted × {widths}) with each "
                                  f"series held out, per platform family and kind and per "
                                  f"publication series, against the 80 % the band promises"))
    return paths


def _vtrain_multi(path: Path, calibration) -> dict[str, float]:
    """Score vTrain's multi-node runs (nothing fitted to them: the families from the published
    runs, Megatron-DeepSpeed's host overhead from the single-node runs) and print it."""
    multi = load_vtrain(path)
    predicted = predict_vtrain(multi, calibration, platform=vtrain_cluster())
    score, per_job = score_vtrain(multi, predicted)
    ratio = multi["measured_ms"] / predicted
    print(f"\n## vTrain multi-node A100 ({score.rows} runs, {score.jobs} jobs on 64-512 GPUs; "
          f"nothing fitted to them)\n")
    print(f"MAPE {score.mape_pct:.1f} %, median APE {score.median_ape_pct:.1f} %; measured / "
          f"predicted median {ratio.median():.2f} ({ratio.min():.2f}-{ratio.max():.2f}); "
          f"Kendall tau per job min {per_job['kendall_tau'].min():.2f}; top-1 regret max "
          f"{per_job['top1_regret_pct'].max():.1f} %")
    print(per_job.round(3).to_string(index=False))
    print("peer analytical model (Calculon): 15.3 % MAPE, tau 0.62")
    ceiling = reweighted_terms(multi, calibration, platform=vtrain_cluster())
    print("\nThe model's own terms reweighted per job (non-negative weights fitted in sample to "
          "each job's measured times, least squares on the relative error): the order that "
          "rescaling the mechanisms the model prices reaches\n")
    print(ceiling.drop(columns=["num_gpus", "gbs"]).round(3).to_string(index=False))
    twins = equal_work_twins(multi, predicted)
    print("\nEqual-work twins (`equal_work_twins`): each layout against the one with twice the "
          "TP, half the DP and twice the micro-batch (same pipeline, same GEMM and attention "
          "work per GPU, more elementwise work and all-reduce bytes), iteration time wide / "
          "narrow; a measured ratio below one is an order no model of the work can give\n")
    print(twins.groupby(["num_gpus", "hidden", "layers"]).agg(
        pairs=("measured_ratio", "size"),
        wide_faster=("measured_ratio", lambda r: int((r < 1.0).sum())),
        measured_min=("measured_ratio", "min"), measured_median=("measured_ratio", "median"),
        predicted_min=("predicted_ratio", "min"), predicted_max=("predicted_ratio", "max"),
    ).round(3).to_string())
    return {"vtrain_multi_mape_pct": score.mape_pct,
            "vtrain_multi_min_tau": float(per_job["kendall_tau"].min()),
            "vtrain_multi_max_top1_regret_pct": float(per_job["top1_regret_pct"].max())}


def _write(fitted, base, coll, metrics, reference: Path, mlperf: Path | None) -> None:
    c = base.collectives
    lines = [
        "# calibration.toml — free parameters of the analytical performance model.",
        "# Written by `python benchmarks/calibrate.py --write`; do not edit by hand.",
        f"# {dt.date.today().isoformat()}: published_runs.csv sha256 {_sha(reference)[:16]}"
        + (f", mlperf_runs.csv sha256 {_sha(mlperf)[:16]}" if mlperf else ""),
        "",
        "[collectives]",
        f"alpha0_s = {c.alpha0_s:.6g}",
        f"alpha1_s = {c.alpha1_s:.6g}",
        f"domain_efficiency = {c.domain_efficiency:.6g}",
        f"domain_group_penalty = {c.domain_group_penalty:.6g}",
        f"network_efficiency = {c.network_efficiency:.6g}",
        f"p2p_efficiency = {c.p2p_efficiency:.6g}",
        f"dispatch_network_efficiency = {c.dispatch_network_efficiency:.6g}",
        "",
        "[prior]",
        *(f"{k} = {getattr(base.prior, k):.6g}" for k in FIT_PARAMETERS),
        "",
    ]
    for family, eff in fitted.families.items():
        lines += [f"[family.{family}]", *(f"{k} = {getattr(eff, k):.6g}"
                                          for k in FIT_PARAMETERS), ""]
    for name, fw in sorted(fitted.frameworks.items()):
        lines += [f'[framework."{name}"]', f"gemm = {fw.gemm:.6g}",
                  f"attention = {fw.attention:.6g}"]
        if fw.layer_overhead_s is not None:
            lines.append(f"layer_overhead_s = {fw.layer_overhead_s:.6g}")
        lines.append("")
    for family, trend in sorted(fitted.software.items()):
        lines += [f"[software.{family}]", f"rate_per_year = {trend.rate_per_year:.6g}",
                  f"reference_year = {trend.reference_year:.4f}",
                  f"undated_year = {trend.undated_year:.4f}", ""]
    lines += ["[metrics]", *(f"{k} = {v:.4g}" for k, v in metrics.items()), ""]
    sources = dict(base.sources)
    sources["software"] = ("rate_per_year: fitted jointly with the families on their dated runs "
                           "(the container release YY.MM a row names, else its MLPerf round's "
                           "publication; advisor.learn.fit.release_year), normal prior around 0 "
                           "(sd 0.1 a year, a judgement); reference_year: the family's newest "
                           "dated run, the release its efficiencies describe; undated_year: the "
                           "mean release of its dated runs, where an undated run is priced")
    sources["collectives"] = (
        f"alpha0_s, alpha1_s, domain_efficiency, domain_group_penalty fitted to vTrain's measured "
        f"NCCL all-reduce tables (A100 NVSwitch, 2-8 GPUs, 1 MiB-1 GiB, {coll['fit_points']} "
        f"points; fit MAPE {coll['fit_mape_pct']:.2f} %)")
    sources["family"] = ("MAP fit to published_runs.csv" + (" and the expressible MLPerf "
                         "Training submissions (mlperf_runs.csv)" if mlperf else "")
                         + " (tokens/s/GPU; log-ratio least squares, log-normal prior around "
                         "[prior]); see benchmarks/calibrate.py")
    sources["framework"] = ("gemm and attention: fitted jointly with the families on the rows of "
                            "each stack, a framework on one platform family (framework@family; "
                            "Megatron-Core = 1); megatron-deepspeed layer_overhead_s: fitted to "
                            "vTrain's 1,440 A100 runs")
    lines += ["[sources]", *(f"{k} = {_quote(v)}" for k, v in sorted(sources.items())), ""]
    TARGET.write_text("\n".join(lines))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
