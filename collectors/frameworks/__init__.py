"""Framework adapters: run a `RunSpec` under Megatron-LM or NeMo 2 and read back what it measured.

Each adapter builds its launch command from `advisor.explain.emit` (the flags `recommend --emit`
writes), adding only what a measurement needs: the run length, per-step logging and mock data.
It parses the framework's own stdout into a `RunResult`. No framework is imported here: commands
are strings and logs are text, so campaigns plan and tests run where neither is installed.

This module holds what both adapters share: the `Job` a spec describes, the typed record of a
parsed log (`TrainingLog`), the failure signatures, and the reduction to a `RunResult`.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from dataclasses import dataclass, field

from advisor.core.errors import ConfigError
from advisor.core.parallel import Job, ParallelConfig, make_job
from collectors.spec import RunResult, RunSpec

#: Substrings that mark a run as out of memory: PyTorch's caching allocator raises
#: `torch.OutOfMemoryError` ("CUDA out of memory. Tried to allocate ..."; `torch.cuda.` before
#: PyTorch 2.5; ROCm builds say "HIP out of memory").
OOM_SIGNATURES = ("CUDA out of memory", "HIP out of memory", "OutOfMemoryError")
#: Substrings that mark a communication failure: NCCL errors surface as `DistBackendError:
#: NCCL error in: ...`, hangs as ProcessGroupNCCL's "Watchdog caught collective operation timeout".
NCCL_SIGNATURES = ("NCCL error", "Watchdog caught collective operation timeout")
_EXCEPTION = re.compile(r"\b[\w.]*(?:Error|Exception)\b:")
_CRASH = re.compile(r"Segmentation fault|Signal \d+ \(SIG|\bKilled\b|exitcode\s*:\s*-?[1-9]")
#: torchrun's own wrapper of a worker's failure; the worker's line above it says more.
_LAUNCHER_WRAPPERS = ("ChildFailedError",)
_MAX_ERROR_CHARS = 1000


@dataclass(frozen=True)
class Step:
    """One optimizer step as the framework logged it."""

    iteration: int
    """1-based step number."""
    step_time_s: float
    tflops_per_gpu: float | None = None
    """The framework's own model TFLOP/s per GPU, where it prints one."""


@dataclass
class TrainingLog:
    """What a framework's stdout says about one run."""

    steps: list[Step] = field(default_factory=list)
    """Logged steps in iteration order, one per iteration (the last line wins)."""
    peak_allocated_bytes: float | None = None
    """Largest peak allocated memory (`torch.cuda.max_memory_allocated`) any rank reported."""
    peak_reserved_bytes: float | None = None
    """Largest peak reserved memory (`torch.cuda.max_memory_reserved`) any rank reported."""
    failure: tuple[str, str] | None = None
    """(status, first matching line) for an OOM or NCCL signature; OOM wins, being the cause
    that NCCL timeouts on the other ranks follow from."""
    last_error: str = ""
    """The last line that looks like an error, for runs that stop without a known signature."""


def job_for(spec: RunSpec, *, framework: str) -> tuple[ParallelConfig, Job]:
    """The `ParallelConfig` and `Job` a spec describes, with `spec.scale` applied to the model.

    Raises:
        ConfigError: the spec is for CPUs, or its config or scale does not fit its model.
    """
    from advisor.catalog import load_model, load_platform

    if spec.platform == "cpu":
        raise ConfigError(f"run {spec.run_id} is on platform cpu, but {framework} trains on GPUs; "
                          f"use the PyTorch workload for CPU campaigns.")
    config = ParallelConfig(**spec.config)
    model = load_model(spec.model)
    try:
        model = dataclasses.replace(model, **spec.scale)
    except TypeError as error:
        raise ConfigError(f"scale of run {spec.run_id} names a field ModelSpec lacks ({error}); "
                          f"use num_layers, hidden_size, ffn_hidden_size, num_attention_heads, "
                          f"num_kv_heads or vocab_size.") from None
    job = make_job(model, load_platform(spec.platform), num_gpus=spec.num_gpus,
                   seq_len=config.seq_len, gbs=config.gbs, precision=config.precision)
    return config, job


def log_lines(text: str) -> list[str]:
    """Lines of a log; progress bars rewrite a line with carriage returns, so those split too."""
    return text.replace("\r", "\n").splitlines()


def complete_lines(text: str) -> list[str]:
    """`log_lines` without a last line that has no line end: a log cut off mid-line must not
    yield a figure from half a number."""
    lines = log_lines(text)
    return lines if text.endswith(("\n", "\r")) else lines[:-1]


def find_failure(lines: list[str]) -> tuple[str, str] | None:
    """("oom" or "failed", the first line with that signature), OOM first; None if neither."""
    for status, signatures in (("oom", OOM_SIGNATURES), ("failed", NCCL_SIGNATURES)):
        for line in lines:
            if any(s in line for s in signatures):
                return status, line.strip()[:_MAX_ERROR_CHARS]
    return None


def last_error_line(lines: list[str]) -> str:
    """The last exception line a worker printed (not torchrun's wrapper), else the last crash
    line (signal, non-zero exit code), else ''."""
    for pattern, skip in ((_EXCEPTION, _LAUNCHER_WRAPPERS), (_CRASH, ())):
        hits = [ln for ln in lines if pattern.search(ln) and not any(s in ln for s in skip)]
        if hits:
            return hits[-1].strip()[:_MAX_ERROR_CHARS]
    return ""


def unique_steps(steps: list[Step]) -> list[Step]:
    """One step per iteration, the last logged, in iteration order."""
    return sorted({s.iteration: s for s in steps}.values(), key=lambda s: s.iteration)


def summarize(log: TrainingLog, spec: RunSpec) -> RunResult:
    """Reduce a parsed log to a `RunResult`.

    Step time is the median over the steps after `spec.warmup_steps`; tokens/s per GPU is
    gbs × seq_len / step time / world size; TFLOP/s is the median of what the framework printed
    for those steps; peak memory is the peak allocated, or the peak reserved where the log has
    only that (NeMo's MegatronStrategy). A run whose log stops before `warmup_steps +
    measure_steps` iterations, with no OOM or NCCL signature, failed: its error is the last
    error line the log has.
    """
    if log.failure:
        status, line = log.failure
        return RunResult(run_id=spec.run_id, status=status, error=line)
    expected = spec.warmup_steps + spec.measure_steps
    last = log.steps[-1].iteration if log.steps else 0
    measured = [s for s in log.steps if s.iteration > spec.warmup_steps]
    if last < expected or not measured:
        error = log.last_error or (f"log ends after iteration {last} of {expected} with no "
                                   f"error line (killed, or the log was cut short)")
        return RunResult(run_id=spec.run_id, status="failed", error=error)
    config = ParallelConfig(**spec.config)
    step_time_s = statistics.median(s.step_time_s for s in measured)
    tflops = [s.tflops_per_gpu for s in measured if s.tflops_per_gpu is not None]
    peak_bytes = (log.peak_reserved_bytes if log.peak_allocated_bytes is None
                  else log.peak_allocated_bytes)
    return RunResult(
        run_id=spec.run_id, status="ok", step_time_s=step_time_s,
        tokens_per_sec_per_gpu=config.gbs * config.seq_len / step_time_s / spec.num_gpus,
        tflops_per_gpu=statistics.median(tflops) if tflops else None,
        peak_mem_gb=None if peak_bytes is None else peak_bytes / 1e9)
