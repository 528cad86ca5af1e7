"""Before the first run of a campaign: can its runs start at all?

A campaign whose runs cannot start would otherwise launch every run, record each as a `failed`
row ("No module named 'torch'") and report success. `preflight` asks the interpreter the runs
will use (the launcher's `python`; for Megatron-LM and NeMo, the one behind `torchrun` or
`nemo` on PATH), in the runs' own environment, what it can do (`collectors.preflight_probe`):

- torch and `torch.distributed.run` import, with the backend the device needs (gloo, NCCL);
- the workload imports (`collectors.workload`, or the framework's entry point is there);
- `device = "cuda"`: as many GPUs are visible as the largest run needs; the CPU path is a
  `device = "cpu"` campaign such as the `cpu-smoke` template;
- the telemetry the campaign asks for opens (`auto` on GPUs must find GPU telemetry: a GPU
  row with the CPU's power would be wrong data; `kind = "none"` measures without it);
- the launcher is reachable: Slurm's commands are on PATH and its controller answers.

With `--launcher slurm` the GPUs and telemetry live on the compute nodes, which this machine
cannot see: those two checks are left to the jobs (the interpreter is probed here, at the same
path the nodes use). The first problem found raises `PreflightError`, whose one line says what
is missing and how to fix it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from advisor.core.errors import AdvisorError
from collectors.campaign import Campaign

PROBE = Path(__file__).with_name("preflight_probe.py")
PROBE_TIMEOUT_S = 300.0
"""Importing torch on a loaded node takes seconds; NVML's first start can take tens."""
SLURM_PING_TIMEOUT_S = 30.0
TORCH_REQUIREMENT = "torch>=2.13"
"""The `collect` extra's torch (pyproject.toml, [project.optional-dependencies])."""
WORKLOAD = "collectors.workload"
_WORKLOAD_IMPORTS = ("collectors.workload.model", "collectors.workload.parallelize")
"""What the workload imports when it starts (torch, and advisor's model types)."""


class PreflightError(AdvisorError):
    """The campaign's runs cannot start here; the message says what is missing."""


@dataclass(frozen=True)
class Preflight:
    """What the runs will use, as the checks found it."""

    python: str
    torch_version: str
    devices: str
    """e.g. `8 CUDA GPU(s)`, `CPU (gloo)`, or `GPUs checked on the Slurm nodes`."""
    telemetry: str
    launcher: str

    def summary(self) -> str:
        return (f"preflight: {self.python} (torch {self.torch_version}); {self.devices}; "
                f"telemetry {self.telemetry}; launcher {self.launcher}")


def preflight(campaign: Campaign, launcher, *, timeout_s: float = PROBE_TIMEOUT_S) -> Preflight:
    """Check that `campaign`'s runs can start under `launcher` (see the module docstring).

    Raises:
        PreflightError: the first problem found, with its fix.
    """
    environ = getattr(launcher, "environ", None)  # a caller's own launcher may lack one
    env = environ(campaign.device) if environ else dict(os.environ)
    launcher_note = _check_launcher(launcher, env)
    python = _runs_python(campaign, launcher, env)
    module = getattr(launcher, "module", WORKLOAD)
    request = {"module": module, "device": campaign.device, "hz": campaign.telemetry_hz,
               "imports": _imports(campaign, module),
               "telemetry": (campaign.telemetry if _sees_devices(campaign, launcher)
                             else "none")}
    found = _probe(python, request, env, timeout_s)
    where = f"{python}, which runs the campaign's workers"
    if "torch_error" in found:
        raise PreflightError(
            f"torch is not importable by {where} ({found['torch_error']}): install it there "
            f"({python} -m pip install '{TORCH_REQUIREMENT}', or pip install "
            f"'advisor[collect]'), or pass --python an interpreter that has it.")
    devices = _check_devices(campaign, launcher, found, python)
    backend = "nccl" if campaign.device == "cuda" else "gloo"
    if not found.get(backend):
        raise PreflightError(f"torch {found['torch_version']} in {python} has no {backend} "
                             f"backend, which device = {campaign.device!r} runs need: install "
                             f"a torch build with it ({TORCH_REQUIREMENT}).")
    if "module_error" in found:
        raise PreflightError(f"the runs' code does not import in {where} "
                             f"({found['module_error']}): install advisor's collect extra there "
                             f"(pip install 'advisor[collect]'), or pass --python the "
                             f"interpreter advisor is installed in.")
    telemetry = _check_telemetry(campaign, launcher, found, python)
    return Preflight(python, found["torch_version"], devices, telemetry, launcher_note)


def _check_launcher(launcher, env: dict[str, str]) -> str:
    if launcher.name != "slurm":
        return str(launcher.name)
    for command in ("sbatch", "scontrol", "scancel"):
        if shutil.which(command, path=env.get("PATH")) is None:
            raise PreflightError(f"{command} is not on PATH: the slurm launcher needs Slurm's "
                                 f"client commands (Debian: apt-get install slurm-client); use "
                                 f"--launcher local to run on this machine.")
    try:
        done = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True,
                              timeout=SLURM_PING_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        done = None
    answer = "" if done is None else (done.stdout + done.stderr).strip()
    if done is None or done.returncode or "DOWN" in answer or "UP" not in answer:
        said = [line for line in answer.splitlines() if "DOWN" in line or "rror" in line]
        why = (f"no answer in {SLURM_PING_TIMEOUT_S:g} s" if done is None
               else _last_line(said[-1] if said else answer) or f"exit code {done.returncode}")
        raise PreflightError(f"Slurm's controller does not answer `scontrol ping` ({why}): "
                             f"check SLURM_CONF and that slurmctld runs, or use --launcher "
                             f"local.")
    return "slurm (controller up)"


def _runs_python(campaign: Campaign, launcher, env: dict[str, str]) -> str:
    """The interpreter the runs start: the launcher's, or the one behind the framework's
    command (`torchrun` for Megatron-LM, `nemo` for NeMo)."""
    if campaign.framework == "pytorch":
        python = str(getattr(launcher, "python", sys.executable))
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise PreflightError(f"the runs' interpreter {python} is not an executable file: "
                                 f"pass --python an interpreter that has torch.")
        return python
    command = "torchrun" if campaign.framework == "megatron" else "nemo"
    path = shutil.which(command, path=env.get("PATH"))
    if path is None:
        raise PreflightError(f"{command} is not on PATH, and framework {campaign.framework} "
                             f"runs start with it: activate the environment that has "
                             f"{campaign.framework} installed.")
    if campaign.framework == "megatron":
        checkout = env.get("MEGATRON_LM", "")
        if not (checkout and (Path(checkout) / "pretrain_gpt.py").is_file()):
            raise PreflightError("framework megatron runs pretrain_gpt.py from a Megatron-LM "
                                 "checkout: set MEGATRON_LM to its directory.")
    return _interpreter_of(path) or sys.executable


def _interpreter_of(script: str) -> str | None:
    """The Python in a console script's `#!` line (pip writes one), if it names one."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096).decode(errors="replace").strip()
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0] if words and "python" in Path(words[0]).name else None


def _imports(campaign: Campaign, module: str) -> list[str]:
    if campaign.framework == "nemo":
        return ["nemo"]
    if campaign.framework == "megatron":
        return []  # pretrain_gpt.py imports megatron from its checkout
    return list(_WORKLOAD_IMPORTS) if module == WORKLOAD else [module]


def _sees_devices(campaign: Campaign, launcher) -> bool:
    """Whether this machine is where the runs' GPUs and telemetry are (not on Slurm)."""
    return launcher.name == "local" and campaign.framework == "pytorch"


def _probe(python: str, request: dict, env: dict[str, str], timeout_s: float) -> dict:
    try:
        done = subprocess.run([python, "-c", PROBE.read_text(), json.dumps(request)], env=env,
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise PreflightError(f"{python} did not say within {timeout_s:g} s whether it can "
                             f"import torch; is the machine overloaded?") from None
    except OSError as e:
        raise PreflightError(f"cannot start {python} ({e.strerror or e}): pass --python an "
                             f"interpreter that has torch.") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("PREFLIGHT "):
            return json.loads(line.removeprefix("PREFLIGHT "))
    raise PreflightError(f"{python} could not run the preflight check (exit code "
                         f"{done.returncode}: {_last_line(done.stderr) or 'no output'}); is it "
                         f"a Python 3 interpreter?")


def _check_devices(campaign: Campaign, launcher, found: dict, python: str) -> str:
    if campaign.device == "cpu":
        return "CPU (gloo)"
    if not _sees_devices(campaign, launcher):
        return "GPUs checked by each run on its node"
    needed = _largest_run(campaign)
    visible = int(found.get("cuda_devices") or 0)
    if visible == 0:
        why = found.get("cuda_error") or (f"torch {found['torch_version']}: "
                                          f"torch.cuda.device_count() = 0")
        raise PreflightError(f'no CUDA GPU is visible to {python} ({why}), but the campaign '
                             f'sets device = "cuda": run it on a GPU node (or with --launcher '
                             f'slurm), or measure on this machine\'s CPU with --campaign '
                             f'cpu-smoke.')
    if visible < needed:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        note = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""
        raise PreflightError(f"the campaign's largest run needs {needed} GPUs on one node, but "
                             f"{visible} are visible to {python}{note}: lower [sweep] num_gpus, "
                             f"or use --launcher slurm for multi-node runs.")
    return f"{visible} CUDA GPU(s)"


def _largest_run(campaign: Campaign) -> int:
    counts = [int(n) for m in campaign.models for n in campaign.sweep_values("num_gpus", 1, m)]
    return max(counts, default=1)


def _check_telemetry(campaign: Campaign, launcher, found: dict, python: str) -> str:
    kind = campaign.telemetry
    if kind == "none":
        return "none"
    if campaign.framework != "pytorch":
        return f"{kind} (not sampled by {campaign.framework} runs)"
    if not _sees_devices(campaign, launcher):
        return f"{kind} (checked by each run on its node)"
    fix = ('set [telemetry] kind = "auto" (the best available) or "none" (no power and '
           'temperature)')
    if "telemetry_error" in found:
        raise PreflightError(f"telemetry {found['telemetry']!r} does not open in {python} "
                             f"({found['telemetry_error']}): install its library there "
                             f"(nvidia-ml-py for nvml, amdsmi for amdsmi), or {fix}.")
    picked = found.get("telemetry", kind)
    if kind == "auto" and campaign.device == "cuda" and picked == "cpu":
        raise PreflightError(f"telemetry 'auto' finds no GPU telemetry in {python} "
                             f"({found.get('telemetry_why', 'no NVML or AMD SMI')}), so the "
                             f"rows would carry the CPU's power as the GPUs': install "
                             f'nvidia-ml-py (NVIDIA) or amdsmi (AMD) there, or set [telemetry] '
                             f'kind = "none".')
    return picked if picked == kind else f"{kind} ({picked})"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
