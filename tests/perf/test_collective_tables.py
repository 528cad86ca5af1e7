"""In-domain collectives against each platform's measured table (XLA's collective tables)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from advisor.catalog import load_platform, load_platform_override
from advisor.core.errors import CatalogError
from advisor.perf import collective_fit
from advisor.perf.calibration import load_calibration
from advisor.perf.collectives import ALL_GATHER, RING_ALLREDUCE


@pytest.fixture(scope="module")
def tables():
    return collective_fit.load_tables()


@pytest.mark.parametrize("platform", ["h100", "b200", "gb200", "gb300", "mi300x", "mi355x"])
def test_each_platform_reproduces_its_large_collectives_within_10_percent(tables, platform):
    model = load_calibration().collectives.for_platform(load_platform(platform))
    score = collective_fit.score(model, tables[tables["platform"] == platform])
    assert score["large_median_ape_pct"] < 10.0
    assert 0.95 < score["large_median_ratio"] < 1.05


def test_the_a100_constants_priced_amd_links_twice_too_fast(tables):
    """Why the tables matter: the A100 NCCL fit, carried to MI300X's xGMI, predicts its large
    collectives at 0.38 × the measured time."""
    base = replace(load_calibration().collectives, domain=None)
    score = collective_fit.score(base, tables[tables["platform"] == "mi300x"])
    assert score["large_median_ratio"] < 0.5


def test_a_full_mesh_gains_bandwidth_with_the_group_and_a_switch_does_not(tables):
    collectives = load_calibration().collectives

    def bus(platform_name: str, n: int) -> float:
        platform = load_platform(platform_name)
        t = collectives.for_platform(platform).time(ALL_GATHER, 1e9, n, True, platform)
        return 1e9 * (n - 1) / n / float(t)

    assert bus("mi300x", 8) > 2.5 * bus("mi300x", 2)           # 7 links against 1
    assert bus("h100", 8) < 1.6 * bus("h100", 2)               # one NVSwitch port
    # the measured tables say the same
    mi = tables[(tables["platform"] == "mi300x") & (tables["opcode"] == "all-gather")
                & (tables["tensor_bytes"] >= 256e6)]
    by_group = mi.groupby("devices_per_group")["throughput_GBps"].median()
    assert by_group[8] > 2.5 * by_group[2]


def test_platforms_without_a_table_keep_the_nccl_fit_and_a_wrong_name_is_refused(tmp_path):
    collectives = load_calibration().collectives
    assert collectives.for_platform(load_platform("a100")).domain is None
    assert collectives.for_platform(load_platform("h200")).domain == \
        collectives.for_platform(load_platform("h100")).domain
    path = tmp_path / "odd.toml"
    path.write_text('base = "h100"\ncollective_kernels = "nvl576"\n'
                    '[sources]\ncollective_kernels = "a guess"\n')
    with pytest.raises(CatalogError, match="nvl576.*collective_kernels.toml"):
        collectives.for_platform(load_platform_override(path))


def test_network_collectives_still_pay_the_network(tables):
    """A group across nodes runs at the NIC, not at the domain's table."""
    platform = load_platform("h100")
    model = load_calibration().collectives.for_platform(platform)
    inside = model.time(RING_ALLREDUCE, 1e9, 8, True, platform)
    across = model.time(RING_ALLREDUCE, 1e9, 16, False, platform, members_per_domain=1)
    assert float(across) > 4 * float(inside)
    assert np.isfinite(across)


def test_the_benchmark_prints_each_platforms_fit(capsys):
    import sys

    from benchmark_scripts import load_benchmark

    bench = load_benchmark("collective_check")
    argv, sys.argv = sys.argv, ["collective_check.py"]
    try:
        assert bench.main() == 0
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    for name in ("h100", "b200", "gb200", "gb300", "mi300x", "mi355x"):
        assert f"\n{name:>8}" in out or f" {name} " in out
