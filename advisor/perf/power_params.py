"""The power model's parameters (`advisor/catalog/power.toml`: shares of the board's design
power, DVFS, leakage, sampling), and the few formulas that read only them. Its own module so that
the thermal fit (`advisor/perf/thermal_fit.py`), which needs the static share and the exponent,
and the power model (`advisor/perf/power.py`), which needs the thermal fit, do not import each
other."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from dataclasses import replace as replace_fields
from importlib import resources

import numpy as np

from advisor.core.errors import CatalogError
from advisor.core.platform import Platform


@dataclass(frozen=True)
class PowerParams:
    """The power model's parameters (`advisor/catalog/power.toml`); shares of the power limit."""

    busy_share: float
    wait_share: float
    static_share: float
    clock_power_exponent: float
    clock_bound_share: float
    attention_ratio: float
    memory_ratio: float
    overlap_share: float
    comm_extra_share: float
    peak_excursion: float
    leakage_per_c: float
    leakage_reference_c: float
    min_clock_frac: float
    sample_window_s: float
    inlet_sigma_c: float
    """How far the real inlet may differ from the stated one (racks, hot spots, seasons)."""
    gemm_power_half_dim: float
    """At equal FLOP rate a smaller GEMM draws less (the H200 probe: a 4096³ GEMM at 0.996 of
    the 8192³ one's speed held 1,537 against 1,491 MHz under the cap): its dynamic power
    follows Π d/(d + d½) over its three dimensions, relative to the 8192³ GEMM's
    (`gemm_power_shape`)."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    FITTED = ("busy_share", "wait_share", "static_share", "clock_power_exponent",
              "clock_bound_share")

    def replace(self, **changes: float) -> PowerParams:
        return replace_fields(self, **changes)

    def slowdown(self, clock_frac: np.ndarray) -> np.ndarray:
        """Compute time at clock fraction φ relative to full clock: β/φ + 1 − β."""
        b = self.clock_bound_share
        return b / clock_frac + 1.0 - b

    def best_gemm_w(self, platform: Platform) -> float:
        """What a best-fed GEMM draws at full clock on `platform`: its own measured
        `gemm_power_w`, else the cross-chip `busy_share` of its design power."""
        return float(platform.gemm_power_w or self.busy_share * platform.tdp_w)

    def gemm_demand(self, design_w: np.ndarray | float, utilization: np.ndarray,
                    best_w: np.ndarray | float) -> np.ndarray:
        """A GEMM's demand at full clock: the static floor plus dynamic power in proportion to
        how well fed its tensor cores are (utilization 1, the probe's 8192³ GEMM: `best_w`)."""
        static = self.static_share * design_w
        return static + (best_w - static) * utilization

    def gemm_power_shape(self, m, n, k) -> np.ndarray:
        """Π d/(d + d½) of a GEMM's dimensions over the same for the 8192³ GEMM the demand is
        stated for."""
        h = self.gemm_power_half_dim
        ref = (8192.0 / (8192.0 + h)) ** 3
        return (m / (m + h)) * (n / (n + h)) * (k / (k + h)) / ref

    def busy_power(self, static_w: np.ndarray, demand_w: np.ndarray,
                   clock_frac: np.ndarray) -> np.ndarray:
        return static_w + (demand_w - static_w) * clock_frac ** self.clock_power_exponent

    def capped_clock(self, static_w: np.ndarray, demand_w: np.ndarray,
                     limit_w: float | np.ndarray) -> np.ndarray:
        """The clock fraction at which busy power meets the limit (1 where it fits)."""
        headroom = np.maximum(limit_w - static_w, 1e-9)
        over = np.maximum(demand_w - static_w, 1e-9)
        phi = (headroom / over) ** (1.0 / self.clock_power_exponent)
        return np.clip(phi, self.min_clock_frac, 1.0)


@functools.cache
def load_power_params() -> PowerParams:
    """The shipped parameters."""
    import tomllib

    text = resources.files("advisor.catalog").joinpath("power.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    values = {**data.get("fitted", {}), **data.get("fixed", {})}
    names = {f.name for f in fields(PowerParams)} - {"sources"}
    if set(values) != names:
        raise CatalogError(f"power.toml: expected keys {', '.join(sorted(names))}; "
                           f"got {', '.join(sorted(values))}.")
    sources = data.get("sources", {})
    for key in names:
        if not str(sources.get(key, "")).strip():
            raise CatalogError(f"power.toml: {key} has no entry in [sources].")
    return PowerParams(**{k: float(v) for k, v in values.items()}, sources=sources)
