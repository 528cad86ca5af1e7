"""Dropout's HBM traffic: each block's bias-dropout-add writes a one-byte mask, and unfused
attention drops every score's probability in a kernel of its own (read 2 B, write 2 B and a
1 B mask forward; as much backward). vTrain's runs keep Megatron-DeepSpeed's dropout 0.1
(`advisor.perf.vtrain.DROPOUT`); where their GPU, not the host, sets the pace, the step model
priced them too fast until it counted that traffic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor.catalog import load_platform
from advisor.perf.memory import DROPOUT_MASK_BYTES
from advisor.perf.step import step_table
from advisor.perf.step_compute import DROPOUT_FORWARD_BYTES, MEMORY_EFFICIENCY
from advisor.perf.vtrain import gpt_spec, load_vtrain, vtrain_configs, vtrain_groups


def one_run(attention: str, dropout: float, recompute: str) -> pd.Series:
    model = gpt_spec(hidden=2048, heads=16, layers=24, seq_len=1024)
    configs = vtrain_configs(pd.DataFrame({"tp": [2], "pp": [1], "dp": [1], "mbs": [4],
                                           "gbs": [16], "seq_len": [1024]}))
    configs = configs.assign(attention=attention, dropout=dropout, recompute=recompute)
    return step_table(model, load_platform("a100"), configs,
                      framework="megatron-deepspeed").iloc[0]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_dropout_costs_its_bytes_of_hbm_traffic(recompute):
    on, off = one_run("unfused", 0.1, recompute), one_run("unfused", 0.0, recompute)
    hidden, heads, seq, tp, tokens = 2048, 16, 1024, 2, 16 * 1024
    per_token = (2 * DROPOUT_MASK_BYTES * hidden
                 + DROPOUT_FORWARD_BYTES * heads / tp * seq)        # forward, per layer
    passes = 2 + (recompute == "full")                               # fwd + bwd (+ recompute)
    expected = (24 * passes * per_token * tokens
                / (load_platform("a100").hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY))
    added = on["memory_bound_s"] - off["memory_bound_s"]
    assert added == pytest.approx(expected, rel=1e-6)
    assert on["step_time_s"] > off["step_time_s"]


def test_fused_attention_drops_inside_its_kernel():
    on, off = one_run("flash", 0.1, "none"), one_run("flash", 0.0, "none")
    masks = (24 * 2 * 2 * DROPOUT_MASK_BYTES * 2048 * 16 * 1024
             / (load_platform("a100").hbm_bandwidth_bytes_per_s * MEMORY_EFFICIENCY))
    assert on["memory_bound_s"] - off["memory_bound_s"] == pytest.approx(masks, rel=1e-6)


def test_vtrain_runs_the_gpu_paces_are_priced_nearer_their_measurement(vtrain_dir):
    """Measured direction: on vTrain's single-node runs that the step model finds GPU-bound
    (no host wait), counting dropout moves the median predicted / measured step time toward 1
    (0.92 without it: priced too fast; 0.98 with it)."""
    frame = load_vtrain(vtrain_dir / "ground_truth_single.csv")
    tables = {}
    for dropout in (0.0, 0.1):
        parts = []
        for model, part, configs in vtrain_groups(frame):
            table = step_table(model, load_platform("a100"), configs.assign(dropout=dropout),
                               framework="megatron-deepspeed")
            table.index = part.index
            parts.append(table)
        tables[dropout] = pd.concat(parts).loc[frame.index]
    gpu_bound = (tables[0.1]["overhead_s"] == 0).to_numpy()
    assert gpu_bound.sum() >= 200
    measured = frame["measured_ms"].to_numpy()[gpu_bound] / 1e3
    before, after = (np.median(tables[d]["step_time_s"].to_numpy()[gpu_bound] / measured)
                     for d in (0.0, 0.1))
    assert before < after
    assert abs(np.log(after)) < abs(np.log(before))
