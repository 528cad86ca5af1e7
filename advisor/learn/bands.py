"""How wide the surrogate's p10–p90 band must be for a stack it has never seen.

The quantile trees learn the spread of their own training rows, which is too narrow for a new
publisher's software stack or cluster: every user's cluster is such a stack. So the band is
scaled by a factor found by grouped cross-validation inside the training data (conformalised
quantile regression, Romano et al. 2019, with whole groups held out): hold out each group,
train on the rest, and find how far the held-out rows fall outside the band, in units of its
half-width; the factor is the `COVERAGE` quantile of that. The power and throttle
surrogates (`advisor.learn.power_surrogate`) scale their bands the same way, in their own
learned space.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Z90 = 1.2816
"""Standard-normal quantile of 0.9: p10/p90 = median · exp(∓Z90 · σ) for a log-normal error."""

COVERAGE = 0.8
"""Share of held-out rows the scaled p10–p90 band should contain (what p10–p90 promises)."""
MIN_GROUPS = 3
"""Fewer groups than this give no honest estimate: the band stays as the trees made it."""


def needed_scale(ratio: pd.DataFrame, measured_ratio: np.ndarray) -> np.ndarray:
    """Per row: the factor by which its band's half-width (on the side the measurement fell)
    must grow to contain the measurement; ≤ 1 where it already does. Log scale."""
    return half_widths_needed(np.log(ratio["p10"].to_numpy()), np.log(ratio["p50"].to_numpy()),
                              np.log(ratio["p90"].to_numpy()), np.log(measured_ratio))


def half_widths_needed(low: np.ndarray, mid: np.ndarray, high: np.ndarray,
                       y: np.ndarray) -> np.ndarray:
    """`needed_scale` in the space the band is scaled in (a log ratio, or a fraction)."""
    below = y < mid
    half = np.where(below, mid - low, high - mid)
    return np.where(below, mid - y, y - mid) / np.maximum(half, 1e-6)


def grouped_scale(groups: np.ndarray, needs_when_held_out) -> tuple[float, dict]:
    """The band factor from holding out each group in turn: `needs_when_held_out(held)` trains
    on the rows not `held` and returns the held-out rows' `half_widths_needed` (only rows the
    fold's surrogate supports: an unsupported row gets the analytical band)."""
    import pandas as pd

    labels = pd.unique(groups)
    if len(labels) < MIN_GROUPS:
        return 1.0, {"band_scale_groups": int(len(labels)),
                     "band_scale_note": f"fewer than {MIN_GROUPS} groups: not scaled"}
    needs = [n for n in (needs_when_held_out(groups == label) for label in labels) if len(n)]
    if not needs:
        return 1.0, {"band_scale_groups": int(len(labels)),
                     "band_scale_note": "no held-out group was supported: not scaled"}
    needed = np.concatenate(needs)
    scale = max(1.0, float(np.quantile(needed, COVERAGE)))
    return scale, {"band_scale_groups": int(len(labels)), "band_scale_rows": int(len(needed)),
                   "band_scale_note": f"{COVERAGE:.0%} of rows of a held-out group inside"}


def band_scale(features: pd.DataFrame, families: np.ndarray, model_families: np.ndarray,
               groups: np.ndarray, *, seed: int = 0) -> tuple[float, dict]:
    """The throughput surrogate's band factor from leave-one-group-out inside these rows, and
    how it was found."""
    from advisor.learn.surrogate import train_throughput

    def needs(held: np.ndarray) -> np.ndarray:
        inner = train_throughput(features[~held], families[~held], model_families[~held],
                                 seed=seed)
        test = features[held]
        ratio = inner.predict_ratio(test, families[held], model_families[held])
        ok = ratio["supported"].to_numpy()
        measured = (test["measured"] / test["analytical"]).to_numpy()
        return needed_scale(ratio[ok], measured[ok])

    return grouped_scale(groups, needs)


ANALYTICAL_MEDIAN_APE_PCT = 15.0
"""Fallback when a calibration file carries no cross-validated error (a judgement: the
leave-one-source-out median of the bundled calibration)."""


KIND_METRIC = {False: "loso_series_dense_p80_abs_log_error",
               True: "loso_series_moe_p80_abs_log_error"}
"""The calibration metric that sizes the band of dense and of MoE runs (written by
`benchmarks/calibrate.py` where the held-out runs of that kind number
`advisor.learn.stack.MIN_KIND_ROWS` or more)."""


def analytical_log_sd(calibration, *, calibrated: bool = True, moe: bool = False) -> float:
    """σ of the analytical model's log error on a software stack it was not fitted to, for a
    log-normal band (p10/p90 = median · exp(∓1.2816 σ)): the 80th percentile of its |log
    error| with whole publication series held out, over 1.2816, so that the band holds 80 % of
    them (`loso_series_p80_abs_log_error`; the error is heavier-tailed than a log-normal, and a
    σ read from the median error held 71 % of held-out runs). Dense and MoE runs each get their
    own (`KIND_METRIC`, where the calibration records it): held out, MoE runs err about twice
    as much (their expert kernels and dispatch are measured by one series), so one pooled band
    held 90 % of dense runs and 54 % of MoE runs. Older calibration files: the pooled figure,
    or the median |log ratio| (median |Z| = 0.6745 σ).

    For a platform family no measured run calibrated (`calibrated=False`, MI250 today), whose
    efficiencies are the calibrated families' mean: the median error with whole families held
    out (`lofo_median_ape_pct`), never less than the series figure."""
    metrics = calibration.metrics
    median_ape = metrics.get("loso_series_median_ape_pct",
                             metrics.get("loso_median_ape_pct", ANALYTICAL_MEDIAN_APE_PCT))
    sd = float(np.log1p(median_ape / 100.0) / 0.6745)
    for key in ("loso_series_p80_abs_log_error", KIND_METRIC[bool(moe)]):
        if key in metrics:
            sd = float(metrics[key]) / Z90
    if not calibrated:
        family = float(np.log1p(metrics.get("lofo_median_ape_pct", median_ape) / 100.0) / 0.6745)
        sd = max(sd, family)
    return sd


def analytical_log_sds(calibration, moe) -> np.ndarray:
    """Per row, `analytical_log_sd` of its kind (`moe`: one flag per row)."""
    return np.where(np.asarray(moe, bool), analytical_log_sd(calibration, moe=True),
                    analytical_log_sd(calibration))


def at_least(low: np.ndarray, mid: np.ndarray, high: np.ndarray, widen: np.ndarray,
             log_sd: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) no narrower than the log-normal band of σ `log_sd` (one, or one per row)
    around `mid` where
    `widen`: a stack no run calibrated (an uncalibrated framework on this platform family) is
    as far from the data as a publication series never seen, whatever the trees' own spread
    (`Calibration.knows_stack`)."""
    spread = np.exp(Z90 * log_sd)
    return (np.where(widen, np.minimum(low, mid / spread), low),
            np.where(widen, np.maximum(high, mid * spread), high))
