"""The Predictor's shortcuts (lists of pairs, small frames, one group, one pipeline shape, one
value per column) give exactly what the general paths give."""

import numpy as np
import pandas as pd
import pytest

from advisor import catalog
from advisor.core.parallel import ParallelConfig, make_job
from advisor.core.space import config_from_row, enumerate_space
from advisor.core.table import Table
from advisor.learn.features import FEATURES
from advisor.perf.analytical import analytical_table
from advisor.perf.columns import config_columns
from advisor.perf.memory import memory_arrays
from advisor.perf.step import per_value
from advisor.predict.columns import SMALL
from advisor.predict.predictor import Predictor


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


@pytest.fixture(scope="module", params=[("llama3-70b", "h100", 64), ("mixtral-8x22b", "h200", 64)])
def job(request):
    name, gpu, gpus = request.param
    return make_job(catalog.load_model(name), catalog.load_platform(gpu), num_gpus=gpus)


@pytest.fixture(scope="module")
def space(job):
    space = enumerate_space(job).drop(columns="tp_beyond_nvlink")
    return space.sample(min(len(space), 3 * SMALL), random_state=0).reset_index(drop=True)


def _named(space, job):
    return space.assign(model=job.model.name, gpu=job.platform.name)


def test_pairs_predict_as_the_frame(predictor, job, space):
    pairs = [(config_from_row(row), job) for row in space.iloc[:60].to_dict(orient="records")]
    by_pairs = predictor.predict(pairs)
    by_frame = predictor.predict(_named(space.iloc[:60], job))
    pd.testing.assert_frame_equal(by_pairs, by_frame, check_exact=True)
    one = pd.concat([predictor.predict([pair]) for pair in pairs[:10]], ignore_index=True)
    pd.testing.assert_frame_equal(one, by_pairs.iloc[:10], check_exact=True)


def test_small_frames_predict_as_a_large_one(predictor, job, space):
    frame = _named(space, job).astype({"recompute": object, "model": object})
    frame["recompute"] = frame["recompute"].str.upper()   # lower-cased on both paths
    frame.iloc[::3, frame.columns.get_loc("model")] = job.model   # objects as well as names
    assert len(frame) > SMALL
    large = predictor.predict(frame)
    small = pd.concat([predictor.predict(frame.iloc[i:i + 50]) for i in range(0, len(frame), 50)])
    pd.testing.assert_frame_equal(small, large, check_exact=True)


def test_groups_and_invalid_rows_predict_as_each_alone(predictor, job, space):
    other = make_job(catalog.load_model("llama3-8b"), job.platform, num_gpus=8)
    rows = pd.concat([_named(space.iloc[:40], job),
                      _named(enumerate_space(other).drop(columns="tp_beyond_nvlink").iloc[:40],
                             other)])
    rows = rows.sample(frac=1.0, random_state=1)
    rows.index = np.arange(len(rows)) * 2 + 5
    rows["framework"] = np.where(np.arange(len(rows)) % 3 == 0, "torchtitan", "megatron")
    rows.iloc[::7, rows.columns.get_loc("tp")] = 5                 # tp must divide the heads
    out = predictor.predict(rows)
    assert list(out.index) == list(rows.index)
    assert (out["pred_error"].iloc[::7] != "").all()
    for i in range(1, len(rows), 5):
        alone = predictor.predict(rows.iloc[[i]])
        pd.testing.assert_series_equal(out.iloc[i], alone.reindex(columns=out.columns).iloc[0],
                                       check_exact=True, check_dtype=False)


def test_mixed_pipeline_shapes_compute_as_each_alone(job, space):
    table = analytical_table(job.model, job.platform, space.iloc[:80])
    assert space.iloc[:80][["pp", "vp"]].drop_duplicates().shape[0] > 1
    for i in range(0, 80, 9):
        alone = analytical_table(job.model, job.platform, space.iloc[[i]])
        pd.testing.assert_frame_equal(table.iloc[[i]], alone, check_exact=True)


def test_predict_ratio_reads_features_in_any_column_order_or_a_matrix(predictor, job, space):
    from advisor.learn.features import group_features

    table = analytical_table(job.model, job.platform, space.iloc[:30])
    feats = group_features(job.model, job.platform, space.iloc[:30], table)
    families = np.full(30, job.platform.family)
    model_families = np.full(30, job.model.family or job.model.name)
    ordered = predictor.surrogate.predict_ratio(feats, families, model_families)
    shuffled = predictor.surrogate.predict_ratio(feats[list(FEATURES)[::-1]], families,
                                                 model_families)
    pd.testing.assert_frame_equal(ordered, shuffled, check_exact=True)
    matrix = predictor.surrogate.predict_ratio(feats.to_numpy(), families, model_families)
    pd.testing.assert_frame_equal(ordered, matrix, check_exact=True)


def test_per_value_one_value_matches_many():
    values = np.array([["bf16"], ["bf16"], ["fp8"]], dtype=object)
    mixed = per_value(values, len)
    same = per_value(values[:2], len)
    assert same.dtype == mixed.dtype and same.shape == (2, 1)
    assert (same == mixed[:2]).all()


def test_pairs_with_unusual_values_take_the_frame_path(predictor, job):
    config = ParallelConfig(tp=8, dp=8, gbs=job.gbs, seq_len=job.seq_len,
                            sequence_parallel=1)   # an int where a bool belongs
    plain = config.replace(sequence_parallel=True)
    out = predictor.predict([(config, job), (plain, job)])
    assert out["pred_error"].eq("").all()
    assert out.iloc[0].equals(out.iloc[1])


def test_a_table_predicts_as_the_frame(predictor, job, space):
    """`predict_table` (what search calls, no DataFrame) gives every column `predict` gives,
    bit for bit, with or without the memory columns handed in."""
    table = Table.from_frame(space)
    frame = predictor.predict(_named(space, job), breakdown=True)
    for memory in (None, memory_arrays(job.model, platform=job.platform,
                                       cols=config_columns(table))):
        got = predictor.predict_table(job.model, job.platform, table, breakdown=True,
                                      memory=memory)
        pd.testing.assert_frame_equal(got.to_frame(), frame, check_exact=True)


def test_a_table_with_an_invalid_row_predicts_as_the_frame(predictor, job, space):
    bad = space.iloc[:5].copy()
    bad.loc[2, "tp"] = 3                                 # divides no model's heads here
    got = predictor.predict_table(job.model, job.platform, Table.from_frame(bad))
    want = predictor.predict(_named(bad, job))
    pd.testing.assert_frame_equal(got.to_frame(), want, check_exact=True)
    assert got["pred_error"][2] and not got["pred_error"][0]


def test_contribution_table_is_the_frame_s_shap(predictor, job, space):
    rows = space.iloc[:30]
    frame = predictor.contributions(job.model, job.platform, rows)
    table = predictor.contribution_table(job.model, job.platform, Table.from_frame(rows))
    pd.testing.assert_frame_equal(table.to_frame(), frame, check_exact=True)
