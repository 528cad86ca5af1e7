import numpy as np
import pytest

from advisor import catalog
from advisor.core.errors import ConfigError
from advisor.core.parallel import (
    Job,
    ParallelConfig,
    default_gbs,
    default_seq_len,
    make_config,
    make_job,
)


def test_vp_requires_pp():
    with pytest.raises(ConfigError, match="vp .* needs pp > 1"):
        ParallelConfig(vp=2, pp=1)


def test_sequence_parallel_requires_tp():
    with pytest.raises(ConfigError, match="sequence_parallel needs tp > 1"):
        ParallelConfig(sequence_parallel=True)


def test_gbs_is_a_multiple_of_mbs_times_dp():
    with pytest.raises(ConfigError, match=r"gbs \(10\) must be a multiple of mbs × dp"):
        ParallelConfig(dp=4, mbs=1, gbs=10)


def test_cp_divides_the_sequence_in_two_cp_chunks():
    with pytest.raises(ConfigError, match="2 × cp"):
        ParallelConfig(cp=3, seq_len=4096)


def test_positive_sizes():
    with pytest.raises(ConfigError, match="tp must be a positive whole number"):
        ParallelConfig(tp=0)


def test_unknown_precision_lists_valid_ones():
    with pytest.raises(ConfigError, match="bf16.*mxfp8"):
        ParallelConfig(precision="int3")


def test_overlap_param_gather_needs_sharding():
    with pytest.raises(ConfigError, match="overlap_param_gather"):
        ParallelConfig(overlap_param_gather=True, dp_sharding="none")


def test_job_refuses_precision_the_platform_lacks():
    with pytest.raises(ConfigError, match="a100 cannot run fp8"):
        Job(catalog.load_model("8b"), catalog.load_platform("a100"), 8, 4096, 64, "fp8")


def test_derived_quantities():
    c = ParallelConfig(tp=8, pp=4, dp=2, cp=2, mbs=2, gbs=64)
    assert c.world_size == 128
    assert c.num_microbatches == 16


def test_defaults_are_documented_values():
    m = catalog.load_model("70b")
    assert default_seq_len(m) == 8192
    assert default_seq_len(catalog.load_model("llama3.1-405b")) == 8192
    assert default_gbs(m, num_gpus=64, seq_len=8192) == 256          # 2M tokens
    assert default_gbs(m, num_gpus=16384, seq_len=8192) == 8192      # at least gpus/2
    # The batch grows with the job: 405B on 1,024 GPUs gets NVIDIA's smallest recipe batch.
    assert default_gbs(catalog.load_model("llama3.1-405b"), num_gpus=1024, seq_len=8192) == 512
    job = make_job(m, catalog.load_platform("h200"), num_gpus=64)
    assert (job.seq_len, job.gbs) == (8192, 256)


def test_etp_defaults_to_tp_as_megatron_core_does():
    moe = catalog.load_model("mixtral-8x7b")
    job = make_job(moe, catalog.load_platform("h100"), num_gpus=64, seq_len=4096, gbs=256)
    assert make_config(job, tp=4, ep=8).etp == 4
    assert make_config(job, tp=4, ep=8, etp=1).etp == 1
    # ep × tp must divide the stage's GPUs (tp·cp·dp = 16 with pp 4): 8 × 4 does not.
    assert make_config(job, tp=4, pp=4, ep=8).etp == 1
    dense = make_job(catalog.load_model("llama3-8b"), catalog.load_platform("h100"), num_gpus=8)
    assert make_config(dense, tp=2).etp == 1


@pytest.mark.parametrize("given, name", [("ddp", "none"), ("ZeRO1", "optimizer"),
                                         ("zero-1", "optimizer"), ("FSDP", "full"),
                                         ("zero3", "full"), (" full ", "full")])
def test_sharding_aliases_become_the_one_vocabulary(given, name):
    from advisor.core.parallel import ParallelConfig, sharding_name

    assert sharding_name(given) == name
    assert ParallelConfig(tp=2, dp_sharding=given).dp_sharding == name


def test_unknown_sharding_lists_the_vocabulary():
    from advisor.core.errors import ConfigError
    from advisor.core.parallel import ParallelConfig

    with pytest.raises(ConfigError, match="none, optimizer, full"):
        ParallelConfig(dp_sharding="zero9")


def test_finetune_label_names_what_is_trained():
    from advisor.core.parallel import ParallelConfig, finetune_label

    assert finetune_label(ParallelConfig()) == ""
    assert finetune_label(ParallelConfig(finetune="full")) == "full fine-tuning"
    assert finetune_label(ParallelConfig(finetune="lora", lora_rank=8,
                                         lora_targets="all-linear")) == \
        "LoRA rank 8 (all-linear)"


def test_knob_values_sort_as_numbers_and_in_knob_order():
    import numpy as np

    from advisor.core.knobs import sorted_values

    assert sorted_values({1, 10, 2, 20, 4, 5}) == [1, 2, 4, 5, 10, 20]
    assert sorted_values(np.array([16, 2, 128, 1])) == [1, 2, 16, 128]
    assert sorted_values(["full", "none", "selective"]) == ["none", "selective", "full"]
    assert sorted_values(["full", "optimizer", "none"]) == ["none", "optimizer", "full"]
    assert sorted_values([True, False]) == [False, True]


def test_moe_dispatcher_reads_megatrons_spellings_and_refuses_the_rest():
    from advisor.core.parallel import invalid_config_rows

    for spelling, name in (("flex", "deepep"), ("HybridEP", "deepep"), ("all-to-all", "alltoall"),
                           ("alltoall", "alltoall"), ("auto", "auto")):
        assert ParallelConfig(dp=8, ep=8, gbs=8, moe_dispatcher=spelling).moe_dispatcher == name
    with pytest.raises(ConfigError, match="moe_dispatcher 'allgather' is unknown; use one of "
                                          "auto, alltoall, deepep"):
        ParallelConfig(dp=8, ep=8, gbs=8, moe_dispatcher="allgather")
    with pytest.raises(ConfigError, match="needs ep > 1"):
        ParallelConfig(dp=8, gbs=8, moe_dispatcher="deepep")
    cols = {"tp": np.array([1, 1, 1]), "dp": np.array([8, 8, 8]), "ep": np.array([8, 1, 8]),
            "gbs": np.array([8, 8, 8]),
            "moe_dispatcher": np.array(["alltoall", "deepep", "bogus"], dtype=object)}
    assert invalid_config_rows(cols).tolist() == [False, True, True]
