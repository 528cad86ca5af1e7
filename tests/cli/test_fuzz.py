"""Generated inputs of the five kinds a user or a file gives advisor — CLI flags, predict
--input CSV, cluster TOML, campaign TOML, Hugging Face config.json — through the real entry
point: each answers (exit 0, valid JSON without NaN) or refuses (exit 2, one `error:` line),
never a traceback, never over 30 s. Hypothesis draws the cases with a fixed seed
(`derandomize`), so CI runs the same ones every time; `benchmarks/fuzz.py` runs thousands."""

import random

import pytest
from fuzzing import KINDS, make_case, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_every_generated_input_is_answered_or_refused_on_one_line(kind, seed, tmp_path):
    case = make_case(kind, random.Random(seed))
    outcome = run(case, tmp_path / f"{kind}-{seed}")
    assert not outcome.problem, (
        f"{outcome.problem}\nreplay: python benchmarks/fuzz.py --replay {seed} --kinds {kind}"
        f"\nargs: {case.args}\nstderr: {outcome.stderr[-400:]}\n{outcome.crash[-3000:]}")


def test_the_contract_catches_what_it_is_meant_to(tmp_path):
    """The checker itself: a traceback, a two-line refusal and NaN in JSON are problems."""
    from fuzzing import Case, Outcome

    case = Case("cli", ["predict", "--json"])
    assert Outcome(case, None, "", "", 0.1, crash="Traceback...\nKeyError: 'x'").problem \
        .startswith("crash: KeyError")
    assert Outcome(case, None, "", "", 31, crash="hang").problem.startswith("hang")
    assert "one error: line" in Outcome(case, 2, "", "error: a\nerror: b\n", 0.1).problem
    assert "bad JSON" in Outcome(case, 0, '{"x": NaN}', "", 0.1).problem
    assert Outcome(case, 0, '{"x": null}', "", 0.1).problem == ""
    assert Outcome(case, 2, "", "note\nerror: one line\n", 0.1).problem == ""
    # And a real run that refuses keeps the contract.
    refused = run(Case("cli", ["predict", "--model", "nope", "--gpus", "8", "--platform",
                               "h100", "--json"]), tmp_path)
    assert refused.code == 2 and refused.problem == ""
