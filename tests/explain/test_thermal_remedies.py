"""The thermal warning's remedies are checked (issue 47): each change is predicted with it
applied, named with the risk it leaves and its throughput cost, and a change that does not
lower the risk is not named."""

import re

from advisor.catalog import load_model, load_platform, with_conditions
from advisor.core.parallel import make_config, make_job
from advisor.explain.rationale import thermal_remedies, thermal_warning
from advisor.perf.analytical import predict_config

MODEL = load_model("llama3-70b")
HOT = with_conditions(load_platform("h100"), inlet_c=35)


def _row(**layout) -> dict:
    job = make_job(MODEL, HOT, num_gpus=64)
    config = make_config(job, **layout)
    b = predict_config(MODEL, HOT, config)
    return {**config.to_dict(), "pred_throttle_risk": b.power.throttle_risk}, b


def test_every_named_remedy_lowers_the_risk_it_states():
    for layout in ({"tp": 4, "pp": 2, "mbs": 2}, {"tp": 8, "pp": 1}, {"tp": 2, "pp": 8}):
        row, base = _row(**layout)
        named = thermal_remedies(row, HOT, MODEL)
        assert named, layout
        for text in named:
            risk = float(re.search(r"\(risk (\d+)%", text).group(1)) / 100
            assert risk < base.power.throttle_risk - 0.005, (layout, text)
        # Independently: micro-batch 1 is named exactly when it lowers the risk.
        if base.config.mbs > 1:
            after = predict_config(MODEL, HOT, base.config.replace(mbs=1))
            lowers = after.power.throttle_risk < base.power.throttle_risk - 0.01
            assert lowers == any(t.startswith("micro-batch 1") for t in named), layout


def test_the_warning_says_when_nothing_tried_helps():
    row, _ = _row(tp=8, pp=1)
    text = thermal_warning(row, HOT, MODEL)
    assert text.startswith(f"thermal risk {row['pred_throttle_risk']:.0%}")
    assert ("lowered by" in text) != ("no change tried here" in text)
