"""LoRA and full fine-tuning as a job kind: what trains, what the backward skips, and the MLPerf
Training runs that measured it (datasets/reference/power/mlperf_power.csv)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.core.errors import ConfigError
from advisor.core.parallel import ParallelConfig, make_config, make_job
from advisor.explain.emit import emit
from advisor.perf.analytical import analytical_table, predict_config
from advisor.perf.finetune import adapter_params_per_layer, stage_adapter_params
from advisor.perf.layout import stage_layout
from advisor.perf.node_energy import load_runs, predict_runs, validation_rows
from advisor.predict.predictor import Predictor

runner = CliRunner()


def _mlperf_h100(finetune: str, **changes):
    """The MLPerf v4.1 Dell layout: Llama-2-70B, 64 H100, TP4 CP2, GBS 8, seq 8192, FP8."""
    model, platform = catalog.load_model("llama2-70b"), catalog.load_platform("h100")
    job = make_job(model, platform, num_gpus=64, seq_len=8192, gbs=8,
                   **({"precision": "fp8"} | changes), finetune=finetune)
    return model, platform, make_config(job, tp=4, cp=2)


def test_adapters_on_fused_qkv_and_output_projection():
    model = catalog.load_model("llama2-70b")
    h, q, kv = model.hidden_size, model.q_dim, model.kv_dim
    per_layer = adapter_params_per_layer(model, 16, "attention")
    assert per_layer["attention"] == 16 * ((h + q + 2 * kv) + (q + h))
    assert per_layer["mlp"] == 0
    wider = adapter_params_per_layer(model, 16, "all-linear")
    assert wider["mlp"] == 16 * ((h + 2 * model.ffn_hidden_size) + (model.ffn_hidden_size + h))
    layout = stage_layout(model, 1, 1)
    total = stage_adapter_params(model, layout, ranks=np.array([16]),
                                 targets=np.array(["attention"])).sum()
    assert total == model.num_layers * per_layer["attention"]   # 44.6 M for rank 16


def test_lora_trains_only_the_adapters():
    model, platform, lora = _mlperf_h100("lora")
    _, _, pretrain = _mlperf_h100("none")
    a, b = predict_config(model, platform, lora), predict_config(model, platform, pretrain)
    # the frozen base keeps its weights in FP8 only (1 B/param), where FP8 pre-training with a
    # sharded optimizer gathers FP8 weights and their transpose (2 B/param); gradients and Adam
    # state shrink to the adapters'
    adapters = 80 * adapter_params_per_layer(model, 16, "attention")["attention"] / 4
    assert a.memory.weights_bytes == pytest.approx(b.memory.weights_bytes / 2 + 2 * adapters,
                                                   rel=1e-3)
    assert a.memory.gradients_bytes < 0.01 * b.memory.gradients_bytes
    assert a.memory.optimizer_bytes < 0.01 * b.memory.optimizer_bytes
    # frozen MLP GEMMs keep no inputs, and the activation function's input is stored in FP8
    assert a.memory.activations_bytes < 0.75 * b.memory.activations_bytes
    _, _, bf16_lora = _mlperf_h100("lora", precision="bf16")
    _, _, bf16 = _mlperf_h100("none", precision="bf16")
    c, d = predict_config(model, platform, bf16_lora), predict_config(model, platform, bf16)
    assert c.memory.weights_bytes >= d.memory.weights_bytes   # BF16: the same 2 B/param
    assert c.memory.activations_bytes < d.memory.activations_bytes
    # no weight-gradient GEMMs: weight GEMMs run 2 × forward instead of 3 ×
    table = analytical_table(model, platform, pd.DataFrame([lora.to_dict(),
                                                            pretrain.to_dict()]))
    assert table["gemm_s"].iloc[0] == pytest.approx(table["gemm_s"].iloc[1] * 2 / 3, rel=0.02)
    assert a.step.dp_comm_s < b.step.dp_comm_s
    assert a.step.optimizer_s < 0.01 * b.step.optimizer_s
    assert a.step.step_time_s < b.step.step_time_s
    # model FLOPs count the work done (no weight gradients), so MFU stays comparable
    assert a.step.tflops_per_gpu < a.step.tokens_per_sec_per_gpu * 3 * 2 * 70e9 / 1e12


def test_full_finetuning_is_pretraining_work():
    model, platform, full = _mlperf_h100("full")
    _, _, pretrain = _mlperf_h100("none")
    a, b = predict_config(model, platform, full), predict_config(model, platform, pretrain)
    assert a.step.step_time_s == b.step.step_time_s
    assert a.memory.total_bytes == b.memory.total_bytes


def test_finetune_values_are_checked():
    with pytest.raises(ConfigError, match="finetune 'qlora' is unknown"):
        ParallelConfig(finetune="qlora")
    with pytest.raises(ConfigError, match="lora_targets 'mlp' is unknown"):
        ParallelConfig(finetune="lora", lora_targets="mlp")
    with pytest.raises(ConfigError, match="lora_rank must be a positive whole number"):
        ParallelConfig(finetune="lora", lora_rank=0)


def test_predictor_keeps_lora_rows_analytical():
    _, _, lora = _mlperf_h100("lora")
    model, platform, pretrain = _mlperf_h100("none")
    job = make_job(model, platform, num_gpus=64, seq_len=8192, gbs=8, precision="fp8")
    out = Predictor.load().predict([(lora, job), (pretrain, job)])
    assert out["pred_source"].iloc[0] == "analytical"     # no measured LoRA run trained it
    assert out["pred_error"].iloc[0] == ""


@pytest.mark.parametrize("kind", ["megatron", "torchtitan"])
def test_emitters_without_adapters_refuse_lora_and_say_why(kind):
    model, platform, lora = _mlperf_h100("lora")
    job = make_job(model, platform, num_gpus=64, seq_len=8192, gbs=8, precision="fp8",
                   finetune="lora")
    with pytest.raises(ConfigError, match="finetune lora: .* emit it for nemo"):
        emit(kind, lora, job)


def _finetune_case(finetune: str, model: str = "llama3-70b", **choices):
    platform = catalog.load_platform(choices.pop("platform", "h100"))
    job = make_job(catalog.load_model(model), platform,
                   num_gpus=choices.pop("gpus", 16), seq_len=8192, gbs=choices.pop("gbs", 16),
                   precision=choices.pop("precision", "fp8"),
                   finetune=finetune, lora_rank=choices.pop("lora_rank", 16),
                   lora_targets=choices.pop("lora_targets", "attention"))
    return make_config(job, **choices), job


@pytest.fixture
def nemo_recipe(tmp_path):
    """Writes advisor's NeMo fine-tuning script, imports it and returns the recipe its
    `recipe()` builds from NeMo's own finetune_recipe (nothing is run)."""
    pytest.importorskip("nemo.collections.llm", reason="nemo_toolkit is not installed")
    import importlib.util

    from advisor.explain.emit.nemo_finetune import nemo_finetune_script, script_name

    def build(config, job):
        path = tmp_path / script_name(job)
        path.write_text(nemo_finetune_script(config, job))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.recipe()

    return build


@pytest.mark.parametrize("finetune, choices", [
    ("lora", {"tp": 4, "cp": 2}),                                     # the MLPerf layout
    ("lora", {"tp": 2, "pp": 2, "lora_rank": 8, "lora_targets": "all-linear",
              "precision": "bf16", "recompute": "full"}),
    ("full", {"tp": 8, "pp": 2, "dp_sharding": "optimizer", "precision": "bf16"}),
    # Llama 3 8B on 8 B200 at micro-batch 2: NeMo packs only at micro-batch 1, so no packing.
    ("lora", {"model": "llama3-8b", "platform": "b200", "gpus": 8, "gbs": 256, "mbs": 2,
              "precision": "bf16"}),
    # No llama2_13b recipe in NeMo 2.7.3: the generic route (llama3_8b's, with the shape set).
    ("lora", {"model": "llama2-13b", "tp": 2, "precision": "bf16"}),
])
def test_nemo_finetune_script_builds_the_recipe_advisor_priced(finetune, choices, nemo_recipe):
    import fiddle as fdl
    from megatron.core.distributed import DistributedDataParallelConfig
    from nemo.collections.llm.peft import LoRA

    from advisor.explain.emit.nemo import nemo_values
    from advisor.explain.emit.nemo_finetune import TARGET_MODULES

    config, job = _finetune_case(finetune, **choices)
    recipe = nemo_recipe(config, job)
    assert recipe.__fn_or_cls__.__name__ == "finetune"
    for key, intended in nemo_values(config, job).items():
        got = recipe
        for name in key.split("."):
            got = getattr(got, name)
        if isinstance(intended, str) and intended.startswith("torch."):
            intended = getattr(__import__("torch"), intended.removeprefix("torch."))
        assert got == intended, (key, got, intended)
    ddp = fdl.build(recipe.trainer.strategy.ddp)
    assert isinstance(ddp, DistributedDataParallelConfig)
    assert ddp.overlap_grad_reduce == config.overlap_grad_reduce
    strategy = recipe.trainer.strategy
    assert (strategy.tensor_model_parallel_size, strategy.pipeline_model_parallel_size,
            strategy.context_parallel_size) == (config.tp, config.pp, config.cp)
    # NeMo's own data module, built: it refuses packed sequences above micro-batch 1
    # (FineTuningDataModule.validate_batch_size_for_packed_sequence).
    data = fdl.build(recipe.data)
    assert (data.micro_batch_size, data.global_batch_size) == (config.mbs, config.gbs)
    assert data.packed_sequence_size == (config.seq_len if config.mbs == 1 else -1)
    assert data.dataset_kwargs.get("pad_to_max_length") is True  # seq_len tokens per sample
    assert recipe.data.seq_length == recipe.model.config.seq_length == config.seq_len
    assert recipe.optim.config.use_distributed_optimizer == (config.dp_sharding != "none")
    assert recipe.model.config.num_layers == job.model.num_layers  # the model, not the recipe's
    if finetune == "lora":
        lora = fdl.build(recipe.peft)
        assert isinstance(lora, LoRA)
        assert lora.dim == config.lora_rank
        assert lora.target_modules == TARGET_MODULES[config.lora_targets]
    else:
        assert recipe.peft is None


def test_nemo_finetune_command_writes_the_script_then_runs_it_under_torchrun():
    config, job = _finetune_case("lora", tp=4, cp=2)
    command = emit("nemo", config, job)
    assert "cat > advisor_finetune_llama3_70b.py <<'EOF'\n" in command
    script = command.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    compile(script, "advisor_finetune_llama3_70b.py", "exec")
    assert "recipe.peft.dim = 16" in script and "run.run(recipe(), direct=True)" in script
    assert command.rstrip().endswith("advisor_finetune_llama3_70b.py")
    assert "torchrun --nproc-per-node=8 --nnodes=2" in command
    with pytest.raises(ConfigError, match="NeMo-Run's CLI cannot set"):
        from advisor.explain.emit.nemo import nemo_overrides

        nemo_overrides(config, job)


@pytest.mark.parametrize("model, targets, why", [
    ("deepseek-v3", "attention", "multi-head latent attention"),
    ("mixtral-8x7b", "all-linear", "routed experts"),
])
def test_nemo_finetune_refuses_targets_it_cannot_name(model, targets, why):
    job = make_job(catalog.load_model(model), catalog.load_platform("h100"), num_gpus=256,
                   seq_len=4096, gbs=256, finetune="lora", lora_targets=targets)
    config = make_config(job, tp=8, pp=4, ep=8)
    with pytest.raises(ConfigError, match=why):
        emit("nemo", config, job)


def test_cli_predicts_a_lora_job():
    args = ["predict", "-m", "llama2-70b", "-p", "h100", "-g", "64", "--tp", "4", "--cp", "2",
            "--gbs", "8", "--seq-len", "8192", "--precision", "fp8", "--json"]
    lora = runner.invoke(app, [*args, "--finetune", "lora", "--lora-rank", "16"])
    base = runner.invoke(app, args)
    assert lora.exit_code == 0 and base.exit_code == 0, lora.output
    a, b = json.loads(lora.stdout), json.loads(base.stdout)
    assert a["config"]["finetune"] == "lora" and a["config"]["lora_rank"] == 16
    assert a["memory"]["total_bytes"] < b["memory"]["total_bytes"]
    bad = runner.invoke(app, [*args, "--finetune", "qlora"])
    assert bad.exit_code == 2 and "finetune 'qlora' is unknown" in bad.output


@pytest.fixture(scope="module")
def mlperf(power_dir):
    return predict_runs(load_runs(power_dir))


def test_mlperf_node_energy_per_token_is_predicted_held_out(mlperf):
    # The power fit never saw MLPerf (A40/A100 GPU power); the step model's calibration takes in
    # the MLPerf throughput rows; the host floor from each run's lowest node reading. Measured
    # (benchmarks/power_validation.py, 2026-12-06): energy per token -3.7 % (64 H100) and
    # +2.1 % (8 B200); the bound leaves room, not slack to hide a regression.
    systems = {r.system: r for r in mlperf}
    assert len(systems) == 2 and all(r.runs == 10 for r in mlperf)
    for r in mlperf:
        assert abs(r.predicted_j_per_token / r.measured_j_per_token - 1) < 0.15, r
        assert 0 < r.host_ac_w < r.measured_node_w
    rows = validation_rows(mlperf)
    assert {row["target"] for row in rows} == {"node energy per token", "node average power",
                                               "step time"}


@pytest.mark.xfail(strict=True, reason=(
    "a regression not yet fixed: since GEMMs are priced by the measured kernels the 64-H100 "
    "Llama 2 70B LoRA step is predicted 11.3 % fast (8.3 % before; the 8-B200 one 6.7 %)"))
def test_mlperf_node_step_time_is_within_ten_percent(mlperf):
    for r in mlperf:
        assert abs(r.predicted_step_s / r.measured_step_s - 1) < 0.10, r


def test_catalog_host_power_is_the_measured_floor(mlperf):
    # host_power_w of h100 and b200 (what --max-node-power-w adds) is each system's floor
    platforms = {"8xXE9680x8H100-SXM-80GB-POWER": "h100", "SR780aV3-8xB200_SXM_180GB": "b200"}
    for r in mlperf:
        host = catalog.load_platform(platforms[r.system]).host_power_w
        assert host == pytest.approx(r.host_ac_w, abs=1.0), r.system
