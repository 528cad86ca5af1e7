"""The peak sample (`peak_excursion`) against what measures it at the board limit."""

from benchmark_scripts import load_benchmark

from advisor.perf.peak_fit import derived_peak_excursion, probe_peaks
from advisor.perf.power_params import load_power_params


def test_peak_excursion_stays_between_the_probe_and_the_training_runs():
    """At 700 W the H200 probe's steady capped kernels read a smaller share of the demand above
    the limit than the H200 campaign's training steps (bursts after gaps escape the cap at
    first): the placeholder lies between the two, and power.toml's source quotes both."""
    shipped = load_power_params()
    probe = derived_peak_excursion(probe_peaks())
    _, campaign = load_benchmark("power_validation").campaign_excursion()
    assert probe < shipped.peak_excursion < campaign
    source = shipped.sources["peak_excursion"]
    assert f"give {probe:.2f}" in source and f"runs {campaign:.2f}" in source


def test_the_probe_peaks_sit_above_the_limit_and_below_the_model_demand():
    table = probe_peaks()
    assert (table["measured_peak_w"] > table["limit_w"]).all()
    assert (table["measured_peak_w"] < table["demand_w"]).all()
    assert (table["error"].abs() < 0.1).all()
