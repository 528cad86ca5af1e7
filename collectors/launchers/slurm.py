"""Run through Slurm: one batch job per run (`launch`) or one job array for many (`launch_array`).
The job's one task per node starts `torchrun`; multi-node jobs meet at a c10d rendezvous on the
first node of the allocation.

Jobs are submitted with `sbatch --parsable` and watched with `scontrol show job` every `poll_s`
rather than `sbatch --wait`, whose polling backs off to 32 s between looks (sbatch.c,
`MAX_WAIT_SLEEP_TIME`) and which reports an exit code but not whether the time limit struck.
Slurm holds a finished job's record for `MinJobAge` (300 s by default), far longer than a poll.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from collectors.launchers import (
    LOG_FILE,
    RESULT_FILE,
    SOURCE_ROOT,
    SPEC_FILE,
    LauncherError,
    failure,
    prepare,
    read_result,
    timed_out,
)
from collectors.spec import RunResult, RunSpec

SCRIPT_FILE = "job.sh"
ENDED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL",
         "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
"""Job states after which nothing more happens (squeue(1), JOB STATE CODES)."""
MAX_QUERY_FAILURES = 10
"""Consecutive failed `scontrol` calls (slurmctld busy or restarting) before giving up."""


@dataclass(frozen=True)
class JobEnd:
    """How one job (or array task) ended, as `scontrol show job` says."""

    job_id: str
    state: str
    exit_code: int


class SlurmLauncher:
    """Submit runs as Slurm batch jobs whose steps run `torchrun`.

    Args:
        module: The module torchrun runs with `-m` (tests point it at a stand-in).
        python: The interpreter on the compute nodes (same path: a shared file system).
        env: Extra environment for `sbatch` and `scontrol` (e.g. `SLURM_CONF`); jobs inherit it.
        partition: `--partition`, else the cluster's default.
        account: `--account`, else the user's default.
        gpus_per_node: Processes per node at most; None takes the platform's GPUs per node
            for cuda runs (a whole run on one node for CPU runs).
        cpus_per_task: CPUs for each node's torchrun; None gives one per worker process.
        sbatch_args: More `#SBATCH` options, e.g. `("--qos=short",)`.
        rdzv_port: Port of the c10d rendezvous on a multi-node job's first node.
        poll_s: Seconds between looks at a submitted job.
    """

    name = "slurm"

    def __init__(self, *, module: str = "collectors.workload", python: str = sys.executable,
                 env: Mapping[str, str] | None = None, partition: str | None = None,
                 account: str | None = None, gpus_per_node: int | None = None,
                 cpus_per_task: int | None = None, sbatch_args: Sequence[str] = (),
                 rdzv_port: int = 29500, poll_s: float = 2.0) -> None:
        self.module, self.python = module, python
        self.env = {**os.environ, **(env or {})}
        self.partition, self.account = partition, account
        self.gpus_per_node, self.cpus_per_task = gpus_per_node, cpus_per_task
        self.sbatch_args, self.rdzv_port, self.poll_s = tuple(sbatch_args), rdzv_port, poll_s
        if shutil.which("sbatch", path=self.env.get("PATH")) is None:
            raise LauncherError("sbatch is not on PATH: the slurm launcher needs Slurm's client "
                                "commands and a cluster (Debian: apt-get install slurm-client); "
                                "use --launcher local to run on this machine.")

    def environ(self, device: str) -> dict[str, str]:
        """The environment a job's torchrun starts with, as far as this machine can tell (the
        job script's exports over the submitting environment)."""
        env = dict(self.env)
        if SOURCE_ROOT is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(SOURCE_ROOT),
                                                              env.get("PYTHONPATH"))))
        if device == "cpu":
            env["OMP_NUM_THREADS"] = "1"
        return env

    def launch(self, spec: RunSpec, workdir: Path) -> RunResult:
        """Run `spec` as one batch job; its output goes to `workdir/log.txt`."""
        if spec.framework != "pytorch":
            raise LauncherError(f"framework {spec.framework} campaigns run with --launcher "
                                f"local for now (on an allocated node).")
        prepare(spec, workdir)
        script = self.script([spec], [workdir], array=False)
        (workdir / SCRIPT_FILE).write_text(script)
        job_id = self._submit(workdir / SCRIPT_FILE)
        ends = self._wait(job_id)
        return _outcome(spec, workdir, ends.get(job_id), self._minutes([spec]))

    def launch_array(self, specs: Sequence[RunSpec], workdirs: Sequence[Path]) -> list[RunResult]:
        """Run `specs` as one job array (task i runs `specs[i]` in `workdirs[i]`) and return
        their results in order. The tasks share one resource request, so the specs must agree
        on `num_gpus` and `device`; the time limit is the longest timeout."""
        if len(specs) != len(workdirs) or not specs:
            raise LauncherError(f"launch_array needs one workdir per spec, got {len(specs)} "
                                f"specs and {len(workdirs)} workdirs.")
        shapes = {(s.num_gpus, s.device) for s in specs}
        if len(shapes) > 1:
            raise LauncherError(f"a job array's tasks share one resource request, but the specs "
                                f"ask for (num_gpus, device) in {sorted(shapes)}; submit one "
                                f"array per shape.")
        for spec, workdir in zip(specs, workdirs, strict=True):
            prepare(spec, workdir)
        script = self.script(specs, workdirs, array=True)
        for workdir in workdirs:  # each run's directory shows what ran it
            (workdir / SCRIPT_FILE).write_text(script)
        array_id = self._submit(workdirs[0] / SCRIPT_FILE)
        ends = self._wait(array_id)
        minutes = self._minutes(specs)
        return [_outcome(spec, workdir, ends.get(f"{array_id}_{i}"), minutes)
                for i, (spec, workdir) in enumerate(zip(specs, workdirs, strict=True))]

    def script(self, specs: Sequence[RunSpec], workdirs: Sequence[Path], *, array: bool) -> str:
        """The batch script: `#SBATCH` resources, then `srun` of torchrun on every node."""
        spec = specs[0]
        num_nodes, per_node = self._layout(spec)
        name = re.sub(r"[^\w.-]", "_", spec.campaign if array else spec.run_id)[:100]
        options = [f"--job-name=advisor-{name}", f"--nodes={num_nodes}", "--ntasks-per-node=1",
                   f"--cpus-per-task={self.cpus_per_task or per_node}",
                   f"--time={self._minutes(specs)}"]
        if array:  # each task sends its output to its own log below
            options += [f"--array=0-{len(specs) - 1}", "--output=/dev/null"]
        else:
            options += [f"--output={workdirs[0] / LOG_FILE}", f"--chdir={workdirs[0]}"]
        if self.partition:
            options.append(f"--partition={self.partition}")
        if self.account:
            options.append(f"--account={self.account}")
        if spec.device == "cuda":
            options.append(f"--gres=gpu:{per_node}")
        lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in (*options, *self.sbatch_args)),
                 "set -u"]
        if SOURCE_ROOT is not None:
            lines.append(f"export PYTHONPATH={shlex.quote(str(SOURCE_ROOT))}"
                         "${PYTHONPATH:+:$PYTHONPATH}")
        if spec.device == "cpu":
            lines.append("export OMP_NUM_THREADS=1  # the workers share the task's CPUs")
        if array:
            lines += [f"dirs=({' '.join(shlex.quote(str(w)) for w in workdirs)})",
                      'dir="${dirs[$SLURM_ARRAY_TASK_ID]}"', 'cd "$dir"',
                      f'exec >>"$dir/{LOG_FILE}" 2>&1']
        else:
            lines.append(f"dir={shlex.quote(str(workdirs[0]))}")
        if num_nodes == 1:
            rendezvous = "--standalone --nnodes 1"  # a free port: array tasks may share a node
        else:
            lines.append('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)')
            rendezvous = ('--nnodes "$SLURM_NNODES" --rdzv-backend c10d --rdzv-id "$SLURM_JOB_ID"'
                          f' --rdzv-endpoint "$head:{self.rdzv_port}"')
        lines.append(f'srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" '
                     f"{shlex.quote(self.python)} -m torch.distributed.run {rendezvous} "
                     f'--nproc-per-node {per_node} --tee 3 --log-dir "$dir/ranks" '
                     f"-m {self.module} "
                     f'--spec "$dir/{SPEC_FILE}" --result "$dir/{RESULT_FILE}"')
        return "\n".join(lines) + "\n"

    def _layout(self, spec: RunSpec) -> tuple[int, int]:
        """(nodes, processes per node) for `spec.num_gpus` processes."""
        per_node = self.gpus_per_node or _platform_per_node(spec) or spec.num_gpus
        num_nodes = math.ceil(spec.num_gpus / per_node)
        if spec.num_gpus % num_nodes:
            raise LauncherError(f"num_gpus ({spec.num_gpus}) of {spec.run_id} does not split "
                                f"evenly over {num_nodes} nodes of at most {per_node}; "
                                f"use a multiple of gpus_per_node ({self.gpus_per_node}).")
        return num_nodes, spec.num_gpus // num_nodes

    @staticmethod
    def _minutes(specs: Sequence[RunSpec]) -> int:
        """The time limit: Slurm counts whole minutes."""
        return max(1, math.ceil(max(s.timeout_s for s in specs) / 60))

    def _slurm(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, env=self.env, capture_output=True, text=True)

    def _submit(self, script: Path) -> str:
        """The job id. A rejected submission raises: it is the cluster's problem, not the
        run's, and recording it as a failed run would skip the run on resume."""
        done = self._slurm("sbatch", "--parsable", str(script))
        if done.returncode:
            raise LauncherError(f"sbatch rejected {script}: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]  # "id;cluster" on federated clusters

    def _wait(self, job_id: str) -> dict[str, JobEnd]:
        """Poll until the job (every task of an array) has ended; cancel it if interrupted.
        Keys are job ids, `ARRAYID_TASK` for array tasks."""
        failures = 0
        try:
            while True:
                time.sleep(self.poll_s)
                done = self._slurm("scontrol", "--oneliner", "show", "job", job_id)
                if done.returncode:
                    if "Invalid job id" in done.stderr:  # record purged: report what is left
                        return {}
                    failures += 1
                    if failures >= MAX_QUERY_FAILURES:
                        raise LauncherError(f"scontrol cannot query job {job_id}: "
                                            f"{done.stderr.strip()}")
                    continue
                failures = 0
                records = [_fields(line) for line in done.stdout.splitlines() if line.strip()]
                if records and all(r.get("JobState") in ENDED for r in records):
                    return dict(_job_end(r) for r in records)
        except BaseException:
            self._slurm("scancel", job_id)
            raise


def _fields(line: str) -> dict[str, str]:
    """`Key=Value` pairs of one `scontrol --oneliner` record (first occurrence wins)."""
    found: dict[str, str] = {}
    for key, value in re.findall(r"(\w+)=(\S*)", line):
        found.setdefault(key, value)
    return found


def _job_end(record: dict[str, str]) -> tuple[str, JobEnd]:
    task = record.get("ArrayTaskId", "N/A")
    job_id = record["JobId"] if task == "N/A" else f"{record['ArrayJobId']}_{task}"
    exit_code = int(record.get("ExitCode", "0:0").split(":")[0])
    return job_id, JobEnd(job_id, record["JobState"], exit_code)


def _outcome(spec: RunSpec, workdir: Path, end: JobEnd | None, minutes: int) -> RunResult:
    result = read_result(spec, workdir / RESULT_FILE)
    log = workdir / LOG_FILE
    if end is not None and end.state in ("TIMEOUT", "DEADLINE"):
        return timed_out(spec, result, f"Slurm job {end.job_id} reached its time limit "
                                       f"({minutes} min)")
    if end is not None and end.state == "OUT_OF_MEMORY":
        if result is not None and result.status != "failed":
            return result
        # A rank killed for memory leaves its peers to fail on a broken connection.
        oom = failure(spec, log, "")
        return RunResult(spec.run_id, "oom", error=oom.error if oom.status == "oom" else
                         f"Slurm job {end.job_id} ran out of memory (OUT_OF_MEMORY)")
    if result is not None:
        return result
    if end is None:
        return failure(spec, log, "the Slurm job ended without a result and its record is gone")
    return failure(spec, log, f"Slurm job {end.job_id} ended {end.state} "
                              f"(exit code {end.exit_code}) without a result")


def _platform_per_node(spec: RunSpec) -> int | None:
    """GPUs per node of the run's platform (cuda runs only; CPU runs share one node)."""
    if spec.device != "cuda":
        return None
    from advisor.catalog import load_platform
    from advisor.core.errors import AdvisorError

    try:
        return load_platform(spec.platform).num_gpus_per_node
    except AdvisorError:
        return None
