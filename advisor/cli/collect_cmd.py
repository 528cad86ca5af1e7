"""`advisor collect`: run a measurement campaign (the `collectors` package does the work; it is
imported only here, so the rest of the CLI never pulls in torch)."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from advisor.cli.common import (
    MEASURED_POWER_SEMANTICS,
    JsonOpt,
    emit_json,
    guard,
    make_console,
)
from advisor.core.errors import AdvisorError


@guard
def collect(
        campaign: Annotated[str, typer.Option(
            "--campaign", "-c", help="Campaign TOML file, or a built-in template: cpu-smoke, "
            "h200-single, paper-h200-parallelism, paper-h100-parallelism, "
            "paper-h200-optimisation, paper-h200-microbatch.")],
        launcher: Annotated[str, typer.Option(
            "--launcher", help="local (torchrun on this machine), slurm (sbatch, one job "
            "per run), or replay:FILE: answer each planned run from a table of real "
            "measurements (a dataset .parquet or CSV), to try the collect, train, recommend "
            "loop without GPUs.")] = "local",
        dataset: Annotated[Path | None, typer.Option(
            "--dataset", help="Parquet file the runs are appended to (default: "
            "datasets/campaigns/<campaign>.parquet).")] = None,
        runs_dir: Annotated[Path | None, typer.Option(
            "--runs-dir", help="Per-run specs, results and logs (default: runs/<campaign>/).")]
        = None,
        dry_run: Annotated[bool, typer.Option(
            "--dry-run", help="Plan only: list the runs that would be measured, in order.")]
        = False,
        strategy: Annotated[str | None, typer.Option(
            "--strategy", help="Which runs first, overriding the campaign file's [strategy]: "
            "grid (in order), active (where the model is least sure or most promising), or "
            "targeted (the layout most likely to be its job's fastest under what the runs so "
            "far taught: what serves the recommendation; --dry-run says why each was "
            "picked).")] = None,
        resume: Annotated[bool, typer.Option(
            "--resume", help="Continue a campaign: runs measured in the dataset (ok, or out "
            "of memory) are skipped; failed and timed-out runs, and a run that was cut off, "
            "run again; [budget] runs counts the rows already there. Refused if the campaign "
            "file changed since it wrote the dataset (see --extend).")] = False,
        extend: Annotated[bool, typer.Option(
            "--extend", help="Resume a dataset written by an earlier version of this campaign "
            "(its models, sweep, steps, telemetry or cool-down changed): the old rows stay, "
            "this version's runs are added up to [budget] runs in all. Implies --resume.")]
        = False,
        python: Annotated[Path | None, typer.Option(
            "--python", help="Interpreter that runs torchrun and the workers (default: the "
            "one running advisor); it needs torch (the collect extra). Slurm: the same path "
            "on the compute nodes.")] = None,
        gpus_per_node: Annotated[int | None, typer.Option(
            "--gpus-per-node", min=1, help="Slurm: GPUs (processes) per node (default: the "
            "platform's).")] = None,
        partition: Annotated[str | None, typer.Option(
            "--partition", help="Slurm partition.")] = None,
        account: Annotated[str | None, typer.Option("--account", help="Slurm account.")] = None,
        json_out: JsonOpt = False) -> None:
    """Measure a campaign of configurations on your own GPUs (or CPUs) and grow the dataset.

        advisor collect --campaign cpu-smoke
        advisor collect --campaign my-sweep.toml --launcher slurm --resume
        advisor collect --campaign paper-h200-parallelism --dry-run
        advisor collect --campaign my-sweep.toml --launcher replay:datasets/published.parquet
        advisor collect --campaign paper-h200-parallelism --strategy targeted --dry-run

    Each run trains a Llama-style model under one parallel configuration (torchrun; gloo on
    CPU, NCCL on GPU), times steps after warm-up and records throughput, peak memory, power,
    temperature, clocks and throttling. The `active` strategy measures where the surrogate is
    most uncertain or most promising first; `grid` goes in order. Every finished run — failed,
    out of memory or timed out included — is appended to the dataset at once; then
    `advisor train --data DATASET` learns from it.

    Before the first run a preflight asks the runs' interpreter (--python) whether torch
    imports, the GPUs (device = "cuda") and the campaign's telemetry are visible, and the
    launcher answers; if not, it stops with one `error:` line and exit code 2, and nothing is
    written. The cpu-smoke template is the CPU path. `replay:FILE` measures nothing: each
    run is the row of FILE that ran the same job in the same layout (or `failed` where FILE
    has none), so the loop can be tried, tested and benchmarked on published runs. The
    dataset records a hash of the campaign as it was (not of its whitespace, budget, timeout
    or strategy).
    """
    from advisor.catalog import scaled_model_name
    from collectors.campaign import load_campaign
    from collectors.launchers import make_launcher
    from collectors.preflight import preflight
    from collectors.runner import check_previous, run_campaign

    spec = load_campaign(campaign)
    if strategy is not None:
        from dataclasses import replace

        from collectors.campaign import STRATEGIES

        if strategy not in STRATEGIES:
            raise AdvisorError(f"--strategy {strategy!r}: use one of {', '.join(STRATEGIES)}.")
        spec = replace(spec, strategy=strategy)
    dataset = dataset or Path("datasets") / "campaigns" / f"{spec.name}.parquet"
    runs_dir = runs_dir or Path("runs") / spec.name
    options = {k: v for k, v in dict(gpus_per_node=gpus_per_node, partition=partition,
                                      account=account).items() if v is not None}
    replay = launcher.startswith("replay:")
    if options and launcher != "slurm":
        raise AdvisorError(f"--{', --'.join(k.replace('_', '-') for k in options)} apply to "
                           f"--launcher slurm only.")
    if python is not None:
        options["python"] = str(python.expanduser().absolute())
    try:
        chosen = None if dry_run else make_launcher(launcher, **options)
    except ValueError as e:
        raise AdvisorError(str(e)) from None
    console = Console(stderr=True)
    checked = None
    if not dry_run:  # both before any run: the dataset's state, then the runs' machine
        check_previous(spec, dataset, resume=resume, extend=extend)
        checked = None if replay else preflight(spec, chosen)   # a replay runs nothing
        if checked is not None and not json_out:
            console.print(checked.summary(), highlight=False)
    try:
        with _campaign_lock(runs_dir, spec.name, enabled=not dry_run), \
                _terminate_as_interrupt(), \
                _Progress(console, enabled=not (json_out or dry_run)) as progress:
            report = run_campaign(spec, launcher=chosen, dataset=dataset, runs_dir=runs_dir,
                                  resume=resume, extend=extend, dry_run=dry_run,
                                  progress=progress)
    except KeyboardInterrupt:
        console.print(f"interrupted: the run in flight was stopped; finished runs are in "
                      f"{dataset}. Continue with --resume.")
        raise typer.Exit(code=130) from None
    if json_out:
        emit_json({"campaign": spec.name, "dataset": str(dataset), "dry_run": dry_run,
                   "campaign_sha256": report.campaign_hash, "changed": report.changed,
                   "skipped": report.skipped, "retried": report.retried,
                   "unsupported": report.unsupported, "stopped_by": report.stopped_by,
                   "preflight": checked.__dict__ if checked else None,
                   "planned": [s.run_id for s in report.planned],
                   "reasons": report.reasons,
                   "power_semantics": MEASURED_POWER_SEMANTICS,
                   "results": [r.__dict__ for r in report.results]})
        return
    out = make_console()
    if dry_run:
        retried = f", {report.retried} of them reruns of failed runs" if report.retried else ""
        table = Table(title=f"{spec.name}: {len(report.planned)} runs planned{retried} "
                            f"({spec.strategy}; {report.skipped} already measured)")
        moe = any(s.config.get("ep", 1) > 1 for s in report.planned)
        why = any(report.reasons.values())
        for col in ("#", "run_id", "model", "gpus", "tp", "pp", "dp", "mbs", "recompute",
                    "sharding", *(("ep", "dispatcher", "a2a overlap") if moe else ()),
                    *(("why",) if why else ())):
            table.add_column(col)
        for i, s in enumerate(report.planned, 1):
            c = s.config
            experts = ((str(c["ep"]), c.get("moe_dispatcher", "auto"),
                        "on" if c.get("ep_comm_overlap") else "off") if moe else ())
            table.add_row(str(i), s.run_id, scaled_model_name(s.model, s.scale),
                          str(s.num_gpus), str(c["tp"]),
                          str(c["pp"]), str(c["dp"]), str(c["mbs"]), c["recompute"],
                          c["dp_sharding"], *experts,
                          *((report.reasons.get(s.run_id, ""),) if why else ()))
        out.print(table)
        if report.changed:
            out.print(f"note: {dataset} was written by another version of this campaign "
                      f"({'; '.join(report.changed)}); --resume will refuse it, --extend "
                      f"adds to it.", style="yellow")
        _print_unsupported(out, report.unsupported)
        return
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.counts().items()))
    retried = f", {report.retried} of them retried after failing" if report.retried else ""
    out.print(f"{spec.name}: {len(report.results)} runs ({counts or 'none'}){retried}; "
              f"{report.skipped} already measured; stopped by {report.stopped_by}. Rows "
              f"appended to {dataset}.")
    _print_unsupported(out, report.unsupported)


def _print_unsupported(out: Console, unsupported: dict[str, int]) -> None:
    for reason, n in unsupported.items():
        out.print(f"not planned: {n} configuration(s) with {reason}; the PyTorch workload "
                  f"cannot run them.", style="yellow")


@contextlib.contextmanager
def _campaign_lock(runs_dir: Path, name: str, *, enabled: bool):
    """One collector per campaign at a time: a second one would measure the same runs."""
    if not enabled:
        yield
        return
    from filelock import FileLock, Timeout

    runs_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(runs_dir / ".collect.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise AdvisorError(f"another `advisor collect` is running campaign {name!r} "
                           f"(lock {runs_dir / '.collect.lock'}); wait for it, or stop it "
                           f"and use --resume.") from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM/SIGHUP (a scheduler's time limit, `timeout`) unwind like Ctrl-C, so the run in
    flight is killed (local) or cancelled (Slurm) instead of orphaned."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
