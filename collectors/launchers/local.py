"""Run on this machine: `torchrun --standalone` with one process per GPU (per CPU worker on the
`cpu` platform), killed as a whole process group when the run's timeout passes, and with the
collector when it dies (`lifetime`: torchrun and every worker get SIGKILL when their parent
exits, and a rerun in the same work directory first kills what is left of an earlier one)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from collectors.launchers import (
    SOURCE_ROOT,
    LauncherError,
    failure,
    prepare,
    read_result,
    timed_out,
)
from collectors.launchers.lifetime import die_with_parent, kill_leftovers
from collectors.spec import RunResult, RunSpec

KILL_GRACE_S = 5.0
"""Between SIGTERM (torchrun forwards it to its workers) and SIGKILL of the group."""


class LocalLauncher:
    """`python -m torch.distributed.run --standalone` in a new session, logging to `log.txt`.

    Args:
        module: The module torchrun runs with `-m` (tests point it at a stand-in).
        python: The interpreter that runs torchrun and the workers.
        env: Extra environment variables for the run.
    """

    name = "local"

    def __init__(self, *, module: str = "collectors.workload", python: str = sys.executable,
                 env: Mapping[str, str] | None = None) -> None:
        self.module = module
        self.python = python
        self.env = dict(env or {})

    def command(self, spec: RunSpec, spec_path: Path, result_path: Path) -> list[str]:
        # --tee: each rank's output reaches log.txt line by line with a rank prefix, so two
        # ranks failing at once do not interleave mid-line.
        return [self.python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc-per-node", str(spec.num_gpus), "--tee", "3", "--log-dir",
                str(spec_path.parent / "ranks"), "-m", self.module,
                "--spec", str(spec_path), "--result", str(result_path)]

    def launch(self, spec: RunSpec, workdir: Path) -> RunResult:
        workdir = workdir.resolve()  # absolute in every command line: leftovers are found
        leftovers = kill_leftovers(workdir)
        spec_path, result_path, log_path = prepare(spec, workdir)
        if leftovers:
            log_path.write_text(f"advisor: killed {len(leftovers)} process(es) left running in "
                                f"{workdir} by an earlier attempt: {leftovers}\n")
        if spec.framework != "pytorch":
            return self._launch_framework(spec, workdir, log_path)
        command = self.command(spec, spec_path, result_path)
        with log_path.open("ab") as log:
            # A new session makes torchrun and its workers one process group, killed together.
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, env=self.environ(spec.device),
                                    start_new_session=True, preexec_fn=die_with_parent)
            try:
                returncode = proc.wait(timeout=spec.timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:  # also on KeyboardInterrupt, and for strays of a run that ended
                _kill_group(proc)
        result = read_result(spec, result_path)
        if returncode is None:
            return timed_out(spec, result, f"killed at the run's timeout of {spec.timeout_s:g} s")
        if result is not None:
            return result
        return failure(spec, log_path, f"torchrun exited with code {returncode} and no result")

    def _launch_framework(self, spec: RunSpec, workdir: Path, log_path: Path) -> RunResult:
        """Megatron-LM or NeMo: their own launch command (collectors.frameworks, the same as
        `recommend --emit`), run by bash; the result is parsed from their log."""
        import importlib

        adapter = importlib.import_module(f"collectors.frameworks.{spec.framework}")
        cwd = workdir
        if spec.framework == "megatron":
            checkout = os.environ.get("MEGATRON_LM", "")
            if not (checkout and (Path(checkout) / "pretrain_gpt.py").is_file()):
                raise LauncherError("framework megatron runs pretrain_gpt.py from a Megatron-LM "
                                    "checkout: set MEGATRON_LM to its directory.")
            cwd = Path(checkout)
        script = workdir / "run.sh"
        script.write_text("set -euo pipefail\n" + adapter.command(spec) + "\n")
        with log_path.open("ab") as log:
            proc = subprocess.Popen(["bash", str(script)], cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.env}, start_new_session=True,
                                    preexec_fn=die_with_parent)
            try:
                returncode = proc.wait(timeout=spec.timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                _kill_group(proc)
        text = log_path.read_text(errors="replace")
        if returncode is None:
            return timed_out(spec, None, f"killed at the run's timeout of {spec.timeout_s:g} s")
        return adapter.run_result(text, spec)

    def environ(self, device: str) -> dict[str, str]:
        """The environment torchrun and the workers of a `device` run get."""
        env = {**os.environ, **self.env}
        if SOURCE_ROOT is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(SOURCE_ROOT),
                                                              env.get("PYTHONPATH"))))
        if device == "cpu":
            env.setdefault("OMP_NUM_THREADS", "1")  # N workers share the cores
        return env


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group (torchrun forwards it to its workers), then SIGKILL whatever
    is left after a grace period — the group and every descendant, since torchrun starts each
    worker in its own session and a rank stuck in a collective ignores SIGTERM."""
    workers = _descendants(proc.pid)
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)
    for pid in workers | _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _descendants(pid: int) -> set[int]:
    """Every live descendant of `pid`, from /proc (Linux; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    out, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is empty
        pass
