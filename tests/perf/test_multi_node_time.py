"""Multi-node step time: Megatron's asynchronous input-gradient reduce, the network vTrain's
multi-node runs had, and those runs against the model (`datasets/reference/vtrain`)."""

import numpy as np
import pandas as pd
import pytest

from advisor.catalog import load_platform
from advisor.perf.step import step_table
from advisor.perf.vtrain import (
    FRAMEWORK,
    equal_work_twins,
    gpt_spec,
    load_vtrain,
    predict_vtrain,
    reweighted_terms,
    score_vtrain,
    vtrain_cluster,
    vtrain_configs,
)


def _layouts(**changes) -> pd.DataFrame:
    """vTrain-style layouts of a 39B GPT (hidden 8192, 48 layers) on 512 GPUs."""
    rows = pd.DataFrame({"tp": [8, 4, 2, 8], "pp": [2, 4, 8, 8], "dp": [32, 32, 32, 8],
                         "mbs": [2, 2, 2, 4], "gbs": 1536, "seq_len": 2048})
    return vtrain_configs(rows).assign(**changes)


@pytest.fixture(scope="module")
def gpt39():
    return gpt_spec(8192, 64, 48, 2048)


def test_megatron_reduces_input_gradients_under_the_weight_gradient(gpt39):
    """Without tp_comm_overlap, Megatron (Core and DeepSpeed) still runs each column-parallel
    linear's backward all-reduce beside its weight-gradient GEMM; a framework without it
    waits for every TP collective. At most the backward half of a block's collectives hides
    (no recompute, no SP: one all-reduce forward, one backward)."""
    platform = load_platform("a100")
    configs = _layouts(recompute="none")
    megatron = step_table(gpt39, platform, configs, framework="megatron")
    titan = step_table(gpt39, platform, configs, framework="torchtitan")
    hidden = titan["tp_comm_s"] - megatron["tp_comm_s"]
    assert (hidden > 0).all()
    assert (hidden <= 0.5 * titan["tp_comm_s"] + 1e-12).all()
    assert (megatron["hidden_comm_s"] > titan["hidden_comm_s"]).all()


def test_sequence_parallel_hides_the_reduce_scatter_too(gpt39):
    platform = load_platform("h100")
    configs = _layouts(recompute="none", sequence_parallel=True, precision="bf16")
    megatron = step_table(gpt39, platform, configs, framework="megatron")
    titan = step_table(gpt39, platform, configs, framework="torchtitan")
    assert (megatron["tp_comm_s"] < titan["tp_comm_s"]).all()


def test_tp_comm_overlap_is_unchanged_by_the_async_reduce(gpt39):
    """With Transformer Engine's overlap on, its rule (hide up to the budget under the GEMMs)
    decides, whatever the framework."""
    platform = load_platform("h100")
    configs = _layouts(recompute="none", sequence_parallel=True, precision="bf16",
                       tp_comm_overlap=True)
    megatron = step_table(gpt39, platform, configs, framework="megatron")
    titan = step_table(gpt39, platform, configs, framework="torchtitan")
    assert np.allclose(megatron["tp_comm_s"], titan["tp_comm_s"])


def test_vtrain_cluster_has_four_nics_per_node(gpt39):
    """800 Gb/s per 8-GPU node (vTrain's configs): half a DGX A100's per-GPU share, so a
    data-parallel all-reduce across nodes takes longer; nothing else changes."""
    cluster, dgx = vtrain_cluster(), load_platform("a100")
    assert cluster.num_nics_per_node == 4
    assert cluster.inter_node_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    assert dgx.inter_node_bandwidth_bytes_per_s == pytest.approx(25e9)
    configs = _layouts()
    slow = step_table(gpt39, cluster, configs, framework=FRAMEWORK)
    fast = step_table(gpt39, dgx, configs, framework=FRAMEWORK)
    assert (slow["dp_comm_s"] > fast["dp_comm_s"]).all()
    assert np.allclose(slow["compute_s"], fast["compute_s"])


@pytest.fixture(scope="module")
def multi(vtrain_dir):
    frame = load_vtrain(vtrain_dir / "ground_truth_multi.csv")
    return frame, predict_vtrain(frame, platform=vtrain_cluster())


def test_vtrain_multi_node_runs_are_all_there(multi):
    frame, predicted = multi
    assert len(frame) == 109
    assert frame["num_gpus"].min() == 64 and frame["num_gpus"].max() == 512
    assert predicted.notna().all()
    _, per_job = score_vtrain(frame, predicted)
    assert sorted(per_job["layouts"]) == [15, 21, 26, 47]


def test_vtrain_multi_node_runs_are_not_predicted_too_fast(multi):
    """Issue 29 found every multi-node run predicted too fast (measured / predicted 1.08-1.94,
    median 1.23; 1.53 for the 3.6B model down to 1.12 for 175B). With the runs' own settings
    (`vtrain_configs`: unfused attention, no overlap, FP16 gradients), Megatron's async
    input-gradient reduce and the cluster's network, nothing fitted to these runs, measured
    with the bundled calibration (2026-12-04): MAPE 7.3 %, median ratio 0.98, 17 % of runs
    more than 10 % too fast (the worst 1.82: TP 8 with micro-batch 64 on the 3.6B model),
    per-model median ratios 0.95-1.04 (no trend with size), Kendall tau per model 0.55-0.88.
    With GEMMs priced by the measured-kernel model (2026-12-06): MAPE 7.8 %, median ratio
    1.02, per-job tau 0.59-0.87, the same worst run 2.06. With the runs' dropout priced
    (2026-12-07, `tests/perf/test_dropout.py`): MAPE 7.9 %, median ratio 0.97, per-job tau
    0.59-0.86, the worst run 1.92 (`test_the_worst_run_is_not_predicted_twice`).
    Calculon, an analytical peer, scores 15.3 %."""
    frame, predicted = multi
    score, per_job = score_vtrain(frame, predicted)
    ratio = frame["measured_ms"] / predicted
    print(score, per_job.to_string(), sep="\n")
    assert score.mape_pct < 10.0
    assert 0.9 < ratio.median() < 1.1
    assert (ratio > 1.1).mean() < 0.25
    assert per_job["median_ratio"].max() / per_job["median_ratio"].min() < 1.15
    assert (per_job["kendall_tau"] > 0.5).all()


def test_the_worst_run_is_not_predicted_twice(multi):
    """The 3.6B model's TP 8, micro-batch 64 run: 1.82x the predicted time on 2026-12-04,
    2.06x after the measured-kernel GEMMs priced its TP-split GEMMs faster, 1.92x once its
    unfused attention's dropout was priced."""
    frame, predicted = multi
    assert (frame["measured_ms"] / predicted).max() < 2.0


def test_reweighting_the_model_terms_cannot_order_the_18b_and_39b_jobs(vtrain_dir):
    """Issue 29 asks τ ≥ 0.8 per vTrain multi-node job. Letting every term of the step
    (compute, each communication, bubble, optimizer, host wait, throttle) take its own
    non-negative weight, fitted in sample to each job's own runs, fits the times better than
    the model (by construction) yet leaves τ below 0.8 on the 18.4B (15 layouts) and 39.1B
    (47 layouts) jobs (0.60 and 0.70 with the 2026-12-05 calibration): their measured order
    turns on effects no priced mechanism carries, so no rescaling of one would meet the goal."""
    frame = load_vtrain(vtrain_dir / "ground_truth_multi.csv")
    table = reweighted_terms(frame, platform=vtrain_cluster())
    print(table.to_string())
    assert len(table) == 4
    assert (table["rms_error_pct_reweighted"] <= table["rms_error_pct_model"] + 1e-6).all()
    assert (table.filter(like="w_") >= 0).all().all()
    middle = table[table["hidden"].isin([6144, 8192])]
    assert len(middle) == 2
    assert (middle["kendall_tau_reweighted"] < 0.8).all()


def test_equal_work_twins_pair_each_layout_with_twice_the_tp_and_micro_batch():
    """(tp, dp, mbs) pairs with (2·tp, dp/2, 2·mbs) of the same job (GPUs, model, global
    batch) and pipeline depth, and nothing else."""
    runs = pd.DataFrame({"num_gpus": 8, "hidden": 2048, "layers": 24, "gbs": 16,
                         "pp": [1, 1, 1, 1, 2, 1],
                         "tp": [2, 4, 8, 1, 4, 2], "dp": [4, 2, 1, 8, 1, 4],
                         "mbs": [1, 2, 4, 1, 2, 2],
                         "measured_ms": [100.0, 80.0, 120.0, 90.0, 70.0, 95.0]})
    runs.loc[5, "gbs"] = 32                       # row 3's wide twin, but of another job
    predicted = pd.Series([100.0, 105.0, 110.0, 99.0, 60.0, 90.0])
    twins = equal_work_twins(runs, predicted)
    assert twins[["tp", "dp", "mbs"]].values.tolist() == [[2, 4, 1], [4, 2, 2]]
    assert twins["measured_ratio"].tolist() == pytest.approx([0.8, 1.5])
    assert twins["predicted_ratio"].tolist() == pytest.approx([1.05, 110 / 105])


def test_39b_job_ran_faster_at_twice_the_tp_where_the_work_says_slower(multi):
    """Why τ ≥ 0.8 on the 39.1B job is out of reach (issue 29). Doubling TP while halving DP
    and doubling the micro-batch keeps every GPU's GEMM and attention work and the number of
    micro-batches; it doubles the replicated elementwise work and the all-reduce bytes and
    saves only half the once-per-step gradient all-reduce and optimizer. The model prices
    every such twin slower (2-11 % on the 39.1B and 175B jobs). On the 175B job all six
    twins ran 3-11 % slower; on the 39.1B job more than half ran faster, by up to a third
    (12 of 21 pairs, the fastest TP 2 → 4 at PP 16; with the 2026-12-05 calibration): the
    order of those runs turns on an effect of the runs themselves, not on any mechanism a
    model of the work could rescale."""
    frame, predicted = multi
    twins = equal_work_twins(frame, predicted)
    print(twins.round(3).to_string())
    assert (twins["predicted_ratio"] > 1.0).all()
    job39, job175 = (twins[twins["hidden"] == h] for h in (8192, 12288))
    assert len(job175) == 6 and (job175["measured_ratio"] > 1.0).all()
    assert len(job39) == 21
    assert (job39["measured_ratio"] < 1.0).sum() > len(job39) / 2
    assert job39["measured_ratio"].min() < 0.7
