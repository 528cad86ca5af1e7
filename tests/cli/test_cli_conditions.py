"""Where and how a job runs, end to end: the GPU power limit, the room's inlet, degraded nodes."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()
ONE = ["-m", "70b", "-p", "h200", "-g", "64", "--tp", "4", "--pp", "2", "--mbs", "1", "--json"]


def run(*args):
    return runner.invoke(app, list(args))


def _power(*extra) -> dict:
    r = run("predict", *ONE, *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_power_limit_lowers_average_power_and_raises_the_step():
    board, capped = _power(), _power("--power-limit-w", "450")
    assert capped["power"]["power_limit_w"] == 450 and board["power"]["power_limit_w"] == 700
    assert capped["power"]["avg_power_w"] <= 450 < board["power"]["avg_power_w"]
    assert capped["step"]["step_time_s"] > board["step"]["step_time_s"]
    assert capped["power"]["energy_j_per_token"] < board["power"]["energy_j_per_token"]


def test_explain_takes_the_power_limit():
    r = run("explain", *ONE[:-1], "--power-limit-w", "450")
    assert r.exit_code == 0, r.output
    assert "against the 450 W limit" in r.output


def test_a_warmer_room_raises_temperatures_and_the_thermal_loss():
    cool, warm = _power(), _power("--inlet-c", "35")
    for key in ("temp_front_c", "temp_rear_c", "peak_temp_c", "throttle_risk"):
        assert warm["power"][key] > cool["power"][key], key
    assert warm["power"]["thermal_loss"] > cool["power"]["thermal_loss"]


def test_platforms_get_their_own_temperatures():
    rear = {p: json.loads(run("predict", *ONE[:2], "-p", p, *ONE[4:]).stdout)["power"]
            ["temp_rear_c"] for p in ("h100", "b200", "mi300x")}
    assert len({round(t, 1) for t in rear.values()}) == 3, rear


def test_degraded_nodes_slow_the_whole_job():
    healthy = _power()
    one = _power("--degraded-nodes", "1", "--degraded-power-w", "200")
    assert one["power"]["degraded_loss"] > 0.2
    assert one["step"]["step_time_s"] > 1.3 * healthy["step"]["step_time_s"]


def test_recommend_routes_around_degraded_nodes():
    r = run("recommend", "-m", "8b", "-g", "64", "-p", "h100", "--degraded-nodes", "1",
            "--degraded-power-w", "200", "--json")
    assert r.exit_code == 0, r.output
    advice = json.loads(r.stdout)["degraded_nodes"]
    assert advice["healthy_gpus"] == 56 and advice["leave_out"] is True
    assert advice["without_tokens_per_sec"] > advice["with_tokens_per_sec"]


def test_predict_input_reads_conditions_per_row(tmp_path):
    rows = tmp_path / "runs.csv"
    rows.write_text("model,gpu,num_gpus,seq_len,gbs,tp,pp,mbs,power_limit_w,inlet_c\n"
                    "llama3-70b,h200,64,8192,256,4,2,1,,\n"
                    "llama3-70b,h200,64,8192,256,4,2,1,450,\n"
                    "llama3-70b,h200,64,8192,256,4,2,1,,35\n"
                    "llama3-70b,h200,64,8192,256,4,2,1,9000,\n")
    r = run("predict", "--input", str(rows), "--json", "--analytical")
    assert r.exit_code == 0, r.output
    board, capped, warm, bad = json.loads(r.stdout)
    assert capped["pred_avg_power_w"] <= 450 < board["pred_avg_power_w"]
    assert warm["pred_throttle_risk"] > board["pred_throttle_risk"]
    assert "power_limit_w" in bad["pred_error"] and not board["pred_error"]
    # the command line's limit applies where the row leaves it empty
    r = run("predict", "--input", str(rows), "--json", "--analytical", "--power-limit-w", "500")
    first, second = json.loads(r.stdout)[:2]
    assert first["pred_avg_power_w"] <= 500 and second["pred_avg_power_w"] <= 450


def test_energy_objective_searches_the_power_limit():
    r = run("recommend", "-m", "70b", "-g", "64", "-p", "h200", "--objective", "energy",
            "--json", "--top", "1", "--emit", "megatron")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    points = data["power_limit_tradeoff"]
    limits = [p["power_limit_w"] for p in points]
    assert limits[0] == 700 and limits == sorted(limits, reverse=True) and len(limits) >= 5
    speeds = [p["tokens_per_sec_per_gpu"] for p in points]
    assert speeds == sorted(speeds, reverse=True)        # a lower limit is never faster
    chosen = data["power_limit_w"]
    best = min(points, key=lambda p: p["energy_j_per_token"])
    assert chosen == best["power_limit_w"] < 700
    assert data["choices"][0]["predicted"]["avg_power_w"] <= chosen
    assert f"nvidia-smi -pl {chosen:.0f}" in data["launch"]["command"]


def test_throughput_objective_keeps_the_board_limit():
    r = run("recommend", "-m", "70b", "-g", "64", "-p", "h200", "--json", "--top", "1")
    data = json.loads(r.stdout)
    assert data["power_limit_w"] == 700 and data["power_limit_tradeoff"] == []


@pytest.mark.parametrize("flags, words", [
    (["--power-limit-w", "9000"], "power_limit_w"),
    (["--power-limit-w", "50"], "power_limit_w"),
    (["--inlet-c", "75"], "inlet_c"),
    (["--degraded-nodes", "2"], "degraded"),
])
def test_impossible_conditions_are_one_line_errors(flags, words):
    r = run("predict", *ONE, *flags)
    assert r.exit_code == 2 and words in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_emitted_power_limit_is_only_a_comment(tmp_path):
    # the emitted text runs nothing but the framework: the power-limit line is a comment
    r = run("recommend", "-m", "8b", "-g", "8", "-p", "h100", "--power-limit-w", "500",
            "--emit", "torchtitan", "--json", "--top", "1")
    command = json.loads(r.stdout)["launch"]["command"]
    assert "# " in command and "nvidia-smi -pl 500" in command
    assert all(line.startswith("#") for line in command.splitlines() if "nvidia-smi" in line)
    assert subprocess.run(["bash", "-n"], input=command, text=True).returncode == 0


def test_node_power_bounds_gpus_and_host():
    r = run("recommend", "-m", "70b", "-g", "64", "-p", "h200", "--json", "--top", "3",
            "--max-node-power-w", "7500")
    assert r.exit_code == 0, r.output
    for choice in json.loads(r.stdout)["choices"]:
        assert 8 * choice["predicted"]["avg_power_w"] + 2206 <= 7500
    r = run("recommend", "-m", "70b", "-g", "64", "-p", "mi300x", "--max-node-power-w", "7500")
    assert r.exit_code == 2 and "host_power_w" in r.stderr

