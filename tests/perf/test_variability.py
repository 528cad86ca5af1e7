"""The order statistics and the slowdown event behind the expected losses, against simulation."""

from __future__ import annotations

import numpy as np
import pytest

from advisor.perf.variability import (
    max_of_normals,
    normal_cdf,
    slowdown_event,
    slowest_of,
)

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("n", [1, 2, 8, 64, 512])
def test_max_of_normals_matches_simulation(n):
    draws = RNG.standard_normal((20_000, n)).max(axis=1)
    mean, sd = max_of_normals(np.array([n]))
    assert mean[0] == pytest.approx(draws.mean(), abs=0.02)
    assert sd[0] == pytest.approx(draws.std(), abs=0.02)


def test_normal_cdf_matches_the_error_function():
    from math import erf, sqrt

    x = np.linspace(-6, 6, 241)
    assert np.allclose(normal_cdf(x), [0.5 * (1 + erf(v / sqrt(2))) for v in x], atol=2e-7)


def test_the_slowest_of_more_gpus_is_slower():
    loss = slowest_of(np.array([1, 8, 64, 512, 4096]), 0.016)
    assert loss[0] == 0 and (np.diff(loss) > 0).all()


def test_slowdown_event_matches_simulation():
    # the hottest GPU modelled at 80 °C; a room draw, one per node (8 hot nodes), one per GPU
    # (4 hot GPUs per node)
    hottest, slowdown = 80.0, 89.0
    spreads = [(2.0, np.array([1.0])), (4.0, np.array([8.0])), (3.0, np.array([4.0]))]
    probability, excess = slowdown_event(np.array([hottest]), slowdown, spreads)
    room = RNG.normal(0, 2.0, 200_000)
    node = RNG.normal(0, 4.0, (200_000, 8)).max(axis=1)
    gpu = RNG.normal(0, 3.0, (200_000, 4)).max(axis=1)
    t = hottest + room + node + gpu
    assert probability[0] == pytest.approx((t > slowdown).mean(), abs=0.03)
    assert excess[0] == pytest.approx(np.maximum(t - slowdown, 0).mean(), rel=0.1)


def test_no_spread_is_a_step():
    p, e = slowdown_event(np.array([85.0, 95.0]), 89.0, [(0.0, np.array([1.0, 1.0]))])
    assert p.tolist() == [0.0, 1.0]
    assert e == pytest.approx([0.0, 6.0])
