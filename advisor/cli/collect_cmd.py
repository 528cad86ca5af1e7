"""`advisor collect`: run a measurement campaign (the `collectors` package does the work; it is
imported only here, so the rest of the CLI never pulls in torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import JsonOpt, emit_json, guard
from advisor.errors import AdvisorError


@guard
def collect(
        campaign: Annotated[str, typer.Option(
            "--campaign", "-c", help="Campaign TOML file, or a built-in template: cpu-smoke, "
            "paper-h200-parallelism, paper-h100-parallelism, paper-h200-optimisation, "
            "paper-h200-microbatch.")],
        launcher: Annotated[str, typer.Option(
            "--launcher", help="local (torchrun on this machine) or slurm (sbatch, one job "
            "per run).")] = "local",
        dataset: Annotated[Path | None, typer.Option(
            "--dataset", help="Parquet file the runs are appended to (default: "
            "datasets/campaigns/<campaign>.parquet).")] = None,
        runs_dir: Annotated[Path | None, typer.Option(
            "--runs-dir", help="Per-run specs, results and logs (default: runs/<campaign>/).")]
        = None,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Plan only: list the runs that would be measured, in order.")]
        = False,
        resume: Annotated[bool, typer.Option(
            "--resume", help="Continue a campaign: runs already in the dataset are skipped, "
            "a run that was cut off runs again.")] = False,
        json_out: JsonOpt = False) -> None:
    """Measure a campaign of configurations on your own GPUs (or CPUs) and grow the dataset.

        advisor collect --campaign cpu-smoke
        advisor collect --campaign my-sweep.toml --launcher slurm --resume
        advisor collect --campaign paper-h200-parallelism --dry-run

    Each run trains a Llama-style model under one parallel configuration (torchrun; gloo on
    CPU, NCCL on GPU), times steps after warm-up and records throughput, peak memory, power,
    temperature, clocks and throttling. The `active` strategy measures where the surrogate is
    most uncertain or most promising first; `grid` goes in order. Every finished run — failed,
    out of memory or timed out included — is appended to the dataset at once; then
    `advisor train --data DATASET` learns from it.
    """
    from collectors.campaign import load_campaign
    from collectors.launchers import make_launcher
    from collectors.runner import run_campaign

    spec = load_campaign(campaign)
    dataset = dataset or Path("datasets") / "campaigns" / f"{spec.name}.parquet"
    runs_dir = runs_dir or Path("runs") / spec.name
    try:
        chosen = make_launcher(launcher)
    except ValueError as e:
        raise AdvisorError(str(e)) from None
    console = Console(stderr=True)
    with _Progress(console, enabled=not (json_out or dry_run)) as progress:
        report = run_campaign(spec, launcher=chosen, dataset=dataset, runs_dir=runs_dir,
                              resume=resume, dry_run=dry_run, progress=progress)
    if json_out:
        emit_json({"campaign": spec.name, "dataset": str(dataset), "dry_run": dry_run,
                   "skipped": report.skipped, "stopped_by": report.stopped_by,
                   "planned": [s.run_id for s in report.planned],
                   "results": [r.__dict__ for r in report.results]})
        return
    out = Console()
    if dry_run:
        table = Table(title=f"{spec.name}: {len(report.planned)} runs planned "
                            f"({spec.strategy}; {report.skipped} already measured)")
        for col in ("#", "run_id", "model", "gpus", "tp", "pp", "dp", "mbs", "recompute",
                    "sharding"):
            table.add_column(col)
        for i, s in enumerate(report.planned, 1):
            c = s.config
            table.add_row(str(i), s.run_id, s.model, str(s.num_gpus), str(c["tp"]),
                          str(c["pp"]), str(c["dp"]), str(c["mbs"]), c["recompute"],
                          c["dp_sharding"])
        out.print(table)
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts().items()))
    out.print(f"{spec.name}: {len(report.results)} runs ({counts or 'none'}); "
              f"{report.skipped} already measured; stopped by {report.stopped_by}. Rows "
              f"appended to {dataset}.")


class _Progress:
    def __init__(self, console: Console, *, enabled: bool) -> None:
        self.console, self.enabled, self.bar, self.task = console, enabled, None, None

    def __enter__(self):
        return self

    def __call__(self, done: int, total: int, spec, result) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=self.console)
            self.bar.start()
            self.task = self.bar.add_task("runs", total=total)
        if result is None:
            self.bar.update(self.task, description=f"running {spec.run_id}")
        else:
            self.bar.update(self.task, completed=done)
            self.bar.console.print(f"{spec.run_id}: {result.status}"
                                   + (f" ({result.error})" if result.error else ""))

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
