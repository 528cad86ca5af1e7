"""`explain`'s advice names only the remedies that apply to the layout it explains."""

from __future__ import annotations

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.explain.bottlenecks import explain
from advisor.perf.analytical import predict_config


def _biggest_loss(model: str, platform: str, gpus: int, dispatcher: str = "auto",
                  **knobs) -> str:
    m, p = catalog.load_model(model), catalog.load_platform(platform)
    config = make_config(make_job(m, p, num_gpus=gpus), **knobs).replace(
        moe_dispatcher=dispatcher)
    lines = explain(predict_config(m, p, config), m, p)
    return next(line for line in lines if line.startswith("Biggest loss"))


def test_clock_loss_advice_fits_the_layout():
    # GPT3-175B TP2-PP16 on H200: the power cap is the biggest loss. A smaller micro-batch
    # cannot be advised at micro-batch 1; what is named comes with its predicted gain (the
    # changes are checked: tests/explain/test_checked_remedies.py).
    line = _biggest_loss("gpt3-175b", "h200", 32, tp=2, pp=16, mbs=1)
    assert "clocks below maximum" in line
    assert "micro-batch 1 instead" not in line
    assert "throughput)" in line or "nothing in this layout" in line
    for remedy in line.split("To cut it: ")[1].rstrip(".").split(", "):
        assert "nothing" in remedy or "% throughput)" in remedy, remedy


def test_clock_loss_without_a_remedy_says_so():
    # One pipeline stage, micro-batch 1, no overlap, cold plates (no rear row): nothing in the
    # layout lowers the cap's loss.
    line = _biggest_loss("llama3-8b", "gb200", 8, tp=1, pp=1, mbs=1, overlap=False)
    assert "clocks below maximum" in line, line
    assert "nothing in this layout" in line
    # The same layout on air-cooled H200 has a hotter rear row: a cooler inlet helps.
    air = _biggest_loss("llama3-8b", "h200", 8, tp=1, pp=1, mbs=1, overlap=False)
    assert "To cut it: a 5 °C cooler inlet (20 °C) (+" in air, air


def test_all_to_all_advice_names_the_nvlink_domain_only_when_ep_leaves_it():
    # Qwen3-30B-A3B at EP 8 on one H100 node: the all-to-all is inside NVLink already.
    inside = _biggest_loss("qwen3-30b-a3b", "h100", 8, tp=1, ep=8, mbs=1)
    assert "all-to-all" in inside and "lower ep" in inside
    assert "NVLink" not in inside, inside
    assert "--ep-comm-overlap" in inside     # PP 1, no full recompute: it can run
    # EP 32 spans four 8-GPU H100 nodes; on GB200 the 72-GPU NVL72 domain holds it.
    across = _biggest_loss("qwen3-30b-a3b", "h100", 32, tp=1, ep=32, mbs=1)
    assert "keep ep × etp inside the 8-GPU NVLink domain" in across
    nvl72 = _biggest_loss("qwen3-30b-a3b", "gb200", 32, tp=1, ep=32, mbs=1)
    assert "all-to-all" in nvl72 and "NVLink" not in nvl72, nvl72


def test_tp_advice_offers_overlap_only_where_it_is_off():
    line = _biggest_loss("llama3-70b", "h100", 64, tp=8, pp=8, mbs=1, overlap=False)
    assert "tensor-parallel" in line and "turn on TP communication overlap" in line
    assert "inside the" not in line   # TP 8 is one H100 node


def test_all_to_all_advice_offers_the_overlap_only_where_it_can_run():
    # PP 2 without a virtual pipeline: Megatron-Core cannot overlap the all-to-all there.
    line = _biggest_loss("qwen3-30b-a3b", "h100", 32, tp=1, pp=2, ep=16, mbs=1)
    assert "all-to-all" in line and "--ep-comm-overlap" not in line, line


def test_all_to_all_advice_offers_deepep_only_where_the_named_all_to_all_crosses_nodes():
    across = _biggest_loss("qwen3-30b-a3b", "h100", 32, "alltoall", tp=1, ep=32, mbs=1)
    assert "--moe-dispatcher deepep" in across, across
    # DeepEP already (auto across H100 nodes), or all-to-all inside one node: nothing to gain.
    assert "--moe-dispatcher" not in _biggest_loss("qwen3-30b-a3b", "h100", 32, tp=1, ep=32,
                                                   mbs=1)
    assert "--moe-dispatcher" not in _biggest_loss("qwen3-30b-a3b", "h100", 8, "alltoall",
                                                   tp=1, ep=8, mbs=1)


def test_the_first_line_names_the_dispatcher_priced():
    def first(gpus: int, dispatcher: str = "auto", overlap: bool = False, **knobs) -> str:
        m, p = catalog.load_model("qwen3-30b-a3b"), catalog.load_platform("h100")
        config = make_config(make_job(m, p, num_gpus=gpus), **knobs).replace(
            moe_dispatcher=dispatcher, ep_comm_overlap=overlap)
        return explain(predict_config(m, p, config), m, p)[0]

    assert "ep 32 (DeepEP dispatch)" in first(32, tp=1, ep=32, mbs=1)
    assert "ep 8 (all-to-all dispatch)" in first(8, tp=1, ep=8, mbs=1)
    assert "ep 32 (all-to-all dispatch, overlapped)" in first(32, "alltoall", True, tp=1, ep=32,
                                                              mbs=1)
    no_experts_split = first(8, tp=1, ep=1, mbs=1)
    assert ", ep 1," in no_experts_split and "dispatch" not in no_experts_split
