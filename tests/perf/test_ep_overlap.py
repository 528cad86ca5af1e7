"""MoE all-to-all overlap (Megatron-Core `--overlap-moe-expert-parallel-comm`): its rules, what
it hides, what it holds in memory, and how the CLI, CSVs, pins and emitters take it."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.core.errors import ConfigError
from advisor.core.parallel import ParallelConfig, make_config, make_job
from advisor.core.space import validate
from advisor.explain.emit.torchtitan import torchtitan_args
from advisor.perf.memory import estimate_memory
from advisor.predict.predictor import Predictor
from advisor.search.recommend import pinned_space

H100 = catalog.load_platform("h100")
QWEN_30B = catalog.load_model("qwen3-30b-a3b")
QWEN_235B = catalog.load_model("qwen3-235b-a22b")


def _breakdown(model, config, job):
    return Predictor(None).predict([(config, job)], breakdown=True).iloc[0]


def test_megatron_cores_rules():
    with pytest.raises(ConfigError, match="needs ep > 1"):
        ParallelConfig(ep_comm_overlap=True)
    with pytest.raises(ConfigError, match="needs a virtual pipeline"):
        ParallelConfig(ep=8, etp=1, pp=2, dp=8, gbs=64, ep_comm_overlap=True)
    with pytest.raises(ConfigError, match="full recompute"):
        ParallelConfig(ep=8, etp=1, dp=8, gbs=64, recompute="full", ep_comm_overlap=True)
    ParallelConfig(ep=8, etp=1, pp=2, vp=2, dp=8, gbs=64, ep_comm_overlap=True)
    # DeepSeek-V3 carries one MTP layer: Megatron-Core then wants a pipeline.
    v3 = catalog.load_model("deepseek-v3")
    job = make_job(v3, H100, num_gpus=256)
    flat = make_config(job, tp=8, ep=32).replace(ep_comm_overlap=True)
    with pytest.raises(ConfigError, match="MTP layer needs pp > 1"):
        validate(flat, v3, H100, num_gpus=256)


def test_overlap_hides_the_all_to_all_and_holds_one_more_micro_batch():
    job = make_job(QWEN_30B, H100, num_gpus=8, seq_len=4096, gbs=64)
    off = make_config(job, tp=1, ep=8, mbs=1)
    on = off.replace(ep_comm_overlap=True)
    a, b = _breakdown(QWEN_30B, off, job), _breakdown(QWEN_30B, on, job)
    assert b["analytical_ep_comm_s"] < a["analytical_ep_comm_s"]
    assert b["analytical_step_time_s"] < a["analytical_step_time_s"]
    # What it hides comes off the step before the power cap (less the little the gradient
    # sync of the last micro-batch no longer hides under the compute the all-to-all now uses);
    # without the exposed gaps the GPU computes more of the step and the cap takes back a
    # little of it (overlap heats).
    def unthrottled(x):
        return x["analytical_step_time_s"] - x["analytical_throttle_s"]
    assert unthrottled(a) - unthrottled(b) == pytest.approx(
        a["analytical_ep_comm_s"] - b["analytical_ep_comm_s"], rel=1e-3)
    assert b["analytical_throttle_s"] >= a["analytical_throttle_s"]
    # PP 1: the forward of one micro-batch runs beside the backward of the last, so two
    # micro-batches' activations are held, not one (plus what does not scale with them: the
    # embedding output, the loss's logits).
    mem_off = estimate_memory(QWEN_30B, parallel=off, platform=H100).activations_bytes
    mem_on = estimate_memory(QWEN_30B, parallel=on, platform=H100).activations_bytes
    assert 1.5 * mem_off < mem_on < 2 * mem_off


def test_nvidias_qwen3_235b_h100_recipe_is_predicted_closer_with_the_overlap_it_runs():
    # Megatron-MoE-ModelZoo best_practice/qwen3/run_h100_235b.sh: TP2 PP8 VPP4 EP32, MBS1,
    # GBS 2048, seq 4096, BF16, selective recompute of moe_act and layernorm, A2A_OVERLAP=1;
    # the script states 320 TFLOPS per GPU.
    measured_tflops = 320.0
    job = make_job(QWEN_235B, H100, num_gpus=256, seq_len=4096, gbs=2048)
    recipe = make_config(job, tp=2, pp=8, vp=4, ep=32, mbs=1, recompute="selective").replace(
        recompute_modules="moe_act layernorm")
    without = _breakdown(QWEN_235B, recipe, job)["pred_tflops_per_gpu"]
    with_overlap = _breakdown(QWEN_235B, recipe.replace(ep_comm_overlap=True), job)
    assert with_overlap["pred_fits"]
    assert abs(with_overlap["pred_tflops_per_gpu"] / measured_tflops - 1) < \
        abs(without / measured_tflops - 1)


def test_the_search_turns_it_on_only_where_pinned_and_the_layout_can_run_it():
    job = make_job(QWEN_30B, H100, num_gpus=32, seq_len=4096)
    pinned = pinned_space(job, {"ep_comm_overlap": True})
    assert len(pinned) > 0 and pinned["ep_comm_overlap"].all()
    assert (pinned["ep"] > 1).all()
    assert ((pinned["pp"] == 1) | (pinned["vp"] > 1)).all()
    assert (pinned["recompute"] != "full").all()
    assert not pinned_space(job, {})["ep_comm_overlap"].any()


def test_torchtitan_refuses_it():
    job = make_job(QWEN_30B, H100, num_gpus=32)
    config = make_config(job, tp=2, ep=8, etp=1).replace(ep_comm_overlap=True)
    with pytest.raises(ConfigError, match="ep_comm_overlap, Megatron-Core.*has no torchtitan"):
        torchtitan_args(config, job)


runner = CliRunner()


def test_cli_and_csv_take_it_and_refuse_what_cannot_run(tmp_path):
    args = ["predict", "-m", "qwen3-30b-a3b", "-g", "8", "-p", "h100", "--ep", "8",
            "--analytical"]
    assert runner.invoke(app, [*args, "--ep-comm-overlap"]).exit_code == 0
    bad = runner.invoke(app, [*args, "--pp", "2", "--ep", "4", "--ep-comm-overlap"])
    assert bad.exit_code == 2
    lines = [ln for ln in bad.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "needs a virtual pipeline" in lines[0], bad.output
    src = tmp_path / "runs.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs,ep,ep_comm_overlap\n"
                   "qwen3-30b-a3b,h100,8,4096,64,8,\n"
                   "qwen3-30b-a3b,h100,8,4096,64,8,true\n"
                   "qwen3-30b-a3b,h100,8,4096,64,8,maybe\n")
    dst = tmp_path / "out.csv"
    r = runner.invoke(app, ["predict", "--input", str(src), "--output", str(dst),
                            "--analytical"])
    assert r.exit_code == 0, r.output
    out = pd.read_csv(dst, keep_default_na=False)
    speed = pd.to_numeric(out["pred_tokens_per_sec_per_gpu"], errors="coerce")
    assert speed[1] > speed[0]      # the error row leaves the column text: compare numbers
    # Recompute unknown: the least that fits, never full (it cannot run beside the overlap).
    assert "recompute=full" not in out.loc[1, "pred_assumed"]
    assert "use true or false" in out.loc[2, "pred_error"]


def test_recommend_says_what_the_overlap_would_do_for_its_pick_unless_pinned():
    from advisor.search.recommend import recommend

    job = make_job(QWEN_235B, H100, num_gpus=256, seq_len=4096, gbs=2048)
    predictor = Predictor.load()
    rec = recommend(job, predictor=predictor, top=1)
    offer = [line for line in rec.tradeoffs if line.startswith("--ep-comm-overlap")]
    assert len(offer) == 1 and " would add " in offer[0], rec.tradeoffs
    pinned = recommend(job, predictor=predictor, top=1, pins={"ep_comm_overlap": False})
    assert not any(line.startswith("--ep-comm-overlap") for line in pinned.tradeoffs)
    dense = recommend(make_job(catalog.load_model("llama3-8b"), H100, num_gpus=8),
                      predictor=predictor, top=1)
    assert not any(line.startswith("--") for line in dense.tradeoffs)


def test_a_schedulers_table_from_before_the_switch_predicts_without_it():
    from advisor.core.table import Table

    job = make_job(QWEN_30B, H100, num_gpus=8)
    config = make_config(job, tp=1, ep=8)
    frame = pd.DataFrame([config.to_dict()])
    old = Table.from_frame(frame.drop(columns=["ep_comm_overlap", "recompute_modules"]))
    predictor = Predictor(None)
    assert predictor.predict_table(QWEN_30B, H100, old)["pred_step_time_s"][0] == \
        pytest.approx(predictor.predict_table(QWEN_30B, H100, Table.from_frame(frame))
                      ["pred_step_time_s"][0])
