"""`Predictor`: what schedulers and the CLI import — analytical model plus learned surrogate,
vectorised.

    from advisor import Predictor
    p = Predictor.load()                       # bundled artifacts (models/)
    p.predict(frame)                           # DataFrame: model, gpu + ParallelConfig columns

Every learned quantity comes with p10/p90; where the surrogate has no support (a platform family
or model family it never saw, or no trained artifact) the prediction is the analytical one, with
a band from the analytical model's own cross-validated error, and `pred_source` says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.catalog import OVERRIDABLE
from advisor.core.errors import AdvisorError, ConfigError, suggest
from advisor.core.files import bundled_dir
from advisor.core.parallel import PARALLEL_FIELDS, ParallelConfig
from advisor.core.space import invalid_rows, validate
from advisor.core.table import Table
from advisor.learn.bands import Z90, analytical_log_sd, at_least
from advisor.learn.stack import StackCalibration, shares
from advisor.perf.analytical import (
    BREAKDOWN_PREFIX,
    Breakdown,
    analytical_arrays,
    breakdown_from_row,
)
from advisor.perf.columns import Columns, config_columns, full_length, take
from advisor.perf.finetune import is_lora
from advisor.perf.money import energy_usd_per_million_tokens, gpu_usd_per_million_tokens
from advisor.perf.wall import wall_power_w
from advisor.predict.columns import as_columns, group_rows, resolve, table_columns

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Prediction:
    """What the Predictor says about one configuration — one row of `Predictor.predict`, its
    `pred_*` values without the prefix (learned where the data supports them, with p10/p90 and
    their sources) — and the analytical breakdown behind them."""

    config: ParallelConfig
    step_time_s: float
    tokens_per_sec_per_gpu: float
    tokens_per_sec_per_gpu_p10: float
    tokens_per_sec_per_gpu_p90: float
    tflops_per_gpu: float
    mfu: float
    memory_gb: float
    fits: bool
    avg_power_w: float
    peak_power_w: float
    energy_j_per_token: float
    """At the wall: the GPUs' boards, their share of the hosts and the PUE (`perf.wall`)."""
    board_energy_j_per_token: float
    """The GPUs' boards alone."""
    usd_per_million_tokens: float
    """GPU-hours at the platform's price plus the energy at the wall at the electricity price
    (`perf.money`); NaN where the platform has no GPU-hour price."""
    energy_usd_per_million_tokens: float
    """The electricity's share of it."""
    throttle_risk: float
    source: str
    """surrogate, or analytical where the data has no support."""
    power_source: str
    extrapolation: bool
    calibrated: bool
    breakdown: Breakdown | None = None
    """The analytical model's step components, memory and per-stage power and thermal, from
    the same `predict(..., breakdown=True)` call (None where the row had no breakdown)."""

    @classmethod
    def from_row(cls, row, config: ParallelConfig) -> Prediction:
        """The prediction in one row of `Predictor.predict` for `config`, with the breakdown
        where the row has the `analytical_` columns (`breakdown=True`)."""
        values = {}
        for name in VALUES:
            value = row[f"pred_{name}"]
            value = value.item() if hasattr(value, "item") else value
            values[name] = (bool(value) if name in _FLAGS else str(value) if name in _LABELS
                            else float(value))
        has_breakdown = f"{BREAKDOWN_PREFIX}calibrated" in row
        return cls(config=config, **values, breakdown=breakdown_from_row(
            config, row, prefix=BREAKDOWN_PREFIX) if has_breakdown else None)

    def values(self) -> dict:
        """The `pred_*` values by name (without the prefix), in field order."""
        return {name: getattr(self, name) for name in VALUES}


VALUES = tuple(f.name for f in fields(Prediction) if f.name not in ("config", "breakdown"))
"""`Prediction`'s values: the `pred_*` columns it reads."""
_FLAGS = {"fits", "extrapolation", "calibrated"}
_LABELS = {"source", "power_source"}


def bundled_models_dir() -> Path:
    """Where the shipped artifacts are: inside an installed wheel (advisor/_models), else the
    checkout's models/ directory."""
    return bundled_dir("advisor._models", "models")


class Predictor:
    """Predictions for many configurations at once (see module docstring)."""

    def __init__(self, surrogate=None, calibration=None, *, path: Path | None = None,
                 power: dict | None = None, stack=None) -> None:
        from advisor.perf.calibration import load_calibration

        self.surrogate = surrogate
        self.power = power or {}
        """Learned power/throttle surrogates by dataset column (`power_surrogate.TARGETS`);
        those absent stay analytical."""
        self.calibration = calibration or load_calibration()
        self.path = path
        self.stack = stack
        """A team's stack calibration (`advisor train --stack`; `advisor.learn.stack`): every
        prediction for its platform uses it; None where the directory has none."""
        # The analytical model's error on a stack it was not fitted to (series held out), and
        # on a platform family no measured run calibrated (families held out), for dense and
        # for MoE models.
        self.analytical_log_sd = {moe: analytical_log_sd(self.calibration, moe=moe)
                                  for moe in (False, True)}
        self.uncalibrated_log_sd = {moe: analytical_log_sd(self.calibration, calibrated=False,
                                                           moe=moe) for moe in (False, True)}

    @classmethod
    def load(cls, path: str | Path | None = None) -> Predictor:
        """The bundled surrogates (`path=None`) or those in a directory written by
        `advisor train`; an `ArtifactError` for a missing, altered or damaged artifact
        (`Predictor(None)` predicts analytically)."""
        from advisor.learn.power_surrogate import load_power_surrogates
        from advisor.learn.surrogate import ArtifactError, load_throughput

        directory = Path(path) if path is not None else bundled_models_dir()
        if path is not None and not directory.is_dir():
            raise AdvisorError(f"{directory}: no such directory of surrogate artifacts.")
        try:
            surrogate = load_throughput(directory)
            power = load_power_surrogates(directory)
        except ArtifactError as e:
            if path is not None:
                raise
            raise ArtifactError(f"the surrogates bundled with advisor are damaged or missing "
                                f"({e}); reinstall advisor, or predict analytically "
                                f"(`--analytical`, `Predictor(None)`).") from None
        return cls(surrogate, path=directory, power=power,
                   stack=StackCalibration.load(directory))

    def stack_for(self, platform):
        """The stack calibration predictions for `platform` use, or None."""
        if self.stack is not None and self.stack.applies(platform.name):
            return self.stack
        return None

    def calibration_for(self, platform):
        """The calibration the step model prices `platform` with: the bundled one, with the
        host time of the stack calibration that applies (`StackCalibration.host_factor`)."""
        stack = self.stack_for(platform)
        return (self.calibration if stack is None
                else self.calibration.with_host_scale(stack.host_factor))

    def predict(self, configs: pd.DataFrame | list, *, breakdown: bool = False) -> pd.DataFrame:
        """`pred_*` columns for every configuration, in input order: a DataFrame with `model`,
        `gpu` (catalog names, or `ModelSpec` / `Platform` objects) and `ParallelConfig`
        columns, optional `framework` and `software`; or a list of (ParallelConfig, Job)
        pairs. Rows that cannot be predicted get `pred_error` and the others are predicted.

        `breakdown=True` adds the analytical model's own columns behind the prediction (step
        components, memory, per-stage power and thermal), prefixed `analytical_`:
        `Prediction.from_row(row, config)` reads one row as a typed `Prediction` with its
        `Breakdown`, so nothing runs the analytical model twice."""
        import pandas as pd

        cols, index, objects = as_columns(configs)
        if not len(index):
            return pd.DataFrame({"pred_error": pd.Series(dtype=str)}, index=index)
        groups = group_rows(cols)
        parts = []
        for (model_key, gpu_key, framework), rows in groups:
            try:
                model, platform = resolve(model_key, gpu_key, objects)
                parts.append(self._predict_group(
                    model, platform, framework, cols if len(groups) == 1 else take(cols, rows),
                    rows, breakdown=breakdown))
            except _ROW_ERRORS as e:
                parts.append(pd.DataFrame({"pred_error": _row_error(e)}, index=rows))
        if len(parts) == 1 and parts[0].index.is_monotonic_increasing:
            out = parts[0]           # every row, in order: nothing to put back in place
        else:
            out = pd.concat(parts).reindex(pd.RangeIndex(len(index)))
            out["pred_error"] = out["pred_error"].fillna("")
            if "pred_assumed" in out:
                out["pred_assumed"] = out["pred_assumed"].fillna("")
        out.index = index
        if isinstance(configs, pd.DataFrame):
            _note_unread_columns(configs, out)
        return out

    def predict_table(self, model, platform, configs: Table, *, breakdown: bool = False,
                      memory: Mapping[str, np.ndarray] | None = None) -> Table:
        """`predict` for configurations of `model` on `platform` (run by Megatron-Core) given
        as a `Table` that sets every `ParallelConfig` field, as `space_table` gives them: the
        same columns (`pred_*`, then `analytical_*` with `breakdown`, then `pred_assumed`) as
        a `Table`. No DataFrame is built (rows the space rules refuse go through `predict`).
        `memory`: the memory model's columns for these rows, where the caller ran it. Columns
        of conditions or cluster keys (`power_limit_w`, ...) apply per row, as in `predict`."""
        cols = _default_etp(model, table_columns(configs))
        invalid = invalid_rows(model, platform, cols, framework="megatron")
        if invalid.any() or any(c in configs for c in OVERRIDABLE):   # per-row conditions
            frame = configs.to_frame().assign(model=model, gpu=platform)
            return Table.from_frame(self.predict(frame, breakdown=breakdown))
        try:
            out = self._predict_arrays(model, platform, "megatron",
                                       {k: v for k, v in cols.items() if k not in _BOOKKEEPING},
                                       breakdown=breakdown, memory=memory)
        except _ROW_ERRORS as e:    # as `predict` answers: every row gets the error
            return Table({"pred_error": np.full(len(configs), _row_error(e), dtype=object)})
        out["pred_assumed"] = cols["assumed"]
        return Table(out, num_rows=len(configs))

    def throughput_bound(self, model, platform, configs: Table, *,
                         memory: Mapping[str, np.ndarray] | None = None) -> np.ndarray | None:
        """An upper bound on `predict_table`'s tokens/s per GPU for every configuration (a
        `Table` as `space_table` gives them), at about a third of its cost: the analytical
        step at full clock (`nominal_arrays`: the power model only slows it) times the largest
        ratio the surrogate can give any configuration sharing its tensor, pipeline and expert
        split (`ThroughputSurrogate.p50_bound` over `feature_boxes`). `memory`: the memory
        model's columns for these rows, where the caller ran it. None where no such bound
        holds: a stack calibration (its factors shift each share of the step) or per-row
        conditions."""
        from advisor.learn.features import feature_boxes
        from advisor.perf.step import nominal_arrays

        if self.stack_for(platform) is not None or any(c in configs for c in OVERRIDABLE):
            return None
        cols = _default_etp(model, table_columns(configs))
        perf_cols = {k: v for k, v in cols.items() if k not in _BOOKKEEPING}
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            nominal = nominal_arrays(model, platform, perf_cols, calibration=self.calibration)
        bound = nominal["tokens_per_sec_per_gpu"]
        if self.surrogate is not None:
            known = {k: memory[k] for k in ("total_bytes", "capacity_bytes")} if memory else {}
            box, low, high, missing = feature_boxes(model, platform, cols, nominal | known,
                                                    software=cols["software"])
            bound = bound * np.maximum(1.0, self.surrogate.p50_bound(low, high, missing))[box]
        return np.where(np.isfinite(bound), bound, np.inf)

    def contributions(self, model, platform, configs: pd.DataFrame, *,
                      framework: str = "megatron") -> pd.DataFrame | None:
        """The surrogate's SHAP values (log-ratio units, one column per feature) for
        configurations of one model on one platform (rows `predict(..., breakdown=True)`
        returned reuse their analytical columns); None without a surrogate (callers use them
        only for rows whose `pred_source` is surrogate)."""
        import pandas as pd

        if self.surrogate is None:
            return None
        shap = self.contribution_table(model, platform, Table.from_frame(configs),
                                       framework=framework)
        return pd.DataFrame(shap.columns, index=configs.index)

    def contribution_table(self, model, platform, configs: Table, *,
                           framework: str = "megatron") -> Table | None:
        """`contributions` for a `Table` of configurations, as a `Table`."""
        from advisor.learn.features import FEATURES, TABLE_COLUMNS, feature_matrix

        if self.surrogate is None:
            return None
        given = [c for c in configs.names if c.startswith(BREAKDOWN_PREFIX)]
        cols = config_columns(configs.select(PARALLEL_FIELDS))
        if given:
            table = {k: configs[BREAKDOWN_PREFIX + k] for k in TABLE_COLUMNS}
        else:
            table = analytical_arrays(model, platform, cols,
                                      calibration=self.calibration_for(platform),
                                      framework=framework)
        x = feature_matrix(model, platform, cols, table, framework=framework, software="")
        shap = self.surrogate.contribution_matrix(x)
        return Table({name: shap[:, j] for j, name in enumerate(FEATURES)},
                     num_rows=len(configs))

    def _predict_group(self, model, platform, framework: str, cols: Columns,
                       rows: np.ndarray, *, breakdown: bool = False) -> pd.DataFrame:
        """Predictions for configurations of one model on one platform run by one framework;
        `rows` are their positions in the input."""
        import pandas as pd

        cols = _default_etp(model, cols)
        invalid = invalid_rows(model, platform, cols, framework=framework)
        if invalid.any():
            bad = pd.DataFrame({"pred_error": _why_invalid(model, platform, take(cols, invalid),
                                                           framework),
                                "pred_assumed": cols["assumed"][invalid]},
                               index=rows[invalid])
            if invalid.all():
                return bad
            good = ~invalid
            return pd.concat([self._predict_group(model, platform, framework, take(cols, good),
                                                  rows[good], breakdown=breakdown), bad])
        out = self._predict_arrays(model, platform, framework,
                                   {k: v for k, v in cols.items() if k not in _BOOKKEEPING},
                                   breakdown=breakdown)
        out["pred_assumed"] = cols["assumed"]
        return pd.DataFrame(out, index=rows)

    def _host_priced(self, stack: StackCalibration, model, platform, framework: str,
                     perf_cols: Columns, memory: Mapping[str, np.ndarray] | None,
                     tps: np.ndarray, table: Mapping[str, np.ndarray]
                     ) -> dict[float, tuple[np.ndarray, np.ndarray]]:
        """(tokens/s/GPU, stack shares) per host factor `stack` weighs (`tps` and `table`:
        priced at its own). The host time enters the step through a maximum with the GPU's
        work, so a longer host time never makes a step faster: a row the smallest and the
        largest factor price alike is the same at every factor between, and only the rows
        they part are priced at the others (a search's GPU-bound layouts are priced at the
        likeliest factor and the two ends, not at every plausible host time)."""
        factors = stack.plausible_host_factors
        out = {stack.host_factor: (np.asarray(tps, float), shares(table))}

        def at(factor: float, rows: np.ndarray | None = None):
            other = analytical_arrays(
                model, platform, take(perf_cols, rows), framework=framework,
                memory=None if memory is None else take(memory, rows),
                calibration=self.calibration.with_host_scale(factor))
            return np.asarray(other["tokens_per_sec_per_gpu"], float), shares(other)

        for end in {factors[0], factors[-1]} - out.keys():
            out[end] = at(end)
        parted = out[factors[0]][0] != out[factors[-1]][0]
        for factor in set(factors) - out.keys():
            tokens, share = (a.copy() for a in out[stack.host_factor])
            if parted.any():
                tokens[parted], share[parted] = at(factor, parted)
            out[factor] = (tokens, share)
        return out

    def _predict_arrays(self, model, platform, framework: str, cols: Columns, *,
                        breakdown: bool = False,
                        memory: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        from advisor.learn.features import feature_matrix

        # The group's framework for every row (not a per-row column: the group has one).
        perf_cols = {k: v for k, v in cols.items() if k != "framework"}
        # Numbers past any real device (a platform built in code, not loaded) can make a
        # figure infinite or NaN: `_refuse_non_finite` turns those rows into errors.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            table = analytical_arrays(model, platform, perf_cols,
                                      calibration=self.calibration_for(platform),
                                      framework=framework, memory=memory)
        tps = table["tokens_per_sec_per_gpu"]
        n = len(tps)
        source = np.full(n, "analytical", dtype=object)
        calibrated = bool(table["calibrated"][0])
        log_sd = (self.analytical_log_sd if calibrated
                  else self.uncalibrated_log_sd)[bool(model.is_moe)]
        stack = self.stack_for(platform)
        prior = tps
        if stack is not None:   # the team's own factors, and the band its runs leave
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                priced = self._host_priced(stack, model, platform, framework, perf_cols,
                                           memory, tps, table)
                low, prior, high = stack.predict_priced(priced.__getitem__,
                                                        np.full(n, model.name),
                                                        np.full(n, model.is_moe))
        else:
            low = tps * math.exp(-Z90 * log_sd)
            high = tps * math.exp(Z90 * log_sd)
        extrapolation = np.zeros(n, dtype=bool)
        learned = prior.copy()
        feats = (feature_matrix(model, platform, cols, table, framework=framework,
                                software=cols["software"])
                 if self.surrogate is not None or self.power else None)
        if self.surrogate is not None:
            # Columns by iteration: looking one up builds the frame's label index (~0.1 ms).
            ratio = self.surrogate.ratio_arrays(feats, np.full(n, platform.family),
                                                np.full(n, model.family or model.name))
            # No measured LoRA run trained the trees: those rows keep the analytical prior.
            ok = ratio["supported"] & ~is_lora(cols, n)
            learned = np.where(ok, prior * ratio["p50"], prior)
            if stack is not None:   # the stack's posterior band, around the learned value
                low, high = learned * low / prior, learned * high / prior
            else:
                low = np.where(ok, tps * ratio["p10"], low)
                high = np.where(ok, tps * ratio["p90"], high)
            source = np.where(ok, "surrogate", source)
            extrapolation = ratio["extrapolation"] | ~ok
        else:
            extrapolation[:] = True
        if stack is None and not self.calibration.knows_stack(framework, platform.family):
            # A framework no run calibrated on this family: no narrower than an unseen series.
            low, high = at_least(low, learned, high, np.ones(n, dtype=bool), log_sd)
            extrapolation[:] = True
        scale = learned / tps
        gpus = cols["tp"] * cols["pp"] * cols["cp"] * cols["dp"]
        step = table["step_time_s"] / scale
        power = self._power(model, platform, feats, table, lora=is_lora(cols, n))
        avg = power["pred_avg_power_w"]
        tokens = cols["gbs"] * cols["seq_len"]
        return _refuse_non_finite({
            "pred_step_time_s": step,
            "pred_tokens_per_sec_per_gpu": learned,
            "pred_tokens_per_sec_per_gpu_p10": low,
            "pred_tokens_per_sec_per_gpu_p90": high,
            "pred_tflops_per_gpu": table["tflops_per_gpu"] * scale,
            "pred_mfu": table["mfu"] * scale,
            "pred_memory_gb": table["total_bytes"] / 1e9,
            "pred_fits": table["fits"],
            **power,
            "pred_energy_j_per_token": (energy := wall_power_w(platform, avg) * step * gpus
                                        / tokens),
            "pred_board_energy_j_per_token": avg * step * gpus / tokens,
            "pred_usd_per_million_tokens": (gpu_usd_per_million_tokens(platform, learned)
                                            + energy_usd_per_million_tokens(platform, energy)),
            "pred_energy_usd_per_million_tokens": energy_usd_per_million_tokens(platform, energy),
            "pred_throttle_risk": table["throttle_risk"],
            "pred_thermal_loss": table["thermal_loss"],
            "pred_power_cap_loss": table["power_cap_loss"],
            "pred_source": source,
            "pred_extrapolation": extrapolation,
            "pred_calibrated": np.full(n, calibrated),
            "pred_error": np.full(n, "", dtype=object),
            **({BREAKDOWN_PREFIX + k: v for k, v in full_length(table, n).items()}
               if breakdown else {}),
        }, n)

    def _power(self, model, platform, feats, table, *,
               lora: np.ndarray) -> dict[str, np.ndarray]:
        """Average and peak power with their bands, and the measured-style throttle fractions:
        learned where a power surrogate was trained and supports the row, else the analytical
        watts (with no band: the analytical power model has no measurements to size one) and
        no throttle fraction (the analytical model gives a risk, `pred_throttle_risk`)."""
        n = len(table["avg_power_w"])
        nan = np.full(n, np.nan)
        out = {}
        for column in ("avg_power_w", "peak_power_w"):
            out[f"pred_{column}"] = np.asarray(table[column], dtype=float)
            out[f"pred_{column}_p10"] = out[f"pred_{column}_p90"] = nan
        for column in ("throttle_frac_power", "throttle_frac_thermal"):
            for suffix in ("", "_p10", "_p90"):
                out[f"pred_{column}{suffix}"] = nan
        # Arrays, not scalars: pandas builds a column from an array faster.
        out["pred_power_source"] = np.full(n, "analytical", dtype=object)
        if not self.power:
            return out
        from advisor.learn.power_surrogate import power_feature_table

        frame = power_feature_table(feats, platform, {k: np.broadcast_to(table[k], (n,)) for k in (
            "avg_power_w", "peak_power_w", "gemm_power_demand_w", "throttle_risk",
            "throttle_risk_power", "throttle_risk_thermal", "temp_rear_c")})
        families = np.full(n, platform.family)
        model_families = np.full(n, model.family or model.name)
        for column, surrogate in self.power.items():
            q = surrogate.predict_arrays(frame, families, model_families)
            ok = q["supported"] & ~lora
            fallback = out[f"pred_{column}"]
            out[f"pred_{column}"] = np.where(ok, q["p50"], fallback)
            out[f"pred_{column}_p10"] = np.where(ok, q["p10"], np.nan)
            out[f"pred_{column}_p90"] = np.where(ok, q["p90"], np.nan)
            if column == "avg_power_w":
                out["pred_power_source"] = np.where(ok, "surrogate", "analytical")
        return out


MUST_BE_FINITE = ("pred_step_time_s", "pred_tokens_per_sec_per_gpu",
                  "pred_tokens_per_sec_per_gpu_p10", "pred_tokens_per_sec_per_gpu_p90",
                  "pred_tflops_per_gpu", "pred_mfu", "pred_memory_gb", "pred_avg_power_w",
                  "pred_peak_power_w", "pred_energy_j_per_token", "pred_throttle_risk")
"""Figures every predicted row has: a row where one is NaN or infinite gets a `pred_error`
instead (its figures become NaN, which search counts as not predicted)."""


def _refuse_non_finite(out: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """`out` with a `pred_error` on every row whose `MUST_BE_FINITE` figures are not all
    finite, naming the first such figure; never a NaN or infinite number as a prediction."""
    bad = np.zeros(n, dtype=bool)
    first = np.full(n, "", dtype=object)
    with np.errstate(invalid="ignore"):
        for name in MUST_BE_FINITE:
            values = np.broadcast_to(np.asarray(out[name], dtype=float), (n,))
            wrong = ~np.isfinite(values)
            first = np.where(wrong & ~bad, name.removeprefix("pred_"), first)
            bad |= wrong
    if not bad.any():
        return out
    out = dict(out)
    for name, values in out.items():
        values = np.asarray(values)
        if name.startswith("pred_") and values.dtype.kind == "f":
            out[name] = np.where(bad, np.nan, np.broadcast_to(values, (n,)))
    out["pred_error"] = np.where(
        bad, [f"the prediction is not finite ({what} is NaN or infinite): a number of the "
              f"platform or model is out of any real range (a bandwidth, FLOP/s, size or "
              f"latency); check them with `advisor catalog show`." for what in first],
        out["pred_error"]).astype(object)
    return out


def _note_unread_columns(frame: pd.DataFrame, out: pd.DataFrame) -> None:
    """`pred_notes` on every row that fills a column the Predictor does not read (a misspelt
    condition, a knob it does not model): never silently ignored."""
    unread = [c for c in frame.columns if not _is_read(str(c))]
    if not unread:
        return
    filled = frame[unread].astype("string").fillna("").apply(lambda c: c.str.strip() != "")
    said = {c: f"{c}{suggest(str(c), _read_columns(), limit=1).rstrip('?')}"
                .replace(" Did you mean", ": did you mean") for c in unread}
    out["pred_notes"] = [
        f"not read: column(s) {'; '.join(said[c] for c, f in zip(unread, row, strict=True) if f)}"
        f" (not an input advisor knows)" if any(row) else ""
        for row in filled.itertuples(index=False)]


@functools.cache
def _read_columns() -> frozenset[str]:
    from advisor.data.dataset import COLUMNS

    return frozenset({*PARALLEL_FIELDS, *OVERRIDABLE, *COLUMNS, "model", "gpu", "platform",
                      "num_gpus", "framework", "software", "source_name"})


def _is_read(column: str) -> bool:
    """Whether `predict` reads `column`, or knows it for an outcome or provenance (a dataset's
    measured columns, an earlier prediction's `pred_*` and `analytical_*`)."""
    return column in _read_columns() or column.startswith(("pred_", BREAKDOWN_PREFIX))


_ROW_ERRORS = (AdvisorError, KeyError, ValueError, TypeError)
"""What predicting a group of rows can raise that becomes their `pred_error`."""


def _row_error(e: Exception) -> str:
    return str(e) if isinstance(e, AdvisorError) else (
        f"cannot predict this row: {type(e).__name__}: {e}")


_BOOKKEEPING = ("assumed", "etp_unset")
"""Columns `as_columns` adds that are not configuration."""


def _default_etp(model, cols: Columns) -> Columns:
    """etp where the input left it unset: Megatron-Core's default etp = tp for MoE models
    (`parallel.default_etp`), noted in `assumed`."""
    unset = cols["etp_unset"] & (cols["tp"] > 1) if model.is_moe else None
    if unset is None or not unset.any():
        return cols
    tp, ep = cols["tp"], cols["ep"]
    fits = (tp * cols["cp"] * cols["dp"]) % (ep * tp) == 0
    use = unset & fits
    cols = dict(cols)
    cols["etp"] = np.where(use, tp, cols["etp"]).astype(cols["etp"].dtype)
    note = "etp=tp (Megatron-Core's default)"
    cols["assumed"] = np.where(use, np.where(cols["assumed"] == "", note,
                                             cols["assumed"] + "; " + note),
                               cols["assumed"]).astype(object)
    return cols


def _why_invalid(model, platform, configs: Columns, framework: str = "megatron") -> list[str]:
    out = []
    gpus = (configs["num_gpus"].tolist() if "num_gpus" in configs
            else [None] * len(configs["tp"]))
    for values, num_gpus in zip(zip(*(configs[k].tolist() for k in PARALLEL_FIELDS),
                                    strict=True), gpus, strict=True):
        try:
            config = ParallelConfig(**dict(zip(PARALLEL_FIELDS, values, strict=True)))
            if num_gpus is not None and math.isnan(num_gpus):
                raise ConfigError("num_gpus and dp are both empty: give either (dp = "
                                  "num_gpus / (tp·pp·cp)).")
            if num_gpus is not None and not (math.isfinite(num_gpus) and num_gpus >= 1
                                             and num_gpus == int(num_gpus)):
                raise ConfigError(f"num_gpus must be a positive whole number, got "
                                  f"{num_gpus!r}.")
            validate(config, model, platform, framework=framework,
                     num_gpus=config.world_size if num_gpus is None else int(num_gpus))
            out.append("invalid configuration for this model")
        except AdvisorError as e:
            out.append(str(e))
        except (AttributeError, TypeError):
            out.append("invalid configuration for this model (tp must divide the heads, "
                       "pp·vp at most the layers, gbs a multiple of mbs·dp, ep dividing the "
                       "experts)")
    return out
