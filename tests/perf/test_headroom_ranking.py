"""Issue 29: among layouts within 0.5 % of each other, recommend prefers the one with more
memory headroom (a real recommend run: Llama 3.1 8B on 8 H100, the bundled predictor)."""

import numpy as np
import pytest

from advisor import catalog
from advisor.core.parallel import make_job
from advisor.search.objective import HEADROOM_TOLERANCE, conventional_order, headroom_gb
from advisor.search.recommend import recommend


@pytest.fixture(scope="module")
def ranked():
    job = make_job(catalog.find_model("llama3.1-8b"), catalog.load_platform("h100"), num_gpus=8)
    table = recommend(job).ranked_table
    score = np.asarray(table["score"], dtype=float)
    tie_class = np.stack([np.asarray(table["near_best"], dtype=float),
                          conventional_order(table)], axis=1)
    return table, score, tie_class, headroom_gb(table)


def test_a_slower_layout_ranks_first_only_for_more_headroom_within_the_tolerance(ranked):
    table, score, tie_class, room = ranked
    same = (tie_class[1:] == tie_class[:-1]).all(axis=1)
    inverted = np.flatnonzero(same & (score[1:] > score[:-1]))
    assert len(inverted), "the rule never acted on this run: the test would prove nothing"
    # Each inversion stays inside one run (every member within the tolerance of its leader).
    gain = score[inverted + 1] / score[inverted] - 1
    assert (gain <= HEADROOM_TOLERANCE / (1 - HEADROOM_TOLERANCE) + 1e-12).all()
    assert (room[inverted] >= room[inverted + 1]).all()


def test_the_pick_has_the_most_headroom_among_its_equals(ranked):
    table, score, tie_class, room = ranked
    cls = (tie_class == tie_class[0]).all(axis=1)
    lead = np.nanmax(score[cls])
    equals = cls & (score >= lead * (1 - HEADROOM_TOLERANCE))
    assert room[0] == room[equals].max()
    # The pick is no more than the tolerance behind the best of its class.
    assert score[0] >= lead * (1 - HEADROOM_TOLERANCE)
