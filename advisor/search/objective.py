"""What a recommendation optimises and what it must respect: objectives, user constraints, and
the Pareto fronts of throughput against peak power and energy.

Everything here works on the `pred_*` columns the `Predictor` returns (a `Table`), vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.core.errors import ConfigError
from advisor.core.parallel import RECOMPUTE
from advisor.core.platform import Platform
from advisor.core.table import Table

OBJECTIVES = ("throughput", "energy", "balanced", "cost")
"""throughput: most tokens/s per GPU. energy: most tokens per joule. balanced: the largest
product of throughput and tokens per joule, each relative to the best candidate (the knee of the
throughput-energy front). cost: fewest dollars per million tokens (GPU-hour price / tokens per
GPU-hour): on one platform that is the throughput ranking; `compare` weighs the prices."""

RISKS = ("expected", "averse")
"""expected: rank on the predicted median (what a platform engineer means by "fastest").
averse: rank on the pessimistic p10, so a layout the measured data supports poorly (a wide
band) cannot win on its median; the recommendation says what that traded."""


DEFAULT_MEMORY_MARGIN = 0.015
"""Sized from measured peaks: `python benchmarks/memory_validation.py` compares the memory
model's allocated bytes with the peak allocated bytes of 511 Megatron-LM CI runs on A100, H100
and GB200 (datasets/reference/megatron_ci) and prints the 95th percentile of the bytes it misses,
as a fraction of the GPU's memory: 0.0126 (median 0.0014, largest 0.025; 0 of the 511 runs
predicted not to fit; after the attention output of GQA models was counted at full width and
the runs that recompute named modules were mapped).
Rounded up to the next half per cent, 1.5 %. The model's own reserve (CUDA context, NCCL,
fragmentation) is outside allocated bytes and comes on top; --memory-margin 0 gives the
margin back."""


POWER_BOUNDS = {
    "max_power_w": ("power_w", "average power per GPU"),
    "max_peak_power_w": ("peak_power_w", "peak power per GPU (highest 50 ms sample)"),
    "max_node_power_w": ("node_power_w", "average power per node (its GPUs and host)"),
    "max_job_power_w": ("job_power_w", "average power of the job's GPUs together"),
}
"""Each power constraint: the violation it is recorded under and what it bounds."""
LOSS_BOUNDS = {
    "max_thermal_loss": ("thermal_loss", "expected thermal loss"),
    "max_power_cap_loss": ("power_cap_loss", "power-cap loss"),
}
"""Each bound on an expected loss of throughput: its violation (and `pred_` column) and name."""


@dataclass(frozen=True)
class Constraints:
    """Limits every recommended configuration must meet (None = no limit)."""

    max_power_w: float | None = None
    """Predicted average power per GPU over the step (what a rack's power budget sustains;
    never above the GPU's power limit)."""
    max_peak_power_w: float | None = None
    """Predicted peak power per GPU: the highest 50 ms NVML instantaneous sample, which may
    pass the power limit briefly."""
    max_node_power_w: float | None = None
    """Predicted average power of one node: its GPUs' average plus the host's measured draw
    (`Platform.host_power_w`; a platform without one is refused)."""
    max_job_power_w: float | None = None
    """Predicted average power of all the job's GPUs together."""
    max_throttle_risk: float | None = None
    """Predicted probability that a GPU of the job reaches its slowdown temperature, 0..1."""
    max_thermal_loss: float | None = None
    """Predicted expected share of throughput lost to thermal slowdown (its probability times
    what it costs), 0..1: what a risk is worth, where `max_throttle_risk` bounds how likely
    it is however little it costs."""
    max_power_cap_loss: float | None = None
    """Predicted share of throughput lost to clocks below maximum under the power limit, 0..1."""
    memory_margin: float = DEFAULT_MEMORY_MARGIN
    """Fraction of GPU memory left free on the heaviest stage, on top of the memory model's own
    allowance for the CUDA context and allocator (`DEFAULT_MEMORY_MARGIN`)."""

    def __post_init__(self) -> None:
        for name in POWER_BOUNDS:
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"`{name}` must be positive, got {value}.")
        if self.max_throttle_risk is not None and not 0 <= self.max_throttle_risk <= 1:
            raise ConfigError(f"`max_throttle_risk` is a probability between 0 and 1, got "
                              f"{self.max_throttle_risk}.")
        for name in LOSS_BOUNDS:
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                raise ConfigError(f"`{name}` is a share of throughput in [0, 1), got {value}; "
                                  f"0.02 allows 2 %.")
        if not 0 <= self.memory_margin < 1:
            raise ConfigError(f"`memory_margin` is a fraction of GPU memory in [0, 1), got "
                              f"{self.memory_margin}; 0.1 keeps 10 % free.")

    def violations(self, scored: Table, capacity_gb: float, *,
                   platform: Platform | None = None) -> dict[str, np.ndarray]:
        """One array per constraint: by how much each row exceeds it (≤ 0 = met). Optuna's
        `trial.set_constraint` takes exactly these values. `platform` (its GPUs per node and
        host power) is needed for `max_node_power_w`."""
        usable = capacity_gb * (1.0 - self.memory_margin)
        out = {"memory_gb": scored["pred_memory_gb"] - usable}
        for name, (violation, _) in POWER_BOUNDS.items():
            limit = getattr(self, name)
            if limit is not None:
                out[violation] = power_of(scored, violation, platform) - limit
        if self.max_throttle_risk is not None:
            out["throttle_risk"] = scored["pred_throttle_risk"] - self.max_throttle_risk
        for name, (violation, _) in LOSS_BOUNDS.items():
            limit = getattr(self, name)
            if limit is not None:
                out[violation] = _floats(scored, f"pred_{violation}") - limit
        return out

    def describe(self) -> list[str]:
        out = []
        for name, (_, what) in POWER_BOUNDS.items():
            limit = getattr(self, name)
            if limit is not None:
                out.append(f"{what} ≤ {limit:,.0f} W")
        if self.max_throttle_risk is not None:
            out.append(f"thermal risk ≤ {self.max_throttle_risk:.0%}")
        for name, (_, what) in LOSS_BOUNDS.items():
            limit = getattr(self, name)
            if limit is not None:
                out.append(f"{what} ≤ {limit:.1%}")
        if self.memory_margin:
            out.append(f"{self.memory_margin:.1%} of GPU memory kept free")
        return out


def power_of(scored: Table, violation: str, platform: Platform | None = None) -> np.ndarray:
    """The predicted power a constraint bounds (`POWER_BOUNDS`), per row."""
    if violation == "peak_power_w":
        return _floats(scored, "pred_peak_power_w")
    avg = _floats(scored, "pred_avg_power_w")
    if violation == "node_power_w":
        host = node_host_w(platform)
        return avg * np.minimum(platform.num_gpus_per_node, _world(scored)) + host
    if violation == "job_power_w":
        return avg * _world(scored)
    return avg


def _world(scored: Table) -> np.ndarray:
    return (_floats(scored, "tp") * _floats(scored, "pp") * _floats(scored, "cp")
            * _floats(scored, "dp"))


def node_host_w(platform: Platform | None) -> float:
    """The host's draw per node, refused where the platform has no measurement of it."""
    if platform is None or platform.host_power_w is None:
        name = platform.name if platform is not None else "this platform"
        raise ConfigError(f"`max_node_power_w` needs the power of a node's host (CPUs, fans, "
                          f"NICs, switches): {name} has no host_power_w in the catalog; give "
                          f"it in a cluster file (base = \"{name}\", host_power_w = W, with "
                          f"its source) or bound the GPUs with `max_job_power_w`.")
    return float(platform.host_power_w)


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective {objective!r} is unknown; use one of "
                          f"{', '.join(OBJECTIVES)}.")
    return objective


def check_risk(risk: str) -> str:
    if risk not in RISKS:
        raise ConfigError(f"`risk` {risk!r} is unknown; use expected (rank on the predicted "
                          f"median) or averse (rank on the pessimistic p10).")
    return risk


TIE_TOLERANCE = 0.05
"""Candidates within this fraction of the best score count as a tie, which the more
conventional layout wins: the model cannot order them (its error against NVIDIA's measured
recipes is 2-6 % per layout, more between layouts). The recommendation says when a tie
decided, and by how much the layout it beat is predicted faster."""


def throughput_basis(scored: Table, risk: str = "expected") -> np.ndarray:
    """Tokens/s per GPU that ranking uses: the median, or the p10 where `risk` is averse (and
    the Predictor gives one)."""
    check_risk(risk)
    tps = _floats(scored, "pred_tokens_per_sec_per_gpu")
    if risk == "expected" or "pred_tokens_per_sec_per_gpu_p10" not in scored:
        return tps
    return np.minimum(_floats(scored, "pred_tokens_per_sec_per_gpu_p10"), tps)


def score(scored: Table, objective: str, risk: str = "expected") -> np.ndarray:
    """Higher is better, for every row (NaN where the row could not be predicted).

    `risk="expected"` scores the predicted median; `"averse"` the pessimistic p10, so a layout
    the measured data does not support (a wide band) cannot win on its median.
    """
    check_objective(objective)
    tps = _floats(scored, "pred_tokens_per_sec_per_gpu")
    basis = throughput_basis(scored, risk)
    tokens_per_j = (1.0 / _floats(scored, "pred_energy_j_per_token")) * (basis / tps)
    if objective == "cost" and "pred_usd_per_million_tokens" in scored:
        # Million tokens per dollar (GPU-hours and energy at the wall, priced; NaN without a
        # GPU-hour price); risk-averse: both at the p10 throughput. Higher is better and
        # scale-free, as the tie rule needs.
        usd = _floats(scored, "pred_usd_per_million_tokens") * (tps / basis)
        if np.isfinite(usd).any():
            return 1.0 / usd
    if objective in ("throughput", "cost"):  # no GPU-hour price: the throughput order
        return basis
    if objective == "energy":
        return tokens_per_j
    # Relative throughput × relative tokens per joule: scale-free, so it does not matter that
    # one is in tokens/s and the other in tokens/J.
    return (basis / np.nanmax(basis)) * (tokens_per_j / np.nanmax(tokens_per_j))


def conventional_order(scored: Table) -> np.ndarray:
    """Lower = more conventional: no context parallelism, then no FSDP, then a smaller
    micro-batch, then less recompute (each costs memory or adds communication the model
    prices but real runs often pay more for)."""
    mode = scored["recompute"]
    recompute = np.full(len(mode), np.nan)
    for order, name in enumerate(RECOMPUTE):     # none, selective, full
        recompute[mode == name] = order
    return ((scored["cp"] > 1) * 1000 + (scored["dp_sharding"] == "full") * 100
            + np.log2(_floats(scored, "mbs")) * 10 + recompute)


HEADROOM_TOLERANCE = 0.005
"""Scores within this fraction of each other count as equal, and the layout with more memory
headroom goes first: 0.5 % is below anything the model can resolve between layouts, while the
memory model misses measured peaks by up to a few percent of the GPU
(`DEFAULT_MEMORY_MARGIN`), so the roomier layout is the safer of two equals."""


def headroom_gb(scored: Table) -> np.ndarray:
    """Predicted free GPU memory per row (capacity − predicted memory; without a capacity
    column, the negated predicted memory, which orders rows on one platform the same way)."""
    memory = _floats(scored, "pred_memory_gb")
    if "pred_capacity_gb" in scored:
        return _floats(scored, "pred_capacity_gb") - memory
    return -memory


def prefer_headroom(ranked: Table, keys: tuple[str, ...] = ("near_best", "_order")) -> Table:
    """`ranked` with each run of rows whose scores are within `HEADROOM_TOLERANCE` of the run's
    first (and share `keys`) reordered by memory headroom, most first. Runs are formed greedily
    from the top, so every row of a run is within the tolerance of its leader."""
    n = len(ranked)
    if n < 2:
        return ranked
    values = _floats(ranked, "score")
    group = [np.asarray(ranked[k]) for k in keys if k in ranked]
    room = headroom_gb(ranked)
    order = np.arange(n)
    start = 0
    while start < n:
        end = start + 1
        floor = values[start] - HEADROOM_TOLERANCE * abs(values[start])
        while (end < n and values[end] >= floor
               and all(g[end] == g[start] for g in group)):
            end += 1
        if end - start > 1:
            run = np.arange(start, end)
            order[start:end] = run[np.argsort(-room[run], kind="stable")]
        start = end
    return ranked.take(order)


def rank(scored: Table, objective: str, risk: str = "expected") -> Table:
    """Rows best first. Rows within `TIE_TOLERANCE` of the best score come first, the most
    conventional of them first; the rest follow by score; scores within `HEADROOM_TOLERANCE`
    of each other go to more memory headroom."""
    values = score(scored, objective, risk)
    near = values >= (1.0 - TIE_TOLERANCE) * np.nanmax(values) if len(values) else values > 0
    out = scored.with_columns({"score": values, "near_best": near,
                               "_order": np.where(near, conventional_order(scored), 0)})
    out = out.sort(["near_best", "_order", "score", "pred_memory_gb"],
                   ascending=[False, True, False, True])
    return prefer_headroom(out).drop(["_order"])


def pareto_front(scored: Table, cost: str) -> Table:
    """Rows no other row beats on both throughput (higher) and `cost` (lower), by throughput.

    `cost` is a column such as `pred_peak_power_w` or `pred_energy_j_per_token`.
    """
    if scored.empty:
        return scored
    order = scored.sort(["pred_tokens_per_sec_per_gpu", cost], ascending=[False, True])
    costs = _floats(order, cost)
    best_so_far = np.minimum.accumulate(np.concatenate([[np.inf], costs[:-1]]))
    keep = costs < best_so_far
    return order.take(keep)


def _floats(table: Table, name: str) -> np.ndarray:
    return np.asarray(table[name], dtype=float)
