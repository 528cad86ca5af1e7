"""Launchers: start one run's `torchrun` (on this machine or through Slurm) and turn whatever
happened into a `RunResult`. A failure is a result too: a crash, an out-of-memory error or a
timeout comes back as a row with its status and the error line from the log, never as an
exception; exceptions are for a launcher that cannot launch at all (no Slurm, bad options).

Every launcher writes into the run's work directory, which the caller creates fresh:
`spec.json` (what the workload reads), `result.json` (what rank 0 writes), `log.txt` (stdout and
stderr of every rank) and, for Slurm, `job.sh`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from advisor.core.errors import AdvisorError, suggest
from collectors.spec import RunResult, RunSpec

LAUNCHERS = ("local", "slurm", "replay:FILE")
SPEC_FILE, RESULT_FILE, LOG_FILE = "spec.json", "result.json", "log.txt"
_ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOT = _ROOT if (_ROOT / "pyproject.toml").exists() else None
"""The source checkout this launcher runs from (None when installed as a package): first on
the workers' PYTHONPATH, so `-m collectors.workload` (or the tests' stand-in) runs this very
code even where the checkout is not installed."""

_OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|oom[-_]kill"
                  r"|std::bad_alloc|\bMemoryError\b", re.IGNORECASE)
"""CUDA/HIP (`torch.OutOfMemoryError: CUDA out of memory`, NCCL's `Cuda failure 'out of
memory'`), PyTorch's CPU allocator, the kernel's OOM killer as Slurm reports it."""
_RANK_PREFIX = re.compile(r"^\[(?:default|rank|defaultrank)\d+\]:\s*")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)\b:?")
_NOISE = re.compile(r"ChildFailedError|torch/distributed/elastic|^srun: |^slurmstepd"
                    r"|^(?:error_file|traceback|exitcode)\s*:")
"""torchrun's and Slurm's own reports of a failed child: true, but the child's line says why."""


class LauncherError(AdvisorError):
    """A launcher cannot launch at all (unknown name, Slurm missing, inconsistent specs)."""


class Launcher(Protocol):
    """Runs one `RunSpec` to completion and reports what happened."""

    name: str

    def launch(self, spec: RunSpec, workdir: Path) -> RunResult:
        """Run `spec` with `workdir` (fresh, created by the caller) for its files; never raises
        for a failed run."""
        ...


def make_launcher(name: str, **options) -> Launcher:
    """The launcher called `name` (`local`, `slurm`, or `replay:FILE` to answer each run from a
    table of measurements), built with its keyword `options`."""
    if name == "local":
        from collectors.launchers.local import LocalLauncher

        return LocalLauncher(**options)
    if name == "slurm":
        from collectors.launchers.slurm import SlurmLauncher

        return SlurmLauncher(**options)
    if name.startswith("replay:"):
        from collectors.launchers.replay import ReplayLauncher

        if options:
            raise LauncherError(f"--launcher replay takes no {', '.join(sorted(options))}.")
        return ReplayLauncher(name.removeprefix("replay:"))
    raise LauncherError(f"unknown launcher {name!r}; choose one of {', '.join(LAUNCHERS)}."
                        + suggest(name, LAUNCHERS))


def prepare(spec: RunSpec, workdir: Path) -> tuple[Path, Path, Path]:
    """Write `spec.json` into `workdir` and clear a result or log left by an earlier attempt;
    return the spec, result and log paths."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = (workdir / n for n in (SPEC_FILE, RESULT_FILE, LOG_FILE))
    spec.write(spec_path)
    result_path.unlink(missing_ok=True)
    log_path.unlink(missing_ok=True)
    return spec_path, result_path, log_path


def read_result(spec: RunSpec, result_path: Path) -> RunResult | None:
    """Rank 0's result, or None if it wrote none; an unreadable one is a failed run."""
    if not result_path.exists():
        return None
    try:
        return RunResult.read(result_path)
    except (ValueError, TypeError) as exc:
        return RunResult(spec.run_id, "failed", error=f"unreadable {result_path}: {exc}")


def timed_out(spec: RunSpec, result: RunResult | None, error: str) -> RunResult:
    """The result of a run its time limit struck. A result rank 0 wrote still counts (the run
    measured, then hung in teardown) unless it is `failed`: that is the workload reporting the
    SIGTERM which ended it."""
    if result is not None and result.status != "failed":
        return result
    return RunResult(spec.run_id, "timeout", error=error)


def failure(spec: RunSpec, log_path: Path, fallback: str) -> RunResult:
    """An `oom` or `failed` result for a run that wrote no result, from its log."""
    lines = _log_lines(log_path)
    for line in reversed(lines):
        if _OOM.search(line):
            return RunResult(spec.run_id, "oom", error=line)
    return RunResult(spec.run_id, "failed", error=error_line(lines) or fallback)


def error_line(lines: list[str]) -> str:
    """The line that says why a run failed: the last exception line a worker printed (not
    torchrun's `ChildFailedError` report), else the last line mentioning an error."""
    meaningful = [line for line in lines if not _NOISE.search(line)]
    for line in reversed(meaningful):
        if _EXCEPTION.match(line):
            return line
    for line in reversed(meaningful):
        if "error" in line.lower():
            return line
    return ""


def _log_lines(log_path: Path, max_chars: int = 500) -> list[str]:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return []
    lines = (_RANK_PREFIX.sub("", line.strip()) for line in text.splitlines())
    return [line[:max_chars] for line in lines if line]
