"""Launchers: local torchrun and real Slurm (a one-node cluster on localhost, tests/slurm_cluster)
run a stand-in workload (tests/launcher_standin) through every outcome, then the real workload."""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from pathlib import Path

import pytest
from slurm_cluster import unavailable

from collectors.launchers import LauncherError, failure, make_launcher
from collectors.launchers.lifetime import processes_mentioning as _processes_mentioning
from collectors.launchers.local import LocalLauncher
from collectors.launchers.slurm import SlurmLauncher
from collectors.spec import RunSpec

STANDIN = "launcher_standin"
# A top-level module on the workers' PYTHONPATH, not `tests.launcher_standin`: nemo_toolkit (the
# frameworks extra) installs a regular `tests` package into site-packages, which would shadow
# this namespace-package `tests` directory.
STANDIN_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, (str(Path(__file__).resolve().parents[1]),
                                                           os.environ.get("PYTHONPATH"))))}
WORKLOAD_MAIN = Path(__file__).resolve().parents[2] / "collectors" / "workload" / "__main__.py"


def _spec(behaviour: str, *, timeout_s: float = 120.0, num_gpus: int = 2) -> RunSpec:
    return RunSpec(run_id=f"standin-{behaviour}", campaign=behaviour, model="llama3-8b",
                   platform="cpu", num_gpus=num_gpus, config={}, timeout_s=timeout_s)


def _assert_no_leftovers(workdir: Path, wait_s: float = 15.0) -> None:
    deadline = time.monotonic() + wait_s
    while _processes_mentioning(str(workdir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_mentioning(str(workdir)) == []


# Launcher choice and the pieces that need no processes.

def test_make_launcher_rejects_unknown_name():
    with pytest.raises(LauncherError, match="unknown launcher 'slurn'.*Did you mean slurm"):
        make_launcher("slurn")


def test_make_launcher_passes_options():
    launcher = make_launcher("local", module=STANDIN)
    assert isinstance(launcher, LocalLauncher) and launcher.module == STANDIN


def test_slurm_launcher_without_sbatch_says_so(tmp_path):
    with pytest.raises(LauncherError, match="sbatch is not on PATH.*--launcher local"):
        make_launcher("slurm", env={"PATH": str(tmp_path)})


def test_failure_reports_the_workers_exception_not_torchruns_report(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("\n".join([
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "x.py", line 3, in <module>',
        "[rank1]: ValueError: tp (3) must divide heads",
        "E1130 10:21:04 1 torch/distributed/elastic/multiprocessing/api.py:1002] failed",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "  error_file: <N/A>"]))
    result = failure(_spec("crash"), log, "fallback")
    assert (result.status, result.error) == ("failed", "ValueError: tp (3) must divide heads")


def test_failure_without_an_error_line_uses_the_fallback(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("starting\n")
    assert failure(_spec("x"), log, "exit code 3").error == "exit code 3"
    assert failure(_spec("x"), tmp_path / "missing.txt", "no log").error == "no log"


@pytest.fixture
def slurm_client() -> dict[str, str]:
    """An environment whose PATH has Slurm's sbatch (SlurmLauncher refuses to start without
    it); the scripts these tests write are not submitted."""
    env = {"PATH": "/usr/bin:/bin"}
    if shutil.which("sbatch", path=env["PATH"]) is None:
        unavailable("sbatch is not in /usr/bin (Debian: apt-get install slurm-client)")
    return env


def test_multi_node_script_meets_at_a_c10d_rendezvous(tmp_path, slurm_client):
    launcher = SlurmLauncher(env=slurm_client, gpus_per_node=4, partition="gpu",
                             account="proj", sbatch_args=("--qos=short",))
    spec = RunSpec(run_id="r1", campaign="c", model="llama3-8b", platform="h200", num_gpus=8,
                   config={}, device="cuda", timeout_s=600)
    script = launcher.script([spec], [tmp_path], array=False)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:4",
                 "#SBATCH --time=10", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --qos=short", "#SBATCH --cpus-per-task=4"):
        assert line in script.splitlines()
    assert '--rdzv-backend c10d --rdzv-id "$SLURM_JOB_ID" --rdzv-endpoint "$head:29500"' in script
    assert "--nproc-per-node 4 --tee 3" in script and "-m collectors.workload" in script
    assert "OMP_NUM_THREADS" not in script


def test_uneven_split_over_nodes_is_refused(tmp_path, slurm_client):
    launcher = SlurmLauncher(env=slurm_client, gpus_per_node=4)
    spec = RunSpec(run_id="r1", campaign="c", model="m", platform="h200", num_gpus=7, config={})
    with pytest.raises(LauncherError, match=r"num_gpus \(7\).*2 nodes"):
        launcher.script([spec], [tmp_path], array=False)


# Local torchrun.

@pytest.fixture
def local() -> LocalLauncher:
    return LocalLauncher(module=STANDIN, env=STANDIN_ENV)


def test_local_ok_starts_num_gpus_processes(local, tmp_path):
    result = local.launch(_spec("ok"), tmp_path)
    assert result.status == "ok", (tmp_path / "log.txt").read_text()
    assert result.telemetry["world_size"] == 2.0
    assert (tmp_path / "spec.json").exists() and (tmp_path / "log.txt").exists()


def test_local_crash_reports_the_workers_error(local, tmp_path):
    result = local.launch(_spec("crash"), tmp_path)
    assert result.status == "failed"
    assert result.error.startswith("RuntimeError: stand-in crash on rank")


def test_local_oom_is_an_oom_row(local, tmp_path):
    result = local.launch(_spec("oom"), tmp_path)
    assert result.status == "oom"
    assert "CUDA out of memory" in result.error


def test_local_silent_failure_names_the_exit_code(local, tmp_path):
    result = local.launch(_spec("silent"), tmp_path)
    assert result.status == "failed"
    assert "exited with code 1" in result.error


KILLED_COLLECTOR = """
import sys
from pathlib import Path
from collectors.launchers.lifetime import processes_mentioning as _processes_mentioning
from collectors.launchers.local import LocalLauncher
from collectors.spec import RunSpec
spec = RunSpec(run_id="standin-sleep", campaign="sleep", model="llama3-8b", platform="cpu",
               num_gpus=2, config={}, timeout_s=600)
LocalLauncher(module=sys.argv[2]).launch(spec, Path(sys.argv[1]))
"""


@pytest.mark.torch
def test_a_killed_collector_takes_torchrun_and_its_workers_along(tmp_path):
    """kill -9 of the collector's process group: torchrun and every rank die with it, although
    each sits in a session of its own (parent-death signals down the chain)."""
    import signal
    import subprocess
    import sys

    collector = subprocess.Popen([sys.executable, "-c", KILLED_COLLECTOR, str(tmp_path),
                                  STANDIN], env={**os.environ, **STANDIN_ENV},
                                 start_new_session=True)
    deadline = time.monotonic() + 60
    while len(_processes_mentioning(str(tmp_path / "spec.json"))) < 3:  # torchrun + 2 ranks
        assert time.monotonic() < deadline and collector.poll() is None, "workers never started"
        time.sleep(0.2)
    time.sleep(2)  # the ranks are past their own start-up
    os.killpg(collector.pid, signal.SIGKILL)
    collector.wait()
    _assert_no_leftovers(tmp_path)


def test_a_rerun_kills_what_an_earlier_attempt_left_running(local, tmp_path):
    import subprocess

    # $0 names the run's spec, as torchrun's command line does
    stray = subprocess.Popen(["bash", "-c", "sleep 600; exit",
                              str(tmp_path.resolve() / "spec.json")], start_new_session=True)
    deadline = time.monotonic() + 10
    while stray.pid not in _processes_mentioning(str(tmp_path.resolve())):  # exec'd
        assert time.monotonic() < deadline
        time.sleep(0.05)
    result = local.launch(_spec("ok"), tmp_path)
    assert result.status == "ok"
    assert stray.wait(timeout=10) == -9
    assert re.search(rf"killed \d process\(es\) left running .*\b{stray.pid}\b",
                     (tmp_path / "log.txt").read_text())


def test_local_timeout_kills_the_whole_process_group(local, tmp_path):
    started = time.monotonic()
    result = local.launch(_spec("sleep", timeout_s=8), tmp_path)
    assert result.status == "timeout"
    assert "8 s" in result.error
    assert time.monotonic() - started < 60
    _assert_no_leftovers(tmp_path)


# Real Slurm: one job per run and a job array.

@pytest.fixture
def on_slurm(slurm) -> SlurmLauncher:  # noqa: F811
    return SlurmLauncher(module=STANDIN, env={**slurm, **STANDIN_ENV}, poll_s=0.5)


def test_slurm_ok_runs_torchrun_in_a_batch_job(on_slurm, tmp_path):
    result = on_slurm.launch(_spec("ok"), tmp_path)
    assert result.status == "ok", (tmp_path / "log.txt").read_text()
    assert result.telemetry["world_size"] == 2.0
    script = (tmp_path / "job.sh").read_text()
    assert "#SBATCH --nodes=1" in script and "--standalone" in script


def test_slurm_crash_reports_the_workers_error(on_slurm, tmp_path):
    result = on_slurm.launch(_spec("crash"), tmp_path)
    assert result.status == "failed"
    assert result.error.startswith("RuntimeError: stand-in crash on rank")


def test_slurm_time_limit_is_a_timeout(on_slurm, tmp_path):
    # Slurm counts whole minutes and checks limits every 30 s: this takes about 1.5 min.
    result = on_slurm.launch(_spec("sleep", timeout_s=30), tmp_path)
    assert result.status == "timeout"
    assert "time limit (1 min)" in result.error
    _assert_no_leftovers(tmp_path)


def test_slurm_job_array_runs_each_spec_in_its_own_directory(on_slurm, tmp_path):
    behaviours = ("ok", "crash", "oom")
    workdirs = [tmp_path / b for b in behaviours]
    results = on_slurm.launch_array([_spec(b) for b in behaviours], workdirs)
    assert [r.run_id for r in results] == [f"standin-{b}" for b in behaviours]
    assert [r.status for r in results] == ["ok", "failed", "oom"]
    assert results[0].telemetry["world_size"] == 2.0
    assert "#SBATCH --array=0-2" in (workdirs[0] / "job.sh").read_text()
    assert "stand-in crash" in (workdirs[1] / "log.txt").read_text()


ONE_NODE_FOR_TWO = (("--nodes=2", "--nodes=1"), ("--cpus-per-task=1", "--cpus-per-task=2"),
                    ("--nproc-per-node 1", "--nproc-per-node 2"))


def test_multi_node_rendezvous_runs_through_slurm(slurm, tmp_path, monkeypatch):  # noqa: F811
    """The 2-node script (scontrol hostnames, c10d rendezvous) squeezed onto our one node."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = SlurmLauncher(module=STANDIN, env={**slurm, **STANDIN_ENV}, poll_s=0.5,
                             gpus_per_node=1, rdzv_port=port)
    render = launcher.script

    def on_one_node(specs, workdirs, *, array):
        script = render(specs, workdirs, array=array)
        assert "--nodes=2" in script and "--rdzv-backend c10d" in script
        for two_nodes, one_node in ONE_NODE_FOR_TWO:
            script = script.replace(two_nodes, one_node)
        return script

    monkeypatch.setattr(launcher, "script", on_one_node)
    result = launcher.launch(_spec("ok"), tmp_path)
    assert result.status == "ok", (tmp_path / "log.txt").read_text()
    assert result.telemetry["world_size"] == 2.0


def test_job_array_needs_one_shape(on_slurm, tmp_path):
    with pytest.raises(LauncherError, match="one resource request"):
        on_slurm.launch_array([_spec("ok"), _spec("ok", num_gpus=1)],
                              [tmp_path / "a", tmp_path / "b"])


# The real workload, through each launcher.

needs_workload = pytest.mark.skipif(not WORKLOAD_MAIN.exists(),
                                    reason="collectors/workload/__main__.py does not exist yet")


def _tiny_llama() -> RunSpec:
    from advisor.core.parallel import ParallelConfig

    return RunSpec(run_id="tiny-dp2", campaign="launcher-test", model="llama3-8b",
                   scale={"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128,
                          "num_attention_heads": 4, "num_kv_heads": 2, "vocab_size": 256},
                   platform="cpu", num_gpus=2,
                   config=ParallelConfig(dp=2, gbs=4, mbs=1, seq_len=32).to_dict(),
                   device="cpu", telemetry="none", timeout_s=300)


@needs_workload
@pytest.mark.torch
def test_workload_through_local_torchrun(tmp_path):
    result = LocalLauncher().launch(_tiny_llama(), tmp_path)
    assert result.status == "ok", result.error
    assert result.step_time_s > 0 and result.tokens_per_sec_per_gpu > 0


@needs_workload
def test_workload_through_slurm(slurm, tmp_path):  # noqa: F811
    result = SlurmLauncher(env=slurm, poll_s=0.5).launch(_tiny_llama(), tmp_path)
    assert result.status == "ok", result.error
    assert result.step_time_s > 0 and result.tokens_per_sec_per_gpu > 0
