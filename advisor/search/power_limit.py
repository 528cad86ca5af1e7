"""The GPU power limit as a knob (the lever of Zeus and Perseus): which limit the energy, balanced
and cost objectives prefer for a job, and the time–energy trade-off across limits.

A lower limit caps the clock sooner: compute stretches, the average power falls faster than the
step grows, and the energy per token drops until the static power, paid for longer, wins again.
The search scores the job's best layouts (at the board's limit) at each limit in
`LIMIT_SHARES`; the recommendation then searches the whole space again at the chosen limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from advisor.catalog import with_conditions
from advisor.core.parallel import Job
from advisor.core.table import Table
from advisor.search.objective import score

LIMIT_SHARES = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
"""Limits tried, as shares of the board's: the range the Zeus sweeps measured (A40 300 W down
to 125 W, A100 PCIe 300 down to 200 W; `datasets/reference/power`), where the power model's
held-out error is printed by `benchmarks/power_validation.py`."""
LIMIT_OBJECTIVES = ("energy", "balanced", "cost")
"""Objectives whose search includes the power limit (throughput always wants the board's)."""
CANDIDATES = 20
"""Layouts (the best at the board's limit) scored at every limit."""


@dataclass(frozen=True)
class LimitPoint:
    """One layout's prediction at one power limit."""

    power_limit_w: float
    tokens_per_sec_per_gpu: float
    energy_j_per_token: float
    avg_power_w: float
    step_time_s: float

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


def limits_to_try(job: Job) -> list[float]:
    """The limits searched for `job`'s platform, the board's first; none under the lowest its
    vendor's tool sets (`Platform.power_limit_range_w`: a cluster file may raise it)."""
    low, _ = job.platform.power_limit_range_w
    tried = [round(share * job.platform.tdp_w) for share in LIMIT_SHARES]
    return [w for w in tried if w >= low] or [round(job.platform.tdp_w)]


def at_limits(job: Job, rows: Table, predictor) -> Table:
    """`rows` (configurations) predicted at every limit of `limits_to_try`, one block per
    limit, with a `power_limit_w` column."""
    blocks = []
    # The limit is the platform's here: a row's own power_limit_w (a table that went through
    # here before) would override it (`Predictor.predict_table` reads conditions per row).
    configs = rows.drop([c for c in ("power_limit_w",) if c in rows])
    for limit in limits_to_try(job):
        platform = with_conditions(job.platform, power_limit_w=limit, given_by="the search")
        predicted = predictor.predict_table(job.model, platform, configs)
        columns = {**rows.columns, **predicted.columns,
                   "power_limit_w": np.full(len(rows), float(limit))}
        blocks.append(Table(columns, num_rows=len(rows)))
    return Table.concat(blocks)


def best_limit(job: Job, rows: Table, predictor, *, objective: str,
               risk: str = "expected") -> float:
    """The limit at which the best of `rows` scores highest under `objective`."""
    table = at_limits(job, rows.head(CANDIDATES), predictor)
    values = score(table, objective, risk)
    if not np.isfinite(values).any():
        return float(job.platform.tdp_w)
    return float(table["power_limit_w"][int(np.nanargmax(values))])


def tradeoff(job: Job, row: Table, predictor) -> list[LimitPoint]:
    """One configuration (a one-row Table) across the limits: throughput, energy per token,
    average power and step time at each."""
    table = at_limits(job, row, predictor)
    return [LimitPoint(power_limit_w=float(r["power_limit_w"]),
                       tokens_per_sec_per_gpu=float(r["pred_tokens_per_sec_per_gpu"]),
                       energy_j_per_token=float(r["pred_energy_j_per_token"]),
                       avg_power_w=float(r["pred_avg_power_w"]),
                       step_time_s=float(r["pred_step_time_s"])) for r in table.rows()]
