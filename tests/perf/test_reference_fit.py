"""Every configuration in the reference file ran on real hardware: none may be predicted not
to fit. Rows whose printed configuration contradicts itself are reported, not hidden. The power
model's power-limit response is judged on workloads it was not fitted on."""

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.data.predict_input import parse_run_row, read_rows
from advisor.perf.memory import WEIGHT_BYTES
from advisor.perf.power_fit import (
    BASE_LIMIT_W,
    load_reference,
    predict_zeus,
    without_workload,
    workload_holdout_table,
    workloads,
)
from advisor.perf.power_params import load_power_params
from advisor.predict.rows import predict_frame


def _cannot_hold_own_weights_and_grads(row: pd.Series) -> bool:
    """Independent of the memory model: 16-bit weights plus 16-bit gradients of every parameter
    the stated layout puts on one GPU (no optimizer, no activations) exceed its memory."""
    model = catalog.find_model(row["model"])
    platform = catalog.load_platform(row["gpu"])
    config, _ = parse_run_row(row, model)
    if config.dp_sharding == "full":
        return False
    params = model.params
    per_gpu = ((sum(params.layers_dense) + params.embedding + params.output) / config.tp
               + sum(params.layers_expert) / (config.ep * config.etp)) / config.pp
    return per_gpu * 2 * WEIGHT_BYTES > platform.memory_capacity_bytes


def test_every_reference_run_fits(reference_csv):
    frame = read_rows(reference_csv)
    known = frame[[catalog.find_model(m) is not None for m in frame["model"]]]
    pred = predict_frame(known)
    invalid = pred[pred["pred_error"] != ""]
    not_fit = pred[(pred["pred_error"] == "") & (pred["pred_fits"] == False)]  # noqa: E712
    contradictory = not_fit[not_fit.apply(_cannot_hold_own_weights_and_grads, axis=1)]
    unexplained = not_fit.drop(contradictory.index)
    report = pd.concat([invalid, contradictory])[["model", "gpu", "num_gpus", "tp", "pp", "ep",
                                                   "dp", "dp_sharding", "pred_error"]]
    print(f"\n{len(pred)} reference rows with catalog models; {len(invalid)} invalid as printed, "
          f"{len(contradictory)} whose printed layout cannot hold its own weights and "
          f"gradients:\n{report.to_string()}")
    fitting = pred[pred["pred_fits"] == True]  # noqa: E712
    ratio = (fitting["pred_memory_gb"] / fitting["pred_capacity_gb"]).max()
    print(f"tightest fitting row uses {ratio:.1%} of its GPU's memory")
    assert unexplained.empty, unexplained[["model", "gpu", "tp", "pp", "ep", "pred_memory_gb",
                                           "pred_capacity_gb", "pred_assumed"]].to_string()
    # Inconsistent rows must stay rare: at most 1 % of the file.
    assert len(invalid) + len(contradictory) <= 0.01 * len(pred)


@pytest.fixture(scope="module")
def power_reference(power_dir):
    return load_reference(power_dir)


def test_held_out_workload_leaves_no_row_in_the_fit(power_reference):
    for gpu, model in workloads(power_reference):
        rest = without_workload(power_reference, gpu, model)
        for frame in (rest.perseus, rest.profiles, rest.zeus):
            assert not ((frame["gpu"] == gpu) & (frame["model"] == model)).any(), (gpu, model)
        # Only the workload's own rows leave: every other Zeus step stays in the fit.
        own = (power_reference.zeus["gpu"] == gpu) & (power_reference.zeus["model"] == model)
        assert len(rest.zeus) == (~own).sum()
        assert len(rest.profiles) == len(power_reference.profiles)


@pytest.mark.slow    # 11 fits: 7.8-10.2 s on the 2-core dev machine
def test_power_limit_predicts_held_out_workloads(power_reference):
    table = workload_holdout_table(power_reference)
    print(f"\n{table.round(1).to_string()}")
    pairs = list(zip(table["gpu"], table["model"], strict=True))
    assert sorted(pairs) == workloads(power_reference)
    assert len(set(pairs)) == len(pairs) == 10    # 5 A100 PCIe PP4 + 5 A40 PP8 pipelines
    # Zeus steps below 300 W: 175-275 W on A100 PCIe (4 stages), 125-275 W on A40 (8 stages).
    limits = table["gpu"].map({"a100-pcie-80gb": 5, "a40": 7})
    assert (table["num_limits"] == limits).all()
    assert (table["num_power_points"] == limits * table["gpu"].map(
        {"a100-pcie-80gb": 4, "a40": 8})).all()
    numbers = table.select_dtypes("number").to_numpy()
    assert np.isfinite(numbers).all()
    # Measured at this commit (the 300 W reference step modelled as capped, see predict_zeus):
    # held-out iteration-time MAPE 1.5-12.5 % per workload (median 6.5 %; 12.8 % when the 300 W
    # step was taken as unthrottled), average power 1.3-4.0 % (median 1.9 %); the worst single
    # limit is A40 BLOOM 3B at 125 W, predicted 43.7 % too fast. Bounds leave margin for a refit.
    assert table["time_mape_held_out"].max() < 16
    assert table["time_mape_held_out"].median() < 8.5
    assert table["power_mape_held_out"].max() < 5
    assert table["worst_time_error_pct"].abs().max() < 52
    # Holding a workload out may cost accuracy but a large gap means the fit leans on it.
    gap = table["time_mape_held_out"] - table["time_mape_in_sample"]
    assert gap.max() < 2.5    # measured: at most 0.7 points (A100 PCIe BLOOM 3B, A40 BLOOM 3B)


def test_zeus_reference_step_predicts_itself(power_reference):
    """At the 300 W reference limit the model must give back the measured step (ratio 1, the
    measured per-stage busy time), even where it has that step capped (A100 PCIe: the fitted
    demand is above 300 W)."""
    params = load_power_params()
    zeus = power_reference.zeus.assign(limit_w=BASE_LIMIT_W)
    a100 = zeus["gpu"] == "a100-pcie-80gb"
    demand = params.busy_share * zeus.loc[a100, "design_w"]
    assert (demand > BASE_LIMIT_W).all()    # the case the reference step must handle
    ratio, power_w = predict_zeus(params, zeus)
    assert ratio == pytest.approx(1.0, abs=1e-12)
    assert np.all(power_w <= BASE_LIMIT_W + 1e-9)
