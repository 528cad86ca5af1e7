"""Hybrid sharding (`dp_shard_size`): memory, collectives, the CLI and the search."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor.catalog import load_model, load_platform
from advisor.cli import app
from advisor.core.errors import ConfigError
from advisor.core.parallel import ParallelConfig, make_config, make_job
from advisor.perf.calibration import load_calibration
from advisor.perf.collectives import REDUCE_SCATTER
from advisor.perf.memory import estimate_memory

LLAMA2_7B, A100 = load_model("llama2-7b"), load_platform("a100")
runner = CliRunner()


def _config(sharding: str, shard: int, overlap: bool = False) -> ParallelConfig:
    job = make_job(LLAMA2_7B, A100, num_gpus=1024, seq_len=4096, gbs=1024)
    return make_config(job, dp_sharding=sharding, overlap=overlap).replace(dp_shard_size=shard)


def test_dp_shard_size_must_divide_the_data_parallel_group():
    with pytest.raises(ConfigError, match=r"dp_shard_size \(3\) must divide dp × cp"):
        ParallelConfig(dp=8, gbs=8, dp_shard_size=3)
    ParallelConfig(dp=8, cp=2, gbs=8, seq_len=4096, dp_shard_size=4)


def test_dp_shard_size_needs_a_sharded_optimizer():
    with pytest.raises(ConfigError, match="needs dp_sharding optimizer or full"):
        ParallelConfig(dp=8, gbs=8, dp_sharding="none", dp_shard_size=4)
    assert ParallelConfig(dp=8, gbs=8, dp_sharding="none", dp_shard_size=8).shard_replicas == 1


def test_each_gpu_holds_one_shard_groups_share_of_the_optimizer():
    whole = estimate_memory(LLAMA2_7B, parallel=_config("optimizer", 0), platform=A100)
    node = estimate_memory(LLAMA2_7B, parallel=_config("optimizer", 8), platform=A100)
    assert node.optimizer_bytes == pytest.approx(whole.optimizer_bytes * 1024 / 8, rel=1e-6)
    assert node.total_bytes > whole.total_bytes


def test_hybrid_sharding_reduces_inside_the_group_and_all_reduces_the_shards():
    """Gradients reduce-scatter over the 8 ranks of a node (NVLink), then each rank all-reduces
    its eighth with its 127 replicas across nodes on its own NIC; parameters all-gather inside
    the node. Sharded over all 1,024 ranks, both collectives ride a ring through every node."""
    import numpy as np

    from advisor.perf.collectives import ALL_GATHER, RING_ALLREDUCE
    from advisor.perf.layout import stage_layout
    from advisor.perf.step_comm import data_parallel

    coll = load_calibration().collectives.for_platform(A100)
    layout = stage_layout(LLAMA2_7B, 1, 1)
    one = np.array([[1.0]])
    kw = dict(tp=one, cp=one, dp=np.array([[1024.0]]), ep=one, etp=one,
              precision=np.array(["bf16"]), grad_bytes=np.array([[2.0]]))
    flat = data_parallel(layout, A100, coll, **kw)
    node = data_parallel(layout, A100, coll, shard=np.array([[8.0]]), **kw)
    params = float(flat.dense_params[0, 0])
    expected = (coll.time(REDUCE_SCATTER, params * 2, 8, True, A100, 8)
                + coll.time(RING_ALLREDUCE, params / 8 * 2, 128, False, A100, 1))
    assert float(node.reduce_scatter_s[0, 0]) == pytest.approx(float(expected))
    assert float(node.all_gather_s[0, 0]) == pytest.approx(
        float(coll.time(ALL_GATHER, params * 2, 8, True, A100, 8)))
    assert float(node.all_gather_s[0, 0]) < float(flat.all_gather_s[0, 0])


def test_a_collectives_latency_grows_with_its_ring():
    coll = load_calibration().collectives
    one_node = coll.latency(REDUCE_SCATTER, 8, True, A100)
    many = coll.latency(REDUCE_SCATTER, 1024, False, A100)
    assert float(many) > 50 * float(one_node) / 8
    assert float(coll.latency(REDUCE_SCATTER, 1, True, A100)) == 0.0


def test_predict_takes_the_flag_and_the_csv_columns(tmp_path):
    base = ["predict", "-m", "llama2-7b", "-p", "a100", "-g", "1024", "--gbs", "1024",
            "--seq-len", "4096", "--dp-sharding", "full", "--analytical", "--json"]
    assert runner.invoke(app, [*base, "--dp-shard-size", "8"]).exit_code == 0
    bad = runner.invoke(app, [*base, "--dp-shard-size", "7"])
    assert bad.exit_code == 2 and "must divide dp × cp" in bad.output
    src = tmp_path / "runs.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs,dp_sharding,dp_shard_size,"
                   "num_distributed_optimizer_instances\n"
                   "llama2-7b,a100,1024,4096,1024,optimizer,,\n"
                   "llama2-7b,a100,1024,4096,1024,optimizer,8,\n"
                   "llama2-7b,a100,1024,4096,1024,optimizer,,128\n")
    dst = tmp_path / "out.csv"
    result = runner.invoke(app, ["predict", "--input", str(src), "--output", str(dst),
                                 "--analytical"])
    assert result.exit_code == 0, result.output
    out = pd.read_csv(dst)
    memory = out["pred_memory_gb"].to_numpy()
    assert memory[1] == pytest.approx(memory[2]) and memory[1] > memory[0]


def test_recommend_pins_it_on_the_layouts_it_divides():
    result = runner.invoke(app, ["recommend", "-m", "llama2-7b", "-p", "a100", "-g", "64",
                                 "--dp-sharding", "full", "--dp-shard-size", "8", "--top", "1",
                                 "--json"])
    assert result.exit_code == 0, result.output
    import json

    best = json.loads(result.output)["choices"][0]["config"]
    assert best["dp_shard_size"] == 8 and (best["dp"] * best["cp"]) % 8 == 0
