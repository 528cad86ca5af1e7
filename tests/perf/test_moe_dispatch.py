"""The MoE dispatcher's all-to-all across nodes, against DeepEP's published measurements."""

import numpy as np
import pandas as pd
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_config, make_job
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
