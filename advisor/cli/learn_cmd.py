"""`advisor train` and `advisor evaluate`: build the surrogates, and validate them honestly."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import JsonOpt, emit_json, guard, make_console
from advisor.core.errors import AdvisorError

DataOpt = Annotated[list[Path] | None, typer.Option(
    "--data", "-d", help="Dataset file(s) (.parquet or .csv, the canonical schema). Default: "
    "datasets/published.parquet and datasets/mlperf.parquet (`advisor dataset import-published`"
    ", `import-mlperf`).")]
DEFAULT_DATA = (Path("datasets/published.parquet"), Path("datasets/mlperf.parquet"))


def _data(paths: list[Path] | None) -> list[Path]:
    return paths or [p for p in DEFAULT_DATA if p.exists()] or [DEFAULT_DATA[0]]


@guard
def train(data: DataOpt = None,
          output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the "
                                               "artifacts (XGBoost JSON trees + JSON metadata).")]
          = Path("models"),
          seed: Annotated[int, typer.Option(help="Random seed (training is reproducible).")] = 0,
          stack: Annotated[list[Path] | None, typer.Option(
              "--stack", help="Your own runs (a dataset from `advisor collect` or `dataset "
              "import-published`; one platform or cluster file, one framework): advisor fits "
              "your stack's host time and its compute, attention and communication factors "
              "to them, with a prior that keeps a few runs from moving them far, and "
              "predictions for that platform and "
              "framework then use them (the band narrows as runs accumulate). They are "
              "trained on too.")] = None,
          stack_name: Annotated[str | None, typer.Option(
              "--stack-name", help="Name shown with predictions that use the stack "
              "calibration (default: the first --stack file's name).")] = None,
          json_out: JsonOpt = False) -> None:
    """Train the surrogates on measured runs and write them to models/ (what ships).

        advisor train -o models-new
        advisor train --stack datasets/campaigns/my-sweep.parquet -o models-mine

    The throughput surrogate learns log(measured / analytical) tokens/s per GPU from the
    configuration, model, platform, software release and the analytical breakdown. Power and
    throttling surrogates (average and peak power, power-cap and thermal throttle fractions)
    each need 30 usable runs that measured them; with fewer they report "no data", no
    artifact is kept and predictions stay analytical.
    """
    from advisor.core.files import check_output_dir
    from advisor.learn.train import train as run_train

    check_output_dir(output, what="artifacts")
    report = run_train(_data(data), output, seed=seed, stack=stack, stack_name=stack_name)
    if json_out:
        emit_json({"rows_used": report.rows_used, "rows_skipped": report.rows_skipped,
                   "skipped_reasons": report.skipped_reasons, "targets": report.targets,
                   "data_sha256": report.data_sha256, "output": str(report.output),
                   "artifacts": report.artifacts, "stack": report.stack,
                   "stack_advice": report.stack_advice})
        return
    console = make_console()
    console.print(f"{report.rows_used} runs used, {report.rows_skipped} skipped "
                  f"({report.skipped_reasons}); data sha256 {report.data_sha256[:16]}")
    for target, what in report.targets.items():
        console.print(f"  {target}: {what}")
    if report.stack:
        console.print(f"  {report.stack}")
    if report.stack_advice:
        console.print(f"  hint: {report.stack_advice}")
    console.print(f"wrote {', '.join(report.artifacts)} (.model.json + .json) to {report.output}")


@guard
def evaluate(data: DataOpt = None,
             by: Annotated[list[str] | None, typer.Option(
                 "--by", help="Grouped cross-validation split(s): source, series (every "
                 "release of a publication series at once), model_family, platform; "
                 "mlperf_submitter and mlperf_round hold out one MLPerf submitter (round) at a "
                 "time and score only MLPerf rows. Default: the first four.")] = None,
             fast: Annotated[bool, typer.Option(
                 "--fast", help="Keep the bundled analytical calibration instead of refitting "
                 "it per fold (minutes faster; the held-out rows then informed the prior).")]
             = False,
             vtrain: Annotated[Path | None, typer.Option(
                 "--vtrain", help="Also score vTrain's single-node sweeps leave-one-job-out "
                 "(ground_truth_single.csv): MAPE, Kendall tau per job, top-1 regret.")] = None,
             plot: Annotated[Path | None, typer.Option(
                 "--plot", help="Write a PNG of predicted against measured (needs "
                 "matplotlib).")] = None,
             json_out: JsonOpt = False) -> None:
    """Grouped cross-validation of the surrogate against the analytical model alone.

    Each held-out group (a source, a model family, a platform) is predicted by models that
    never saw it: the analytical model is recalibrated and the surrogate retrained per fold.
    Reports MAPE, median APE, Kendall tau within (model, platform, GPU count) groups and
    p10-p90 coverage, side by side.
    """
    import pandas as pd

    from advisor.data.dataset import load
    from advisor.learn.evaluate import DEFAULT_SPLITS, SPLITS, cross_validate, summarise
    from advisor.learn.fit import reference_from_frame
    from advisor.perf.calibration import load_calibration

    splits = by or list(DEFAULT_SPLITS)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise AdvisorError(f"unknown split(s) {', '.join(unknown)}; use "
                           f"{', '.join(SPLITS)}.")
    ref = reference_from_frame(pd.concat([load(p) for p in _data(data)], ignore_index=True))
    console = Console(stderr=True)
    results, summaries = {}, {}
    for split in splits:
        results[split] = cross_validate(ref, load_calibration(), SPLITS[split],
                                        refit_analytical=not fast,
                                        progress=lambda m: console.print(f"[dim]{m}[/dim]"))
        summaries[split] = summarise(ref, results[split])
    if vtrain:
        summaries["vtrain_leave_one_job_out"] = _vtrain(vtrain, console)
    if plot:
        _plot(results, plot)
    if json_out:
        emit_json(summaries)
        return
    table = Table(title=f"Grouped cross-validation, tokens/s per GPU ({len(ref.rows)} runs)")
    for col in ("split", "model", "MAPE %", "median APE %", "Kendall τ", "p10-p90 coverage",
                "surrogate used"):
        table.add_column(col, justify="left" if col in ("split", "model") else "right")
    for split, s in summaries.items():
        if split == "vtrain_leave_one_job_out":
            continue
        for name in ("surrogate", "analytical"):
            m = s[name]
            cov = m.get("p10_p90_coverage")
            table.add_row(split if name == "surrogate" else "", name, f"{m['mape_pct']:.1f}",
                          f"{m['median_ape_pct']:.1f}",
                          "" if m["median_kendall_tau"] is None
                          else f"{m['median_kendall_tau']:.2f}",
                          "" if cov is None else f"{cov:.0%}",
                          f"{s['supported_share']:.0%}" if name == "surrogate" else "")
    make_console().print(table)
    make_console().print(_by_family(summaries))
    if vtrain:
        v = Table(title="vTrain single-node sweeps, leave one job out (iteration time)")
        for col in ("model", "MAPE %", "Kendall τ per job (median)", "top-1 regret (median / "
                    "mean)"):
            v.add_column(col, justify="left" if col == "model" else "right")
        for name, s in summaries["vtrain_leave_one_job_out"].items():
            v.add_row(name, f"{s['mape_pct']:.1f}", f"{s['median_kendall_tau']:.2f}",
                      f"{s['median_top1_regret_pct']:.1f} % / {s['mean_top1_regret_pct']:.1f} %")
        make_console().print(v)


def _by_family(summaries: dict) -> Table:
    """MAPE / median APE per platform family of each split, surrogate and analytical."""
    table = Table(title="... per platform family (MAPE % / median APE %)")
    for col in ("split", "platform family", "rows", "surrogate", "analytical"):
        table.add_column(col, justify="left" if col in ("split", "platform family") else "right")
    for split, s in summaries.items():
        if split == "vtrain_leave_one_job_out":
            continue
        for i, (family, a) in enumerate(s["analytical"]["by_family"].items()):
            g = s["surrogate"]["by_family"][family]
            table.add_row(split if i == 0 else "", family, str(a["rows"]),
                          f"{g['mape_pct']:.1f} / {g['median_ape_pct']:.1f}",
                          f"{a['mape_pct']:.1f} / {a['median_ape_pct']:.1f}")
    return table


def _vtrain(path: Path, console: Console) -> dict:
    from dataclasses import asdict

    from advisor.learn.evaluate import vtrain_leave_one_job_out
    from advisor.perf.vtrain import load_vtrain, score_vtrain

    try:
        frame = load_vtrain(path)
    except (OSError, ValueError) as e:
        raise AdvisorError(f"{path}: not vTrain's ground_truth_single.csv ({e}).") from None
    result = vtrain_leave_one_job_out(frame, progress=lambda m: console.print(f"[dim]{m}[/dim]"))
    return {name: asdict(score_vtrain(frame, result[f"{name}_ms"])[0])
            for name in ("surrogate", "analytical")}


def _plot(results: dict, path: Path) -> None:
    from advisor.cli.plots import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 5), squeeze=False)
    for ax, (split, r) in zip(axes[0], results.items(), strict=True):
        ax.loglog(r["measured"], r["analytical"], ".", alpha=0.4, label="analytical")
        ax.loglog(r["measured"], r["surrogate"], ".", alpha=0.6, label="surrogate")
        lo, hi = r["measured"].min() * 0.8, r["measured"].max() * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_title(f"held out by {split}")
        ax.set_xlabel("measured tokens/s/GPU")
        ax.set_ylabel("predicted")
        ax.legend()
    save(fig, path)
