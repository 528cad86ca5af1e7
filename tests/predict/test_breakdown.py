"""One prediction carries its analytical breakdown, so a command runs the analytical model once
per configuration: recommend explains its choices, and predict prints its breakdown, from the
columns the Predictor returned."""

from unittest import mock

import numpy as np
import pandas as pd

import advisor.perf.analytical as analytical_module
import advisor.perf.memory as memory_module
from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_config, make_job
from advisor.perf.analytical import (
    BREAKDOWN_PREFIX,
    analytical_table,
    breakdown_from_row,
    predict_config,
)
from advisor.predict.predictor import Prediction, Predictor
from advisor.search.recommend import recommend


def test_breakdown_columns_are_the_analytical_table_and_read_back_as_a_prediction():
    model, platform = load_model("mixtral-8x7b"), load_platform("h100")
    job = make_job(model, platform, num_gpus=32)
    configs = [make_config(job, tp=2, ep=8), make_config(job, tp=4, pp=2, ep=4)]
    out = Predictor.load().predict([(c, job) for c in configs], breakdown=True)
    table = analytical_table(model, platform, pd.DataFrame([c.to_dict() for c in configs]))
    for column in table.columns:
        assert np.array_equal(out[BREAKDOWN_PREFIX + column].to_numpy(),
                              table[column].to_numpy()), column
    plain = Predictor.load().predict([(c, job) for c in configs])
    for config, row, bare in zip(configs, out.to_dict("records"), plain.to_dict("records"),
                                 strict=True):
        analytical = predict_config(model, platform, config)
        assert breakdown_from_row(config, row, prefix=BREAKDOWN_PREFIX) == analytical
        # One type for the answer: the values, the configuration and the breakdown behind them.
        prediction = Prediction.from_row(row, config)
        assert prediction.config == config and prediction.breakdown == analytical
        assert prediction.values() == {k: row[f"pred_{k}"] for k in prediction.values()}
        assert Prediction.from_row(bare, config).breakdown is None
    assert not any(c.startswith(BREAKDOWN_PREFIX) for c in plain.columns)
    assert plain.equals(out[plain.columns])


def test_recommend_runs_the_analytical_model_once_per_configuration():
    rows = {"step": [], "memory": []}
    step, memory = analytical_module.step_arrays, memory_module.memory_arrays

    def counted_step(model, platform, cols, **kw):
        rows["step"].append(len(cols["tp"]))
        return step(model, platform, cols, **kw)

    def counted_memory(model, *, platform, cols):
        rows["memory"].append(len(cols["tp"]))
        return memory(model, platform=platform, cols=cols)

    job = make_job(load_model("llama3-8b"), load_platform("h100"), num_gpus=8)
    with mock.patch.object(analytical_module, "step_arrays", counted_step), \
            mock.patch.object(analytical_module, "memory_arrays", counted_memory), \
            mock.patch.object(memory_module, "memory_arrays", counted_memory):
        # pp pinned to 1: no uneven pipeline split to weigh (placement runs its own variants).
        rec = recommend(job, predictor=Predictor.load(), pins={"pp": 1})
    # The memory model once over the space (what fits; a layout's overlap-on and -off forms
    # share one row, `space_memory`), the step model once over the fitting layouts (their memory
    # columns go with them); the top five choices are explained from those columns, not run
    # again.
    assert rows["step"] == [rec.num_fit]
    assert len(rows["memory"]) == 1 and rec.num_valid / 2 <= rows["memory"][0] < rec.num_valid
    assert all(c.prediction.breakdown.step.step_time_s > 0 for c in rec.choices)
