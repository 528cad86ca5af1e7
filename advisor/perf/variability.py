"""What GPU-to-GPU variation costs a synchronous job: the slowest of N GPUs, and the chance and
expected depth of a GPU reaching its slowdown temperature.

Two sources of spread, both measured on hundreds of individual V100s
(`datasets/reference/thermal`, fitted in `advisor/perf/thermal_fit.py`):

* **speed**: at the power cap, GPUs of one model run the same kernel at different clocks
  (leakage differs from die to die). A synchronous step waits for the slowest of its N GPUs,
  whose expected shortfall is σ · E[max of N standard normals], growing with N.
* **temperature**: at equal power and slot, GPUs differ (σ_gpu within a node, one draw per
  GPU), nodes differ (σ_node: airflow, fans, rack position; one draw per node), and the room's
  inlet differs from the stated one (σ_inlet, one draw for the job). The hottest of the GPUs
  near the modelled hottest temperature sets whether, and how far, a GPU passes its slowdown
  point: a real event with a probability, not the ordinary power cap.

Order statistics come from quadrature over the normal density (exact to 1e-6 for any N up to
10^9), the normal CDF from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy only.
"""

from __future__ import annotations

import functools

import numpy as np

_GRID = np.linspace(-10.0, 10.0, 2001)
_STEP = _GRID[1] - _GRID[0]


def normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * np.square(x)) / np.sqrt(2.0 * np.pi)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Φ(x) (Abramowitz & Stegun 7.1.26 on erf)."""
    x = np.asarray(x, dtype=float)
    z = np.abs(x) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (
        -1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.sign(x) * erf)


@functools.lru_cache(maxsize=4096)
def _max_moments(n: int) -> tuple[float, float]:
    if n <= 1:
        return 0.0, 1.0
    # density of the maximum: n φ(x) Φ(x)^(n−1), in logs so huge n does not underflow
    log_cdf = np.log(np.maximum(normal_cdf(_GRID), 1e-300))
    density = n * normal_pdf(_GRID) * np.exp((n - 1) * log_cdf)
    density /= density.sum() * _STEP
    mean = float((_GRID * density).sum() * _STEP)
    var = float((np.square(_GRID - mean) * density).sum() * _STEP)
    return mean, float(np.sqrt(max(var, 0.0)))


def max_of_normals(num: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of the largest of `num` independent standard normals
    (0 and 1 for one)."""
    num = np.maximum(np.rint(np.asarray(num, dtype=float)), 1).astype(np.int64)
    values, inverse = np.unique(num, return_inverse=True)
    moments = np.array([_max_moments(int(v)) for v in values]).reshape(-1, 2)
    return moments[inverse, 0].reshape(num.shape), moments[inverse, 1].reshape(num.shape)


def slowest_of(num_gpus: np.ndarray, sigma: float) -> np.ndarray:
    """Expected fractional shortfall of the slowest of `num_gpus` GPUs against the typical one,
    for a log-normal speed spread σ: σ · E[max of N]."""
    return sigma * max_of_normals(num_gpus)[0]


def slowdown_event(hottest_c: np.ndarray, slowdown_c: float,
                   spreads: list[tuple[float, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(probability, expected excess in °C) that the hottest GPU, modelled at `hottest_c`,
    passes `slowdown_c`. Its temperature is hottest + Σ σ_i·M_i, one term per source of spread
    in `spreads` (σ_i, N_i): M_i the largest of N_i standard normals (taken as normal with its
    own mean and spread), e.g. the room's inlet (one draw shared by all), each hot node's
    airflow (one per node), each hot GPU of a node (one per GPU). The excess is
    E[max(0, T − slowdown)]."""
    mu = np.asarray(hottest_c, dtype=float).copy()
    var = np.zeros_like(mu)
    for sigma, num in spreads:
        mean, spread = max_of_normals(np.broadcast_to(num, mu.shape))
        mu = mu + sigma * mean
        var = var + np.square(sigma * spread)
    sd = np.maximum(np.sqrt(var), 1e-6)
    z = (mu - slowdown_c) / sd
    probability = normal_cdf(z)
    excess = sd * normal_pdf(z) + (mu - slowdown_c) * probability
    return probability, np.maximum(excess, 0.0)
