import json
import re

import pytest
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()
JOB = ["-m", "70b", "-g", "64", "-p", "h200"]


def run(*args):
    return runner.invoke(app, list(args))


def test_recommend_table_explains_and_shows_fronts():
    r = run("recommend", *JOB, "--top", "3")
    assert r.exit_code == 0, r.output
    for text in ("Recommended configurations", "tok/s/GPU", "#1 ", "Trade-offs against #1",
                 "Pareto front", "exhaustive search"):
        assert text in r.stdout


def test_recommend_json_has_everything_a_scheduler_needs():
    r = run("recommend", *JOB, "--top", "2", "--json", "--emit", "megatron")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["num_gpus"] == 64 and len(data["choices"]) == 2
    c = data["choices"][0]
    for key in ("tokens_per_sec_per_gpu", "tokens_per_sec_per_gpu_p10", "mfu", "memory_gb",
                "avg_power_w", "peak_power_w", "energy_j_per_token", "throttle_risk"):
        assert c["predicted"][key] is not None
    assert c["config"]["tp"] * c["config"]["pp"] * c["config"]["cp"] * c["config"]["dp"] == 64
    assert f"--tensor-model-parallel-size {c['config']['tp']}" in data["launch"]["command"]
    assert data["pareto_energy"] and c["reasons"]


@pytest.mark.parametrize("emitter, flag", [("megatron", "--micro-batch-size"),
                                           ("nemo", "trainer.strategy.tensor_model_parallel_size"),
                                           ("torchtitan", "--parallelism.tensor_parallel_degree")])
def test_recommend_emits_launch_commands(emitter, flag):
    r = run("recommend", "-m", "8b", "-g", "8", "-p", "h100", "--top", "1", "--emit", emitter,
            "--dp-sharding", "full")
    assert r.exit_code == 0, r.output
    assert flag in r.stdout


def test_recommend_emit_torchtitan_ranks_what_torchtitan_runs():
    """--emit torchtitan searches with torch's interleaving rule: on PP 6 with 128
    micro-batches Megatron's #1 interleaves (VP 21, in Megatron-Core's groups), which torch's
    21 rounds cannot; torchtitan's #1 is the layout its command launches, with no fallback."""
    job = ["-m", "405b", "-g", "384", "-p", "h200", "--gbs", "1024", "--pp", "6", "--tp", "8",
           "--mbs", "1", "--top", "1", "--json", "--emit"]
    megatron = json.loads(run("recommend", *job, "megatron").stdout)["choices"][0]["config"]
    assert megatron["vp"] > 1
    r = run("recommend", *job, "torchtitan")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["launch"]["note"] == "" and data["choices"][0]["config"]["vp"] == 1
    assert "--parallelism.pipeline_parallel_schedule 1F1B" in data["launch"]["command"]


def test_recommend_constraints_and_pins_from_flags():
    pinned = [*JOB, "--json", "--tp", "8", "--no-overlap", "--memory-margin", "0.1"]
    free = json.loads(run("recommend", *pinned, "--top", "50").stdout)["choices"]
    # limits between the pinned layouts' lowest and highest predicted average and peak power
    for flag, key in (("--max-power-w", "avg_power_w"), ("--max-peak-power-w", "peak_power_w")):
        values = sorted(c["predicted"][key] for c in free)
        limit = f"{(values[0] + values[-1]) / 2:.1f}"
        assert values[0] < float(limit) < values[-1]
        r = run("recommend", *pinned, flag, limit, "--top", "2")
        assert r.exit_code == 0, r.output
        for c in json.loads(r.stdout)["choices"]:
            assert c["config"]["tp"] == 8 and not c["config"]["tp_comm_overlap"]
            assert c["predicted"][key] <= float(limit)


@pytest.mark.plot
def test_recommend_plot_writes_png(tmp_path):
    out = tmp_path / "front.png"
    r = run("recommend", *JOB, "--plot", str(out), "--top", "2")
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {out}" in r.stderr  # stderr: stdout may be JSON a script reads


def test_recommend_why_not_this_layout():
    r = run("recommend", *JOB, "--layout", "tp4 pp4 vp5 cp2")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.stdout.splitlines() if x.startswith("Why not this layout?"))
    assert re.search(r"tp4 pp4 vp5 cp2 (ranks #\d+|is not a candidate)", line), line
    data = json.loads(run("recommend", *JOB, "--layout", "tp4 pp4 vp5 cp2", "--json").stdout)
    assert data["layout"]["layout"] == {"tp": 4, "pp": 4, "vp": 5, "cp": 2}
    assert data["risk"] == "expected" and data["ranking"][0].startswith("Ranked on the expected")
    bad = run("recommend", *JOB, "--layout", "tensor4")
    assert bad.exit_code == 2 and "--layout: cannot read 'tensor4'" in bad.stderr


def test_piped_tables_keep_every_column():
    # Rich assumes 80 columns off a terminal and cuts tables with "…"; advisor does not.
    r = run("recommend", *JOB, "--top", "2")
    assert r.exit_code == 0 and "…" not in r.stdout
    assert any(len(line) > 80 for line in r.stdout.splitlines())


@pytest.mark.parametrize("args, message", [
    (["-m", "405b", "-g", "8", "-p", "h100"], "the smallest GPU count that fits is"),
    ([*JOB, "--tp", "3"], "--tp 3 is not valid"),
    ([*JOB, "--pp", "1", "--vp", "2"], "--vp 2 is not valid"),
    ([*JOB, "--dp-sharding", "full", "--pp", "2"], "is not valid"),
    ([*JOB, "--max-power-w", "50"], "--max-power-w 50: the lowest predicted average power"),
    ([*JOB, "--max-peak-power-w", "50"], "--max-peak-power-w 50: the lowest predicted peak"),
    ([*JOB, "--power-limit-w", "5000"], "power_limit_w"),
    ([*JOB, "--inlet-c", "90"], "inlet_c"),
    ([*JOB, "--degraded-nodes", "1"], "degraded"),
    ([*JOB, "--emit", "deepspeed"], "--emit 'deepspeed' is unknown"),
    ([*JOB, "--objective", "speed"], "objective 'speed' is unknown"),
    ([*JOB, "--search", "exhaustive", "--storage", "x.log"], "--storage"),
    ([*JOB, "--tp", "8", "--pp", "4", "--dp", "4", "--no-overlap"],
     "--dp 4 is not valid for llama3-70b on 64 GPUs (seq 8192, gbs 256) with --tp 8, --pp 4"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run("recommend", *args)
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert r.stderr.count("\n") == 1


def test_library_messages_name_parameters_and_the_cli_its_flags():
    from advisor.cli.common import as_flags
    from advisor.cli.recommend_cmd import recommend

    text = "`max_power_w` 50; `overlap` on; `dp_sharding` full; `catalog` stays; `nope`"
    assert as_flags(text, recommend) == ("--max-power-w 50; --overlap on; --dp-sharding full; "
                                         "`catalog` stays; `nope`")


def test_backquotes_in_a_users_name_survive_the_error_line():
    r = run("predict", "--model", "`x`", "--gpus", "8", "-p", "h100")
    assert r.exit_code == 2
    assert "'`x`'" in r.stderr, r.stderr


def test_every_knob_can_be_pinned_with_its_declared_flag():
    from advisor.cli.common import command_flags
    from advisor.cli.recommend_cmd import recommend
    from advisor.core.knobs import KNOBS

    flags = command_flags(recommend)
    # (a boolean's pair, --overlap/--no-overlap, is named by its first flag)
    assert {k.name: k.flag.split("/")[0] for k in KNOBS} == {k.name: flags[k.name]
                                                            for k in KNOBS}
    helped = run("recommend", "--help")
    assert "Pin the tensor-parallel size" in helped.stdout


def test_compare_json_and_table():
    r = run("compare", "-m", "70b", "--platforms", "h200:32,h100:64", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {s["label"] for s in data["sides"]} == {"32 × h200", "64 × h100"}
    assert data["winner"] in {s["label"] for s in data["sides"]} and data["verdict"]
    r = run("compare", "-m", "70b", "--platforms", "h200:32,h100:64")
    assert r.exit_code == 0 and "Verdict" in r.stdout


def test_compare_bad_sides_exit_2():
    r = run("compare", "-m", "70b", "--platforms", "h200")
    assert r.exit_code == 2 and "PLATFORM:GPUS" in r.stderr


def test_emit_falls_back_to_the_best_expressible_choice():
    # Kimi-K2's 61 layers: advisor's best pipelines split unevenly, which Megatron's flags
    # cannot express without an explicit layout; the launch command is for the best that can.
    r = run("recommend", "-m", "kimi-k2", "-g", "256", "-p", "h100", "--top", "5", "--json",
            "--emit", "megatron")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    launch = data["launch"]
    if launch["note"].startswith("layout #"):
        # None of the shown five: the best expressible layout further down the ranking.
        assert int(launch["note"].split()[1].lstrip("#")) > 5
        assert "do not split evenly" in launch["note"]
        pp = int(re.search(r"--pipeline-model-parallel-size (\d+)", launch["command"])[1])
        assert any((61 + extra) % pp == 0 for extra in range(3))
        return
    if launch["note"]:
        rank = int(launch["note"].split(",")[0].lstrip("#"))
        assert rank > 1 and "do not split evenly" in launch["note"]
        chosen = data["choices"][rank - 1]["config"]
    else:
        chosen = data["choices"][0]["config"]
    assert f"--pipeline-model-parallel-size {chosen['pp']}" in launch["command"]


def test_emit_refusing_everything_still_prints_the_recommendation():
    r = run("recommend", "-m", "qwen3-8b", "-g", "1", "-p", "mi300x", "--emit", "torchtitan",
            "--top", "2")
    assert r.exit_code == 2
    assert "Recommended configurations" in r.stdout
    # One reason for every layout: that sentence alone, not a list of ranks.
    assert r.stderr.startswith("error: --emit torchtitan: torchtitan 0.3.0 has no recipe for "
                               "qwen3-8b") and "#1" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.endswith("instead.\n")


def test_gpu_count_that_breaks_divisibility_is_not_called_a_memory_problem():
    r = run("recommend", "-m", "8b", "-g", "37", "-p", "h100")
    assert r.exit_code == 2 and "no valid layout" in r.stderr and "try --gbs 259" in r.stderr


def test_compare_cost_objective_and_prices():
    r = run("compare", "-m", "70b", "--platforms", "h200:32,h100:64", "--objective", "cost",
            "--gpu-hour-price", "h100=2,h200=3")
    assert r.exit_code == 0, r.output
    assert "$/Mtok" in r.stdout and "Cost: " in r.stdout and "(3.00)" in r.stdout
    bad = run("compare", "-m", "70b", "--platforms", "mi300x:32,h100:64", "--objective", "cost")
    assert bad.exit_code == 2 and "--gpu-hour-price mi300x=" in bad.stderr
