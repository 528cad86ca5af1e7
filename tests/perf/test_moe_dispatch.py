"""The MoE dispatcher's all-to-all across nodes, against DeepEP's published measurements."""

import numpy as np
import pandas as pd
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_config, make_job
from advisor.learn.fit import release_year
from advisor.perf.calibration import load_calibration
from advisor.perf.collectives import EP_DISPATCH, SEND_RECV
from advisor.perf.step import step_table


def test_dispatch_network_leg_runs_at_deepeps_measured_bandwidth():
    """DeepEP README (normal kernels, H800 with one 400 Gb/s CX7 NIC per GPU, as DGX H100):
    internode dispatch and combine at EP 16 reach 43 GB/s of RDMA bandwidth. The model's
    network leg for a DeepSeek-V3 pre-training batch (4096 tokens, hidden 7168, FP8 dispatch)
    is within 10 % of it."""
    h100 = load_platform("h100")
    coll = load_calibration().collectives
    rdma_bytes = 4096 * 7168 * 1.0 * 3.0      # FP8 tokens to about 3 remote nodes each
    seconds = float(np.squeeze(coll.time(EP_DISPATCH, rdma_bytes, 2.0, False, h100)))
    assert abs(rdma_bytes / seconds / 43e9 - 1) < 0.10


def test_dispatch_uses_every_nic_queue_not_one_send_recv_channel():
    """The same bytes cross the network faster through the dispatcher than through one NCCL
    send/recv (which runs on a channel or two: paper finding 2)."""
    h100 = load_platform("h100")
    coll = load_calibration().collectives
    dispatch = coll.time(EP_DISPATCH, 64e6, 2.0, False, h100)
    p2p = coll.time(SEND_RECV, 64e6, 2.0, False, h100)
    assert float(np.squeeze(dispatch)) < 0.7 * float(np.squeeze(p2p))


def test_expert_parallelism_across_nodes_costs_more_all_to_all_than_inside_one():
    """Qwen3-235B on 256 H100: EP 32 spans four nodes and sends most tokens over InfiniBand;
    EP 8 stays on NVLink. Per micro-batch of the same tokens the cross-node all-to-all is the
    slower one, though dispatch deduplicates tokens per node."""
    model, h100 = load_model("qwen3-235b"), load_platform("h100")
    job = make_job(model, h100, num_gpus=256, seq_len=4096, gbs=2048)
    configs = pd.DataFrame([make_config(job, tp=2, pp=8, vp=4, ep=ep, etp=1).to_dict()
                            for ep in (8, 32)])
    out = step_table(model, h100, configs)
    per_microbatch = out["ep_comm_s"] / out["num_microbatches"]
    assert per_microbatch[1] > 1.5 * per_microbatch[0]


def test_node_limited_routing_sends_fewer_tokens_over_the_network():
    """DeepSeek-V3 routes each token to at most 4 of 8 expert groups (config.json n_group 8,
    topk_group 4; arXiv:2412.19437 §2.1.2: at most 4 nodes per token). With EP 64 over 8
    nodes, a group is a node: a token reaches exactly 4 nodes, 3.5 of them remote on average,
    where 8 free choices among 8 nodes would reach 4.6 remote ones."""
    from dataclasses import replace

    from advisor.perf.step_comm import domain_hit

    dsv3 = load_model("deepseek-v3")
    free = replace(dsv3, moe_router_num_groups=0, moe_router_group_topk=0)
    nodes = np.array([[8.0]])
    assert ((nodes - 1) * domain_hit(dsv3, nodes)).item() == pytest.approx(3.5)
    assert ((nodes - 1) * domain_hit(free, nodes)).item() == pytest.approx(7 * (1 - (7 / 8) ** 8))
    # Never more remote traffic than free routing, at any spread.
    spreads = np.array([[2.0], [4.0], [16.0], [32.0]])
    assert (domain_hit(dsv3, spreads) <= domain_hit(free, spreads) + 1e-12).all()


def _qwen235_h100(dispatcher: str, **changes):
    model, h100 = load_model("qwen3-235b-a22b"), load_platform("h100")
    job = make_job(model, h100, num_gpus=256, seq_len=4096, gbs=2048, precision="fp8-cs")
    config = make_config(job, tp=2, pp=8, vp=4, ep=32, etp=1).replace(
        moe_dispatcher=dispatcher, **changes)
    return model, h100, config


def test_all_to_all_across_nodes_sends_every_remote_copy_deepep_one_per_node():
    """Qwen3-235B (top-8 of 128 experts) with EP 32 over four H100 nodes: NCCL's all-to-all
    sends each token to 8 × 3/4 = 6 remote experts, DeepEP to at most 3 remote nodes (2.7 on
    average), so the all-to-all dispatcher's network time is about twice DeepEP's; auto is
    DeepEP there. Inside one node (EP 8) the two cost the same."""
    out = {}
    for dispatcher in ("auto", "deepep", "alltoall"):
        model, h100, config = _qwen235_h100(dispatcher)
        out[dispatcher] = step_table(model, h100, pd.DataFrame([config.to_dict()])).iloc[0]
    assert out["auto"]["ep_comm_s"] == pytest.approx(out["deepep"]["ep_comm_s"])
    assert 1.8 < out["alltoall"]["ep_comm_s"] / out["deepep"]["ep_comm_s"] < 2.5
    assert out["alltoall"]["step_time_s"] > out["deepep"]["step_time_s"]
    inside = []
    for dispatcher in ("deepep", "alltoall"):
        model, h100, config = _qwen235_h100(dispatcher)
        config = make_config(make_job(model, h100, num_gpus=256, seq_len=4096, gbs=2048,
                                      precision="fp8-cs"), tp=2, pp=8, vp=4, ep=8, etp=1
                             ).replace(moe_dispatcher=dispatcher)
        inside.append(step_table(model, h100, pd.DataFrame([config.to_dict()]))["ep_comm_s"][0])
    assert inside[0] == pytest.approx(inside[1])


def test_bridge_qwen3_235b_h100_rows_are_priced_as_the_recipe_ran(reference_csv):
    """Megatron-Bridge's Qwen3-235B-A22B H100 recipe runs the all-to-all dispatcher with the
    all-to-all overlapped (framework_defaults.RECIPE_DISPATCH); its rows of the performance
    summary are read so, and priced that way they land nearer the measurement than under the
    rule's DeepEP without overlap, which predicted them too fast."""
    from advisor.data.predict_input import parse_run_row, read_rows

    rows = read_rows(reference_csv)
    rows = rows[(rows["model"] == "Qwen3-235B-A22B") & (rows["gpu"] == "h100")
                & rows["source_name"].str.startswith("Megatron-Bridge performance summary")
                & (rows["tokens_per_sec_per_gpu"] != "")]
    assert len(rows) >= 4
    model, h100 = load_model("qwen3-235b-a22b"), load_platform("h100")
    errors = {"recipe": [], "rule": []}
    calibration = load_calibration()
    for _, row in rows.iterrows():
        config, assumed = parse_run_row(row.to_dict(), model)
        assert (config.moe_dispatcher, config.ep_comm_overlap) == ("alltoall", True)
        assert any("moe_dispatcher=alltoall (the source's recipe)" in a for a in assumed)
        rule = config.replace(moe_dispatcher="auto", ep_comm_overlap=False)
        # each row at its own release, as the fit prices it (`SoftwareTrend`)
        release = calibration.release_factor(["hopper"], [release_year(row["software"])])[0]
        for name, cfg in (("recipe", config), ("rule", rule)):
            predicted = release * step_table(model, h100, pd.DataFrame([cfg.to_dict()]))[
                "tokens_per_sec_per_gpu"][0]
            errors[name].append(abs(np.log(predicted / float(row["tokens_per_sec_per_gpu"]))))
    assert np.median(errors["recipe"]) < np.median(errors["rule"])
    # A cell that names the dispatcher wins over the recipe, in any of Megatron's spellings.
    row = rows.iloc[0].to_dict() | {"moe_dispatcher": "flex", "ep_comm_overlap": "false"}
    config, _ = parse_run_row(row, model)
    assert (config.moe_dispatcher, config.ep_comm_overlap) == ("deepep", False)
    # Megatron-Core's and Megatron-Bridge's names for the two columns are read too.
    row = rows.iloc[0].to_dict() | {"moe_token_dispatcher_type": "Flex", "moe_a2a_overlap": "0"}
    config, _ = parse_run_row(row, model)
    assert (config.moe_dispatcher, config.ep_comm_overlap) == ("deepep", False)


def test_the_search_keeps_the_rule_unless_pinned_and_a_pin_can_only_name_what_runs():
    from advisor.core.errors import ConfigError
    from advisor.search.recommend import pinned_space

    job = make_job(load_model("qwen3-30b-a3b"), load_platform("h100"), num_gpus=32,
                   seq_len=4096)
    assert (pinned_space(job, {})["moe_dispatcher"] == "auto").all()
    pinned = pinned_space(job, {"moe_dispatcher": "All-to-All"})
    assert len(pinned) > 0 and (pinned["moe_dispatcher"] == "alltoall").all()
    assert (pinned["ep"] > 1).all()   # only the layouts that dispatch tokens
    with pytest.raises(ConfigError, match="deepep runs on NVIDIA GPUs"):
        pinned_space(make_job(job.model, load_platform("mi300x"), num_gpus=32),
                     {"moe_dispatcher": "deepep"})
    with pytest.raises(ConfigError, match="applies to MoE models; llama3-8b is dense"):
        pinned_space(make_job(load_model("llama3-8b"), job.platform, num_gpus=8),
                     {"moe_dispatcher": "alltoall"})
    with pytest.raises(ConfigError, match="'allgather' is unknown"):
        pinned_space(job, {"moe_dispatcher": "allgather"})


def test_cli_and_csv_take_it(tmp_path):
    from typer.testing import CliRunner

    from advisor.cli import app

    runner = CliRunner()
    args = ["predict", "-m", "qwen3-235b-a22b", "-g", "256", "-p", "h100", "--tp", "2", "--pp",
            "8", "--vp", "4", "--ep", "32", "--gbs", "2048", "--analytical", "--json"]
    import json

    speed = {}
    for dispatcher in ("auto", "alltoall", "flex"):
        r = runner.invoke(app, [*args, "--moe-dispatcher", dispatcher])
        assert r.exit_code == 0, r.output
        speed[dispatcher] = json.loads(r.output)["step"]["tokens_per_sec_per_gpu"]
    assert speed["auto"] == speed["flex"] > speed["alltoall"]
    bad = runner.invoke(app, [*args, "--ep", "1", "--moe-dispatcher", "alltoall"])
    assert bad.exit_code == 2 and "needs ep > 1" in bad.output
    src = tmp_path / "runs.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs,tp,pp,vp,ep,moe_dispatcher\n"
                   "qwen3-235b-a22b,h100,256,4096,2048,2,8,4,32,\n"
                   "qwen3-235b-a22b,h100,256,4096,2048,2,8,4,32,alltoall\n"
                   "qwen3-235b-a22b,h100,256,4096,2048,2,8,4,32,allgather\n")
    dst = tmp_path / "out.csv"
    r = runner.invoke(app, ["predict", "--input", str(src), "--output", str(dst),
                            "--analytical"])
    assert r.exit_code == 0, r.output
    out = pd.read_csv(dst, keep_default_na=False)
    speed = pd.to_numeric(out["pred_tokens_per_sec_per_gpu"], errors="coerce")
    assert speed[0] > speed[1]      # cells read as text (keep_default_na): compare numbers
    assert "'allgather' is unknown" in out.loc[2, "pred_error"]


def test_a_frame_reads_the_dispatcher_as_predict_input_does():
    """`Predictor.predict` on a DataFrame: Megatron's spellings price as their dispatcher, an
    unknown one is that row's error."""
    from advisor.predict.predictor import Predictor

    _, _, config = _qwen235_h100("auto")
    frame = pd.DataFrame([config.to_dict() | {"moe_dispatcher": d} for d in
                          ("deepep", "Flex", "alltoall", "all-to-all", "allgather")])
    frame = frame.assign(model="qwen3-235b-a22b", gpu="h100", num_gpus=256)
    out = Predictor(None).predict(frame)
    speed = out["pred_tokens_per_sec_per_gpu"]
    assert speed[0] == pytest.approx(speed[1]) and speed[2] == pytest.approx(speed[3])
    assert speed[0] > speed[2]
    assert out["pred_error"][:4].eq("").all() and "allgather" in out["pred_error"][4]


def test_recommend_says_how_tokens_cross_nodes():
    """A recommendation's reasons name the dispatcher it priced across nodes."""
    from advisor.explain.rationale import layout_reasons
    from advisor.perf.analytical import predict_config

    for dispatcher, phrase in (("auto", "with DeepEP (one network copy per node)"),
                               ("alltoall", "sends the expert all-to-all across nodes")):
        model, h100, config = _qwen235_h100(dispatcher)
        reasons = layout_reasons(predict_config(model, h100, config), model, h100)
        assert any("EP=32 " in r and phrase in r for r in reasons), reasons
