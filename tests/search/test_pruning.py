"""Exhaustive search with a throughput bound (issue 48): layouts whose bound is under
`PRUNE_SHARE` of the best are never predicted, and the picks are exactly those of scoring every
layout. The bound itself holds: the analytical step at full clock is never longer than the
power model's (its components the same), every row's features lie in the box `feature_boxes`
gives it, and the surrogate's largest ratio over that box is never below the row's own."""

import copy
import dataclasses

import numpy as np
import pytest

from advisor import catalog
from advisor.core.parallel import PARALLEL_FIELDS, Job
from advisor.learn.features import feature_boxes, feature_matrix
from advisor.perf.analytical import analytical_arrays
from advisor.perf.columns import config_columns, full_length
from advisor.perf.memory import memory_arrays
from advisor.perf.step import COMPONENTS, nominal_arrays
from advisor.predict.predictor import Predictor
from advisor.search import engine
from advisor.search.recommend import pinned_space, recommend


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


def _fitting(job):
    space = pinned_space(job, {})
    memory = full_length(memory_arrays(job.model, platform=job.platform,
                                       cols=config_columns(space)), len(space))
    return space.take(memory["fits"])


@pytest.mark.parametrize("model, platform, gpus", [("llama3-70b", "h200", 64),
                                                   ("mixtral-8x22b", "h100", 128),
                                                   ("deepseek-v3", "h100", 512),
                                                   ("kimi-k2", "gb200", 288)])
def test_the_bound_is_never_below_the_prediction(predictor, model, platform, gpus):
    job = Job(catalog.load_model(model), catalog.load_platform(platform), gpus, 4096, 512)
    fitting = _fitting(job)
    sample = fitting.take(np.arange(0, len(fitting), max(1, len(fitting) // 4000)))
    cols = config_columns(sample)
    nominal = nominal_arrays(job.model, job.platform, cols)
    full = analytical_arrays(job.model, job.platform, cols)
    assert (nominal["step_time_s"] <= full["step_time_s"] * (1 + 1e-12)).all()
    for part in COMPONENTS:       # the power model lengthens the step, never a component
        if part != "throttle_s":
            assert np.array_equal(nominal[part], full[part])
    # Every row's features lie in its box, and the box's bound is at least its prediction.
    memory = {k: full[k] for k in ("total_bytes", "capacity_bytes")}
    box, low, high, missing = feature_boxes(job.model, job.platform, cols, nominal | memory)
    x = feature_matrix(job.model, job.platform, cols, full)
    gap = np.isnan(x)
    assert (missing[box] | ~gap).all()
    assert ((low[box] <= x) & (x <= high[box]) | gap).all()
    predicted = predictor.predict_table(job.model, job.platform, sample)
    tps = np.asarray(predicted["pred_tokens_per_sec_per_gpu"], dtype=float)
    for known in (None, memory):
        bound = predictor.throughput_bound(job.model, job.platform, sample, memory=known)
        assert (bound >= tps).all()
    assert np.median(bound / tps) < 1.6          # a bound that prunes, not infinity


def test_pruned_search_picks_what_scoring_everything_picks(predictor, monkeypatch):
    job = Job(catalog.load_model("llama3-70b"), catalog.load_platform("h200"), 64, 8192, 256)
    whole = recommend(job, predictor=predictor)
    monkeypatch.setattr(engine, "PRUNE_ABOVE", 1_000)   # prune this 7,894-layout space too
    pruned = recommend(job, predictor=predictor)
    assert pruned.num_pruned > 0
    assert whole.num_pruned == 0 and pruned.num_fit == whole.num_fit
    assert [c.config for c in pruned.choices] == [c.config for c in whole.choices]
    assert [c.prediction.tokens_per_sec_per_gpu for c in pruned.choices] == [
        c.prediction.tokens_per_sec_per_gpu for c in whole.choices]
    assert pruned.tradeoffs == whole.tradeoffs
    # Every layout left out runs under the share of the best (its bound did).
    kept = {_key(row) for row in pruned.ranked_table.rows()}
    out = [row["pred_tokens_per_sec_per_gpu"] for row in whole.ranked_table.rows()
           if _key(row) not in kept]
    best = whole.choices[0].prediction.tokens_per_sec_per_gpu
    assert out and max(out) < engine.PRUNE_SHARE * best


def _key(row: dict) -> tuple:
    return tuple(str(row[k]) for k in PARALLEL_FIELDS)


def test_other_objectives_and_stacks_score_every_layout(predictor, monkeypatch):
    """A bound on throughput says nothing about energy, and a stack calibration shifts each
    share of the step by its own factor: both score every layout that fits."""
    job = Job(catalog.load_model("llama3-8b"), catalog.load_platform("h100"), 16, 8192, 128)
    monkeypatch.setattr(engine, "PRUNE_ABOVE", 10)
    rec = recommend(job, predictor=predictor, objective="energy", search_power_limit=False)
    assert rec.num_pruned == 0
    assert recommend(job, predictor=predictor).num_pruned > 0
    stacked = copy.copy(predictor)
    monkeypatch.setattr(stacked, "stack_for", lambda platform: object())
    assert stacked.throughput_bound(job.model, job.platform, _fitting(job)) is None


def test_too_few_layouts_within_reach_and_the_rest_are_predicted(predictor, monkeypatch):
    """With the share at 99.9 % of the best only #1's layout would be within reach: the search
    then predicts the rest, so the other four picks are still those of scoring everything."""
    job = Job(catalog.load_model("llama3-70b"), catalog.load_platform("h200"), 64, 8192, 256)
    whole = recommend(job, predictor=predictor)
    monkeypatch.setattr(engine, "PRUNE_ABOVE", 1_000)
    monkeypatch.setattr(engine, "PRUNE_SHARE", 0.999)
    pruned = recommend(job, predictor=predictor)
    assert [c.config for c in pruned.choices] == [c.config for c in whole.choices]


def test_the_power_limit_search_stays_above_the_tool_s_floor():
    """A cluster whose cards refuse limits under 400 W (a cluster file may say so): the
    energy search never tries one below it."""
    from advisor.catalog import with_fields
    from advisor.search.power_limit import limits_to_try

    h100 = catalog.load_platform("h100")
    floored = with_fields(h100, min_power_limit_w=400.0, given_by="test")
    job = Job(catalog.load_model("llama3-8b"), floored, 8, 8192, 128)
    tried = limits_to_try(job)
    assert tried and min(tried) >= 400 and tried[0] == round(h100.tdp_w)
    assert min(limits_to_try(dataclasses.replace(job, platform=h100))) < 400
