"""No NaN ever (issue 28, item 3): a platform built in code (a scheduler's, not loaded and so
not range-checked) with numbers past any device gets a per-row error, never a NaN figure; the
rows around it are predicted as before; search skips such layouts with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.errors import AdvisorError
from advisor.core.parallel import make_config, make_job
from advisor.predict.predictor import MUST_BE_FINITE, Predictor


@pytest.fixture(scope="module")
def absurd():
    """H200 with a scale-out network of 1e-300 B/s (the fuzzed cluster file's value)."""
    return dataclasses.replace(load_platform("h200"), inter_node_bandwidth_bytes_per_s=1e-300)


@pytest.mark.parametrize("predictor", [Predictor(None), Predictor.load()],
                         ids=["analytical", "bundled"])
def test_non_finite_prediction_is_a_row_error(absurd, predictor):
    model, h200 = load_model("70b"), load_platform("h200")
    bad, good = (make_job(model, p, num_gpus=64) for p in (absurd, h200))
    out = predictor.predict([(make_config(bad, tp=4, pp=2), bad),
                             (make_config(good, tp=4, pp=2), good)])
    assert "not finite" in out["pred_error"].iloc[0]
    assert out["pred_error"].iloc[1] == ""
    for column in MUST_BE_FINITE:
        assert np.isnan(out[column].iloc[0]), column      # no figure for the refused row
        assert np.isfinite(out[column].iloc[1]), column
    alone = predictor.predict([(make_config(good, tp=4, pp=2), good)])
    assert alone["pred_tokens_per_sec_per_gpu"].iloc[0] == out["pred_tokens_per_sec_per_gpu"
                                                                ].iloc[1]


def test_recommend_refuses_a_job_no_layout_of_which_is_finite(absurd):
    from advisor.search.recommend import recommend

    job = make_job(load_model("8b"), absurd, num_gpus=16)
    with pytest.raises(AdvisorError, match="not finite"):
        recommend(job, top=1, predictor=Predictor(None))
