"""Published experts as a sanity check (issue 5): NVIDIA's tuned recipes against advisor's
ranking for the same jobs. Prints the agreement rate the README quotes."""

import os

import pandas as pd
import pytest

from advisor.search.expert_check import TOP, agreement, recipe_jobs

FLOOR = 0.25
"""Measured 43 of 165 (26 %) with the 1 % default memory margin, 42 without, after the
calibration took in the MLPerf rows (53 before; 46 and 41 with earlier models); a drop below
this is a regression."""


@pytest.fixture(scope="module")
def verdicts(reference_csv):
    return agreement(pd.read_csv(reference_csv), workers=min(4, os.cpu_count() or 1))


def test_recipe_jobs_are_nvidia_recipes_only(reference_csv):
    jobs = recipe_jobs(pd.read_csv(reference_csv))
    assert len(jobs) > 100
    assert jobs["source_name"].str.contains("NeMo|Megatron-Bridge").all()
    assert not jobs["source_name"].str.contains("Narayanan|Korthikanti|MosaicML").any()


@pytest.mark.slow
def test_agreement_with_published_experts(verdicts):
    agree = [v for v in verdicts if v.agrees]
    rate = len(agree) / len(verdicts)
    close = [v for v in verdicts if v.ratio is not None and v.ratio <= 1.10]
    print(f"\nNVIDIA recipe in advisor's top {TOP}: {len(agree)}/{len(verdicts)} jobs "
          f"({rate:.0%}); recipe predicted within 10 % of advisor's pick: "
          f"{len(close)}/{len(verdicts)}")
    assert rate >= FLOOR
    for v in verdicts:
        if v.agrees:
            continue
        # Every disagreement says why: a predicted gain with the knobs that change, or why
        # the recipe is not a candidate at all.
        assert v.why, v.job
        if v.rank is not None:
            assert " would " in v.why, v.why
        else:
            assert v.why.startswith(("outside the valid space", "the memory model says",
                                     "advisor cannot plan")), v.why
