"""Calibrate advisor to one team's stack from a handful of its own runs.

A stack (a cluster, a framework, a software release) runs the same kernels and collectives a
little faster or slower than the bundled calibration says, and it does so for every layout
alike: held out one publication series at a time, most of the analytical model's error is a
shift shared by the series' runs (`stack_spread`). So k measured runs of the stack fit two
interpretable factors on the analytical step — how much longer its compute takes (kernels,
bubbles and throttling scale with it) and how much longer its exposed communication takes —
each a log-normal prior around the bundled fit (factor 1), by MAP (Gauss-Newton on the log
factors: a step's log time is smooth in them). The prediction's band comes from the same
posterior: the factors' remaining uncertainty, projected on the row's share of compute and
communication, plus the within-stack spread no factor explains. With no runs it is the
bundled band; it narrows as runs accumulate, and only as far as the data allows.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.core.errors import AdvisorError
from advisor.learn.bands import Z90

FACTORS = ("compute", "communication")
COMPUTE_TERMS = ("compute_s", "recompute_s", "bubble_s", "throttle_s", "optimizer_s",
                 "overhead_s")
"""Step terms that scale with the stack's compute speed (the bubble is idle compute time, the
throttle loss a share of it)."""
COMM_TERMS = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s")
"""Exposed communication terms (what overlap leaves on the critical path)."""
TERM_COLUMNS = ("tokens_per_sec_per_gpu", "step_time_s", *COMPUTE_TERMS, *COMM_TERMS)
"""The step model's outputs a stack calibration reads (`advisor.learn.fit.reference_terms`)."""
COMM_PRIOR_LOG_SD = float(np.log(2.0))
"""A stack's communication may run up to about twice as fast or slow as the model's: the A100
NVSwitch collective constants were 2-2.6x too fast on AMD's xGMI mesh before each platform got
its own measured table (benchmarks/collective_check.py, docs/validation/collectives.md)."""
STACK_FILE = "stack.json"


@dataclass(frozen=True)
class StackSpread:
    """How the analytical model's held-out log error splits: `between` (a shift shared by
    one stack's runs; σ) and `within` (what varies run to run inside a stack; σ), both sized so
    a log-normal p10-p90 band holds 80 % (the 80th percentile of |error| over Z90)."""

    between: float
    within: float
    series: int
    rows: int

    @property
    def total(self) -> float:
        return float(np.hypot(self.between, self.within))


def stack_spread(measured: np.ndarray, predicted: np.ndarray, groups: np.ndarray) -> StackSpread:
    """`StackSpread` of held-out predictions (each group predicted by a fit without it)."""
    import pandas as pd

    error = np.log(np.asarray(predicted, float) / np.asarray(measured, float))
    frame = pd.DataFrame({"e": error, "g": groups}).dropna()
    shift = frame.groupby("g")["e"].transform("median")
    total = float(np.quantile(np.abs(frame["e"]), 0.8) / Z90)
    within = float(np.quantile(np.abs(frame["e"] - shift), 0.8) / Z90)
    between = float(np.sqrt(max(total ** 2 - within ** 2, 0.0)))
    return StackSpread(between=between, within=within, series=int(frame["g"].nunique()),
                       rows=int(len(frame)))


def shares(table) -> np.ndarray:
    """Per row: the shares of the step that scale with each factor (rows × FACTORS)."""
    step = np.asarray(table["step_time_s"], float)
    parts = [sum(np.asarray(table[t], float) for t in terms if t in table)
             for terms in (COMPUTE_TERMS, COMM_TERMS)]
    out = np.column_stack([np.asarray(p, float) * np.ones_like(step) / step for p in parts])
    return np.clip(out, 0.0, None)


@dataclass(frozen=True)
class StackCalibration:
    """The fitted factors of one stack and their posterior (log space)."""

    name: str
    runs: int
    log_factors: tuple[float, float]
    covariance: tuple[tuple[float, float], tuple[float, float]]
    within: float
    """σ of one run's log error around the calibrated model."""
    platform: str = ""
    """The platform (catalog name or cluster file name) whose runs fitted it: every prediction
    for it uses it (a cluster's network and clocks are the same for every framework)."""
    framework: str = ""
    """The framework those runs used (shown with the predictions)."""

    def applies(self, platform: str) -> bool:
        return platform == self.platform

    @property
    def factors(self) -> dict[str, float]:
        """Time factors (>1: the stack runs that part slower than the bundled model)."""
        return {f: float(np.exp(v)) for f, v in zip(FACTORS, self.log_factors, strict=True)}

    def time_ratio(self, share: np.ndarray) -> np.ndarray:
        """Per row: calibrated step time / the bundled model's."""
        share = np.atleast_2d(share)
        rest = np.clip(1.0 - share.sum(axis=1), 0.0, None)
        return share @ np.exp(np.asarray(self.log_factors)) + rest

    def predict(self, tokens: np.ndarray, share: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p10, p50, p90) tokens/s/GPU from the bundled model's `tokens` and its step shares."""
        ratio = self.time_ratio(share)
        mid = np.asarray(tokens, float) / ratio
        grad = np.atleast_2d(share) * np.exp(np.asarray(self.log_factors)) / ratio[:, None]
        var = np.einsum("ij,jk,ik->i", grad, np.asarray(self.covariance), grad) + self.within ** 2
        spread = np.exp(Z90 * np.sqrt(var))
        return mid / spread, mid, mid * spread

    def describe(self) -> str:
        f = self.factors
        return (f"stack calibration {self.name!r} from {self.runs} {self.framework} run(s) on "
                f"{self.platform}: compute time x{f['compute']:.2f}, exposed communication x"
                f"{f['communication']:.2f} of the bundled model's")

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / STACK_FILE
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, directory: Path) -> StackCalibration | None:
        path = Path(directory) / STACK_FILE
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            return cls(**{**data, "log_factors": tuple(data["log_factors"]),
                          "covariance": tuple(tuple(r) for r in data["covariance"])})
        except (ValueError, TypeError, KeyError) as e:
            raise AdvisorError(f"{path}: not a stack calibration ({e}); rerun advisor train "
                               f"--stack.") from None


def prior(spread: StackSpread) -> np.ndarray:
    """Prior σ of the log factors: compute by the between-stack shift the held-out series show
    (the total where the split is degenerate), communication by `COMM_PRIOR_LOG_SD`."""
    return np.array([spread.between or spread.total, COMM_PRIOR_LOG_SD])


def spread_of(calibration) -> StackSpread:
    """The between- and within-stack spread the bundled calibration recorded
    (`[metrics]` of calibration.toml, from `benchmarks/calibrate.py`)."""
    metrics = calibration.metrics
    if "stack_within_log_sd" not in metrics:
        raise AdvisorError("this calibration records no stack spread (stack_within_log_sd); "
                           "refit it with benchmarks/calibrate.py --write.")
    return StackSpread(between=float(metrics.get("stack_between_log_sd", 0.0)),
                       within=float(metrics["stack_within_log_sd"]), series=0, rows=0)


def fit_stack(share: np.ndarray, model_tokens: np.ndarray, measured: np.ndarray,
              spread: StackSpread, *, name: str = "stack", platform: str = "",
              framework: str = "", iterations: int = 20) -> StackCalibration:
    """MAP factors from k runs: `share` (k × FACTORS), the bundled model's tokens/s/GPU and
    the measured ones. No runs: factor 1, the prior's covariance."""
    sd = prior(spread)
    precision = np.diag(1.0 / sd ** 2)
    theta = np.zeros(len(FACTORS))
    share = np.atleast_2d(np.asarray(share, float)).reshape(-1, len(FACTORS))
    y = np.log(np.asarray(model_tokens, float) / np.asarray(measured, float))  # log t_meas/t
    w = 1.0 / spread.within ** 2
    hessian = precision
    for _ in range(iterations if len(y) else 0):
        ratio = share @ np.exp(theta) + np.clip(1.0 - share.sum(axis=1), 0.0, None)
        resid = np.log(ratio) - y
        jac = share * np.exp(theta) / ratio[:, None]
        hessian = w * jac.T @ jac + precision
        step = np.linalg.solve(hessian, w * jac.T @ resid + precision @ theta)
        theta = theta - step
        if np.max(np.abs(step)) < 1e-8:
            break
    if len(y):
        ratio = share @ np.exp(theta) + np.clip(1.0 - share.sum(axis=1), 0.0, None)
        jac = share * np.exp(theta) / ratio[:, None]
        hessian = w * jac.T @ jac + precision
    cov = np.linalg.inv(hessian)
    return StackCalibration(name=name, runs=int(len(y)),
                            log_factors=tuple(float(v) for v in theta),  # type: ignore[arg-type]
                            covariance=tuple(tuple(float(c) for c in r) for r in cov),  # type: ignore[arg-type]
                            within=float(spread.within), platform=platform,
                            framework=framework)


def pick_next(stack: StackCalibration, tokens: np.ndarray, share: np.ndarray,
              groups: np.ndarray, measured: np.ndarray, *, draws: int = 256,
              seed: int = 0) -> int:
    """The run to measure next: the unmeasured one most likely to be the fastest layout of its
    job (the leader, or one whose band overlaps it), by Monte Carlo over the stack's posterior
    (shared factors) and each run's own spread; `measured` marks runs already measured (their
    value known). Jobs with one candidate, or none unmeasured, teach the factors only: where no
    job has a choice left, the widest band. Returns a row position."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = len(tokens)
    theta = rng.multivariate_normal(np.asarray(stack.log_factors), np.asarray(stack.covariance),
                                    size=draws)
    share = np.atleast_2d(share)
    rest = np.clip(1.0 - share.sum(axis=1), 0.0, None)
    ratio = np.exp(theta) @ share.T + rest               # draws × rows
    noise = rng.normal(0.0, stack.within, size=(draws, n))
    sample = np.asarray(tokens, float) / ratio * np.exp(noise)
    score = np.full(n, -1.0)
    for g in pd.unique(groups):
        members = np.flatnonzero(groups == g)
        if len(members) < 2 or measured[members].all():
            continue
        best = members[np.argmax(sample[:, members], axis=1)]
        p_best = np.bincount(best, minlength=n)[members] / draws
        score[members] = np.where(measured[members], -1.0, p_best)
    if (score >= 0).any():
        return int(np.argmax(score))
    _, mid, high = stack.predict(tokens, share)
    width = np.where(measured, -np.inf, np.log(high / mid))
    return int(np.argmax(width))
