import pytest

from advisor import catalog
from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig
from advisor.perf import memory as mem_mod
from advisor.perf.memory import estimate_memory

H100 = catalog.load_platform("h100")
LLAMA70 = catalog.load_model("70b")


def est(model=LLAMA70, platform=H100, **kw):
    base = dict(tp=8, pp=4, dp=2, mbs=1, gbs=64, seq_len=8192, sequence_parallel=True)
    return estimate_memory(model, parallel=ParallelConfig(**{**base, **kw}), platform=platform)


def test_model_states_are_18_bytes_per_param_without_sharding():
    # Megatron distributed-optimizer docs: 2 (bf16 weights) + 4 (fp32 grads) + 12 (fp32 master
    # weights + Adam moments) = 18 bytes per parameter without the distributed optimizer.
    m = est(tp=1, pp=1, dp=1, gbs=1, sequence_parallel=False, dp_sharding="none",
            grad_reduce_in_fp32=True)
    states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    assert states == pytest.approx(18 * LLAMA70.params.total, rel=1e-9)


def test_distributed_optimizer_is_6_plus_12_over_d():
    d = 8
    m = est(tp=1, pp=1, dp=d, gbs=d, sequence_parallel=False, dp_sharding="optimizer",
            grad_reduce_in_fp32=True)
    states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    assert states == pytest.approx((6 + 12 / d) * LLAMA70.params.total, rel=1e-9)


def _gpt_like(**kw):
    base = dict(name="gpt", num_layers=4, hidden_size=4096, ffn_hidden_size=16384,
                num_attention_heads=32, num_kv_heads=32, vocab_size=51200, max_seq_len=2048,
                gated_mlp=False, norm="layernorm", position_embedding="learned")
    return ModelSpec(**{**base, **kw})


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_activations_follow_korthikanti_without_dropout(tp):
    # Korthikanti et al. 2022 eq. for selective recompute with sequence parallelism:
    # 34·s·b·h/t per layer, of which 2·s·b·h/t are dropout masks (off in LLM recipes) -> 32.
    model = _gpt_like()
    per_token = mem_mod._activation_bytes_per_token(
        model, tp=tp, sp=tp, etp=1, cp=1)
    layer = per_token["attention"] + per_token["mlp"] - per_token["attention_stats"]
    assert layer == pytest.approx(32 * model.hidden_size / tp)


def test_more_tp_never_needs_more_memory():
    prev = None
    for tp in (1, 2, 4, 8):
        m = est(tp=tp, pp=1, dp=8 // tp * 4, gbs=64, sequence_parallel=tp > 1)
        if prev is not None:
            assert m.total_bytes < prev
        prev = m.total_bytes


def test_full_recompute_needs_less_activation_memory():
    none, sel, full = (est(recompute=r).activations_bytes for r in ("none", "selective", "full"))
    assert full < sel <= none


def test_sharding_reduces_optimizer_state():
    none, opt, fsdp = (est(tp=8, pp=1, dp=8, dp_sharding=s) for s in ("none", "optimizer", "full"))
    assert fsdp.optimizer_bytes < none.optimizer_bytes
    assert opt.optimizer_bytes == pytest.approx(none.optimizer_bytes / 8)
    assert fsdp.weights_bytes < opt.weights_bytes


def test_interleaving_holds_more_activations_on_the_first_stage():
    plain, interleaved = est(vp=1), est(vp=5)
    assert interleaved.activations_bytes > plain.activations_bytes


def test_larger_micro_batch_needs_more_memory():
    assert est(mbs=2).total_bytes > est(mbs=1).total_bytes


def test_expert_parallel_splits_experts():
    mix = catalog.load_model("mixtral-8x7b")
    one = est(model=mix, tp=1, pp=1, dp=8, gbs=64, ep=1, sequence_parallel=False)
    eight = est(model=mix, tp=1, pp=1, dp=8, gbs=64, ep=8, sequence_parallel=False)
    assert eight.weights_bytes < one.weights_bytes / 3


def test_heaviest_stage_is_reported():
    # DeepSeek-V3's first three layers are dense, so the first stage is not the heaviest in
    # parameters; the memory model must look at every stage.
    ds = catalog.load_model("deepseek-v3")
    gb300 = catalog.load_platform("gb300")
    m = est(model=ds, platform=gb300, tp=1, pp=16, dp=16, ep=8, gbs=256, seq_len=4096,
            sequence_parallel=False, precision="mxfp8")
    assert 0 <= m.stage < 16


def test_405b_does_not_fit_on_one_node():
    m = est(model=catalog.load_model("405b"), tp=8, pp=1, dp=1, gbs=8)
    assert not m.fits and m.headroom_bytes < 0


def test_capacity_uses_driver_total_where_known():
    assert H100.memory_capacity_bytes > H100.hbm_bytes  # 80 "GB" is 81559 MiB in nvidia-smi


def test_etp_one_stores_less_than_etp_equal_tp_for_moe():
    ds = catalog.load_model("deepseek-v3")
    per = {etp: mem_mod._activation_bytes_per_token(ds, tp=4, sp=4, etp=etp, cp=1)["moe"]
           for etp in (1, 4)}
    assert per[1] < per[4]


def test_mtp_experts_are_split_by_expert_parallelism():
    from advisor.perf.layout import stage_layout

    ds = catalog.load_model("deepseek-v3")
    layout = stage_layout(ds, 16, 1)
    assert layout.expert_params[-1] > layout.expert_params[-2]   # MTP layer's experts
    assert layout.output_params[-1] < 2 * ds.params.output       # not parked on the head
