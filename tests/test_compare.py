import pytest

from advisor.catalog import load_model, load_platform
from advisor.compare import compare, parse_sides
from advisor.errors import ConfigError
from advisor.predictor import Predictor

PAPER = "examples/paper-{}-cluster.toml"


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


def test_parse_sides():
    assert parse_sides("h200:32, h100:64") == [("h200", 32), ("h100", 64)]
    assert parse_sides("my.toml:16,h100:8") == [("my.toml", 16), ("h100", 8)]
    for bad in ("h200", "h200:0", "h200:32", "h200:x,h100:8"):
        with pytest.raises(ConfigError, match="PLATFORM:GPUS|two sides"):
            parse_sides(bad)


def test_scale_up_against_scale_out_on_the_papers_testbeds(predictor):
    sides = [(load_platform(PAPER.format("h200")), 32), (load_platform(PAPER.format("h100")), 64)]
    result = compare(load_model("mixtral-8x7b"), sides, seq_len=4096, gbs=128,
                     predictor=predictor)
    h200, h100 = result.sides
    assert {h200.recommendation.job.gbs, h100.recommendation.job.gbs} == {128}
    fastest = max(result.sides, key=lambda s: s.tokens_per_sec)
    assert result.winner is fastest
    assert h200.tokens_per_sec == pytest.approx(h200.tokens_per_sec_per_gpu * 32)
    assert h100.peak_power_per_node_w == pytest.approx(
        h100.best.predicted["pred_peak_power_w"] * 8)
    head = result.verdict[0]
    assert head.startswith(f"{fastest.label} trains")
    kind = "scale-out wins" if fastest is h100 else "scale-up wins"
    assert kind in head and "%" in head
    greenest = min(result.sides, key=lambda s: s.energy_j_per_token)
    assert result.verdict[-1].startswith(f"Energy: {greenest.label} needs")


def test_same_gpu_count_credits_memory_for_smaller_tp(predictor):
    result = compare(load_model("70b"), [(load_platform("h200"), 64),
                                         (load_platform("h100"), 64)], predictor=predictor)
    h200, h100 = result.sides
    if h200.best.config.tp < h100.best.config.tp and result.winner is h200:
        assert f"allow TP={h200.best.config.tp} instead of TP={h100.best.config.tp}" in \
            result.verdict[0]
    assert result.sides[0].recommendation.choices[0].config.world_size == 64


def test_energy_objective_picks_the_greener_side(predictor):
    sides = [(load_platform("h200"), 32), (load_platform("h100"), 64)]
    result = compare(load_model("8b"), sides, objective="energy", predictor=predictor)
    assert result.winner is min(result.sides, key=lambda s: s.energy_j_per_token)
