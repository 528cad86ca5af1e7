"""Build the surrogate artifacts from the measurement datasets, reproducibly."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.data.dataset import DatasetError, load
from advisor.learn import power_surrogate
from advisor.learn.bands import MIN_GROUPS, band_scale
from advisor.learn.features import reference_features
from advisor.learn.fit import reference_from_frame, reference_terms
from advisor.learn.stack import (
    STACK_FILE,
    TERM_COLUMNS,
    StackCalibration,
    fit_stack_host,
    shares,
    spread_of,
)
from advisor.learn.surrogate import train_throughput
from advisor.perf.calibration import CURRENT_RELEASE, load_calibration

POWER_TARGETS = tuple(power_surrogate.TARGETS)
"""Learned only from the dataset's measured columns (telemetry of campaign runs); the
analytical model's numbers are the prior and features, never a target."""
MIN_ROWS = 30
"""Fewest usable runs to train any surrogate on (a judgement, not tuned): depth-3 trees have up
to 8 leaves, so fewer runs leave about a handful per leaf and the prior is the safer answer."""


@dataclass
class TrainReport:
    rows_used: int
    rows_skipped: int
    skipped_reasons: dict[str, int]
    targets: dict[str, str]
    """Per target: "trained on N rows" or "no data: ..."."""
    data_sha256: str
    output: Path
    artifacts: list[str] = field(default_factory=list)
    """Stems of the artifacts written to `output` (<stem>.model.json and <stem>.json)."""
    stack: str = ""
    """The stack calibration fitted to `--stack` runs (`StackCalibration.describe`), or ""."""
    stack_advice: str = ""
    """What to measure next for it (`StackCalibration.advice`), or ""."""


LATER_COLUMNS = ("finetune", "lora_rank", "lora_targets", "model_spec", "platform_spec")
"""Schema columns added after datasets were written: they count only where a row fills them,
so an older dataset (and the artifacts trained on it) keeps its hash."""


def data_hash(frame: pd.DataFrame) -> str:
    """Order-independent hash of the training rows: every cell but `collected_at` (when a row
    was imported is provenance, not data)."""
    ordered = (frame.drop(columns=["collected_at"], errors="ignore").sort_values("run_id")
               .reset_index(drop=True).astype("string").fillna(""))
    empty = [c for c in LATER_COLUMNS if c in ordered and not ordered[c].ne("").any()]
    ordered = ordered.drop(columns=empty)
    return hashlib.sha256(pd.util.hash_pandas_object(ordered, index=False).values.tobytes()
                          ).hexdigest()


def train(datasets: list[Path], output: Path, *, seed: int = 0,
          stack: list[Path] | None = None, stack_name: str | None = None) -> TrainReport:
    """Train every target the data supports and write the artifacts to `output`. With `stack`
    (datasets of one team's own runs: one platform, one framework), fit that stack's
    calibration to them first (`advisor.learn.stack`), train the surrogate on what it leaves,
    and write it beside the surrogates (`stack.json`)."""
    frames = [load(p) for p in datasets]
    own = [load(p) for p in stack or []]
    data = pd.concat(frames + own, ignore_index=True).drop_duplicates("run_id", keep="last")
    every = reference_from_frame(data)
    lora = ~learnable(every.rows)
    ref = every.subset(~lora)
    own_ids = set(pd.concat(own)["run_id"]) if own else set()
    in_stack = data.loc[ref.rows.index, "run_id"].isin(own_ids).to_numpy()
    ref.rows = ref.rows.assign(release_year=np.where(
        in_stack, CURRENT_RELEASE, ref.rows["release_year"].to_numpy(float)))
    if len(ref.rows) < MIN_ROWS:
        raise DatasetError(f"only {len(ref.rows)} usable runs (need {MIN_ROWS}: catalog model "
                           f"and platform, a valid layout, measured tokens/s); skipped: "
                           f"{len(ref.skipped)}.")
    reasons = every.skipped["why"].str.split(";").str[0].str.slice(0, 80).value_counts().to_dict()
    if lora.any():
        reasons["LoRA fine-tuning (no fine-tuning feature yet: LoRA predictions stay "
                "analytical)"] = int(lora.sum())
    calibration = load_calibration()
    features = reference_features(ref, calibration)
    fitted = None
    if stack:
        stack_ref = ref.subset(in_stack)
        fitted, priced = fit_stack_runs(stack_ref, calibration,
                                        stack_name or Path(stack[0]).stem, where=stack)
        # The trees learn what the stack's factors leave, on its runs.
        terms = priced[fitted.host_factor]
        tokens = terms["tokens_per_sec_per_gpu"].to_numpy()
        calibrated = fitted.predict_priced(
            lambda f: (priced[f]["tokens_per_sec_per_gpu"].to_numpy(), shares(priced[f])),
            stack_ref.rows["model"].to_numpy(), stack_ref.rows["moe"].to_numpy(bool))[1]
        features.loc[terms.index, "analytical"] *= calibrated / tokens
    digest = data_hash(data)
    targets = {}
    surrogate = train_throughput(
        features, ref.rows["family"].to_numpy(), ref.rows["model_family"].to_numpy(), seed=seed,
        metadata={"target": "log(measured / analytical) tokens_per_sec_per_gpu",
                  "data_sha256": digest, "datasets": [str(p) for p in datasets],
                  "rows_used": int(len(ref.rows))})
    scale, how = band_scale(features, ref.rows["family"].to_numpy(),
                            ref.rows["model_family"].to_numpy(), band_groups(ref.rows), seed=seed)
    surrogate.band_scale = scale
    surrogate.metadata.update(how)
    in_sample = _in_sample(features, ref, surrogate)
    surrogate.metadata["in_sample_mape_pct"] = in_sample
    surrogate.save(output)
    targets["tokens_per_sec_per_gpu"] = (f"trained on {len(ref.rows)} rows "
                                         f"(in-sample MAPE {in_sample:.1f} %; p10-p90 band "
                                         f"x{scale:.2f}, from "
                                         f"{how['band_scale_groups']} held-out groups)")
    metadata = {"data_sha256": digest, "datasets": [str(p) for p in datasets]}
    power, written = _train_power(data, ref, calibration, output, seed=seed, metadata=metadata)
    targets.update(power)
    if fitted is not None:
        fitted.save(output)
    else:
        (output / STACK_FILE).unlink(missing_ok=True)   # another stack's, now stale
    return TrainReport(rows_used=int(len(ref.rows)),
                       rows_skipped=int(len(every.skipped) + lora.sum()),
                       skipped_reasons={str(k): int(v) for k, v in reasons.items()},
                       targets=targets, data_sha256=digest, output=output,
                       artifacts=["throughput", *written, *(["stack"] if fitted else [])],
                       stack=fitted.describe() if fitted else "",
                       stack_advice=fitted.advice() if fitted else "")


def fit_stack_runs(ref, calibration, name: str, *, where: list[Path]
                   ) -> tuple[StackCalibration, dict[float, pd.DataFrame]]:
    """The stack calibration of `ref`'s runs (one platform, one framework) on `calibration`:
    its host time and factors (`fit_stack_host`, each host factor's step terms from
    `reference_terms`), and the runs' step terms at every host factor weighed."""
    if ref.rows.empty:
        raise DatasetError(f"{', '.join(map(str, where))}: no usable run for a stack "
                           f"calibration (a valid layout and measured tokens/s; LoRA runs do "
                           f"not count).")
    for column, what in (("platform", "platform"), ("framework", "framework")):
        values = sorted(ref.rows[column].unique())
        if len(values) > 1:
            raise DatasetError(f"{', '.join(map(str, where))}: a stack is one {what}; these "
                               f"runs have {', '.join(values)}. Train one --stack per {what}.")

    terms = {}

    def price(factor: float) -> tuple[np.ndarray, np.ndarray]:
        terms[factor] = reference_terms(ref, calibration.with_host_scale(factor), TERM_COLUMNS)
        return terms[factor]["tokens_per_sec_per_gpu"].to_numpy(), shares(terms[factor])

    fitted = fit_stack_host(price, ref.rows["measured"].to_numpy(), spread_of(calibration),
                            models=ref.rows["model"].to_numpy(),
                            moe=ref.rows["moe"].to_numpy(bool), name=name,
                            platform=str(ref.rows["platform"].iloc[0]),
                            framework=str(ref.rows["framework"].iloc[0]))
    return fitted, terms


def learnable(rows: pd.DataFrame) -> np.ndarray:
    """Reference rows the throughput surrogate learns from: not LoRA runs, which stay
    analytical (the features have no fine-tuning column, so the trees could not tell a LoRA
    step from a pre-training one)."""
    return (rows["finetune"] != "lora").to_numpy()


def band_groups(rows: pd.DataFrame) -> np.ndarray:
    """What the band is cross-validated over: publication series (a new series is a new
    software stack, like a user's own cluster), or sources where there are too few series."""
    for column in ("series", "source"):
        if rows[column].nunique() >= MIN_GROUPS:
            return rows[column].to_numpy()
    return rows["source"].to_numpy()


def _in_sample(features: pd.DataFrame, ref, surrogate) -> float:
    ratio = surrogate.predict_ratio(features, ref.rows["family"].to_numpy(),
                                    ref.rows["model_family"].to_numpy())
    pred = features["analytical"] * ratio["p50"]
    return float(np.mean(np.abs(pred / features["measured"] - 1.0)) * 100)


def _train_power(data: pd.DataFrame, ref, calibration, output: Path, *, seed: int,
                 metadata: dict) -> tuple[dict[str, str], list[str]]:
    """Train each power/throttle target on the usable runs that measured it; below `MIN_ROWS`
    write nothing and delete a stale artifact, so predictions fall back to analytical.
    Returns the per-target report and the artifact stems written."""
    feats = None
    families, model_families = (ref.rows["family"].to_numpy(),
                                ref.rows["model_family"].to_numpy())
    out, written = {}, []
    for column in POWER_TARGETS:
        target = power_surrogate.TARGETS[column]
        measured = data[column].reindex(ref.rows.index).astype(float).to_numpy()
        ok = power_surrogate.usable(target, measured)
        n, skipped = int(ok.sum()), int((~ok).sum())
        if n < MIN_ROWS:
            removed = power_surrogate.remove_artifacts(output, column)
            out[column] = (f"no data: {n} usable runs measured it (need {MIN_ROWS}); "
                           f"predictions stay analytical"
                           + ("; removed the stale artifact" if removed else ""))
            continue
        if feats is None:
            feats = power_surrogate.reference_power_features(ref, calibration)
        args = (column, feats[ok], measured[ok], families[ok], model_families[ok])
        s = power_surrogate.train_power(*args, seed=seed,
                                        metadata={**metadata, "rows_without_target": skipped})
        s.band_scale, how = power_surrogate.power_band_scale(
            *args, band_groups(ref.rows[ok]), seed=seed)
        s.metadata.update(how)
        error = s.error(*args[1:])
        metric = "in_sample_mape_pct" if target.prior else "in_sample_mae"
        s.metadata[metric] = error
        s.save(output)
        written.append(target.name)
        shown = f"MAPE {error:.1f} %" if target.prior else f"MAE {error:.3f}"
        out[column] = (f"trained on {n} rows (in-sample {shown}; p10-p90 band "
                       f"x{s.band_scale:.2f}, {how['band_scale_note']}); {skipped} runs "
                       f"without it skipped")
    return out, written
