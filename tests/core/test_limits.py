"""Sizes beyond any real system are refused where the types are built, with the reason, so no
input path (flags, CSV cells, config.json, catalog files, the Python API) can overflow the
vectorised models or start a search that never ends."""

import dataclasses

import pytest

from advisor import catalog
from advisor.core import limits
from advisor.core.errors import AdvisorError, CatalogError, ConfigError, UnknownNameError
from advisor.core.parallel import Job, ParallelConfig


@pytest.mark.parametrize("field, limit", [("gbs", limits.GLOBAL_BATCH),
                                          ("seq_len", limits.SEQUENCE),
                                          ("tp", limits.GPUS), ("vp", limits.VIRTUAL_STAGES),
                                          ("lora_rank", limits.LORA_RANK)])
def test_a_parallel_size_beyond_its_limit_is_refused_with_the_reason(field, limit):
    at_limit = {"gbs": limit.most} if field == "gbs" else {}
    with pytest.raises(ConfigError, match=rf"^{field} {limit.most + 1:,} is beyond advisor's "
                                          rf"limit of {limit.most:,} \(.+\)\.$"):
        ParallelConfig(**{**at_limit, field: limit.most + 1})


def test_the_layout_as_a_whole_is_bounded_too():
    """Each size within its limit, their product (the GPUs) beyond: int64 would overflow."""
    most = limits.GPUS.most
    with pytest.raises(ConfigError, match="tp × pp × cp × dp"):
        ParallelConfig(tp=most, pp=most, dp=most, cp=most, gbs=most)
    ParallelConfig(tp=8, pp=16, dp=8192, gbs=8192)   # 1,048,576 GPUs is allowed


def test_a_job_beyond_any_cluster_is_refused_and_astronomical_numbers_stay_short():
    model, platform = catalog.load_model("llama3-8b"), catalog.load_platform("h100")
    with pytest.raises(ConfigError) as e:
        Job(model=model, platform=platform, num_gpus=10**40, seq_len=4096, gbs=64)
    assert str(e.value).startswith("num_gpus 1e+40 is beyond advisor's limit of 1,048,576")


def test_model_shapes_and_parameter_counts_are_bounded():
    base = catalog.load_model("llama3-8b")
    with pytest.raises(CatalogError, match="num_layers 5,000 is beyond"):
        dataclasses.replace(base, num_layers=5000)
    with pytest.raises(CatalogError, match="parameters is beyond advisor's limit of 1e\\+15"):
        catalog.load_model("llama3-8b@num_layers=4000,hidden_size=1000000")
    # A scaled model's errors name the scaled model, not the catalog file it came from.
    with pytest.raises(CatalogError, match=r"^llama3-8b@hidden_size=9999999999: hidden_size"):
        catalog.load_model("llama3-8b@hidden_size=9999999999")


@pytest.mark.parametrize("name, message", [
    ("llama3-8b\x00", r"^model 'llama3-8b\\x00' contains the control character '\\x00'\.$"),
    ("x" * 5000, r"^model is 5,000 characters long"),
    ("llama3-8b@vocab_size=²", "scaled models are written NAME@field=int"),
    ("q" * 300, r"^unknown model 'q{80}'\.\.\. \(300 characters\)"),
])
def test_names_no_catalog_or_file_can_have_are_refused_on_one_line(name, message):
    with pytest.raises(AdvisorError, match=message) as e:
        catalog.load_model(name)
    assert "\n" not in str(e.value)


def test_a_platform_name_with_invisible_characters_is_shown_escaped():
    with pytest.raises(UnknownNameError) as e:
        catalog.load_platform("h100\u200b华")
    assert "'h100\\u200b华'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", [10**308, 10**309, 10**5000], ids=["1e308", "1e309", "1e5000"])
def test_a_number_past_float_range_is_refused_cleanly(value):
    with pytest.raises(ConfigError, match="beyond advisor's limit"):
        limits.check_most("gpus", value, limits.GPUS)
