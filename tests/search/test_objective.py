import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.catalog import load_platform
from advisor.core.errors import ConfigError
from advisor.core.table import Table
from advisor.search.objective import Constraints, pareto_front, rank, score


def _frame(tps, cost, **extra):
    n = len(tps)
    base = {"pred_tokens_per_sec_per_gpu": tps, "pred_peak_power_w": cost,
            "pred_energy_j_per_token": cost, "pred_memory_gb": np.full(n, 50.0),
            "cp": np.ones(n, int), "mbs": np.ones(n, int), "dp_sharding": ["optimizer"] * n,
            "recompute": ["none"] * n}
    return Table({k: np.asarray(v) for k, v in (base | extra).items()})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50)), min_size=1, max_size=40))
def test_pareto_front_is_exactly_the_non_dominated_set(points):
    frame = _frame([float(p[0]) for p in points], [float(p[1]) for p in points])
    front = pareto_front(frame, "pred_peak_power_w")
    got = set(zip(front["pred_tokens_per_sec_per_gpu"], front["pred_peak_power_w"], strict=False))
    want = {(t, c) for t, c in points
            if not any((t2 >= t and c2 <= c) and (t2 > t or c2 < c) for t2, c2 in points)}
    assert got == {(float(t), float(c)) for t, c in want}


def test_constraint_violations_are_signed_excess():
    frame = Table({"pred_memory_gb": np.array([100.0, 130.0]),
                   "pred_avg_power_w": np.array([550.0, 690.0]),
                   "pred_peak_power_w": np.array([600.0, 720.0]),
                   "pred_throttle_risk": np.array([0.1, 0.5]),
                   "tp": np.array([8, 8]), "pp": np.array([2, 1]), "cp": np.array([1, 1]),
                   "dp": np.array([1, 2])})
    v = Constraints(max_power_w=650, max_peak_power_w=700, max_job_power_w=10_000,
                    max_throttle_risk=0.2, memory_margin=0.1).violations(
        frame, capacity_gb=140.0)
    assert v["memory_gb"].tolist() == pytest.approx([100 - 126, 130 - 126])
    assert v["power_w"].tolist() == [-100, 40]           # average per GPU
    assert v["peak_power_w"].tolist() == [-100, 20]      # highest 50 ms sample per GPU
    assert v["job_power_w"].tolist() == [16 * 550 - 10_000, 16 * 690 - 10_000]
    assert v["throttle_risk"].tolist() == pytest.approx([-0.1, 0.3])


def test_node_power_adds_the_measured_host():
    frame = Table({"pred_memory_gb": np.array([50.0]), "pred_avg_power_w": np.array([600.0]),
                   "tp": np.array([8]),
                   "pp": np.array([8]), "cp": np.array([1]), "dp": np.array([1])})
    h100 = load_platform("h100")
    v = Constraints(max_node_power_w=7000).violations(frame, capacity_gb=80.0, platform=h100)
    assert v["node_power_w"].tolist() == [8 * 600 + h100.host_power_w - 7000]
    with pytest.raises(ConfigError, match="mi300x has no host_power_w"):
        Constraints(max_node_power_w=7000).violations(frame, capacity_gb=192.0,
                                                      platform=load_platform("mi300x"))


@pytest.mark.parametrize("kwargs", [{"max_power_w": 0}, {"max_peak_power_w": -5},
                                    {"max_job_power_w": float("nan")}, {"max_throttle_risk": 1.5},
                                    {"memory_margin": 1.0}, {"memory_margin": -0.1}])
def test_constraints_reject_nonsense(kwargs):
    with pytest.raises(ConfigError):
        Constraints(**kwargs)


def test_score_is_expected_by_default_and_pessimistic_when_averse():
    frame = _frame([100.0, 110.0], [1.0, 2.0],
                   pred_tokens_per_sec_per_gpu_p10=[95.0, 60.0])
    assert score(frame, "throughput").tolist() == [100.0, 110.0]  # the median decides
    assert score(frame, "throughput", "averse").tolist() == [95.0, 60.0]  # wide band loses
    assert rank(frame, "throughput")["pred_tokens_per_sec_per_gpu"][0] == 110.0
    assert rank(frame, "throughput", "averse")["pred_tokens_per_sec_per_gpu"][0] == 100.0
    energy = score(frame, "energy")
    assert energy[0] > energy[1]
    # On one platform the price per GPU-hour is one number: cost ranks as throughput.
    assert score(frame, "cost").tolist() == score(frame, "throughput").tolist()
    with pytest.raises(ConfigError):
        score(frame, "speed")
    with pytest.raises(ConfigError, match="`risk`"):
        score(frame, "throughput", "reckless")


def test_near_ties_go_to_the_conventional_layout():
    frame = _frame([100.0, 98.0, 80.0], [1.0, 1.0, 1.0], cp=[2, 1, 1])
    order = rank(frame, "throughput")
    assert order["cp"].tolist() == [1, 2, 1]  # 98 is within 5 % of 100: no CP wins
    assert order["near_best"].tolist() == [True, True, False]
    far = rank(_frame([100.0, 90.0], [1.0, 1.0], cp=[2, 1]), "throughput")
    assert far["cp"].tolist() == [2, 1]  # 10 % apart: throughput decides


def test_each_objective_ranks_its_own_best_first():
    # Fast but power-hungry, slow but frugal, and a knee between them.
    frame = _frame([100.0, 60.0, 90.0], [2.0, 0.9, 1.2])
    assert rank(frame, "throughput")["pred_tokens_per_sec_per_gpu"][0] == 100.0
    assert rank(frame, "energy")["pred_energy_j_per_token"][0] == 0.9
    assert rank(frame, "balanced")["pred_tokens_per_sec_per_gpu"][0] == 90.0
