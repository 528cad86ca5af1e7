import tomllib
from pathlib import Path

import pytest

from advisor import catalog
from advisor.core.errors import CatalogError, UnknownNameError

EXPECTED_PLATFORMS = {"h100", "h200", "a100", "a100-40gb", "b200", "b300", "gb200", "gb300",
                      "mi250", "mi300x"}


def test_every_issue_platform_is_in_the_catalog():
    assert EXPECTED_PLATFORMS <= set(catalog.platforms())


def test_every_platform_number_has_a_source():
    for p in catalog.platforms().values():
        data = tomllib.loads(Path(p.path).read_text())
        for key, value in data.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert p.sources.get(key), f"{p.name}: {key} has no source"
        for prec in data["peak_flops_per_s"]:
            assert p.sources.get(f"peak_flops_per_s.{prec}"), f"{p.name}: {prec} no source"


def test_every_model_has_an_architecture_source_and_published_count():
    for m in catalog.models().values():
        assert m.sources.get("architecture"), m.name
        assert m.published_total_params > 0, f"{m.name} has no published parameter count"
        assert m.sources.get("published_total_params"), m.name


def test_mi250_device_is_one_gcd():
    mi250 = catalog.load_platform("mi250")
    assert mi250.device_unit == "gcd" and mi250.num_devices_per_package == 2


def test_nvl72_domain():
    assert catalog.load_platform("gb200").nvlink_domain_size == 72
    assert catalog.load_platform("gb300").nvlink_domain_size == 72


@pytest.mark.parametrize("alias,name", [("8b", "llama3-8b"), ("70b", "llama3-70b"),
                                        ("405b", "llama3.1-405b"), ("175b", "gpt3-175b"),
                                        ("Llama3.1-405B", "llama3.1-405b"),
                                        ("MIXTRAL-8X7B", "mixtral-8x7b"),
                                        ("DeepSeek-V3", "deepseek-v3")])
def test_model_aliases_resolve_case_insensitively(alias, name):
    assert catalog.load_model(alias).name == name


def test_every_reference_model_is_known_or_documented_missing(reference_csv):
    import csv

    names = {r["model"] for r in csv.DictReader(reference_csv.open())}
    # DeepSeek-V4-Flash: no architecture published by its authors (README, "Catalog").
    unknown = {n for n in names if catalog.find_model(n) is None}
    assert unknown == {"DeepSeek-V4-Flash"}


def test_unknown_model_suggests_close_names():
    with pytest.raises(UnknownNameError, match="Did you mean.*llama3-70b"):
        catalog.load_model("llama3-70")


def test_unknown_platform_suggests_close_names():
    with pytest.raises(UnknownNameError, match="Did you mean.*h200"):
        catalog.load_platform("h20")


def test_cluster_override_changes_only_what_it_names(fixtures):
    base = catalog.load_platform("h200")
    cluster = catalog.load_platform(str(fixtures / "clusters" / "paper-h200.toml"))
    assert cluster.name == "paper-h200"
    assert cluster.inter_node_bandwidth_bytes_per_s == 12.5e9
    assert cluster.hbm_bytes == base.hbm_bytes
    assert cluster.peak_flops_per_s == base.peak_flops_per_s


def test_cluster_override_without_source_is_refused(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "h100"\ntdp_w = 500\n')
    with pytest.raises(CatalogError, match="tdp_w.*sources"):
        catalog.load_platform(str(f))


def test_cluster_override_needs_a_base(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('tdp_w = 500\n')
    with pytest.raises(CatalogError, match="base"):
        catalog.load_platform(str(f))


@pytest.mark.parametrize("text, message", [
    ('base = "h100"\n[sources]\n', None),
    ('base = "h100"\nsources = true\n', "\\[sources\\] must be a table"),
    ('base = "h100"\nsources = { tdp_w = 3 }\ntdp_w = 500\n', "\\[sources\\] must be a table"),
    ('base = "h100"\npeak_flops_per_s = 5\n', "peak_flops_per_s must be a table"),
    ('base = "h100"\nname = [1]\n', "name must be a string"),
    ('base = "h100"\naliases = [1, 2]\n', "aliases must be a list of strings"),
    ('base = "h100"\ntdp_w = nan\n[sources]\ntdp_w = "x"\n', "positive finite number"),
    ('base = "h100"\ntdp_w = 1e300\n[sources]\ntdp_w = "x"\n', "beyond any device"),
    ('base = "h100"\nnum_gpus_per_node = 9007199254740993\n[sources]\n'
     'num_gpus_per_node = "x"\n', "beyond advisor's limit"),
    ('base = "h100"\nchassis = "²"\n', "chassis str '²' is unknown"),
    ('base = "c.toml"\n', "a catalog platform"),
])
def test_a_cluster_file_of_the_wrong_shape_is_refused_with_file_and_key(tmp_path, text,
                                                                       message):
    """What a fuzz run of mutated cluster files crashed on: each is one CatalogError naming
    the file and the key (the file naming itself as its base recursed)."""
    f = tmp_path / "c.toml"
    f.write_text(text, encoding="utf-8")
    if message is None:
        assert catalog.load_platform(str(f)).name == "c"
        return
    with pytest.raises(CatalogError, match=message) as e:
        catalog.load_platform(str(f))
    assert str(e.value).startswith(str(f)) and "\n" not in str(e.value)


def test_malformed_toml_names_the_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("base = \n")
    with pytest.raises(CatalogError, match="bad.toml.*not valid TOML"):
        catalog.load_platform(str(f))


def test_negative_platform_number_is_refused(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('base = "h100"\ntdp_w = -1\n[sources]\ntdp_w = "x"\n')
    with pytest.raises(CatalogError, match="tdp_w must be a positive finite number"):
        catalog.load_platform(str(f))


def test_model_without_architecture_source_is_refused():
    with pytest.raises(CatalogError, match="architecture"):
        catalog.model_from_dict({"num_layers": 2, "hidden_size": 8, "ffn_hidden_size": 16,
                                 "num_attention_heads": 2, "num_kv_heads": 2, "vocab_size": 10,
                                 "max_seq_len": 8}, name="x", path="x.toml")


def test_model_unknown_key_is_refused():
    with pytest.raises(CatalogError, match="unknown key.*hidden"):
        catalog.model_from_dict({"hidden": 8, "sources": {"architecture": "x"}}, name="x",
                                path="x.toml")


# ---- thermal and power limits -----------------------------------------------------------
def _cluster(tmp_path, body: str, sources: dict[str, str] | None = None, base: str = "h100"):
    """A cluster file on `base` with `body` and a source for each of its numbers."""
    keys = sources if sources is not None else {
        line.split("=")[0].strip(): "test" for line in body.splitlines() if "=" in line}
    table = "".join(f'{key} = "{text}"\n' for key, text in keys.items())
    f = tmp_path / "c.toml"
    f.write_text(f'base = "{base}"\n{body}\n[sources]\n{table}', encoding="utf-8")
    return f


def _refused(f, message: str) -> str:
    with pytest.raises(CatalogError, match=message) as e:
        catalog.load_platform(str(f))
    text = str(e.value)
    assert text.startswith(str(f)) and "\n" not in text
    return text


def test_every_platform_shuts_down_above_its_slowdown():
    for p in catalog.platforms().values():
        assert p.thermal_shutdown_c is not None, f"{p.name} has no thermal_shutdown_c"
        assert p.thermal_shutdown_c > p.thermal_slowdown_c, p.name
        assert p.sources.get("thermal_shutdown_c"), p.name


def test_shutdown_must_exceed_slowdown(tmp_path):
    text = _refused(_cluster(tmp_path, "thermal_shutdown_c = 89"),
                    r"thermal_shutdown_c \(89 °C\) must exceed thermal_slowdown_c \(89 °C\)")
    assert "nvidia-smi -q" in text


def test_slowdown_raised_past_the_base_shutdown_is_refused(tmp_path):
    _refused(_cluster(tmp_path, "thermal_slowdown_c = 93"), "thermal_shutdown_c.*must exceed")


def test_power_limit_above_tdp_is_refused(tmp_path):
    text = _refused(_cluster(tmp_path, "power_limit_w = 800"),
                    r"power_limit_w = 800 W is outside 200-700 W")
    assert "tdp_w" in text and "leave it out" in text


def test_power_limit_below_the_floor_is_refused(tmp_path):
    _refused(_cluster(tmp_path, "power_limit_w = 70"), r"power_limit_w = 70 W is outside 200-700")


def test_power_limit_zero_is_refused(tmp_path):
    _refused(_cluster(tmp_path, "power_limit_w = 0"), "power_limit_w must be a positive")


def test_power_limit_floor_follows_an_overridden_tdp(tmp_path):
    _refused(_cluster(tmp_path, "tdp_w = 400\npower_limit_w = 500"),
             r"power_limit_w = 500 W is outside 100-400 W")


def test_power_limit_needs_a_source(tmp_path):
    _refused(_cluster(tmp_path, "power_limit_w = 500", sources={}),
             "power_limit_w.*sources")


def test_degraded_power_needs_degraded_nodes(tmp_path):
    _refused(_cluster(tmp_path, "degraded_power_w = 400"),
             "degraded_nodes and degraded_power_w go together")


def test_degraded_nodes_need_degraded_power(tmp_path):
    _refused(_cluster(tmp_path, "degraded_nodes = 1"),
             "degraded_nodes and degraded_power_w go together")


def test_degraded_power_outside_the_power_range_is_refused(tmp_path):
    text = _refused(_cluster(tmp_path, "degraded_nodes = 1\ndegraded_power_w = 100"),
                    r"degraded_power_w = 100 W is outside 200-700 W")
    assert "degraded_nodes out" in text


def test_degraded_nodes_must_be_whole(tmp_path):
    _refused(_cluster(tmp_path, "degraded_nodes = 1.5\ndegraded_power_w = 400"),
             "degraded_nodes must be a whole number")


def test_inlet_above_60_c_is_refused(tmp_path):
    _refused(_cluster(tmp_path, "inlet_c = 77"), r"inlet_c = 77 °C is outside 0-60 °C")


def test_inlet_at_or_below_zero_is_refused(tmp_path):
    _refused(_cluster(tmp_path, "inlet_c = 0"), "inlet_c must be a positive")


def test_cluster_file_sets_power_limit_inlet_and_degraded_nodes(tmp_path):
    f = _cluster(tmp_path, "power_limit_w = 500\ninlet_c = 35\ndegraded_nodes = 2\n"
                           "degraded_power_w = 400", base="h200")
    p = catalog.load_platform(str(f))
    assert (p.power_limit_w, p.inlet_c, p.degraded_nodes, p.degraded_power_w) == (
        500, 35, 2, 400)
    assert isinstance(p.degraded_nodes, int)
    assert p.limit_w == 500 and p.thermal_shutdown_c == catalog.load_platform(
        "h200").thermal_shutdown_c
    assert p.sources["power_limit_w"] == "test"


def test_power_limit_range_is_inclusive(tmp_path):
    # H100: nvidia-smi's Min Power Limit 200 W to Max 700 W (min_power_limit_w, tdp_w).
    f = _cluster(tmp_path, "power_limit_w = 200")
    assert catalog.load_platform(str(f)).power_limit_w == 200
    f = _cluster(tmp_path, "power_limit_w = 700")
    assert catalog.load_platform(str(f)).limit_w == 700
    f = _cluster(tmp_path, "power_limit_w = 180")  # above 0.25 × tdp_w, below the driver's
    with pytest.raises(CatalogError, match="180 W is outside 200-700 W.*min_power_limit_w"):
        catalog.load_platform(str(f))
    # A part without its own minimum in the catalog: 0.25 × tdp_w (B200: 250 of 1,000 W).
    f = _cluster(tmp_path, "power_limit_w = 250", base="b200")
    assert catalog.load_platform(str(f)).power_limit_range_w == (250, 1000)


@pytest.mark.parametrize("value, message", [
    ("-1" + "0" * 300, "must be a positive finite number, got -1e\\+300"),
    ("1" + "0" * 300, "= 1e\\+300 is beyond any device"),
    ("1" + "0" * 400, "a number of about 401 digits"),
    ("nan", "positive finite number, got nan"),
])
def test_a_cluster_number_past_float_range_is_one_clear_error(tmp_path, value, message):
    """An integer of 10^309 or more has no float: the check compares it before converting
    (it raised OverflowError inside math.isfinite)."""
    cluster = tmp_path / "c.toml"
    cluster.write_text(f'base = "h200"\nnic_bandwidth_bytes_per_s = {value}\n'
                       f'num_nics_per_node = 8\n[sources]\nnic_bandwidth_bytes_per_s = "t"\n'
                       f'num_nics_per_node = "t"\n')
    with pytest.raises(CatalogError, match=message):
        catalog.load_platform(str(cluster))
