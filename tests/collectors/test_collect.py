"""Campaigns end to end: plan, launch the real workload with torchrun/gloo (and through real
Slurm), append rows, resume after a kill, then train on the rows and predict with them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from advisor.core.errors import ConfigError
from advisor.data.dataset import load
from collectors.campaign import campaign_from_dict, load_campaign, templates
from collectors.plan import acquisition, candidates, predicted
from collectors.runner import run_campaign

TINY = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "num_kv_heads": 2, "vocab_size": 256}


def _campaign(name: str, runs: int, **sweep) -> dict:
    return {"name": name, "platform": "cpu", "device": "cpu", "budget": {"runs": runs},
            "steps": {"warmup": 1, "measure": 2}, "timing": {"timeout_s": 240},
            "telemetry": {"kind": "cpu", "hz": 20}, "strategy": {"kind": "active"},
            "models": [{"name": "llama3-8b", "scale": TINY}],
            "sweep": {"num_gpus": [2], "seq_len": [32], "gbs": [8], **sweep}}


def _write(tmp_path: Path, data: dict) -> Path:
    lines = [f'name = "{data["name"]}"', 'platform = "cpu"', 'device = "cpu"']
    for table in ("budget", "steps", "timing", "telemetry", "strategy"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in data[table].items()]
    lines.append("[[models]]")
    lines.append('name = "llama3-8b"')
    lines.append("scale = { " + ", ".join(f"{k} = {v}" for k, v in TINY.items()) + " }")
    lines.append("[sweep]")
    lines += [f"{k} = {json.dumps(v)}" for k, v in data["sweep"].items()]
    path = tmp_path / f"{data['name']}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_template_plans():
    for name in templates():
        campaign = load_campaign(name)
        assert len(candidates(campaign)) > 0, name


def test_bad_campaigns_name_the_key():
    with pytest.raises(ConfigError, match=r"\[sweep\] tpp is not a knob"):
        campaign_from_dict(_campaign("x", 2, tpp=[1]))
    with pytest.raises(ConfigError, match=r"\[budget\]: unknown key\(s\) run; allowed"):
        campaign_from_dict({**_campaign("x", 2), "budget": {"run": 2}})
    with pytest.raises(ConfigError, match=r"recompute = 'fulll' is not allowed; use none"):
        campaign_from_dict(_campaign("x", 2, recompute=["none", "fulll"]))
    with pytest.raises(ConfigError, match=r"\[telemetry\] kind 'nvmll'"):
        campaign_from_dict({**_campaign("x", 2), "telemetry": {"kind": "nvmll"}})
    with pytest.raises(ConfigError, match="wrong type"):
        campaign_from_dict({**_campaign("x", 2), "budget": {"runs": "lots"}})
    with pytest.raises(ConfigError, match=r"write \[\[models\]\]"):
        campaign_from_dict({**_campaign("x", 2), "models": {"name": "llama3-8b"}})
    with pytest.raises(ConfigError, match="hz must be within 1..100"):
        campaign_from_dict({**_campaign("x", 2), "telemetry": {"hz": 500}})
    with pytest.raises(ConfigError, match="leaves no valid configuration"):
        candidates(campaign_from_dict(_campaign("x", 2, tp=[3])))


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", "", ".hidden", "x" * 65, 7])
def test_campaign_name_stays_inside_the_dataset_and_run_directories(name):
    with pytest.raises(ConfigError, match="must stay inside them"):
        campaign_from_dict({**_campaign("x", 2), "name": name})


def test_acquisition_prefers_wide_bands_far_from_measurements():
    cands = pd.DataFrame({"run_id": ["a", "b", "c"], "model": "m", "recompute": "none",
                          "dp_sharding": "optimizer", "precision": "bf16",
                          "overlap_grad_reduce": True, "overlap_param_gather": True,
                          "tp_comm_overlap": False, "tp": [1, 1, 8], "pp": 1, "cp": 1,
                          "ep": 1, "vp": 1, "mbs": [1, 2, 1], "dp": [8, 8, 1], "seq_len": 32,
                          "gbs": 8, "num_gpus": 8})
    preds = pd.DataFrame({"pred_tokens_per_sec_per_gpu": [100.0, 100.0, 100.0],
                          "pred_tokens_per_sec_per_gpu_p10": [90.0, 50.0, 50.0],
                          "pred_tokens_per_sec_per_gpu_p90": [110.0, 200.0, 200.0]})
    first = acquisition(cands, preds, set())
    assert first.argmax() in (1, 2) and first[0] < first[1]  # the wide bands first
    after = acquisition(cands, preds, {"b"})
    assert after.argmax() == 2  # equally uncertain, but far from what was just measured


def test_planning_skips_what_the_workload_cannot_run():
    campaign = campaign_from_dict(_campaign("skip", 4, tp=[1, 2], cp=[1, 2], mbs=[1, 2]))
    cands = candidates(campaign)
    assert (cands["cp"] == 1).all()
    assert any("cp > 1" in reason for reason in cands.attrs["skipped"])
    gpt = {**_campaign("gpt", 2), "models": [{"name": "gpt3-175b", "scale": TINY}]}
    with pytest.raises(ConfigError, match="non-Llama-style"):
        candidates(campaign_from_dict(gpt))


def test_active_planning_spreads_out_and_prefers_uncertain_configs():
    from advisor.predict.predictor import Predictor

    campaign = campaign_from_dict(_campaign("plan", 4, tp=[1, 2], pp=[1, 2], mbs=[1, 2, 4],
                                            recompute=["none", "full"],
                                            dp_sharding=["none", "optimizer", "full"]))
    cands = candidates(campaign)
    preds = predicted(cands, Predictor.load())
    first = acquisition(cands, preds, set())
    pick = cands.iloc[int(first.argmax())]
    after = acquisition(cands, preds, {pick["run_id"]})
    # Measuring a configuration makes it and its neighbours less attractive.
    assert after[int(first.argmax())] < first[int(first.argmax())]
    same_layout = (cands["tp"] == pick["tp"]) & (cands["pp"] == pick["pp"]) & \
        (cands["mbs"] == pick["mbs"])
    assert (after[same_layout.to_numpy()] <= first[same_layout.to_numpy()] + 1e-12).all()


def test_dry_run_plans_within_budget(tmp_path):
    campaign = campaign_from_dict(_campaign("dry", 3, tp=[1, 2], mbs=[1, 2]))
    report = run_campaign(campaign, launcher=None, dataset=tmp_path / "d.parquet",
                          runs_dir=tmp_path / "runs", dry_run=True)
    assert len(report.planned) == 3 and not report.results
    assert len({s.run_id for s in report.planned}) == 3
    assert not (tmp_path / "d.parquet").exists()


def _collect(*args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "advisor", "collect", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, **kwargs)


@pytest.mark.torch
@pytest.mark.slow
def test_killed_campaign_resumes_without_loss_or_duplicates(tmp_path):
    path = _write(tmp_path, _campaign("resume", 3, tp=[1, 2], mbs=[1, 2],
                                      dp_sharding=["none", "optimizer"]))
    dataset, runs = tmp_path / "rows.parquet", tmp_path / "runs"
    args = ["--campaign", str(path), "--dataset", str(dataset), "--runs-dir", str(runs)]
    first = _collect(*args)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (dataset.exists() and len(load(dataset)) >= 1):
        time.sleep(0.5)
    os.killpg(first.pid, signal.SIGKILL)  # mid-campaign, possibly mid-run
    first.wait()
    kept = load(dataset).set_index("run_id")
    assert 1 <= len(kept) < 3
    again = _collect(*args)  # without --resume: refuses rather than duplicating
    _, err = again.communicate(timeout=120)
    assert again.returncode == 2 and "--resume" in err
    resumed = _collect(*args, "--resume")
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err
    rows = load(dataset)
    assert len(rows) == 3 and rows["run_id"].is_unique
    # The runs measured before the kill were not measured again (append would have replaced
    # them silently): their timestamps and timings are untouched.
    again = rows.set_index("run_id").loc[kept.index]
    assert (again["collected_at"] == kept["collected_at"]).all()
    assert (again["step_time_s"] == kept["step_time_s"]).all()
    assert (rows["status"] == "ok").all(), rows[["status", "notes"]]
    ok = rows.iloc[0]
    assert ok["tokens_per_sec_per_gpu"] > 0 and ok["step_time_s"] > 0
    assert ok["source"] == "campaign" and ok["gpu"] == "cpu" and "@" in ok["model"]


@pytest.mark.torch
def test_failures_are_rows_and_the_campaign_goes_on(tmp_path):
    from collectors.launchers import make_launcher

    data = _campaign("fail", 2, tp=[1], mbs=[1, 2])
    data["timing"] = {"timeout_s": 1}  # torchrun cannot even import torch in a second
    campaign = campaign_from_dict(data)
    report = run_campaign(campaign, launcher=make_launcher("local"),
                          dataset=tmp_path / "f.parquet", runs_dir=tmp_path / "runs")
    rows = load(tmp_path / "f.parquet")
    assert len(report.results) == 2 == len(rows)
    assert set(rows["status"]) == {"timeout"} and rows["notes"].notna().all()


@pytest.mark.torch
@pytest.mark.slow
def test_collect_train_predict_closes_the_loop(tmp_path):
    """Measure on CPU, train on the rows, and see `advisor predict` use them for `cpu`."""
    from advisor.learn.train import train

    data = _campaign("loop", 32, tp=[1, 2], pp=[1, 2], mbs=[1, 2, 4, 8],
                     recompute=["none", "selective", "full"],
                     dp_sharding=["none", "optimizer", "full"])
    data["steps"] = {"warmup": 1, "measure": 1}
    data["telemetry"] = {"kind": "none", "hz": 20}
    path = _write(tmp_path, data)
    dataset = tmp_path / "loop.parquet"
    proc = _collect("--campaign", str(path), "--dataset", str(dataset), "--runs-dir",
                    str(tmp_path / "runs"))
    _, err = proc.communicate(timeout=1800)
    assert proc.returncode == 0, err
    rows = load(dataset)
    assert (rows["status"] == "ok").sum() >= 30, rows["status"].value_counts()
    models = tmp_path / "models"
    report = train([dataset], models)
    assert report.rows_used >= 30
    row = rows[rows["status"] == "ok"].iloc[0]
    args = ["predict", "-m", row["model"], "-p", "cpu", "-g", "2", "--seq-len", "32",
            "--gbs", "8", "--tp", str(row["tp"]), "--pp", str(row["pp"]), "--mbs",
            str(row["mbs"]), "--recompute", row["recompute"], "--dp-sharding",
            row["dp_sharding"], "--json"]
    bundled = json.loads(subprocess.run([sys.executable, "-m", "advisor", *args],
                                        capture_output=True, text=True, check=True).stdout)
    learned = json.loads(subprocess.run([sys.executable, "-m", "advisor", *args, "--models",
                                         str(models)], capture_output=True, text=True,
                                        check=True).stdout)
    assert bundled["learned"]["pred_source"] == "analytical"  # cpu never measured before
    assert learned["learned"]["pred_source"] == "surrogate"
    # Over every measured row (one CPU row alone is noise: these runs share 2 cores with
    # whatever else runs), the surrogate trained on them predicts them better.
    from advisor.predict.predictor import Predictor

    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    measured = ok["tokens_per_sec_per_gpu"].astype(float)
    before = Predictor.load().predict(ok)["pred_tokens_per_sec_per_gpu"] / measured - 1
    after = Predictor.load(models).predict(ok)["pred_tokens_per_sec_per_gpu"] / measured - 1
    assert after.abs().median() < before.abs().median()


def test_cpu_campaign_through_real_slurm(tmp_path, slurm):
    env = slurm
    path = _write(tmp_path, _campaign("slurm", 2, tp=[1, 2]))
    dataset = tmp_path / "s.parquet"
    proc = subprocess.run([sys.executable, "-m", "advisor", "collect", "--campaign", str(path),
                           "--launcher", "slurm", "--dataset", str(dataset), "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=900)
    assert proc.returncode == 0, proc.stderr
    rows = load(dataset)
    assert len(rows) == 2 and (rows["status"] == "ok").all(), rows[["status", "notes"]]
    assert pd.to_numeric(rows["tokens_per_sec_per_gpu"]).gt(0).all()


def test_h200_script_plans_its_sixteen_runs(tmp_path):
    """Its dataset is committed with all 16 runs measured on an H200 (2026-12-04), so the dry
    run plans none and skips 16; against an empty dataset the template plans all 16."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "h200_campaign.sh"
    out = subprocess.run([str(script), "--dry-run", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["campaign"] == "h200-single" and plan["skipped"] == 16 and not plan["planned"]
    fresh = subprocess.run([sys.executable, "-m", "advisor", "collect", "--campaign",
                            "h200-single", "--dry-run", "--json", "--dataset",
                            str(tmp_path / "fresh.parquet")], capture_output=True, text=True,
                           timeout=300)
    assert len(json.loads(fresh.stdout)["planned"]) == 16, fresh.stderr


FAKE_NVML = '''
import sys
sys.path.insert(0, {tests!r})
from fakes import ScriptedTrace
from fakes import fake_pynvml as _fake
from fakes.fake_pynvml import *  # noqa: F403
from fakes.fake_pynvml import FakeGpu

# Two H200s at 650 W and 72 C, clocks capped by the power limit a quarter of the time.
_fake.configure([FakeGpu(ScriptedTrace.constant(650.0, temp_c=72.0, reasons=0)),
                 FakeGpu(ScriptedTrace.constant(650.0, temp_c=72.0, reasons=0x4))])
'''


@pytest.mark.torch
@pytest.mark.slow
def test_nvml_telemetry_reaches_the_dataset_through_the_workload(tmp_path):
    """The H200 script's path (workload → NvmlSampler → dataset row), on CPU, with the fake
    NVML importable as `pynvml` by the workload's processes."""
    fake_dir = tmp_path / "fake_nvml"
    fake_dir.mkdir()
    tests = str(Path(__file__).resolve().parents[1])
    (fake_dir / "pynvml.py").write_text(FAKE_NVML.format(tests=tests))
    data = _campaign("nvml", 1, tp=[1])
    data["telemetry"] = {"kind": "nvml", "hz": 50}
    data["steps"] = {"warmup": 1, "measure": 3}
    path = _write(tmp_path, data)
    dataset = tmp_path / "nvml.parquet"
    env = {**os.environ, "PYTHONPATH": f"{fake_dir}{os.pathsep}"
           f"{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-m", "advisor", "collect", "--campaign", str(path),
                           "--dataset", str(dataset), "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    row = load(dataset).iloc[0]
    assert row["status"] == "ok", row["notes"]
    assert row["avg_power_w"] == pytest.approx(650.0, rel=0.02)
    assert row["max_temp_c"] == pytest.approx(72.0)
    assert row["throttle_frac_power"] == pytest.approx(0.5, abs=0.05)  # one GPU of two
    assert row["telemetry_hz"] == pytest.approx(50, rel=0.3)
    assert row["energy_j"] > 0


STANDIN_PRETRAIN_GPT = '''
import os
import sys

# Stands in for Megatron-LM's pretrain_gpt.py: prints its iteration and memory log lines
# (formats of megatron/training/training.py training_log and utils.py report_memory).
args = sys.argv[1:]
iters = int(args[args.index("--train-iters") + 1])
gbs = int(args[args.index("--global-batch-size") + 1])
assert "--tensor-model-parallel-size" in args and "--mock-data" in args
if os.environ.get("RANK", "0") == "0":
    for i in range(1, iters + 1):
        ms = 900.0 if i == 1 else 500.0
        print(f" [2026-11-30 12:00:{i:02d}.000000] iteration {i:8d}/{iters:8d} | consumed "
              f"samples: {i * gbs:12d} | elapsed time per iteration (ms): {ms:.1f} | "
              f"throughput per GPU (TFLOP/s/GPU): 321.0 | learning rate: 3.000000E-04 | "
              f"global batch size: {gbs:5d} | lm loss: 9.000000E+00 | loss scale: 1.0 | "
              f"grad norm: 1.000 | number of skipped iterations:   0 | number of nan "
              f"iterations:   0 |", flush=True)
        if i == 1:
            print("[Rank 0] (after 1 iterations) memory (MB) | allocated: 1000.0 | max "
                  "allocated: 2000.0 | reserved: 3000.0 | max reserved: 3000.0", flush=True)
'''


@pytest.mark.torch
def test_campaign_drives_megatron_through_its_launch_command_and_log(tmp_path):
    """framework = "megatron": the run is the emitter's command (torchrun pretrain_gpt.py ...)
    from $MEGATRON_LM, and the row comes from parsing Megatron's log. A stand-in
    pretrain_gpt.py plays Megatron-LM (not installable here)."""
    checkout = tmp_path / "Megatron-LM"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text(STANDIN_PRETRAIN_GPT)
    data = {"name": "mlm", "platform": "h100", "device": "cuda", "framework": "megatron",
            "budget": {"runs": 2}, "steps": {"warmup": 1, "measure": 3},
            "timing": {"timeout_s": 240}, "telemetry": {"kind": "none"},
            "strategy": {"kind": "grid"},
            "models": [{"name": "llama3-8b", "scale": {"num_layers": 2}}],
            "sweep": {"num_gpus": [2], "seq_len": [2048], "gbs": [8], "tp": [1, 2]}}
    from collectors.launchers import make_launcher

    campaign = campaign_from_dict(data)
    os.environ["MEGATRON_LM"] = str(checkout)
    try:
        report = run_campaign(campaign, launcher=make_launcher("local"),
                              dataset=tmp_path / "mlm.parquet", runs_dir=tmp_path / "runs")
    finally:
        del os.environ["MEGATRON_LM"]
    rows = load(tmp_path / "mlm.parquet")
    assert len(report.results) == 2 and (rows["status"] == "ok").all(), rows["notes"].tolist()
    assert rows["step_time_s"].tolist() == [0.5, 0.5]  # median after the warm-up iteration
    assert rows["tokens_per_sec_per_gpu"].tolist() == [8 * 2048 / 0.5 / 2] * 2
    assert (rows["framework"] == "megatron").all() and set(rows["tp"]) == {1, 2}
    script = (tmp_path / "runs" / report.planned[0].run_id / "run.sh").read_text()
    assert "torchrun --nproc-per-node=2" in script and "pretrain_gpt.py" in script


def test_run_ids_survive_new_config_fields():
    # A campaign collected before selective-recompute modules, the all-to-all overlap, uneven
    # splits, fine-tuning, the MoE dispatcher knob and hybrid sharding existed resumes with the
    # same ids: fields added later count only when they leave their default.
    import hashlib

    from advisor.core.parallel import PARALLEL_FIELDS, ParallelConfig
    from collectors.plan import run_id

    row = {"model": "llama3-8b", "gpu": "cpu", "num_gpus": 2,
           **ParallelConfig(dp=2, gbs=4).to_dict()}
    before = [f for f in PARALLEL_FIELDS if f not in (
        "recompute_modules", "ep_comm_overlap", "first_stage_layers", "last_stage_layers",
        "finetune", "lora_rank", "lora_targets", "moe_dispatcher", "dp_shard_size",
        "torch_compile")]
    key = {"model": "llama3-8b", "gpu": "cpu", "num_gpus": 2, **{k: row[k] for k in before}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    assert run_id("c", row) == f"c-{digest}"
    assert run_id("c", {**row, "finetune": "lora"}) != run_id("c", row)
    assert run_id("c", {**row, "dp_sharding": "optimizer", "dp_shard_size": 1}) != run_id(
        "c", {**row, "dp_sharding": "optimizer"})
    assert run_id("c", {**row, "ep": 2, "moe_dispatcher": "alltoall"}) != run_id(
        "c", {**row, "ep": 2})


def test_the_bundled_campaign_resumes_with_the_ids_it_was_collected_under():
    """datasets/campaigns/h200-single.parquet (16 runs on one H200, collected before the
    later fields existed): planning its template again gives every run the id it was stored
    under, so a resume measures nothing twice."""
    from collectors.campaign import load_campaign
    from collectors.plan import candidates

    stored = pd.read_parquet(Path(__file__).resolve().parents[2] / "datasets" / "campaigns"
                             / "h200-single.parquet")
    planned = set(candidates(load_campaign("h200-single"))["run_id"])
    assert len(stored) == 16 and set(stored["run_id"]) <= planned


def test_a_campaign_sweeps_the_moe_dispatcher_and_overlap_and_records_what_ran(tmp_path):
    """[sweep] moe_dispatcher and ep_comm_overlap: each value on the layouts that can run it
    (ep > 1), the launch command carries Megatron-Core's flags, and the dataset row records
    the dispatcher and overlap the run used, which training reads back."""
    checkout = tmp_path / "Megatron-LM"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text(STANDIN_PRETRAIN_GPT)
    data = {"name": "moe", "platform": "h100", "device": "cuda", "framework": "megatron",
            "budget": {"runs": 8}, "steps": {"warmup": 1, "measure": 3},
            "timing": {"timeout_s": 240}, "telemetry": {"kind": "none"},
            "strategy": {"kind": "grid"},
            "models": [{"name": "qwen3-30b-a3b"}],
            "sweep": {"num_gpus": [2], "seq_len": [2048], "gbs": [8], "ep": [1, 2],
                      "moe_dispatcher": ["alltoall", "deepep"],
                      "ep_comm_overlap": [False, True]}}
    from collectors.launchers import make_launcher

    campaign = campaign_from_dict(data)
    planned = candidates(campaign)
    assert (planned["ep"] == 2).all()   # a named dispatcher needs expert parallelism
    assert set(zip(planned["moe_dispatcher"], planned["ep_comm_overlap"], strict=True)) == {
        ("alltoall", False), ("alltoall", True), ("deepep", False), ("deepep", True)}
    os.environ["MEGATRON_LM"] = str(checkout)
    try:
        report = run_campaign(campaign, launcher=make_launcher("local"),
                              dataset=tmp_path / "moe.parquet", runs_dir=tmp_path / "runs")
    finally:
        del os.environ["MEGATRON_LM"]
    rows = load(tmp_path / "moe.parquet")
    assert (rows["status"] == "ok").all(), rows["notes"].tolist()
    assert sorted(zip(rows["moe_dispatcher"], rows["ep_comm_overlap"], strict=True)) == [
        ("alltoall", False), ("alltoall", True), ("deepep", False), ("deepep", True)]
    for spec in report.planned:
        script = (tmp_path / "runs" / spec.run_id / "run.sh").read_text()
        deepep = spec.config["moe_dispatcher"] == "deepep"
        assert ("--moe-token-dispatcher-type flex" in script) == deepep
        assert ("--moe-token-dispatcher-type alltoall" in script) == (not deepep)
        assert ("--overlap-moe-expert-parallel-comm" in script) == spec.config["ep_comm_overlap"]
    from advisor.learn.fit import reference_from_frame

    ref = reference_from_frame(rows)
    assert len(ref.rows) == 4, ref.skipped
    configs = pd.concat([frame for _, frame in ref.groups.values()])
    assert set(zip(configs["moe_dispatcher"], configs["ep_comm_overlap"], strict=True)) == {
        ("alltoall", False), ("alltoall", True), ("deepep", False), ("deepep", True)}
    with pytest.raises(ConfigError, match="moe_dispatcher = 'allgather' is not allowed"):
        campaign_from_dict({**data, "sweep": {**data["sweep"], "moe_dispatcher": ["allgather"]}})
