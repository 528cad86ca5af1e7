import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.errors import ConfigError
from advisor.perf.money import DEFAULT_ELECTRICITY_USD_PER_KWH
from advisor.predict.predictor import Predictor
from advisor.search.compare import compare, parse_prices, parse_sides

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
    assert h200.tokens_per_sec == pytest.approx(h200.tokens_per_sec_per_gpu * 32)
    assert h100.peak_power_per_node_w == pytest.approx(
        h100.best.prediction.peak_power_w * 8)
    assert result.winner is max(result.sides, key=lambda s: s.tokens_per_sec)
    assert h200.best.config == h200.recommendation.choices[0].config


def _claims(line: str, result) -> None:
    """What a verdict line claims must match the numbers."""
    if "communication-bound on" in line:
        slow = next(s for s in result.sides if f"communication-bound on {s.label}" in line)
        assert slow.comm_share >= 0.2
    if "compute-bound" in line:
        assert all(s.comm_share < 0.2 for s in result.sides)
    if "scale-out wins" in line:
        out, up = sorted(result.sides, key=lambda s: -s.num_gpus)[:2]
        # More GPUs win by number; their communication is a cost, never the reason.
        assert "communication-heavy" not in line and "communication-bound" not in line
        if "despite more exposed communication" in line:
            assert out.comm_share > up.comm_share
        if "with less exposed communication" in line:
            assert out.comm_share < up.comm_share
    if "larger memory" in line:
        named = next(s for s in result.sides if s.platform.display_name + "'s larger" in line)
        others = [s for s in result.sides if s is not named]
        assert all(named.platform.memory_capacity_bytes > o.platform.memory_capacity_bytes
                   for o in others)


@pytest.mark.parametrize("sides", [("h200", 32, "h100", 64), ("b200", 48, "h100", 64),
                                   ("h200", 64, "h100", 32), ("h100", 64, "h100", 32)])
def test_verdicts_never_contradict_the_numbers(predictor, sides):
    a, n, b, m = sides
    result = compare(load_model("70b"), [(load_platform(a), n), (load_platform(b), m)],
                     predictor=predictor)
    fastest = max(result.sides, key=lambda s: s.tokens_per_sec)
    slowest = min(result.sides, key=lambda s: s.tokens_per_sec)
    head = result.verdict[0]
    if fastest.tokens_per_sec / slowest.tokens_per_sec - 1 < 0.05:
        assert "tie within" in head
    else:
        assert head.startswith(f"{fastest.label} trains")
        kind = ("scale-out wins" if fastest.num_gpus > slowest.num_gpus else
                "scale-up wins" if fastest.num_gpus < slowest.num_gpus else "per GPU")
        assert kind in head
    for line in result.verdict:
        _claims(line, result)


def test_energy_objective_names_the_greener_side_without_calling_it_faster(predictor):
    sides = [(load_platform("mi300x"), 32), (load_platform("h100"), 64)]
    result = compare(load_model("70b"), sides, objective="energy", predictor=predictor)
    greenest = min(result.sides, key=lambda s: s.energy_j_per_token)
    assert result.winner is greenest
    assert not any(f"{greenest.label} trains -" in line for line in result.verdict)
    assert result.verdict[-1].startswith(f"Energy: {greenest.label} needs") or \
        "tie within" in result.verdict[-1]


def test_parse_prices():
    assert parse_prices(None) == {} and parse_prices("3.5") == {"*": 3.5}
    assert parse_prices("H100=2.5, h200=3.6") == {"h100": 2.5, "h200": 3.6}
    for bad in ("free", "h100=", "=3", "h100=-1", "h100=0"):
        with pytest.raises(ConfigError, match="`gpu_hour_price`"):
            parse_prices(bad)


def test_cost_objective_weighs_the_gpu_hour_prices(predictor):
    sides = [(load_platform("h200"), 32), (load_platform("h100"), 64)]
    model = load_model("70b")
    # Catalog prices: dollars per million tokens = price / tokens per GPU-hour × 1e6, plus
    # the energy at the wall at the default electricity price.
    result = compare(model, sides, objective="cost", predictor=predictor)
    for side in result.sides:
        assert side.gpu_hour_usd == side.platform.gpu_hour_usd
        energy = side.energy_j_per_token * 1e6 / 3.6e6 * DEFAULT_ELECTRICITY_USD_PER_KWH
        assert side.usd_per_million_tokens == pytest.approx(
            side.gpu_hour_usd / (side.tokens_per_sec_per_gpu * 3600) * 1e6 + energy)
    assert result.winner is min(result.sides, key=lambda s: s.usd_per_million_tokens)
    assert any(line.startswith("Cost: ") for line in result.verdict)
    # Make the winner's GPUs ten times dearer: the other side wins on cost.
    dear = {result.winner.platform.name: 10 * result.winner.gpu_hour_usd}
    flipped = compare(model, sides, objective="cost", predictor=predictor, prices=dear)
    assert flipped.winner.platform.name != result.winner.platform.name
    with pytest.raises(ConfigError, match="`gpu_hour_price` mi300x="):
        compare(model, [(load_platform("mi300x"), 32), sides[1]], objective="cost",
                predictor=predictor)
