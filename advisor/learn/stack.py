"""Calibrate advisor to one team's stack from a handful of its own runs.

A stack (a cluster, a framework, a software release) runs the same kernels and collectives a
little faster or slower than the bundled calibration says. Held out one publication series at
a time, the analytical model's log error splits into a shift shared by every run of a stack
(a series on one platform), a further shift shared by one model's runs on it, and the scatter
of single runs (`stack_spread`). So k measured runs of the stack fit, in log space:

    log(t_measured / t_model) = c · a + f · g + m · b + u[model] + ε

where c, f and m are the row's shares of compute other than attention (GEMMs, memory-bound
kernels, bubble, throttle), of attention (the fused attention kernels, forward, backward and
recomputed) and of exposed communication in the modelled step, a, g and b the stack's log
factors on them (priors around the bundled fit, 0: as wide as series differed, as frameworks'
attention kernels differed, up to 2x), u the offset of one model on this stack (prior as wide
as models differed within a stack) and ε the scatter. Attention has its own factor because its
share moves with the layout and sequence length unlike the GEMMs' (a stack's flash-attention
release is not its GEMM library), so one factor on all compute leaves a trend across the runs
of one stack. MoE runs err about twice as much at every level (their expert kernels and
dispatch are the least known part of the model), so they get their own spreads and one more
coefficient: a shift shared by the stack's MoE runs. The
model is linear and Gaussian, so the posterior is exact: the factors and offsets a few runs
support, and the band — the posterior's uncertainty projected on the row plus the scatter —
which narrows as runs accumulate, most for the models that were measured. With no runs it is
the bundled band, widened where the host time bounds the step by every host time the prior
leaves plausible (`fit_stack_host`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from advisor.core.errors import AdvisorError
from advisor.learn.bands import Z90

FACTORS = ("compute", "attention", "communication")
COMPUTE_TERMS = ("compute_s", "recompute_s", "bubble_s", "throttle_s", "optimizer_s",
                 "overhead_s")
"""Step terms that scale with the stack's compute speed (the bubble is idle compute time, the
throttle loss a share of it); less the attention kernels' time, which is the attention
factor's."""
ATTENTION_TERM = "attention_s"
"""The fused attention kernels' time in the step (part of compute and recompute)."""
COMM_TERMS = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s")
"""Exposed communication terms (what overlap leaves on the critical path)."""
TERM_COLUMNS = ("tokens_per_sec_per_gpu", "step_time_s", *COMPUTE_TERMS, ATTENTION_TERM,
                *COMM_TERMS)
"""The step model's outputs a stack calibration reads (`advisor.learn.fit.reference_terms`)."""
COMM_PRIOR_LOG_SD = float(np.log(2.0))
"""A stack's communication may run up to about twice as fast or slow as the model's: the A100
NVSwitch collective constants were 2-2.6x too fast on AMD's xGMI mesh before each platform got
its own measured table (benchmarks/collective_check.py, docs/validation/collectives.md)."""
ATTENTION_PRIOR_LOG_SD = 0.254
"""How far a stack's attention kernels may run from the bundled model's: the root mean square
log of the fitted frameworks' attention factors against Megatron-Core's (calibration.toml at
e6090f1, [framework.*] attention: DeepSpeed 0.965 on Ampere and 0.888 on Hopper, llm-foundry
0.837 and 0.596, LLMBoost 1.087: sqrt(mean(log² f)) = 0.254)."""
STACK_FILE = "stack.json"
STACK_PRIOR_DOF = 4.0
"""Pseudo-runs of the prior on a stack's scatter scale where the data cannot say (fewer than
three stacks of five runs to compare: `scale_dof`); a judgement."""
MIN_KIND_ROWS = 30
"""Fewest held-out runs of one kind (dense, MoE) to size its own spreads from (as
`advisor.learn.train.MIN_ROWS`: a judgement); fewer borrow the pooled spreads."""


@dataclass(frozen=True)
class StackSpread:
    """How the analytical model's held-out log error splits (each a σ, sized so a log-normal
    p10-p90 band holds 80 %: the 80th percentile of |error| over Z90): `between` stacks (a
    shift shared by a stack's runs), `model` (a further shift shared by one model's runs on a
    stack) and `run` (what is left run to run). `within` is the spread inside a stack."""

    between: float
    model: float
    run: float

    @property
    def within(self) -> float:
        return float(np.hypot(self.model, self.run))

    @property
    def total(self) -> float:
        return float(np.hypot(self.between, self.within))


def stack_spread(measured: np.ndarray, predicted: np.ndarray, stacks: np.ndarray,
                 models: np.ndarray | None = None) -> StackSpread:
    """`StackSpread` of held-out predictions (each stack predicted by a fit without it).

    Each level is read from how far a run falls from the mean of the *other* runs of its
    group (its stack; its model on the stack), scaled by sqrt(1 + 1/(n - 1)) so that the
    group's own estimate does not flatter it (the residual around a group's own median is
    smaller than the error a prediction from the group's other runs makes). Groups of one
    run show nothing and are left out. Without `models`, every stack is one model."""
    import pandas as pd

    error = np.log(np.asarray(predicted, float) / np.asarray(measured, float))
    frame = pd.DataFrame({"e": error, "s": stacks,
                          "m": stacks if models is None else models}).dropna()
    frame["m"] = frame["s"].astype(str) + "|" + frame["m"].astype(str)

    def spread(values) -> float:
        return float(np.quantile(np.abs(values), 0.8) / Z90) if len(values) else 0.0

    def left_out(level: str) -> pd.Series:
        groups = frame.groupby(level)["e"]
        n = groups.transform("size")
        others = (groups.transform("sum") - frame["e"]) / (n - 1).where(n > 1)
        return ((frame["e"] - others) / np.sqrt(1 + 1 / (n - 1).where(n > 1))).dropna()

    total = spread(frame["e"])
    within = min(spread(left_out("s")), total)
    run = min(spread(left_out("m")), within)
    return StackSpread(between=float(np.sqrt(max(total ** 2 - within ** 2, 0.0))),
                       model=float(np.sqrt(max(within ** 2 - run ** 2, 0.0))), run=run)


def shares(table) -> np.ndarray:
    """Per row: the shares of the step that scale with each factor (rows × FACTORS)."""
    step = np.asarray(table["step_time_s"], float)
    compute, comm = (sum(np.asarray(table[t], float) for t in terms if t in table)
                     for terms in (COMPUTE_TERMS, COMM_TERMS))
    attention = np.asarray(table[ATTENTION_TERM], float) if ATTENTION_TERM in table else 0.0
    parts = (compute - attention, attention, comm)
    out = np.column_stack([np.asarray(p, float) * np.ones_like(step) / step for p in parts])
    return np.clip(out, 0.0, None)


FIXED = (*FACTORS, "moe")
"""The coefficients every stack calibration has: the factors and the MoE runs' shift."""


@dataclass(frozen=True)
class StackCalibration:
    """One stack's fitted factors and model offsets, with their posterior (log space)."""

    name: str
    runs: int
    names: tuple[str, ...]
    """What each coefficient is: `FIXED`, then `model:<name>` per model the runs measured."""
    mean: tuple[float, ...]
    covariance: tuple[tuple[float, ...], ...]
    model_sd: float
    """Prior σ of the offset of a dense model this stack's runs never measured."""
    run_sd: float
    """σ of one dense run's scatter."""
    moe_model_sd: float
    moe_run_sd: float
    """The same for MoE models and runs."""
    platform: str = ""
    """The platform (catalog name or cluster file name) whose runs fitted it: every prediction
    for it uses it (a cluster's network and clocks are the same for every framework)."""
    framework: str = ""
    """The framework those runs used (shown with the predictions)."""
    scale: float = 1.0
    """How much wider than the pooled spreads this stack scatters, as its runs say (the
    posterior of a common scale on every σ; 1 with no runs)."""
    dof: float = STACK_PRIOR_DOF
    """Degrees of freedom of the predictive Student t (prior pseudo-runs + runs)."""
    host_factor: float = 1.0
    """The stack's host time (kernel launches per layer and local expert) against the bundled
    calibration's: the model prices its runs with `Calibration.with_host_scale` of it, then
    applies the factors (`fit_stack_host`)."""
    weight: float = 1.0
    """This fit's posterior weight among the host factors weighed (1 without `alternatives`)."""
    alternatives: tuple[StackCalibration, ...] = ()
    """The fits at the other host factors the runs leave plausible (`fit_stack_host`: weight
    `MIN_HOST_WEIGHT` or more), each with its `weight`: predictions are the mixture of them
    all (`predict_priced`), so a host time the runs cannot pin down widens the band of the
    rows it bounds."""

    @property
    def plausible_host_factors(self) -> list[float]:
        """This fit's host factor and its alternatives', ascending."""
        return sorted(c.host_factor for c in (self, *self.alternatives))

    def applies(self, platform: str) -> bool:
        return platform == self.platform

    @property
    def factors(self) -> dict[str, float]:
        """Time factors (>1: the stack runs that part slower than the bundled model)."""
        return {f: float(np.exp(self.mean[i])) for i, f in enumerate(FIXED)}

    def _design(self, share: np.ndarray, models, moe) -> np.ndarray:
        share = np.atleast_2d(np.asarray(share, float))
        x = np.zeros((len(share), len(self.names)))
        x[:, :len(FACTORS)] = share
        x[:, len(FACTORS)] = _flags(moe, len(share))
        if models is not None:
            column = {n: i for i, n in enumerate(self.names)}
            for row, model in enumerate(np.asarray(models, dtype=object)):
                j = column.get(f"model:{model}")
                if j is not None:
                    x[row, j] = 1.0
        return x

    def _scatter(self, x: np.ndarray, moe) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the run scatter's σ, and the σ of its model's offset where the runs never
        measured that model (0 where they did)."""
        moe = _flags(moe, len(x))
        run = np.where(moe, self.moe_run_sd, self.run_sd)
        unseen = ~x[:, len(FIXED):].any(axis=1)
        return run, np.where(unseen, np.where(moe, self.moe_model_sd, self.model_sd), 0.0)

    def predict(self, tokens: np.ndarray, share: np.ndarray, models=None, moe=None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p10, p50, p90) tokens/s/GPU from the bundled model's `tokens`, the rows' step
        shares and (optional) model names and MoE flags: a model the runs measured gets its
        offset. This fit's alone, at its `host_factor` (`predict_priced`: with the
        alternatives)."""
        from scipy.special import stdtrit  # Student t's quantile (scipy.stats: 1 s import)

        log_mid, sd = self._log_t(tokens, share, models, moe)
        mid = np.exp(log_mid)
        spread = np.exp(float(stdtrit(self.dof, 0.9)) * sd)
        return mid / spread, mid, mid * spread

    def _log_t(self, tokens, share, models, moe) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the predictive Student t of log tokens/s/GPU (`dof`): centre and scale."""
        x = self._design(share, models, moe)
        run, model = self._scatter(x, moe)
        var = np.einsum("ij,jk,ik->i", x, np.asarray(self.covariance), x) + run ** 2 + model ** 2
        return (np.log(np.asarray(tokens, float)) - x @ np.asarray(self.mean),
                self.scale * np.sqrt(var))

    def predict_priced(self, price, models=None, moe=None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(p10, p50, p90) tokens/s/GPU of the mixture of this fit and its `alternatives`,
        each weighted: `price(host_factor)` gives the rows' bundled tokens/s/GPU and shares
        with the host time times that factor. Without alternatives, `predict`."""
        if not self.alternatives:
            return self.predict(*price(self.host_factor), models, moe)
        parts = [(c.weight, c.dof, *c._log_t(*price(c.host_factor), models, moe))
                 for c in (self, *self.alternatives)]
        return tuple(np.exp(_mixture_quantiles(parts, (0.1, 0.5, 0.9))))

    def sample(self, tokens: np.ndarray, share: np.ndarray, models, moe=None, *, draws: int,
               rng: np.random.Generator) -> np.ndarray:
        """Draws × rows of plausible tokens/s/GPU under the posterior (shared coefficients,
        one offset per unmeasured model, independent run scatter)."""
        x = self._design(share, models, moe)
        run, model = self._scatter(x, moe)
        # One common scale per draw (the stack's, from its posterior), then every σ under it.
        lam = self.scale * np.sqrt(self.dof / rng.chisquare(self.dof, size=(draws, 1)))
        dev = rng.multivariate_normal(np.zeros(len(self.mean)), np.asarray(self.covariance),
                                      size=draws)
        log_ratio = np.asarray(self.mean) @ x.T + lam * (dev @ x.T)
        names = np.asarray(models if models is not None else [""] * len(x), dtype=object)
        for name in set(names[model > 0]):
            rows = (model > 0) & (names == name)
            log_ratio[:, rows] += lam * rng.normal(0.0, 1.0, size=(draws, 1)) * model[rows]
        log_ratio += lam * rng.normal(0.0, 1.0, size=log_ratio.shape) * run
        return np.asarray(tokens, float) * np.exp(-log_ratio)

    def describe(self) -> str:
        f = self.factors
        moe = (f", MoE runs x{f['moe']:.2f} more" if any(
            n == "moe" for n in self.names) and abs(f["moe"] - 1) >= 0.005 else "")
        host = f", host time x{self.host_factor:g}" if self.host_factor != 1.0 else ""
        if self.alternatives:
            low, high = self.plausible_host_factors[0], self.plausible_host_factors[-1]
            host = (f", host time x{self.host_factor:g} ({self.weight:.0%} likely; x"
                    f"{low:g} to x{high:g} plausible)")
        return (f"stack calibration {self.name!r} from {self.runs} {self.framework} run(s) on "
                f"{self.platform}: compute time x{f['compute']:.2f}, attention x"
                f"{f['attention']:.2f}, exposed communication x{f['communication']:.2f}{moe}"
                f"{host} of the bundled model's")

    def advice(self) -> str:
        """What to measure next where the runs leave the host time open (the likeliest host
        factor under half the weight), else ""."""
        if not self.alternatives or self.weight >= 0.5:
            return ""
        low, high = self.plausible_host_factors[0], self.plausible_host_factors[-1]
        return (f"these runs leave the stack's host time open (x{low:g} to x{high:g}): the "
                f"GPU's work bounds their steps. A run whose layers are short (a small model, "
                f"micro-batch or sequence) measures it and narrows the band of such layouts.")

    @classmethod
    def from_dict(cls, data: dict) -> StackCalibration:
        """The inverse of `dataclasses.asdict` (what `save` writes)."""
        return cls(**{**data, "names": tuple(data["names"]), "mean": tuple(data["mean"]),
                      "covariance": tuple(tuple(r) for r in data["covariance"]),
                      "alternatives": tuple(cls.from_dict(a)
                                            for a in data.get("alternatives", ()))})

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
            stack = cls.from_dict(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError) as e:
            raise AdvisorError(f"{path}: not a stack calibration ({e}); rerun advisor train "
                               f"--stack.") from None
        if any(len(s.mean) != len(s.names) or len(s.covariance) != len(s.names)
               or s.names[:len(FIXED)] != FIXED for s in (stack, *stack.alternatives)):
            raise AdvisorError(f"{path}: not a stack calibration (its coefficients and their "
                               f"covariance disagree); rerun advisor train --stack.")
        return stack


def _mixture_quantiles(parts, probs) -> np.ndarray:
    """Per probability and row (probs × rows), the quantile of a mixture of Student t's:
    `parts` holds (weight, dof, centres, scales) per component. The mixture's quantile lies
    between its components' own (its CDF there is at most and at least p), so one bisection
    for every probability on the mixture's CDF (monotone) within that bracket, 40 halvings:
    2^-40 of the components' spread, far below 1e-6 in log tokens/s (a fixed count, so a row
    with no finite figure ends too)."""
    from scipy.special import stdtr, stdtrit  # Student t's CDF and quantile, ufuncs

    p = np.asarray(probs, float)[:, None]
    own = [c + s * stdtrit(dof, p) for _, dof, c, s in parts]      # each probs × rows
    low, high = np.min(own, axis=0), np.max(own, axis=0)
    total = sum(w for w, *_ in parts)
    for _ in range(40):
        mid = (low + high) / 2
        below = sum(w * stdtr(dof, (mid - c) / s) for w, dof, c, s in parts) / total < p
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    return (low + high) / 2


def _flags(moe, n: int) -> np.ndarray:
    return np.zeros(n, bool) if moe is None else np.broadcast_to(np.asarray(moe, bool), (n,))


@dataclass(frozen=True)
class StackSpreads:
    """The spreads of dense and of MoE runs (`StackSpread` each), and how much the scatter
    itself differs between stacks (`dof`: of the scaled inverse-χ² its scale follows)."""

    dense: StackSpread
    moe: StackSpread
    dof: float = STACK_PRIOR_DOF

    @classmethod
    def of(cls, measured, predicted, stacks, models, moe) -> StackSpreads:
        """Each kind's `stack_spread` from held-out predictions; a kind with fewer than
        `MIN_KIND_ROWS` runs, or none in groups of two or more, gets the pooled spread."""
        moe = np.asarray(moe, bool)
        args = [np.asarray(a) for a in (measured, predicted, stacks, models)]
        pooled = stack_spread(*args)

        def kind(mask: np.ndarray) -> StackSpread:
            spread = stack_spread(*(a[mask] for a in args)) if mask.sum() else pooled
            return spread if mask.sum() >= MIN_KIND_ROWS and spread.run > 0 else pooled

        dense, moe_spread = kind(~moe), kind(moe)
        within = np.where(moe, moe_spread.within, dense.within)
        return cls(dense=dense, moe=moe_spread, dof=scale_dof(args[0], args[1], args[2], within))


def scale_dof(measured, predicted, stacks, within: np.ndarray) -> float:
    """Degrees of freedom of the scaled inverse-χ² that a stack's scatter scale follows, from
    how much the stacks' scatters differ: per stack of five or more runs, the log of its mean
    squared error about its own mean (in units of `within`); their variance, less what n runs
    alone would give (trigamma((n - 1) / 2)), is trigamma(dof / 2) (the variance of the log of
    an inverse-χ²). `STACK_PRIOR_DOF` where the stacks differ no more than sampling explains."""
    import pandas as pd
    from scipy.optimize import brentq
    from scipy.special import polygamma

    error = np.log(np.asarray(predicted, float) / np.asarray(measured, float))
    frame = pd.DataFrame({"e": error, "s": stacks, "w": within}).dropna()
    z2 = ((frame["e"] - frame.groupby("s")["e"].transform("mean")) / frame["w"]) ** 2
    per = z2.groupby(frame["s"]).agg(["mean", "size"])
    per = per[(per["size"] >= 5) & (per["mean"] > 0)]
    if len(per) < 3:
        return STACK_PRIOR_DOF
    log_var = np.log(per["mean"] * per["size"] / (per["size"] - 1))
    excess = float(log_var.var() - np.mean(polygamma(1, (per["size"] - 1) / 2)))
    if excess <= polygamma(1, 1000 / 2):
        return STACK_PRIOR_DOF
    return float(brentq(lambda nu: polygamma(1, nu / 2) - excess, 0.05, 1000))


def spread_of(calibration) -> StackSpreads:
    """The spreads the bundled calibration recorded (`[metrics]` of calibration.toml, from
    `benchmarks/calibrate.py`)."""
    metrics = calibration.metrics
    if "stack_run_log_sd" not in metrics or "stack_moe_run_log_sd" not in metrics:
        raise AdvisorError("this calibration records no stack spread (stack_run_log_sd, "
                           "stack_moe_run_log_sd); refit it with benchmarks/calibrate.py "
                           "--write.")
    return StackSpreads(*(StackSpread(between=float(metrics[f"stack{k}_between_log_sd"]),
                                      model=float(metrics[f"stack{k}_model_log_sd"]),
                                      run=float(metrics[f"stack{k}_run_log_sd"]))
                          for k in ("", "_moe")),
                        dof=float(metrics.get("stack_scale_dof", STACK_PRIOR_DOF)))


def fit_stack(share: np.ndarray, model_tokens: np.ndarray, measured: np.ndarray,
              spreads: StackSpreads, *, models=None, moe=None, name: str = "stack",
              platform: str = "", framework: str = "",
              prior_dof: float | None = None) -> StackCalibration:
    """The posterior from k runs: `share` (k × FACTORS), the bundled model's tokens/s/GPU, the
    measured ones and (optional) each run's model and MoE flag. No runs: the prior.

    Every σ shares one unknown scale λ (a stack may scatter more or less than the pooled
    series did), with a scaled inverse-χ² prior of `prior_dof` pseudo-runs at 1: the
    normal-inverse-χ² model, whose posterior is exact — the coefficients' mean does not
    depend on λ, λ² is (prior_dof + SSR) / (prior_dof + k) with SSR the runs' weighted squared
    residuals plus the coefficients' prior penalty, and predictions are Student t.
    `prior_dof` defaults to the spreads' own (`scale_dof`: how much stacks' scatter differed)."""
    share = np.atleast_2d(np.asarray(share, float)).reshape(-1, len(FACTORS))
    y = np.log(np.asarray(model_tokens, float) / np.asarray(measured, float))
    dense, moe_spread = spreads.dense, spreads.moe
    prior_dof = spreads.dof if prior_dof is None else prior_dof
    flags = _flags(moe, len(y))
    seen = sorted({str(m) for m in models}) if models is not None and len(y) else []
    kind = {str(m): bool(f) for m, f in zip(models if seen else [], flags, strict=False)}
    names = (*FIXED, *(f"model:{m}" for m in seen))
    extra_moe = float(np.sqrt(max(moe_spread.between ** 2 - dense.between ** 2, 0.0)))
    prior_sd = np.array([dense.between or dense.total, ATTENTION_PRIOR_LOG_SD,
                         COMM_PRIOR_LOG_SD, extra_moe,
                         *(moe_spread.model if kind[m] else dense.model for m in seen)])
    stack = StackCalibration(name=name, runs=int(len(y)), names=names,
                             mean=(0.0,) * len(names), covariance=(), model_sd=dense.model,
                             run_sd=dense.run, moe_model_sd=moe_spread.model,
                             moe_run_sd=moe_spread.run, platform=platform,
                             framework=framework)
    x = stack._design(share, models if seen else None, flags)
    weight = 1.0 / np.where(flags, moe_spread.run, dense.run) ** 2
    prior_precision = 1.0 / np.maximum(prior_sd, 1e-6) ** 2
    cov = np.linalg.inv(np.diag(prior_precision) + (x.T * weight) @ x)
    mean = cov @ (x.T * weight) @ y
    ssr = float(weight @ (y - x @ mean) ** 2 + prior_precision @ mean ** 2)
    return dataclasses.replace(stack, mean=tuple(float(v) for v in mean),
                               covariance=tuple(tuple(float(c) for c in r) for r in cov),
                               scale=float(np.sqrt((prior_dof + ssr) / (prior_dof + len(y)))),
                               dof=float(prior_dof + len(y)))


HOST_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
"""The host-time factors `fit_stack_host` weighs (the host time enters the step through a
maximum with the GPU's work, so no linear share can stand for it: each is priced anew)."""
HOST_PRIOR_LOG_SD = float(np.log(0.00291817 / 0.0003) / 2)
"""A stack's host time may be ten times the model's: Megatron-DeepSpeed's host time per layer,
fitted to vTrain's 1,440 A100 runs, is 2.92 ms (calibration.toml, [framework.megatron-deepspeed])
where the families' prior is 0.3 ms; that gap sits at 2 σ."""


MIN_HOST_WEIGHT = 0.01
"""Smallest posterior weight a host factor's fit needs to join the mixture (a judgement:
below it, it moves no quantile visibly, and each costs one more pricing per prediction)."""


def fit_stack_host(price, measured: np.ndarray, spreads: StackSpreads, *,
                   factors: tuple[float, ...] = HOST_FACTORS, **fit) -> StackCalibration:
    """`fit_stack` with the stack's host time too: `price(factor)` gives the measured runs'
    (model tokens/s/GPU, shares) with every host time times `factor`. Each of `factors` is
    weighed by its posterior: the fit's marginal likelihood (`_log_evidence`) times the
    log-normal prior on the factor (σ `HOST_PRIOR_LOG_SD`). The likeliest fit is returned,
    with the others of weight `MIN_HOST_WEIGHT` or more as its `alternatives` (weights
    renormalised over those kept): a few runs that the host time does not bound leave it
    open, and the rows it would bound get the band of every plausible host time. With no
    runs, the prior itself: every factor weighted by the log-normal alone (the host time of a
    stack nothing measured is as open as the prior says, not the bundled one for sure)."""
    measured = np.asarray(measured, float)
    prior = None if len(measured) else fit_stack(np.zeros((0, len(FACTORS))), np.zeros(0),
                                                 measured, spreads, **fit)
    fits, log_weight = [], []
    for factor in factors:
        if prior is None:
            tokens, share = price(factor)
            stack = fit_stack(share, tokens, measured, spreads, **fit)
            evidence = _log_evidence(stack, len(measured))
        else:                      # no runs: the prior, the same at every factor
            stack, evidence = prior, 0.0
        fits.append(dataclasses.replace(stack, host_factor=factor))
        log_weight.append(evidence - 0.5 * (np.log(factor) / HOST_PRIOR_LOG_SD) ** 2)
    log_weight = np.asarray(log_weight, float)
    if not np.isfinite(log_weight).any():
        raise AdvisorError("no host time fits these runs: a measured or modelled throughput is "
                           "not a positive finite number (check the runs' tokens/s per GPU).")
    log_weight = np.where(np.isfinite(log_weight), log_weight, -np.inf)
    weight = np.exp(log_weight - log_weight.max())
    weight /= weight.sum()
    kept = [i for i in np.argsort(-weight, kind="stable") if weight[i] >= MIN_HOST_WEIGHT]
    total = float(weight[kept].sum())
    best, *others = (dataclasses.replace(fits[i], weight=float(weight[i] / total))
                     for i in kept)
    return dataclasses.replace(best, alternatives=tuple(others))


def _log_evidence(stack: StackCalibration, runs: int) -> float:
    """log p(runs | host factor) of `fit_stack`'s normal-inverse-χ² model, up to a constant
    that every host factor shares (the runs' weights and the prior's are the same): the
    coefficients and the scale integrated out, the runs follow a multivariate t whose log
    density is ½ log det(posterior covariance) − ½ (ν + k) log(1 + SSR / ν), with ν the
    prior's pseudo-runs, k the runs and SSR `fit_stack`'s weighted squared residual plus
    prior penalty."""
    nu = stack.dof - runs
    ssr = stack.scale ** 2 * stack.dof - nu       # `fit_stack`'s λ² inverted
    _, log_det = np.linalg.slogdet(np.asarray(stack.covariance, float))
    return float(0.5 * log_det - 0.5 * (nu + runs) * np.log1p(ssr / nu))


MAX_CANDIDATES = 96
"""Most runs whose measurement `pick_next` simulates (the likeliest leaders, then the widest
bands): each costs draws × runs operations, and a campaign's likely picks are among them."""
SETTLED = 1e-4
"""Expected regret (summed over jobs) a measurement must remove to count as serving the
decision; below it every job's pick is settled and the run that teaches most is taken."""


@dataclass(frozen=True)
class _Joint:
    """The stack's posterior widened by one offset per model its runs never measured (prior
    mean 0, σ that model kind's spread): rows' log ratios are `x @ θ` + run scatter, all under
    the stack's scale."""

    x: np.ndarray
    mean: np.ndarray
    covariance: np.ndarray
    run: np.ndarray

    @classmethod
    def of(cls, stack: StackCalibration, share, models, moe) -> _Joint:
        x = stack._design(share, models, moe)
        run, unseen_sd = stack._scatter(x, moe)
        names = np.asarray(models if models is not None else [""] * len(x), dtype=object)
        unseen = sorted({str(m) for m in names[unseen_sd > 0]})
        extra = np.zeros((len(x), len(unseen)))
        prior = np.zeros(len(unseen))
        for j, name in enumerate(unseen):
            rows = (unseen_sd > 0) & (names == name)
            extra[rows, j] = 1.0
            prior[j] = unseen_sd[rows][0] ** 2
        k = len(stack.mean)
        covariance = np.zeros((k + len(unseen),) * 2)
        covariance[:k, :k] = np.asarray(stack.covariance).reshape(k, k)
        covariance[k:, k:] = np.diag(prior)
        scale2 = stack.scale ** 2
        return cls(x=np.hstack([x, extra]),
                   mean=np.r_[np.asarray(stack.mean, float), np.zeros(len(unseen))],
                   covariance=covariance * scale2, run=run * stack.scale)


def pick_next(stack: StackCalibration, tokens: np.ndarray, share: np.ndarray,
              groups: np.ndarray, measured: np.ndarray, models=None, moe=None, *, values=None,
              draws: int = 256, seed: int = 0,
              eligible: np.ndarray | None = None) -> tuple[int, str]:
    """The run to measure next, and why: the one whose measurement most lowers the expected
    regret of the recommendation — per job (`groups`), the measured layout's or the predicted
    leader's shortfall from the job's truly fastest, summed over jobs. One step ahead, by Monte
    Carlo over the stack's posterior (`_Joint`): each draw is a plausible truth; measuring run
    c reveals its value, which updates every prediction through the shared factors and its
    model's offset (the Gaussian update is exact), the picks follow, and the draw scores their
    regret. So a likely leader whose band overlaps its rivals is measured first, and a run of
    another job is worth measuring when what it teaches settles a close call.
    `measured` marks runs already measured (`values`: what they measured), `eligible`
    (default: all) the runs that can run at all (predicted to fit): only they compete. Where
    no measurement would lower the regret (every pick settled, or no job has a choice), the
    run that most narrows the bands of the runs not measured. Returns (row position, reason);
    position -1 when nothing is left."""
    import pandas as pd

    n = len(tokens)
    tokens = np.asarray(tokens, float)
    measured = np.asarray(measured, bool)
    eligible = np.ones(n, bool) if eligible is None else np.asarray(eligible, bool)
    open_ = ~measured & eligible
    if not open_.any():
        return -1, "nothing left"
    joint = _Joint.of(stack, share, models, moe)
    rng = np.random.default_rng(seed)
    theta = rng.multivariate_normal(joint.mean, joint.covariance, size=draws,
                                    method="eigh")
    truth = theta @ joint.x.T + rng.normal(0.0, 1.0, (draws, n)) * joint.run
    known = measured & np.isfinite(np.asarray(values, float) if values is not None
                                   else np.full(n, np.nan))
    if known.any():
        truth[:, known] = np.log(tokens[known] / np.asarray(values, float)[known])
    believed = joint.x @ joint.mean
    believed[known] = truth[0, known]
    speed = tokens * np.exp(-truth)                       # draws × runs: the true tokens/s
    jobs = [m for g in pd.unique(groups)
            if len(m := np.flatnonzero((groups == g) & eligible)) >= 2]

    def regret(log_ratio: np.ndarray) -> np.ndarray:
        """Per draw, the summed regret of picking each job's believed-fastest run."""
        guess = tokens * np.exp(-log_ratio)
        total = np.zeros(draws)
        for members in jobs:
            pick = members[np.argmax(guess[:, members], axis=1)]
            best = speed[:, members].max(axis=1)
            total += best / speed[np.arange(draws), pick] - 1.0
        return total

    flat = np.broadcast_to(believed, (draws, n))
    before = float(regret(flat).mean()) if jobs else 0.0
    cov_x = joint.x @ joint.covariance                    # runs × coefficients
    spread2 = np.einsum("ij,ij->i", cov_x, joint.x) + joint.run ** 2
    candidates = np.flatnonzero(open_)
    if len(candidates) > MAX_CANDIDATES:
        contender = np.zeros(n)
        for members in jobs:
            top = members[np.argmax(speed[:, members], axis=1)]
            contender += np.bincount(top, minlength=n) / draws
        order = np.lexsort((-spread2[candidates], -contender[candidates]))
        candidates = candidates[order[:MAX_CANDIDATES]]
    after = np.full(n, np.inf)
    teaches = np.zeros(n)
    for c in candidates:
        gain = cov_x @ joint.x[c] / spread2[c]            # how each run's belief moves per unit
        teaches[c] = float((gain[open_] ** 2).sum() * spread2[c])
        if jobs:
            innovation = truth[:, c] - believed[c]
            updated = believed + innovation[:, None] * np.where(known, 0.0, gain)[None, :]
            updated[:, c] = truth[:, c]
            after[c] = float(regret(updated).mean())
    at = int(candidates[np.argmin(after[candidates])]) if jobs else -1
    if at >= 0 and before - after[at] > SETTLED:
        others = int(((groups == groups[at]) & eligible).sum()) - 1
        plural = "s" if len(jobs) != 1 else ""
        return at, (f"expected regret per job, mean over {len(jobs)} job{plural}: "
                    f"{before / len(jobs):.2%} -> {after[at] / len(jobs):.2%} (a layout of a job "
                    f"with {others} other(s))")
    at = int(candidates[np.argmax(teaches[candidates])])
    why = "every job's pick is settled" if jobs else "no job has a layout to choose"
    return at, f"{why}: narrows the other runs' bands most"
