"""The power, clock and thermal model: rules it must keep, the slot layout, uneven pipeline
splits, and its fit to the measured GPU power in datasets/reference/power."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.core.errors import CatalogError, ConfigError
from advisor.core.parallel import make_config, make_job
from advisor.core.space import enumerate_space, validate
from advisor.perf.analytical import analytical_table, predict_config
from advisor.perf.layout import stage_layer_counts, stage_layout
from advisor.perf.power import windowed_limit
from advisor.perf.power_fit import (
    DEFAULT_PROBE,
    FITTED,
    fit,
    kernel_ratios,
    load_reference,
    phase_table,
    read_probe,
    validation_table,
)
from advisor.perf.power_params import load_power_params
from advisor.perf.thermal import chassis_catalog, chassis_for, slot_map

CAMPAIGNS = Path(__file__).resolve().parents[2] / "datasets" / "campaigns"
"""This project's own GPU campaigns (`datasets/DATASHEET.md`)."""


def _table(model_name: str, platform, gpus: int):
    model = catalog.load_model(model_name)
    configs = enumerate_space(make_job(model, platform, num_gpus=gpus))
    return analytical_table(model, platform, configs)


@pytest.mark.parametrize("platform_name", ["b200", "gb200", "gb300", "b300"])
def test_blackwell_stays_below_its_slowdown_limit(platform_name):
    # On the chassis' default inlet no modelled GPU sits at its slowdown point, and the chance
    # that one of the job's GPUs reaches it stays a minority event for every layout.
    platform = catalog.load_platform(platform_name)
    table = _table("llama3-70b", platform, 64)
    assert (table["peak_temp_c"] < platform.thermal_slowdown_c).all()
    assert (table["throttle_risk_thermal"] < 0.5).all()


def test_expected_losses_separate_layouts_whose_power_differs():
    table = _table("llama3-70b", catalog.load_platform("h200"), 64)
    fits = table[table["fits"]]
    assert fits["avg_power_w"].std() > 10
    assert fits["throttle_loss"].round(3).nunique() > 20
    assert fits["throttle_loss"].max() - fits["throttle_loss"].min() > 0.03
    assert fits["peak_power_w"].round(0).nunique() > 20
    hot = _table("llama3-70b", catalog.with_conditions(catalog.load_platform("h200"),
                                                       inlet_c=35), 64)
    assert hot[hot["fits"]]["throttle_risk"].round(2).nunique() > 20


def test_losses_add_up_to_the_step_lost():
    table = _table("llama3-70b", catalog.load_platform("h200"), 64)
    parts = (table["power_cap_loss"] + table["straggler_loss"] + table["thermal_loss"]
             + table["degraded_loss"])
    assert np.allclose(parts, table["throttle_loss"])
    assert (table["throttle_risk"] >= 0).all() and (table["throttle_risk"] <= 1).all()


def test_thermal_slowdown_holds_a_hot_gpu_at_its_limit(tmp_path):
    hot = tmp_path / "hot.toml"
    hot.write_text('base = "h200"\nname = "hot-h200"\nthermal_slowdown_c = 70\n'
                   '[sources]\nthermal_slowdown_c = "test: a slowdown limit below the rear '
                   'GPUs\' steady temperature"\n')
    platform = catalog.load_platform_override(hot)
    model = catalog.load_model("llama3-70b")
    job = make_job(model, platform, num_gpus=32, seq_len=8192, gbs=128)
    normal = predict_config(model, catalog.load_platform("h200"), make_config(job, tp=4, pp=4))
    throttled = predict_config(model, platform, make_config(job, tp=4, pp=4))
    assert throttled.power.peak_temp_c == pytest.approx(70, abs=0.1)
    assert throttled.power.throttle_risk_thermal > 0.5
    assert throttled.power.thermal_loss > normal.power.thermal_loss + 0.02
    assert throttled.step.step_time_s > normal.step.step_time_s
    assert throttled.power.straggler_slot >= 4      # a rear GPU sets the pace


def test_slots_follow_megatron_rank_order():
    chassis = chassis_for(catalog.load_platform("h200"))
    # tp 1, pp 32: eight stages per node, stage s in slot s mod 8, rear slots behind s - 4
    slots = slot_map(chassis, gpus_per_stage=np.array([1]), pp=32)
    assert slots.valid[0, :, 0].all() and not slots.valid[0, :, 1:].any()
    assert (slots.slot[0, :, 0] == np.arange(32) % 8).all()
    up = slots.upstream_stage[0, :, 0]
    assert (up[4:8] == np.arange(4)).all() and (up[:4] == -1).all()
    # a stage of a whole node (tp 8) has GPUs in every slot, each breathing its own stage's air
    whole = slot_map(chassis, gpus_per_stage=np.array([8]), pp=4)
    assert whole.valid.all()
    assert (whole.upstream_stage[0, :, 4:] == np.arange(4)[:, None]).all()


def test_chassis_catalog_cites_every_number():
    for chassis in chassis_catalog().values():
        assert chassis.num_slots == len(chassis.upstream) == len(chassis.row)
    assert chassis_for(catalog.load_platform("mi250")).package_skew_c > 0
    assert chassis_for(catalog.load_platform("gb200")).num_slots == 4


def test_nic_count_sets_the_scale_out_bandwidth(tmp_path):
    h100 = catalog.load_platform_override(
        Path(__file__).resolve().parents[2] / "examples" / "paper-h100-cluster.toml")
    assert h100.num_nics_per_node == 8
    assert h100.inter_node_bandwidth_bytes_per_s == pytest.approx(12.5e9)
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "h100"\nnum_nics_per_node = 1\nnic_bandwidth_bytes_per_s = 12.5e9\n'
                   'inter_node_bandwidth_bytes_per_s = 12.5e9\n[sources]\n'
                   'num_nics_per_node = "t"\nnic_bandwidth_bytes_per_s = "t"\n'
                   'inter_node_bandwidth_bytes_per_s = "t"\n')
    with pytest.raises(CatalogError, match="contradicts"):
        catalog.load_platform_override(bad)


def test_uneven_split_follows_megatron():
    assert stage_layer_counts(80, 4, first=21, last=19) == [21, 20, 20, 19]
    assert stage_layer_counts(61, 8, first=7, last=6) == [7, 8, 8, 8, 8, 8, 8, 6]
    # Even as Megatron-Core builds it, the embedding and loss counted as layers (12 / 3):
    # the end stages one layer fewer; Llama 3.1 405B's 126 on 8 likewise (128 / 8).
    assert stage_layer_counts(10, 3) == [3, 4, 3]
    assert stage_layer_counts(126, 8) == [15] + [16] * 6 + [15]
    assert stage_layer_counts(127, 8) == [16] * 7 + [15]  # the loss alone
    model = catalog.load_model("llama3-70b")
    layout = stage_layout(model, 4, 1, first=21, last=19)
    assert layout.num_layers.tolist() == [21, 20, 20, 19] and not layout.even
    inter = stage_layout(model, 4, 2, first=22, last=18)
    assert inter.num_layers.tolist() == [22, 20, 20, 18]
    # Interleaved, the first and the last virtual stage are the ones a layer short.
    priced = stage_layout(catalog.load_model("llama3.1-405b"), 8, 8).num_layers.tolist()
    assert priced == [15] + [16] * 6 + [15]


def test_uneven_split_rules_name_the_fix():
    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    job = make_job(model, platform, num_gpus=32, seq_len=8192, gbs=128)
    base = make_config(job, tp=4, pp=4)
    with pytest.raises(ConfigError, match="middle stages"):
        validate(base.replace(first_stage_layers=21, last_stage_layers=18), model, platform)
    with pytest.raises(ConfigError, match="needs pp > 1"):
        make_config(job, tp=8, pp=1).replace(first_stage_layers=3)
    validate(base.replace(first_stage_layers=21, last_stage_layers=19), model, platform)


@pytest.fixture(scope="module")
def power_reference(power_dir):
    return load_reference(power_dir)


def test_shipped_power_parameters_are_the_fit(power_reference):
    shipped = load_power_params()
    fitted = fit(power_reference)
    for key in FITTED:
        assert getattr(fitted, key) == pytest.approx(getattr(shipped, key), rel=2e-3), key


def test_power_model_predicts_held_out_sources(power_reference):
    full = validation_table(power_reference).set_index(["source", "target"])
    table = full["mape_held_out"]
    assert table["perseus", "avg_power"] < 5
    assert table["zeus_power_limit", "avg_power"] < 5
    # measured with the Zeus reference step modelled as throttled (power_fit.predict_zeus) and
    # the shared parameters fitted across chips (A40, A100) without the H200 probe: stage
    # profiles' time 12.6 % held out, power 11.5 %; Zeus time 8.1 %
    assert table["stage_profiles", "time_ratio"] < 13
    assert table["stage_profiles", "power"] < 12
    assert table["zeus_power_limit", "iter_time_ratio"] < 10
    # The probe does not set H200's level (advisor/perf/power_fit.py says why): fitted to the
    # probe alone its capped time and clock come within 3 %; at the cross-chip level every chip
    # gets, 11.5 % and 14.8 %.
    for target in ("time_ratio", "clock"):
        own, carried = full.loc[("h200_probe", target), ["mape_in_sample", "mape_held_out"]]
        assert own < 4 < carried


def test_no_catalog_chip_carries_one_probes_level(tmp_path):
    """Every catalog chip draws the cross-chip best-fed GEMM demand (busy_share × its design
    power): the H200 probe's own level contradicted two other H200 measurements. A cluster
    file can carry a site's own probe of its chips."""
    from advisor.catalog import load_platform, load_platform_override, platforms

    shipped = load_power_params()
    assert all(p.gemm_power_w is None for p in platforms().values())
    h200 = load_platform("h200")
    assert shipped.best_gemm_w(h200) == pytest.approx(shipped.busy_share * h200.tdp_w)
    site = tmp_path / "site.toml"
    site.write_text('base = "h200"\ngemm_power_w = 1000\n'
                    '[sources]\ngemm_power_w = "our probe"\n')
    assert shipped.best_gemm_w(load_platform_override(site)) == 1000
    assert load_platform_override(site).gemm_power_w == 1000


def test_memory_ratio_is_the_h200_probe():
    """power.toml's memory_ratio is what the H200 probe's HBM-bound copy drew, over the
    cross-chip GEMM demand (as written, 3 decimals). attention_ratio stays a placeholder below
    1: through the fitted curve, at the cross-chip level, the probe's fused attention would
    draw more than the best-fed GEMM, which says the level is low for H200 (power.toml's
    source), not that attention outdraws a GEMM."""
    kernels, samples, facts = read_probe(DEFAULT_PROBE)
    derived = kernel_ratios(phase_table(kernels, samples, facts), facts)
    shipped = load_power_params()
    assert shipped.memory_ratio == round(derived["memory_ratio"], 3)
    assert derived["attention_ratio"] > 1 > shipped.attention_ratio


def test_the_capped_clock_falls_with_micro_batch_as_the_h200_campaign_measured():
    """Measured (datasets/campaigns/h200-single, nothing fitted to it): at the 700 W cap the
    mean SM clock falls as micro-batches grow (1,773 -> 1,609 MHz from 1 to 8 at 2,048 tokens):
    bigger GEMMs keep the tensor cores busier, which draws more per clock. The model, whose GEMM
    demand follows how well fed the tensor cores are, orders the 16 runs' clocks as measured
    (Kendall tau 0.75-0.77 with the cross-chip power level over refits: it predicts MBS 2 with
    full recompute and MBS 4 without, and MBS 4 with and MBS 8 without, within 0.1 MHz of each
    other, so a refit's smallest move swaps such a pair; the order within each sequence length
    and recompute, asserted first, never moves)."""
    from scipy.stats import kendalltau

    from advisor.data.predict_input import choose_recompute, parse_row

    frame = pd.read_parquet(CAMPAIGNS / "h200-single.parquet")
    rows = [parse_row(row, {}, None) for row in frame.to_dict("records")]
    choose_recompute(rows)
    predicted = np.array([predict_config(r.job.model, r.job.platform, r.config).power
                          .min_clock_frac * r.job.platform.boost_clock_hz / 1e6 for r in rows])
    measured = frame["mean_sm_clock_mhz"].to_numpy()
    for (_, _), group in frame.groupby(["seq_len", "recompute"]):
        order = group.sort_values("mbs").index
        assert np.all(np.diff(predicted[order]) < 0), group[["seq_len", "mbs"]]
    assert kendalltau(measured, predicted).statistic >= 0.75


@pytest.mark.xfail(strict=True, reason=(
    "not met since the H200 probe left the cross-chip power fit: at the cross-chip level "
    "(922 W) the campaign's capped clocks come out 6.2 % high (MAPE), at the probe's own "
    "(~1,300 W) 6.8 % low; power_fit.py says why neither fits H200's clock and speed at once"))
def test_the_h200_campaign_clock_is_within_three_percent():
    from advisor.data.predict_input import choose_recompute, parse_row

    frame = pd.read_parquet(CAMPAIGNS / "h200-single.parquet")
    rows = [parse_row(row, {}, None) for row in frame.to_dict("records")]
    choose_recompute(rows)
    predicted = np.array([predict_config(r.job.model, r.job.platform, r.config).power
                          .min_clock_frac * r.job.platform.boost_clock_hz / 1e6 for r in rows])
    assert np.max(np.abs(predicted / frame["mean_sm_clock_mhz"].to_numpy() - 1)) < 0.03


def test_the_limit_binds_on_a_window_as_the_h200_measured():
    """Measured (datasets/probes/h200-power): GEMM bursts of 5-20 ms between equal idle gaps run
    within 3 % of full clock while back-to-back GEMMs lose 17 % to the 700 W cap, and bursts of
    1 s or more lose what continuous load does. The model's rule: the limit binds on the
    compute and its short gaps together, so gaps raise the busy power allowed."""
    kernels, samples, facts = read_probe(DEFAULT_PROBE)
    table = phase_table(kernels, samples, facts)
    full = 2.0 * 8192 ** 3 / facts["warm_kernel_s"]["gemm8192"] / 1e12
    assert table.loc["continuous", "speed"] < 0.85 * full
    for short in ("duty-5ms-5ms", "duty-10ms-10ms", "duty-20ms-20ms"):
        assert table.loc[short, "speed"] > 0.97 * full
    assert table.loc["duty-2000ms-2000ms", "speed"] < 0.85 * full
    allowed, duty = windowed_limit(700.0, np.array([0.5, 0.9, 1.0]), np.array([0.5, 0.1, 0.0]),
                                   np.array([121.0, 121.0, 121.0]))
    assert allowed[2] == pytest.approx(700.0) and allowed[1] > 700.0 and allowed[0] > allowed[1]
    assert duty.tolist() == pytest.approx([0.5, 0.9, 1.0])


def test_exposed_communication_between_kernels_keeps_the_clock_higher():
    """The same 70B layout on 64 H200s with TP communication overlapped and not: the second
    waits between its kernels, so the window rule lets its compute run at a higher clock."""
    model, platform = catalog.load_model("llama3-70b"), catalog.load_platform("h200")
    job = make_job(model, platform, num_gpus=64)
    clocks = {}
    for overlap in (True, False):
        config = make_config(job, tp=8, pp=2, mbs=1, overlap=overlap)
        power = predict_config(model, platform, config).power
        clocks[overlap] = float(power.min_clock_frac)
    assert clocks[False] > clocks[True]


@pytest.mark.plot
def test_predict_per_gpu_lists_every_gpu_and_draws_the_heat_map(tmp_path):
    import json

    from typer.testing import CliRunner

    from advisor.cli import app

    png = tmp_path / "heat.png"
    result = CliRunner().invoke(app, ["predict", "-m", "gpt3-175b", "-p", "h200", "-g", "32",
                                      "--tp", "2", "--pp", "16", "--analytical", "--per-gpu",
                                      "--json", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    gpus = out["gpus"]
    assert len(gpus) == 32 and {g["stage"] for g in gpus} == set(range(16))
    assert sum(g["straggler"] for g in gpus) >= 1
    rear = [g["peak_temp_c"] for g in gpus if g["row"] == "rear"]
    front = [g["peak_temp_c"] for g in gpus if g["row"] == "front"]
    assert min(rear) > max(front)
    assert png.stat().st_size > 10_000
