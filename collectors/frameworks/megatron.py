"""Megatron-LM adapter: the `pretrain_gpt.py` command for a `RunSpec`, and its training log parsed.

The layout flags are `advisor.explain.emit.megatron.megatron_args`, exactly what `recommend
--emit megatron` writes; `command` is that emitter's command with its `$DATA_ARGS` and
`$TRAIN_ARGS` filled in.

Log formats (Megatron-LM `megatron/training/training.py`, `training_log`, and
`megatron/training/utils.py`, `report_memory`): the last rank prints one line per logged
iteration,

    ` [2025-06-02 10:15:42.123456] iteration        3/       6 | consumed samples:           96 |
    elapsed time per iteration (ms): 3951.2 | throughput per GPU (TFLOP/s/GPU): 452.4 | ...`

(throughput only with `--log-throughput`; older releases print the time without microseconds),
and each data-parallel-rank-0 rank prints, after the first logged iterations,

    `[Rank 0] (after 2 iterations) memory (MB) | allocated: ... | max allocated: ... |
    reserved: ... | max reserved: ...`

in MiB (the function divides bytes by 1024²).
"""

from __future__ import annotations

import re
import shlex

from advisor.core.parallel import Job
from advisor.explain.emit.megatron import megatron_args, megatron_command
from collectors.frameworks import (
    Step,
    TrainingLog,
    complete_lines,
    find_failure,
    job_for,
    last_error_line,
    log_lines,
    summarize,
    unique_steps,
)
from collectors.spec import RunResult, RunSpec

_ITERATION = re.compile(r"\biteration\s+(\d+)/\s*\d+\s*\|")
_MEMORY = re.compile(r"memory \(MB\)\s*\|.*?\bmax allocated:\s*([\d.]+)\s*\|"
                     r".*?\bmax reserved:\s*([\d.]+)")
_STEP_MS = "elapsed time per iteration (ms)"
_TFLOPS = "throughput per GPU (TFLOP/s/GPU)"
_MIB = 1024**2
#: Megatron-LM needs a learning rate; its value does not change the step time.
_LEARNING_RATE = "3e-4"


def data_args(job: Job) -> list[str]:
    """Mock data and a null tokenizer, as the emitter's comment suggests: nothing to download."""
    return ["--mock-data", "--tokenizer-type", "NullTokenizer",
            "--vocab-size", str(job.model.vocab_size)]


def train_args(spec: RunSpec) -> list[str]:
    """Run length and logging for a measurement: every iteration logged with its TFLOP/s, no
    evaluation (it would add untimed passes at the end)."""
    return ["--train-iters", str(spec.warmup_steps + spec.measure_steps),
            "--lr", _LEARNING_RATE, "--log-interval", "1", "--log-throughput",
            "--eval-iters", "0"]


def script_args(spec: RunSpec) -> list[str]:
    """`pretrain_gpt.py` and its arguments, for a launcher that supplies `torchrun` itself."""
    config, job = job_for(spec, framework="Megatron-LM")
    return ["pretrain_gpt.py", *megatron_args(config, job), *data_args(job), *train_args(spec)]


def command(spec: RunSpec) -> str:
    """A shell script: `DATA_ARGS` and `TRAIN_ARGS` set, then the command `recommend --emit
    megatron` writes for this configuration, unchanged."""
    config, job = job_for(spec, framework="Megatron-LM")
    return (f"DATA_ARGS={shlex.quote(' '.join(data_args(job)))}\n"
            f"TRAIN_ARGS={shlex.quote(' '.join(train_args(spec)))}\n"
            + megatron_command(config, job))


def parse_log(text: str) -> TrainingLog:
    """Steps, peak allocated memory and failure lines from a Megatron-LM stdout/stderr log."""
    steps: list[Step] = []
    allocated_mib: list[float] = []
    reserved_mib: list[float] = []
    for line in complete_lines(text):
        if match := _ITERATION.search(line):
            fields = _fields(line[match.end():])
            if _STEP_MS in fields:
                steps.append(Step(iteration=int(match.group(1)),
                                  step_time_s=fields[_STEP_MS] / 1e3,
                                  tflops_per_gpu=fields.get(_TFLOPS)))
        elif match := _MEMORY.search(line):
            allocated_mib.append(float(match.group(1)))
            reserved_mib.append(float(match.group(2)))
    lines = log_lines(text)
    return TrainingLog(steps=unique_steps(steps),
                       peak_allocated_bytes=max(allocated_mib) * _MIB if allocated_mib else None,
                       peak_reserved_bytes=max(reserved_mib) * _MIB if reserved_mib else None,
                       failure=find_failure(lines), last_error=last_error_line(lines))


def run_result(text: str, spec: RunSpec) -> RunResult:
    """The `RunResult` a Megatron-LM log shows for `spec` (`collectors.frameworks.summarize`)."""
    return summarize(parse_log(text), spec)


def _fields(rest: str) -> dict[str, float]:
    """`key: number` pairs of the `|`-separated part of an iteration line (others skipped).

    Only fields closed by a `|` count: a line cut short mid-number must not yield a figure.
    """
    fields: dict[str, float] = {}
    for part in rest.split("|")[:-1]:
        key, _, value = part.partition(":")
        try:
            fields[key.strip()] = float(value)
        except ValueError:
            continue
    return fields
