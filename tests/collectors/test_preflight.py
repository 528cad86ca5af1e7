"""`advisor collect` fails fast: the preflight asks the interpreter the runs will use, and a
campaign whose runs cannot start stops with one `error:` line and exit code 2 before any run,
writing nothing. The interpreters without torch here are real ones (a venv without it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from collectors.campaign import campaign_from_dict, load_campaign
from collectors.launchers import make_launcher
from collectors.preflight import PreflightError, preflight

TINY = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "num_kv_heads": 2, "vocab_size": 256}


def _venv(root: Path, *, hide: tuple[str, ...] | None) -> Path:
    """A virtual environment's python. `hide=None`: bare (the standard library only);
    otherwise it sees this environment's site-packages (the advisor install included) except
    the entries whose names start with one of `hide`: a quick-start install without torch."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True,
                   timeout=120)
    python = root / "bin" / "python"
    if hide is not None:
        ours = Path(sysconfig.get_paths()["purelib"])
        theirs = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                      "get_paths()['purelib'])"], capture_output=True,
                                     text=True, check=True).stdout.strip())
        for entry in ours.iterdir():
            if not entry.name.startswith(hide):
                (theirs / entry.name).symlink_to(entry)
    return python


def _collect(python: Path | str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(python), "-m", "advisor", "collect", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _assert_refused_before_any_run(proc: subprocess.CompletedProcess, tmp_path: Path,
                                   *fragments: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (tmp_path / "rows.parquet").exists()
    assert not (tmp_path / "runs").exists()


def test_collect_after_a_quick_start_install_without_torch_stops_before_any_run(tmp_path):
    """The issue's first day: advisor installed, torch not; `collect` exited 0 with six
    `failed` rows. Now advisor itself runs in an interpreter that cannot import torch."""
    python = _venv(tmp_path / "venv", hide=("torch",))
    lacks = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True)
    assert "No module named 'torch'" in lacks.stderr  # really without torch
    proc = _collect(python, "--campaign", "cpu-smoke", "--dataset", "rows.parquet",
                    "--runs-dir", "runs", cwd=tmp_path)
    _assert_refused_before_any_run(proc, tmp_path, "torch is not importable by",
                                   str(python), "No module named 'torch'", "pip install")


def test_runs_interpreter_without_torch_stops_before_any_run(tmp_path):
    """--python names the runs' interpreter: a bare venv, though advisor's own has torch."""
    bare = _venv(tmp_path / "bare", hide=None)
    proc = _collect(sys.executable, "--campaign", "cpu-smoke", "--python", str(bare),
                    "--dataset", "rows.parquet", "--runs-dir", "runs", cwd=tmp_path)
    _assert_refused_before_any_run(proc, tmp_path, f"torch is not importable by {bare}",
                                   "--python")


def test_a_runs_interpreter_that_is_not_there_is_named(tmp_path):
    proc = _collect(sys.executable, "--campaign", "cpu-smoke", "--python",
                    str(tmp_path / "nowhere" / "python"), "--dataset", "rows.parquet",
                    "--runs-dir", "runs", cwd=tmp_path)
    _assert_refused_before_any_run(proc, tmp_path, "nowhere/python is not an executable file")


@pytest.mark.torch
def test_preflight_names_the_interpreter_and_torch_the_runs_use():
    import torch

    found = preflight(load_campaign("cpu-smoke"), make_launcher("local"))
    assert found.python == sys.executable and found.torch_version == str(torch.__version__)
    assert found.devices == "CPU (gloo)" and found.telemetry == "cpu"


@pytest.mark.torch
def test_a_gpu_campaign_without_visible_gpus_points_to_the_cpu_path():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(PreflightError, match=r"no CUDA GPU is visible to .*--campaign cpu-smoke"):
        preflight(load_campaign("h200-single"), make_launcher("local"))


@pytest.mark.torch
def test_telemetry_the_campaign_asks_for_must_open():
    from collectors.telemetry import nvml_available

    if nvml_available()[0]:
        pytest.skip("NVML works on this machine")
    data = {"name": "nvml", "platform": "cpu", "device": "cpu", "telemetry": {"kind": "nvml"},
            "models": [{"name": "llama3-8b", "scale": TINY}],
            "sweep": {"num_gpus": [2], "seq_len": [32], "gbs": [8]}}
    with pytest.raises(PreflightError, match=r"telemetry 'nvml' does not open in .*"
                                             r'kind = "auto"'):
        preflight(campaign_from_dict(data), make_launcher("local"))


def test_megatron_campaign_needs_its_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("MEGATRON_LM", raising=False)
    if shutil.which("torchrun") is None:
        pytest.skip("no torchrun on PATH")
    data = {"name": "mlm", "platform": "h100", "device": "cuda", "framework": "megatron",
            "models": [{"name": "llama3-8b", "scale": {"num_layers": 2}}],
            "sweep": {"num_gpus": [2], "seq_len": [2048], "gbs": [8]}}
    with pytest.raises(PreflightError, match="set MEGATRON_LM"):
        preflight(campaign_from_dict(data), make_launcher("local"))


def test_slurm_without_an_answering_controller_is_refused(tmp_path):
    """sbatch is there but the cluster is not: the controller named in SLURM_CONF listens on a
    port nobody serves."""
    if shutil.which("sbatch") is None or shutil.which("scontrol") is None:
        pytest.skip("Slurm's client commands are not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=nobody\nSlurmctldHost=localhost(127.0.0.1)\n"
                    "SlurmctldPort=9\nNodeName=localhost CPUs=1 State=UNKNOWN\n"
                    "PartitionName=debug Nodes=localhost Default=YES\n")
    launcher = make_launcher("slurm", env={"SLURM_CONF": str(conf)})
    with pytest.raises(PreflightError, match=r"controller does not answer `scontrol ping` "
                                             r"\(Slurmctld\(primary\) at .* is DOWN\)"):
        preflight(load_campaign("cpu-smoke"), launcher)


def test_framework_runs_are_checked_in_the_interpreter_behind_their_command(tmp_path):
    """NeMo runs start `nemo` from PATH: its `#!` interpreter (here a bare venv) is asked."""
    bare = _venv(tmp_path / "bare", hide=None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nemo = bin_dir / "nemo"
    nemo.write_text(f"#!{bare}\nimport sys\nsys.exit('not reached')\n")
    nemo.chmod(0o755)
    data = {"name": "nemo", "platform": "h100", "device": "cuda", "framework": "nemo",
            "models": [{"name": "llama3-8b", "scale": {"num_layers": 2}}],
            "sweep": {"num_gpus": [2], "seq_len": [2048], "gbs": [8]}}
    launcher = make_launcher("local", env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    with pytest.raises(PreflightError, match=f"torch is not importable by {bare}, which runs"):
        preflight(campaign_from_dict(data), launcher)
