"""`explain`'s advice names only the remedies that apply to the layout it explains."""

from __future__ import annotations

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.explain.bottlenecks import explain
from advisor.perf.analytical import predict_config


def _biggest_loss(model: str, platform: str, gpus: int, **knobs) -> str:
    m, p = catalog.load_model(model), catalog.load_platform(platform)
    config = make_config(make_job(m, p, num_gpus=gpus), **knobs)
    lines = explain(predict_config(m, p, config), m, p)
    return next(line for line in lines if line.startswith("Biggest loss"))


def test_clock_loss_advice_fits_the_layout():
    # GPT3-175B TP2-PP16 at micro-batch 1 on H200: the power cap is the biggest loss; a smaller
    # micro-batch cannot be advised (it is 1 already), an uneven split can (PP 16).
    line = _biggest_loss("gpt3-175b", "h200", 32, tp=2, pp=16, mbs=1)
    assert "clocks below maximum" in line
    assert "micro-batch 1 instead" not in line
    assert "uneven split" in line
    bigger = _biggest_loss("gpt3-175b", "h200", 32, tp=2, pp=16, mbs=2)
    assert "micro-batch 1 instead of 2" in bigger


def test_clock_loss_without_a_remedy_says_so():
    # One pipeline stage, micro-batch 1, no overlap, cold plates (no rear row): nothing in the
    # layout lowers the cap's loss.
    line = _biggest_loss("llama3-8b", "gb200", 8, tp=1, pp=1, mbs=1, overlap=False)
    assert "clocks below maximum" in line, line
    assert "nothing in this layout" in line
    # The same layout on air-cooled H200 has a hotter rear row to cool.
    air = _biggest_loss("llama3-8b", "h200", 8, tp=1, pp=1, mbs=1, overlap=False)
    assert air.endswith("To cut it: a cooler inlet for the rear row."), air
