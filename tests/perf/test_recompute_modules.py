"""Selective recompute of named modules (Megatron-Core `--recompute-modules`): what each module
frees, what it costs, and how configurations, CSVs, pins and the CLI take it."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.core.errors import ConfigError
from advisor.core.parallel import ParallelConfig, make_config, make_job, recompute_modules_name
from advisor.core.space import space_table, validate
from advisor.perf.memory import estimate_memory
from advisor.predict.predictor import Predictor
from advisor.search.recommend import pinned_space

H100 = catalog.load_platform("h100")
QWEN_30B = catalog.load_model("qwen3-30b-a3b")
QWEN_235B = catalog.load_model("qwen3-235b-a22b")
LLAMA_8B = catalog.load_model("llama3-8b")
SEQ = 4096


def _config(model, gpus, modules="core_attn", recompute="selective", **layout):
    job = make_job(model, H100, num_gpus=gpus, seq_len=SEQ)
    return make_config(job, recompute=recompute, **layout).replace(
        recompute_modules=modules), job


def _activations(model, gpus, modules, **layout) -> float:
    config, _ = _config(model, gpus, modules, **layout)
    return estimate_memory(model, parallel=config, platform=H100).activations_bytes


def test_module_names_are_canonical_and_checked():
    assert recompute_modules_name("MoE_Act,layernorm") == "layernorm moe_act"
    assert recompute_modules_name("moe_act + layernorm  moe_act") == "layernorm moe_act"
    with pytest.raises(ConfigError, match="'attn' unknown.*core_attn, mla_up_proj"):
        recompute_modules_name("attn")
    with pytest.raises(ConfigError, match="empty"):
        recompute_modules_name(" , ")
    with pytest.raises(ConfigError, match="applies only to recompute selective"):
        ParallelConfig(recompute="full", recompute_modules="mlp")


def test_megatron_cores_refusals_are_advisors():
    dense, job = _config(LLAMA_8B, 8, recompute="selective", modules="core_attn", tp=1)
    for modules, why in [("moe_act", "is dense"), ("mla_up_proj", "multi-latent"),
                         ("shared_experts", "is dense")]:
        with pytest.raises(ConfigError, match=why):
            validate(dense.replace(recompute_modules=modules), LLAMA_8B, H100, num_gpus=8)
    moe, _ = _config(QWEN_30B, 8, "moe_act", tp=1, ep=8)
    validate(moe, QWEN_30B, H100, num_gpus=8)
    with pytest.raises(ConfigError, match="no shared experts"):  # Qwen3 MoE has none
        validate(moe.replace(recompute_modules="shared_experts"), QWEN_30B, H100, num_gpus=8)
    with pytest.raises(ConfigError, match="fp8 delayed scaling"):
        validate(moe.replace(precision="fp8"), QWEN_30B, H100, num_gpus=8)
    validate(moe.replace(precision="fp8-cs"), QWEN_30B, H100, num_gpus=8)


def test_moe_act_and_layernorm_free_one_tensor_per_token_and_layer():
    # TP 1, PP 1, one micro-batch in flight: a MoE layer's experts keep their activation output
    # (the FC2 input: top-k × moe_ffn BF16 values per token) and its pre-MLP norm keeps its
    # output (hidden BF16 values per token); recomputing them frees exactly that per layer.
    layout = dict(tp=1, ep=8, mbs=1)
    base = _activations(QWEN_30B, 8, "core_attn", **layout)
    tokens, layers = SEQ, QWEN_30B.num_layers
    act = layers * tokens * QWEN_30B.moe_top_k * QWEN_30B.moe_ffn_hidden_size * 2
    norm = layers * tokens * QWEN_30B.hidden_size * 2
    assert base - _activations(QWEN_30B, 8, "core_attn moe_act", **layout) == pytest.approx(
        act, rel=1e-9)
    assert base - _activations(QWEN_30B, 8, "core_attn layernorm", **layout) == pytest.approx(
        norm, rel=1e-9)


def test_more_recompute_frees_more_memory_and_costs_more_time():
    # Qwen3-235B-A22B as NVIDIA's recipe lays it out on 256 H100 (Megatron-Bridge
    # launch_qwen235b.sh: TP 2, PP 8, EP 32).
    layout = dict(tp=2, pp=8, ep=32, mbs=1)
    ladder = [("selective", "core_attn"), ("selective", "core_attn layernorm moe_act"),
              ("selective", "core_attn moe"), ("full", "core_attn")]
    rows = []
    for recompute, modules in ladder:
        config, job = _config(QWEN_235B, 256, modules, recompute=recompute, **layout)
        rows.append(Predictor(None).predict([(config, job)], breakdown=True).iloc[0])
    memory = [r["analytical_activations_bytes"] for r in rows]
    recompute_s = [r["analytical_recompute_s"] for r in rows]
    step = [r["analytical_step_time_s"] for r in rows]
    assert memory == sorted(memory, reverse=True) and len(set(memory)) == 4
    assert recompute_s == sorted(recompute_s) and len(set(recompute_s)) == 4
    assert step == sorted(step)
    # A norm and an elementwise function again cost little next to the GEMMs (no GEMM is
    # recomputed); the whole MoE layer runs its dispatch and combine again too.
    assert step[1] / step[0] - 1 < 0.02
    assert rows[2]["analytical_ep_comm_s"] > rows[1]["analytical_ep_comm_s"]


def test_the_search_takes_other_modules_only_where_pinned():
    job = make_job(QWEN_30B, H100, num_gpus=32, seq_len=SEQ)
    default = space_table(job)
    assert set(default["recompute_modules"].tolist()) == {"core_attn"}
    pinned = pinned_space(job, {"recompute_modules": "moe_act,layernorm"})
    assert len(pinned) > 0
    assert set(pinned["recompute_modules"].tolist()) == {"layernorm moe_act"}
    assert set(pinned["recompute"].tolist()) == {"selective"}
    with pytest.raises(ConfigError, match="is dense"):
        pinned_space(make_job(LLAMA_8B, H100, num_gpus=8), {"recompute_modules": "moe"})


runner = CliRunner()


def test_cli_predicts_with_modules_and_refuses_in_one_line():
    args = ["predict", "-m", "qwen3-30b-a3b", "-g", "8", "-p", "h100", "--ep", "8",
            "--seq-len", str(SEQ), "--analytical", "--json"]
    r = runner.invoke(app, [*args, "--recompute", "selective"])
    s = runner.invoke(app, [*args, "--recompute", "selective", "--recompute-modules", "moe"])
    assert r.exit_code == 0 and s.exit_code == 0, (r.output, s.output)
    memory = [json.loads(x.stdout)["memory"]["activations_bytes"] for x in (r, s)]
    assert memory[1] < memory[0]
    for bad in (["--recompute-modules", "moe"], ["--recompute", "selective",
                                                  "--recompute-modules", "attn"]):
        e = runner.invoke(app, [*args, *bad])
        assert e.exit_code == 2, e.output
        lines = [ln for ln in e.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:"), e.output


def test_predict_input_reads_a_recompute_modules_column(tmp_path):
    src = tmp_path / "runs.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs,ep,recompute,recompute_modules\n"
                   f"qwen3-30b-a3b,h100,8,{SEQ},64,8,selective,\n"
                   f"qwen3-30b-a3b,h100,8,{SEQ},64,8,,moe_act layernorm\n"
                   f"qwen3-30b-a3b,h100,8,{SEQ},64,8,full,moe_act\n")
    dst = tmp_path / "out.csv"
    r = runner.invoke(app, ["predict", "--input", str(src), "--output", str(dst),
                            "--analytical"])
    assert r.exit_code == 0, r.output
    out = pd.read_csv(dst, keep_default_na=False)
    assert out.loc[1, "pred_memory_gb"] < out.loc[0, "pred_memory_gb"]
    assert "applies only to recompute selective" in out.loc[2, "pred_error"]


def test_a_moe_run_that_does_not_say_gets_the_moe_recipes_modules_before_full():
    # GPT-OSS-120B on 64 B200 as Megatron-Bridge's performance summary lists it (NeMo 26.04.01,
    # TP1 PP1 EP8 MBS4, recompute not stated): core attention alone leaves it over the GPU's
    # memory, NVIDIA's MoE modules fit; full recompute would cost far more.
    from advisor.predict.rows import predict_frame

    frame = pd.DataFrame([dict(model="gpt-oss-120b", gpu="b200", num_gpus="64", precision="bf16",
                               seq_len="4096", gbs="1280", mbs="4", tp="1", pp="1", ep="8",
                               framework="megatron", software="26.04.01")])
    row = predict_frame(frame, Predictor(None)).iloc[0]
    assert row["pred_fits"], row["pred_assumed"]
    assert "recompute=selective (layernorm moe_act)" in row["pred_assumed"]
    model, b200 = catalog.load_model("gpt-oss-120b"), catalog.load_platform("b200")
    job = make_job(model, b200, num_gpus=64, seq_len=4096, gbs=1280)
    core_attn = make_config(job, tp=1, ep=8, mbs=4, recompute="selective")
    assert not estimate_memory(model, parallel=core_attn, platform=b200).fits


def test_the_predictor_reads_recompute_modules_however_a_scheduler_writes_them():
    from advisor.core.table import Table

    model = QWEN_30B
    config, _ = _config(model, 8, "core_attn", tp=1, ep=8)
    predictor = Predictor(None)
    frame = pd.DataFrame([config.to_dict()]).assign(model=model.name, gpu="h100")
    # A frame or table written before the column existed means core attention, as does an
    # empty cell; any order, case and separator of the names is one configuration.
    without = predictor.predict(frame.drop(columns=["recompute_modules"])).iloc[0]
    assert without["pred_error"] == ""
    for same in ("", "core_attn", "CORE_ATTN"):
        row = predictor.predict(frame.assign(recompute_modules=same)).iloc[0]
        assert row["pred_memory_gb"] == without["pred_memory_gb"], same
    spellings = [predictor.predict(frame.assign(recompute_modules=s)).iloc[0]["pred_memory_gb"]
                 for s in ("moe_act,layernorm", "layernorm moe_act", "Moe_Act+LayerNorm")]
    assert len(set(spellings)) == 1 and spellings[0] < without["pred_memory_gb"]
    bad = predictor.predict(frame.assign(recompute_modules="bogus")).iloc[0]
    assert "recompute_modules 'bogus': 'bogus' unknown" in bad["pred_error"]
    old_table = Table.from_frame(frame.drop(columns=["recompute_modules", "model", "gpu"]))
    assert predictor.predict_table(model, H100, old_table)["pred_memory_gb"][0] == \
        pytest.approx(without["pred_memory_gb"])
    new_table = Table.from_frame(frame.drop(columns=["model", "gpu"])
                                 .assign(recompute_modules="moe_act,layernorm"))
    assert predictor.predict_table(model, H100, new_table)["pred_memory_gb"][0] == \
        pytest.approx(spellings[0])


def test_recommend_offers_the_moe_recipes_recompute_where_it_fits_in_place_of_full():
    # GPT-OSS-120B on 64 B200 at TP1 EP8 MBS4 (Megatron-Bridge's layout): full recompute fits,
    # core attention alone does not, the MoE recipes' modules do and run faster.
    from advisor.search.recommend import moe_what_ifs

    model, b200 = catalog.load_model("gpt-oss-120b"), catalog.load_platform("b200")
    job = make_job(model, b200, num_gpus=64, seq_len=4096, gbs=1280)
    full = make_config(job, tp=1, ep=8, mbs=4, recompute="full")
    predictor = Predictor(None)
    best = {**full.to_dict(), **predictor.predict([(full, job)]).iloc[0].to_dict()}
    assert best["pred_fits"]
    lines = moe_what_ifs(best, job, predictor, pins={})
    offer = [line for line in lines if line.startswith("--recompute-modules layernorm,moe_act")]
    assert len(offer) == 1 and " would add " in offer[0], lines
    assert not any(line.startswith("--recompute-modules")
                   for line in moe_what_ifs(best, job, predictor, pins={"recompute": "full"}))
