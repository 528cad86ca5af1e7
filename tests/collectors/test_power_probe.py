"""The power probe's code path, run for real on the CPU (the GPU run is in
datasets/probes/h200-power); and the committed H200 measurements read back as the probe wrote
them."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from collectors.power_probe import main, plan

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "datasets" / "probes" / "h200-power"


def test_plan_duty_cycles_run_at_least_three_periods():
    for phase in plan():
        if phase.burst_s:
            assert phase.seconds >= 3 * (phase.burst_s + phase.gap_s) - 1e-9
    assert plan(0.5)[1].seconds == plan()[1].seconds / 2


def test_probe_writes_every_phase_on_cpu(tmp_path, capsys):
    pytest.importorskip("torch")
    main(["--out", str(tmp_path), "--device", "cpu", "--scale", "0.005"])
    facts = json.loads((tmp_path / "device.json").read_text())
    kernels = pd.read_csv(tmp_path / "kernels.csv.gz")
    timed = {p["name"] for p in facts["phases"] if p["kernel"]}
    assert set(kernels.phase) == timed
    assert (kernels.duration_s > 0).all()
    duty = kernels[kernels.phase == "duty-2000ms-2000ms"]
    assert duty.burst.nunique() >= 1
    samples = pd.read_csv(tmp_path / "samples.csv.gz")
    assert len(samples) > 0 and samples.timestamp_s.is_monotonic_increasing
    with gzip.open(tmp_path / "driver_samples.csv.gz", "rt") as f:
        assert f.readline().strip() == "column,timestamp_s,value"
    assert [s[0] for s in facts["spans"]] == [p["name"] for p in facts["phases"]]
    assert "warm_kernel_s" in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_committed_h200_probe_is_complete():
    facts = json.loads((H200 / "device.json").read_text())
    assert facts["name"] == "NVIDIA H200" and facts["power_limit_w"] == 700.0
    kernels = pd.read_csv(H200 / "kernels.csv.gz")
    assert set(kernels.phase) == {p["name"] for p in facts["phases"] if p["kernel"]}
    samples = pd.read_csv(H200 / "samples.csv.gz")
    assert samples.power_instant_w.notna().mean() > 0.99
