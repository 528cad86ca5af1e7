import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor import catalog
from advisor.core.errors import ConfigError
from advisor.core.interleaving import group_size, group_sizes
from advisor.core.parallel import ParallelConfig, make_config, make_job
from advisor.core.space import config_from_row, enumerate_space, validate
from advisor.perf.memory import estimate_memory

H200 = catalog.load_platform("h200")
LLAMA70 = catalog.load_model("70b")
MIXTRAL = catalog.load_model("mixtral-8x7b")


def cfg(**kw):
    base = dict(tp=8, pp=2, dp=4, mbs=1, gbs=64, seq_len=8192, sequence_parallel=True)
    return ParallelConfig(**{**base, **kw})


def test_tp_divides_kv_heads_with_suggestions():
    match = r"tp \(16\) must divide num_kv_heads.*try tp in \{1, 2, 4, 8\}"
    with pytest.raises(ConfigError, match=match):
        validate(cfg(tp=16, dp=2), LLAMA70, H200, num_gpus=64)


def test_tp_divides_heads():
    with pytest.raises(ConfigError, match=r"num_attention_heads \(96\)"):
        validate(cfg(tp=64, pp=1, dp=1, sequence_parallel=True), catalog.load_model("175b"),
                 H200)


def test_world_size_equals_gpus():
    with pytest.raises(ConfigError, match="job has 32 GPUs"):
        validate(cfg(), LLAMA70, H200, num_gpus=32)


def test_pp_at_most_layers():
    with pytest.raises(ConfigError, match="exceeds the 80 layers"):
        validate(cfg(tp=1, pp=128, dp=1, sequence_parallel=False, gbs=64), LLAMA70, H200)


def test_vp_needs_a_layer_per_virtual_stage():
    with pytest.raises(ConfigError, match="every virtual stage needs a layer"):
        validate(cfg(pp=8, vp=12, dp=1), LLAMA70, H200)


def test_uneven_split_is_allowed_but_flagged():
    notes = validate(cfg(tp=8, pp=7, dp=1, gbs=7), LLAMA70, H200)
    assert any("do not split evenly" in n for n in notes)


def test_ep_divides_experts():
    with pytest.raises(ConfigError, match=r"ep \(3\) must divide the 8 experts"):
        validate(cfg(tp=1, pp=1, dp=24, ep=3, gbs=24, sequence_parallel=False), MIXTRAL, H200)


def test_ep_fits_megatron_expert_folding():
    with pytest.raises(ConfigError, match="ep × etp"):
        validate(cfg(tp=2, pp=4, dp=1, ep=8, etp=1, gbs=8), MIXTRAL, H200)


def test_ep_requires_moe():
    with pytest.raises(ConfigError, match="is dense"):
        validate(cfg(ep=2), LLAMA70, H200)


def test_fsdp_with_pipeline_depends_on_the_framework():
    # Megatron-FSDP does not pipeline; PyTorch FSDP2 under TorchTitan or NeMo AutoModel does
    # (DeepSeek-V3 on 256-1,024 H100).
    with pytest.raises(ConfigError, match="FSDP.*torchtitan"):
        validate(cfg(dp_sharding="full"), LLAMA70, H200)
    for framework in ("torchtitan", "automodel"):
        validate(cfg(dp_sharding="full"), LLAMA70, H200, framework=framework)


def test_tp_beyond_nvlink_domain_is_flagged():
    small_domain = dataclasses.replace(H200, nvlink_domain_size=4)
    notes = validate(cfg(tp=8, pp=1, dp=8), LLAMA70, small_domain)
    assert any("NVLink domain" in n for n in notes)


@pytest.mark.parametrize("model,gpus", [("70b", 64), ("mixtral-8x7b", 32),
                                        ("nemotron-3-nano-30b-a3b", 16), ("deepseek-v3", 64)])
def test_every_enumerated_config_is_valid_and_unique(model, gpus):
    m = catalog.load_model(model)
    job = make_job(m, H200, num_gpus=gpus)
    table = enumerate_space(job)
    assert len(table) > 0
    assert not table.duplicated().any()
    for _, row in table.sample(min(len(table), 400), random_state=0).iterrows():
        validate(config_from_row(row), m, H200, num_gpus=gpus)


def test_space_covers_the_papers_llama_layouts():
    # Go et al. MICRO'25 ran Llama3-70B on 32 H200 as TP8-PP2, TP4-PP4, TP2-PP8, TP1-PP16.
    table = enumerate_space(make_job(LLAMA70, H200, num_gpus=32, gbs=128))
    layouts = set(zip(table.tp, table.pp, strict=True))
    assert {(8, 2), (4, 4), (2, 8), (1, 16)} <= layouts


def test_tp_beyond_nvlink_is_enumerated_and_flagged():
    small = dataclasses.replace(H200, nvlink_domain_size=4)
    table = enumerate_space(make_job(LLAMA70, small, num_gpus=64))
    assert table[table.tp == 8]["tp_beyond_nvlink"].all()
    assert not table[table.tp <= 4]["tp_beyond_nvlink"].any()


def test_pins_fix_a_knob():
    table = enumerate_space(make_job(LLAMA70, H200, num_gpus=64), pins={"tp": 4, "mbs": 2})
    assert set(table.tp) == {4} and set(table.mbs) == {2}


def test_unknown_pin_is_refused():
    with pytest.raises(ConfigError, match="cannot pin"):
        enumerate_space(make_job(LLAMA70, H200, num_gpus=64), pins={"tpp": 4})


def test_every_even_vp_is_enumerated():
    table = enumerate_space(make_job(catalog.load_model("8b"), H200, num_gpus=8),
                            pins={"pp": 2})
    assert {1, 2, 4, 8, 16} <= set(table.vp)


def test_job_fields_cannot_be_pinned():
    with pytest.raises(ConfigError, match="part of the job"):
        enumerate_space(make_job(LLAMA70, H200, num_gpus=64), pins={"gbs": 1024})


def test_boolean_pins_apply():
    table = enumerate_space(make_job(LLAMA70, H200, num_gpus=64),
                            pins={"grad_reduce_in_fp32": True, "tp": "8"})
    assert table.grad_reduce_in_fp32.all() and set(table.tp) == {8}


def test_vp_runs_the_microbatches_megatron_core_can_group():
    # Llama 3.1 405B on 768 H100, PP 6 / VP 3 with 16 micro-batches per step: Megatron-Core's
    # default group of pp (6) leaves a last group of 4 and raises at the first step; a group of
    # 8 (--microbatch-group-size-per-virtual-pipeline-stage, which the emitters write) runs.
    model, platform = catalog.load_model("llama3.1-405b"), catalog.load_platform("h100")
    job = make_job(model, platform, num_gpus=768, seq_len=8192, gbs=256)
    config = make_config(job, tp=8, pp=6, vp=3)
    assert config.num_microbatches == 16 and group_size(16, 6) == 8
    validate(config, model, platform, num_gpus=768)
    space = enumerate_space(job, pins={"tp": 8, "pp": 6})
    interleaved = space.query("vp > 1")
    assert not interleaved.empty
    assert (group_sizes(job.gbs // (interleaved["mbs"] * interleaved["dp"]), 6,
                        torch_pipelining=False) > 0).all()
    # The larger group holds more micro-batches in flight: 16 micro-batches (group 8) keep more
    # activations than 18 (group 6).
    more = make_job(model, platform, num_gpus=768, seq_len=8192, gbs=288)
    grouped, default = (estimate_memory(model, platform=platform,
                                        parallel=make_config(j, tp=8, pp=6, vp=3))
                        for j in (job, more))
    assert grouped.activations_bytes > default.activations_bytes
    # Fewer micro-batches than pp cannot fill the pipeline: refused, and never enumerated.
    few = make_job(model, platform, num_gpus=768, seq_len=8192, gbs=64)
    with pytest.raises(ConfigError, match="at least pp"):
        validate(make_config(few, tp=8, pp=6, vp=3), model, platform, num_gpus=768)
    thin = enumerate_space(few, pins={"tp": 8, "pp": 6}).query("vp > 1")
    assert (few.gbs // (thin["mbs"] * thin["dp"]) >= 6).all()


def test_torch_pipelining_interleaves_in_equal_rounds():
    # torch.distributed.pipelining (TorchTitan): M micro-batches in M // pp rounds of equal
    # size: 9 on PP 4 is 2 rounds of 4.5 (refused), 5 is one round, 3 (fewer than pp) one too.
    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    for gbs, ok in ((18, False), (10, True), (6, True)):
        config = make_config(make_job(model, platform, num_gpus=64, gbs=gbs), tp=8, pp=4, vp=2)
        if ok:
            validate(config, model, platform, framework="torchtitan")
        else:
            with pytest.raises(ConfigError, match="rounds of equal size"):
                validate(config, model, platform, framework="torchtitan")
    megatron = make_config(make_job(model, platform, num_gpus=64, gbs=18), tp=8, pp=4, vp=2)
    validate(megatron, model, platform)  # Megatron-Core: 9 in groups of 9


def test_torchtitan_space_interleaves_as_torch_does():
    """The space for TorchTitan keeps vp > 1 only where torch's ScheduleInterleaved1F1B runs the
    micro-batches (M // pp rounds dividing M); Megatron's keeps its own groups. Llama 3 70B on
    48 GPUs, PP 3: 16 micro-batches per step run in Megatron-Core groups of 4 but are 5 rounds
    of 3.2 in torch (its error: "multiple of the number of rounds (5), but got 16")."""
    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    job = make_job(model, platform, num_gpus=48, gbs=32)
    pins = {"tp": 8, "pp": 3, "cp": 1, "mbs": 1}
    megatron = enumerate_space(job, pins=pins).query("vp > 1")
    titan = enumerate_space(job, pins=pins, framework="torchtitan").query("vp > 1")
    assert not megatron.empty and titan.empty     # 16 micro-batches on PP 3
    fewer = make_job(model, platform, num_gpus=48, gbs=4)  # 2 micro-batches: one round in torch
    assert enumerate_space(fewer, pins=pins).query("vp > 1").empty
    assert not enumerate_space(fewer, pins=pins, framework="torchtitan").query("vp > 1").empty
    for space, framework in ((megatron, "megatron"), (titan, "torchtitan")):
        for row in space.head(3).itertuples():
            validate(make_config(job, tp=row.tp, pp=row.pp, vp=row.vp, mbs=row.mbs), model,
                     platform, framework=framework)


_ODD = {"tp": [0, 3, 16], "pp": [3, 5, 100], "cp": [3, 4], "dp": [3], "ep": [2, 16],
        "etp": [2], "vp": [2, 3, 5], "mbs": [3], "gbs": [12, 100], "seq_len": [6, 4097],
        "precision": ["nvfp4", "int3"], "recompute": ["most"], "dp_sharding": ["none", "full"],
        "attention": ["unfused"], "sequence_parallel": [True, False],
        "overlap_param_gather": [True], "first_stage_layers": [1, 3], "last_stage_layers": [2],
        "extra_gpus": [1]}
"""Values that break one rule or another, alone or with the rest of a row."""


_PICK = {name: st.sampled_from(values) for name, values in {
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4], "cp": [1, 2], "dp": [1, 2, 4], "mbs": [1, 2],
    "vp": [1, 2], "gbs_factor": [1, 2, 3], "precision": ["bf16", "fp8"],
    "recompute": ["none", "full"], "dp_sharding": ["optimizer", "none"],
    "changes": [0, 1, 1, 2]}.items()}
_ODD_PICK = {field: st.sampled_from(values) for field, values in _ODD.items()}
_ODD_FIELDS = {n: st.lists(st.sampled_from(sorted(_ODD)), min_size=n, max_size=n, unique=True)
               for n in (0, 1, 2)}
"""The strategies `_row` draws from, built once (building one inside every draw made
Hypothesis validate it again each time: most of this module's run time)."""


@st.composite
def _row(draw):
    """A layout that is valid for most models, with up to two fields changed to values that
    break a rule: each rule gets hit on its own or in pairs, not only among many."""
    tp, pp, cp, dp = (draw(_PICK[k]) for k in ("tp", "pp", "cp", "dp"))
    mbs = draw(_PICK["mbs"])
    row = {"tp": tp, "pp": pp, "cp": cp, "dp": dp, "ep": 1, "etp": 1,
           "vp": draw(_PICK["vp"]) if pp > 1 else 1, "mbs": mbs,
           "gbs": mbs * dp * pp * draw(_PICK["gbs_factor"]), "seq_len": 4096,
           "precision": draw(_PICK["precision"]),
           "recompute": draw(_PICK["recompute"]),
           "dp_sharding": draw(_PICK["dp_sharding"]),
           "attention": "flash", "sequence_parallel": tp > 1, "overlap_param_gather": False,
           "first_stage_layers": 0, "last_stage_layers": 0, "extra_gpus": 0}
    for field in draw(_ODD_FIELDS[draw(_PICK["changes"])]):
        row[field] = draw(_ODD_PICK[field])
    return row


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(_row(), min_size=20, max_size=40),
       model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "deepseek-v3",
                              "nemotron-3-nano-30b-a3b"]),
       platform=st.sampled_from(["h100", "b200"]),
       framework=st.sampled_from(["megatron", "torchtitan"]))
def test_the_vectorised_rules_are_validates(rows, model, platform, framework):
    """`invalid_rows` (what the Predictor checks a table with) flags exactly the rows that
    building a `ParallelConfig` or `validate` refuses, rule for rule."""
    import numpy as np

    from advisor.core.space import invalid_rows

    m, p = catalog.load_model(model), catalog.load_platform(platform)
    expected = []
    for row in rows:
        fields = {k: v for k, v in row.items() if k != "extra_gpus"}
        gpus = row["tp"] * row["pp"] * row["cp"] * row["dp"] + row["extra_gpus"]
        try:
            validate(ParallelConfig(**fields), m, p, num_gpus=gpus, framework=framework)
            expected.append(False)
        except ConfigError:
            expected.append(True)
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0] if k != "extra_gpus"}
    cols["num_gpus"] = np.array([r["tp"] * r["pp"] * r["cp"] * r["dp"] + r["extra_gpus"]
                                 for r in rows])
    assert invalid_rows(m, p, cols, framework=framework).tolist() == expected


def test_deepep_is_refused_off_nvidia_in_one_config_and_in_a_table():
    from advisor.core.space import invalid_rows

    mi300x = catalog.load_platform("mi300x")
    config = ParallelConfig(tp=1, dp=64, ep=8, gbs=64, moe_dispatcher="deepep")
    with pytest.raises(ConfigError, match="deepep runs on NVIDIA GPUs.*use alltoall or auto"):
        validate(config, MIXTRAL, mi300x, num_gpus=64)
    validate(config.replace(moe_dispatcher="alltoall"), MIXTRAL, mi300x, num_gpus=64)
    validate(config, MIXTRAL, H200, num_gpus=64)
    cols = {k: [getattr(c, k) for c in (config, config.replace(moe_dispatcher="alltoall"))]
            for k in dataclasses.asdict(config)}
    assert invalid_rows(MIXTRAL, mi300x, cols).tolist() == [True, False]
    assert invalid_rows(MIXTRAL, H200, cols).tolist() == [False, False]
