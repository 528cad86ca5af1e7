"""Calibrate the analytical model against published runs and measure its error honestly.

`load_reference` turns rows shaped like `published_runs.csv` into (model, platform,
configuration, measured tokens/s/GPU) cases, grouped so the vectorised model runs once per
(model, platform). `fit_family` fits one platform family's `Efficiency` by least squares on
log(predicted / measured). `leave_one_source_out` refits without each source in turn and
predicts the source it left out; `error_table` and `kendall_by_group` summarise.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_model, load_platform
from advisor.core.errors import AdvisorError
from advisor.core.model import ModelSpec
from advisor.core.parallel import PRECISIONS
from advisor.core.platform import Platform
from advisor.data.predict_input import lightest_recompute_that_fits, parse_run_row
from advisor.data.row_specs import MODEL_SPEC, PLATFORM_SPEC, row_model, row_platform, spec_key
from advisor.perf.calibration import (
    FIT_PARAMETERS,
    FRAMEWORK_PARAMETERS,
    STACK_SEPARATOR,
    Calibration,
    FrameworkEfficiency,
    SoftwareTrend,
)
from advisor.perf.columns import config_columns
from advisor.perf.flop_conventions import derived_tokens_per_sec
from advisor.perf.memory import estimate_memory
from advisor.perf.step import DEFAULT_FRAMEWORK, step_arrays

PRIOR_LOG_SD = 0.5
"""A Gaussian prior on log(parameter) around the literature value (`[prior]` of
calibration.toml), so a family with few runs stays near it: the fit is a MAP estimate."""
PRIOR_LOG_SD_OF = {"expert_overhead_s": 1.0, "gemm": 0.15}
"""Wider priors: a MoE expert's launch count is known (`[prior]`), the host time around each
launch in Transformer Engine's Python and C++ is not (a factor of several either way).
Narrower: training GEMMs run the measured kernels (`advisor/perf/gemm.py`), so the end-to-end
fit may move their speed only by what the kernel tables cannot see (MAMF's torch matmul runs
0.8-1.05 × the model at its best shapes: `benchmarks/gemm_check.py`). A framework's GEMM factor
takes the same narrow prior (around 1, Megatron-Core's): every framework calls the cuBLAS or
hipBLASLt kernels the tables time, so what a stack's few runs cannot explain by its GEMMs stays
in its attention factor or its residual rather than making its GEMMs half as fast (the two
DeepSpeed LoRA runs of MLPerf on H100 fitted 0.54 with the wide prior, and as a third of the
mean an uncalibrated framework gets, they had llm-foundry held out predicted 8-10 % too slow)."""
DATA_LOG_SD = 0.15
"""Typical log error of one run against the model (scale of the data term)."""
SHARED_PARAMETERS = ("expert_gemm",)
"""Parameters with a level shared by the families: each family's value has its prior around
that level (`PRIOR_LOG_SD` apart), and a family no row informs takes the level itself. Every
family the MoE runs measure runs its expert GEMMs well below the measured kernels' speed
(Hopper 0.30, Blackwell 0.56; the level 0.56): a family without MoE runs is better served by
that than by the prior 1. With each publication series held out (`benchmarks/calibrate.py
--gate`), which leaves Hopper no MoE run when the Megatron-Bridge summary is out, Hopper's FP8
MoE runs went from 45.8 to 43.9 % MAPE and its BF16 ones from 60.3 to 55.9 %."""
FIT_FRAMEWORKS = True
"""Fit kernel factors for non-Megatron frameworks (llm-foundry). Leave-one-source-out error was
the same with or without them (about 19 %: a held-out framework is predicted at Megatron-Core's
efficiency either way), but with them the families describe Megatron-Core alone (Megatron
sources 16.1 % against 16.4 %) instead of a blend of frameworks."""
SOFTWARE_RATE_PRIOR_SD = 0.1
"""placeholder (a judgement): a Gaussian prior on a family's software trend
(`SoftwareTrend.rate_per_year`, log tokens/s per year) around 0: releases may move a GPU
generation's throughput by about 10 % a year, more while its software is young; the dated runs
of a family that spans releases decide."""
SOFTWARE_RATE_BOUNDS = (-0.5, 0.5)
MLPERF_ROUND_YEARS = {"v3.1": 2023 + 10.5 / 12, "v4.0": 2024 + 5.5 / 12, "v4.1": 2024 + 10.5 / 12,
                      "v5.0": 2025 + 5.5 / 12, "v5.1": 2025 + 10.5 / 12}
"""When each MLPerf Training round was published (MLCommons: 8 Nov 2023, 12 Jun 2024, 13 Nov
2024, 4 Jun 2025, 12 Nov 2025), as decimal years at mid-month: the release of every submission
of the round (`release_year`)."""
LOG_FLOOR = 1e-6
"""Parameters are fitted in log space; a zero lower bound becomes this."""
FRAMEWORK_BOUNDS = (0.3, 1.5)
KERNEL_GEMM_CEILING = 1.0
"""The highest `gemm` of a family whose platforms all run measured kernel tables
(`Platform.gemm_kernels`): the tables time the best kernel per shape on an idle GPU, so a
training step cannot run its GEMMs faster than they do. Without it the fit, which sees Hopper's
BF16 GEMMs almost only through llm-foundry's runs (whose own factors the prior holds near 1),
raised Hopper's to 1.04 and took its FP8 ratio down to 0.82 once those runs were dated to
2023 (Llama 3 70B BF16 on H100 then predicted at 61 % MFU, above the 50-60 % NVIDIA reports)."""
ATTENTION_CEILING = 0.6
"""The highest `attention` (fraction of BF16 peak, forward and backward, on long sequences:
`step_compute.ATTENTION_HALF_SPEED_TOKENS` prices shorter kernels slower) a family may fit: the
best published fused-attention kernels on Blackwell reach 39-57 % of a 2.5 PFLOP/s BF16 peak
forward at head dim 64-128 (cuDNN and FA4, Dao-AILab/flash-attention PR #2605's benchmark), and
backward runs slower. Without it, dating the Hopper runs moved Blackwell's fit, flat along that
direction, from 0.79 to 1.0 (attention at full peak) at no change in its error."""
BOUNDS = {"gemm": (0.3, 1.3), "expert_gemm": (0.1, 1.5), "attention": (0.1, ATTENTION_CEILING),
          "scan": (0.005, 1.0),
          "layer_overhead_s": (1e-5, 5e-3), "expert_overhead_s": (1e-6, 1e-2),
          "fp8_ratio": (0.4, 1.0), "fp4_ratio": (0.3, 1.0)}


@dataclass
class Reference:
    """Published runs ready to predict: `rows` (one per usable run, with `family`, `source`,
    `measured`) and the `ParallelConfig` columns per (model, platform) group."""

    rows: pd.DataFrame
    groups: dict[tuple[str, str], tuple[pd.Index, pd.DataFrame]]
    skipped: pd.DataFrame
    """Rows left out, with `why`."""
    objects: dict[str, ModelSpec | Platform] = dataclasses.field(default_factory=dict)
    """The model or platform of each key of `groups` (a catalog name, or `name#hash` for a
    specification a row carries: `advisor.data.row_specs`)."""

    def model(self, key: str) -> ModelSpec:
        return self.objects[key] if key in self.objects else load_model(key)  # type: ignore

    def platform(self, key: str) -> Platform:
        return self.objects[key] if key in self.objects else load_platform(key)  # type: ignore

    @functools.cached_property
    def prepared(self) -> list[tuple[ModelSpec, Platform, np.ndarray, dict[str, np.ndarray]]]:
        """Per group: the model, the platform, the group's positions in `rows` and its
        configurations as the perf model's columns (read once: a fit predicts every row a
        few hundred times)."""
        out = []
        for (model_key, platform_key), (idx, configs) in self.groups.items():
            out.append((self.model(model_key), self.platform(platform_key),
                        self.rows.index.get_indexer(idx), config_columns(configs)))
        return out

    def subset(self, mask: np.ndarray) -> Reference:
        keep = self.rows.index[mask]
        groups = {}
        for key, (idx, configs) in self.groups.items():
            sel = idx.isin(keep)
            if sel.any():
                groups[key] = (idx[sel], configs[sel])
        return Reference(rows=self.rows.loc[keep], groups=groups, skipped=self.skipped,
                         objects=self.objects)


def load_reference(path: Path, mlperf: Path | None = None) -> Reference:
    """Usable runs of a CSV shaped like published_runs.csv, or of a dataset Parquet file; with
    `mlperf`, plus the MLPerf Training submissions advisor can express (`advisor.data.mlperf`)."""
    if Path(path).suffix.lower() == ".parquet":
        from advisor.data.dataset import load

        frames = [load(Path(path))]
    else:
        frames = [pd.read_csv(path, dtype=str, keep_default_na=False)]
    if mlperf is not None:
        from advisor.data.mlperf import mlperf_runs

        frames.append(mlperf_runs(mlperf)[0])
    return reference_from_frame(pd.concat(frames, ignore_index=True))


MLPERF_SOURCE = "MLPerf Training"
"""The MLPerf submissions are one source (and one series): submitters rerun NVIDIA's and AMD's
published configurations, so holding one submitter out would leave its twins in."""


def _round_and_submitter(source_name: str) -> tuple[str, str]:
    """The MLPerf round and submitter of a source name ("MLPerf Training v5.0 NVIDIA" ->
    ("v5.0", "NVIDIA"))."""
    import re

    found = re.search(r"\b(v\d+\.\d+)\s+(.+)$", str(source_name))
    return (found.group(1), found.group(2).strip()) if found else ("", "")


def _mlperf_fields(source_name: str, mlperf: bool) -> dict[str, str]:
    """`round` and `submitter` of an MLPerf row; empty for the others."""
    rnd, submitter = _round_and_submitter(source_name) if mlperf else ("", "")
    return {"round": rnd, "submitter": submitter}


def release_year(software: str, mlperf_round: str = "") -> float:
    """The software release of a run as a decimal year at mid-month: an MLPerf submission's
    round's publication (`MLPERF_ROUND_YEARS`: the rounds' system descriptions carry framework
    strings that are not always their own — B200 previews of v4.1 name 23.09 containers), else
    the first container version `YY.MM` its `software` names (NGC's NeMo and PyTorch containers:
    "26.04.01" → 2026.29), else the first month `YYYY-MM` it names (a stack without numbered
    containers dated by its publication: "llm-foundry tables of 2023-09" → 2023.71); NaN where
    none says."""
    import re

    if mlperf_round:
        return MLPERF_ROUND_YEARS.get(str(mlperf_round), float("nan"))
    found = re.search(r"(?<![\d.])(\d\d)\.(\d\d)(?!\d)", str(software))
    if found and 20 <= int(found.group(1)) <= 39 and 1 <= int(found.group(2)) <= 12:
        return 2000 + int(found.group(1)) + (int(found.group(2)) - 0.5) / 12
    found = re.search(r"(?<!\d)(20[2-3]\d)-(\d\d)(?!\d)", str(software))
    if found and 1 <= int(found.group(2)) <= 12:
        return int(found.group(1)) + (int(found.group(2)) - 0.5) / 12
    return float("nan")


def source_series(source_name: str) -> str:
    """The publication series a source belongs to: its name without release numbers or the
    parenthesised detail ("Megatron-Bridge performance summary (NeMo 26.04 container)" →
    "Megatron-Bridge performance summary"), so that releases of one series, which share
    configurations, can be held out together."""
    import re

    if str(source_name).startswith(MLPERF_SOURCE):
        return MLPERF_SOURCE
    name = re.sub(r"\([^)]*\)", "", str(source_name))
    name = re.sub(r"\b\d+(\.\d+)*\b", "", name)
    return " ".join(name.split())


def reference_from_frame(frame: pd.DataFrame) -> Reference:
    """Usable runs (catalog model and platform, a valid configuration, measured tokens/s) of a
    frame of runs; the others are in `skipped` with the reason."""
    frame = frame.astype("string").fillna("").astype(object)
    if "status" in frame:
        frame = frame[frame["status"].isin(["", "ok"])]
    usable, skipped, configs, objects = [], [], {}, {}
    for i, row in frame.iterrows():
        measured = row.get("tokens_per_sec_per_gpu", "").strip()
        derived = None
        try:
            model, platform = row_model(row), row_platform(row)
            config, _ = parse_run_row(row, model)
            if not measured:
                # Tokens/s from the row's TFLOP/s where its source's FLOP count is known.
                derived = derived_tokens_per_sec(row.get("source_name", ""),
                                                 row.get("tflops_per_gpu", ""), model,
                                                 config.seq_len)
                if derived is None:
                    skipped.append((i, "no tokens_per_sec_per_gpu (nor TFLOP/s from a source "
                                       "whose FLOP count is known)"))
                    continue
                measured = derived[0]
            if not row.get("recompute", "").strip():
                config = _assumed_recompute(row, model, config, platform)
        except AdvisorError as e:
            skipped.append((i, str(e)))
            continue
        mlperf = str(row["source_name"]).startswith(MLPERF_SOURCE)
        mlperf_fields = _mlperf_fields(row["source_name"], mlperf)
        keys = (spec_key(model.name, row.get(MODEL_SPEC, "")),
                spec_key(platform.name, row.get(PLATFORM_SPEC, "")))
        objects.update(zip(keys, (model, platform), strict=True))
        usable.append({"index": i, "model": model.name, "platform": platform.name,
                       "model_key": keys[0], "platform_key": keys[1],
                       "family": platform.family,
                       "source": MLPERF_SOURCE if mlperf else row["source_name"],
                       **mlperf_fields,
                       "series": source_series(row["source_name"]),
                       "framework": row.get("framework", "") or "megatron",
                       "software": row.get("software", ""),
                       "release_year": release_year(row.get("software", ""),
                                                    mlperf_fields["round"]),
                       "precision": row["precision"],
                       "model_family": model.family or model.name, "moe": model.is_moe,
                       "mamba": model.mamba_num_heads > 0,
                       "num_gpus": int(float(row["num_gpus"])), "finetune": config.finetune,
                       "measured": float(measured),
                       "measured_derived": derived[1] if derived else ""})
        configs[i] = config.to_dict() | {"framework": row.get("framework", "") or "megatron"}
    if not usable:
        reasons = sorted({why.split(";")[0][:80] for _, why in skipped})[:3]
        raise AdvisorError(f"no usable runs among {len(frame)} rows (need a catalog model and "
                           f"platform, a valid layout and measured tokens/s; e.g. "
                           f"{'; '.join(reasons) or 'no rows with status ok'}).")
    rows = pd.DataFrame(usable).set_index("index")
    all_configs = pd.DataFrame.from_dict(configs, orient="index")
    groups = {}
    for key, part in rows.groupby(["model_key", "platform_key"]):
        groups[key] = (part.index, all_configs.loc[part.index])
    skipped_frame = pd.DataFrame(skipped, columns=["index", "why"]).set_index("index")
    return Reference(rows=rows, groups=groups, skipped=skipped_frame, objects=objects)


def _assumed_recompute(row: pd.Series, model, config, platform):
    """Recompute for a row that does not say: NVIDIA's tuned recipes (Megatron rows with a
    container release) run without full recompute, some with selective (published_runs README),
    so: none if it fits, else selective (core attention, what the shipped surrogate was trained
    on; `predict --input` goes on to the MoE recipes' modules). Other rows: the least recompute
    that fits (`recompute_ladder`, as `predict --input` assumes)."""
    if row.get("framework", "") == "megatron" and row.get("software", "").strip():
        fits = estimate_memory(model, parallel=config.replace(recompute="none"),
                               platform=platform).fits
        return config.replace(recompute="none" if fits else "selective")
    return lightest_recompute_that_fits(model, config, platform)[0]


def predict_reference(ref: Reference, calibration: Calibration) -> pd.Series:
    """Predicted tokens/s/GPU for every reference row, at its software release where its
    family has a trend (`Calibration.software`)."""
    out = np.full(len(ref.rows), np.nan)
    for model, platform, positions, cols in ref.prepared:
        out[positions] = step_arrays(model, platform, cols,
                                     calibration=calibration)["tokens_per_sec_per_gpu"]
    return pd.Series(out * release_factor(ref.rows, calibration), index=ref.rows.index)


def release_factor(rows: pd.DataFrame, calibration: Calibration) -> np.ndarray:
    """Per reference row, its release's throughput against its family's reference release
    (`Calibration.release_factor`; rows without a `release_year` column as undated)."""
    years = (rows["release_year"].to_numpy(float) if "release_year" in rows
             else np.full(len(rows), np.nan))
    return calibration.release_factor(rows["family"].to_numpy(), years)


def reference_terms(ref: Reference, calibration: Calibration,
                    columns: tuple[str, ...]) -> pd.DataFrame:
    """`columns` of the step model (tokens/s/GPU, step time, its terms) for every reference
    row, indexed like `ref.rows`, at the row's software release (`release_factor`: the
    throughput times it, every time in seconds over it)."""
    out = pd.DataFrame(np.nan, index=ref.rows.index, columns=list(columns))
    for model, platform, positions, cols in ref.prepared:
        table = step_arrays(model, platform, cols, calibration=calibration)
        for column in columns:
            out.iloc[positions, out.columns.get_loc(column)] = np.asarray(table[column], float)
    factor = release_factor(ref.rows, calibration)
    for column in columns:
        if column == "tokens_per_sec_per_gpu":
            out[column] *= factor
        elif column.endswith("_s"):
            out[column] /= factor
    return out


def _constrained(rows: pd.DataFrame, parameter: str) -> bool:
    """Whether any row informs `parameter` (no FP4 rows: fp4_ratio stays at the prior)."""
    classes = rows["precision"].str.lower()
    if parameter == "fp8_ratio":
        return bool(classes.map(lambda p: PRECISIONS.get(p) == "fp8").any())
    if parameter == "fp4_ratio":
        return bool((classes == "nvfp4").any())
    if parameter == "scan":
        return bool(rows["mamba"].any())
    if parameter in ("expert_overhead_s", "expert_gemm"):
        return bool(rows["moe"].any())
    return len(rows) > 0


def _spans_releases(years: np.ndarray) -> bool:
    """Whether dated runs of one family span releases enough to fit a trend: two releases a
    quarter of a year or more apart."""
    years = years[np.isfinite(years)]
    return len(years) > 0 and float(years.max() - years.min()) >= 0.25


def fit_all(ref: Reference, calibration: Calibration, *,
            fit_frameworks: bool = FIT_FRAMEWORKS) -> Calibration:
    """Fit every platform family's `Efficiency` (and, with `fit_frameworks`, every
    non-reference framework's kernel factors, and for each family whose dated runs span
    releases, its `SoftwareTrend`) jointly: least squares on log(predicted / measured) of all
    rows plus a log-normal prior on each parameter (MAP; the software rates a normal one around
    0, `SOFTWARE_RATE_PRIOR_SD`). Parameters no row informs keep their prior value, but for
    `SHARED_PARAMETERS`, which take the families' shared level. A family's efficiencies then
    describe its newest release in the rows (`SoftwareTrend.reference_year`)."""
    from scipy.optimize import least_squares
    from scipy.sparse import lil_matrix

    rows = ref.rows
    families = sorted(rows["family"].unique())
    # One pair of kernel factors per stack: a non-reference framework on one platform family.
    stack_of = (rows["framework"] + STACK_SEPARATOR + rows["family"]).to_numpy()
    frameworks = (sorted({s for s, fw in zip(stack_of, rows["framework"], strict=True)
                          if fw not in (DEFAULT_FRAMEWORK, "")}) if fit_frameworks else [])
    family_of = rows["family"].to_numpy()
    years = (rows["release_year"].to_numpy(float) if "release_year" in rows
             else np.full(len(rows), np.nan))
    years = np.where(np.isfinite(years), years, np.nan)   # CURRENT_RELEASE dates nothing
    reference_year = {f: float(np.nanmax(years[family_of == f])) for f in families
                      if _spans_releases(years[family_of == f])}
    undated_year = {f: float(np.nanmean(years[family_of == f])) for f in reference_year}
    names: list[tuple[str, str, str]] = []
    for family in families:
        part = rows[rows["family"] == family]
        names += [("family", family, p) for p in FIT_PARAMETERS if _constrained(part, p)]
    names += [("shared", "", p) for p in SHARED_PARAMETERS
              if any(n == ("family", f, p) for f in families for n in names)]
    names += [("framework", fw, k) for fw in frameworks for k in FRAMEWORK_PARAMETERS]
    names += [("software", f, "rate") for f in reference_year]
    shared_at = {p: j for j, (kind, _, p) in enumerate(names) if kind == "shared"}
    rate = np.array([kind == "software" for kind, _, _ in names])
    # Log space for the efficiencies; the software rates are fitted as they are, around 0.
    z_prior = np.array([0.0 if kind == "software" else np.log(max(
        getattr(calibration.prior, p) if kind != "framework" else 1.0, LOG_FLOOR))
        for kind, _, p in names])
    lo = np.array([SOFTWARE_RATE_BOUNDS[0] if kind == "software" else np.log(
        max(BOUNDS[p][0], LOG_FLOOR) if kind != "framework" else FRAMEWORK_BOUNDS[0])
        for kind, _, p in names])
    tabled = _families_with_kernel_tables(ref)
    hi = np.array([SOFTWARE_RATE_BOUNDS[1] if kind == "software"
                   else np.log(FRAMEWORK_BOUNDS[1]) if kind == "framework"
                   else np.log(KERNEL_GEMM_CEILING) if p == "gemm" and f in tabled
                   else np.log(BOUNDS[p][1]) for kind, f, p in names])
    z0 = np.clip(z_prior, lo + 1e-9, hi - 1e-9)
    measured = np.log(rows["measured"].to_numpy())
    # Where a family's prior centres: the shared level's parameter, else its fixed prior.
    centre = np.array([shared_at.get(p, -1) if kind == "family" else -1
                       for kind, _, p in names])
    # Families the runs have but do not inform about a shared parameter run at the level.
    level_only = {p: [f for f in families if ("family", f, p) not in names]
                  for p in shared_at}

    sparsity = lil_matrix((len(rows) + len(names), len(names)), dtype=int)
    framework_of = stack_of
    for j, (kind, key, p) in enumerate(names):
        if kind == "shared":
            hit = np.flatnonzero(np.isin(family_of, level_only[p]))
        elif kind == "software":
            hit = np.flatnonzero((family_of == key) & np.isfinite(years))
        else:
            hit = np.flatnonzero((family_of if kind == "family" else framework_of) == key)
        sparsity[hit, j] = 1
        sparsity[len(rows) + j, j] = 1
        if centre[j] >= 0:
            sparsity[len(rows) + j, centre[j]] = 1
    pull = DATA_LOG_SD / np.array([
        SOFTWARE_RATE_PRIOR_SD if kind == "software" else PRIOR_LOG_SD_OF.get(p, PRIOR_LOG_SD)
        for kind, _, p in names])

    def build(z: np.ndarray) -> Calibration:
        values = dict(zip(names, np.where(rate, z, np.exp(z)), strict=True))
        fams = {f: dataclasses.replace(calibration.prior, calibrated=True, **{
            p: float(values[("shared", "", p)]) for p in shared_at if f in level_only[p]}, **{
            p: float(v) for (kind, key, p), v in values.items() if kind == "family" and key == f})
            for f in families}
        fws = {fw: FrameworkEfficiency(**{p: float(v) for (kind, key, p), v in values.items()
                                          if kind == "framework" and key == fw})
               for fw in frameworks}
        trends = {f: SoftwareTrend(rate_per_year=float(values[("software", f, "rate")]),
                                   reference_year=year, undated_year=undated_year[f])
                  for f, year in reference_year.items()}
        return dataclasses.replace(calibration.with_families(fams).with_frameworks(fws),
                                   software=trends)

    def residuals(z: np.ndarray) -> np.ndarray:
        pred = predict_reference(ref, build(z)).to_numpy()
        centred = np.where(centre >= 0, z[np.maximum(centre, 0)], z_prior)
        return np.concatenate([np.log(pred) - measured, pull * (z - centred)])

    fit = least_squares(residuals, z0, bounds=(lo, hi), jac_sparsity=sparsity,
                        diff_step=1e-3, max_nfev=100)
    return build(fit.x)


def _families_with_kernel_tables(ref: Reference) -> set[str]:
    """The families all of whose rows run on platforms with a measured kernel table
    (`KERNEL_GEMM_CEILING`)."""
    family = ref.rows["family"].to_numpy()
    with_table, without = set(), set()
    for _, platform, positions, _ in ref.prepared:
        (with_table if platform.gemm_kernels else without).update(family[positions])
    return with_table - without


def predict_held_out(ref: Reference, calibration: Calibration, source: str, *,
                     by: str = "source") -> pd.Series:
    """Fit on every row whose `by` is not `source`, predict the others."""
    held = (ref.rows[by] == source).to_numpy()
    fitted = fit_all(ref.subset(~held), calibration.with_families({}).with_frameworks({}))
    return predict_reference(ref.subset(held), fitted)


def leave_one_source_out(ref: Reference, calibration: Calibration, *,
                         by: str = "source") -> pd.Series:
    """Prediction for each row from a calibration fitted without the row's source (or
    publication series, with `by="series"`)."""
    parts = [predict_held_out(ref, calibration, group, by=by)
             for group in ref.rows[by].unique()]
    return pd.concat(parts).reindex(ref.rows.index)


def error_table(rows: pd.DataFrame, predicted: pd.Series, by: str | None) -> pd.DataFrame:
    """MAPE and median APE (%) of predicted vs measured tokens/s/GPU, overall or per `by`."""
    ape = (predicted / rows["measured"] - 1.0).abs() * 100
    frame = pd.DataFrame({"ape": ape, "key": rows[by] if by else "all"})
    table = frame.groupby("key")["ape"].agg(rows="count", mape="mean", median_ape="median")
    return table.round(1)


def kendall_by_group(rows: pd.DataFrame, predicted: pd.Series,
                     keys: tuple[str, ...] = ("model", "platform", "num_gpus")) -> pd.DataFrame:
    """Kendall τ between predicted and measured throughput within groups of ≥ 3 rows sharing
    `keys` (the ranking question: which layout of this job is fastest?)."""
    from scipy.stats import kendalltau

    out = []
    for key, part in rows.groupby(list(keys)):
        if len(part) < 3 or part["measured"].nunique() < 2:
            continue
        tau = kendalltau(predicted.loc[part.index], part["measured"]).statistic
        out.append((*key, len(part), tau))
    return pd.DataFrame(out, columns=[*keys, "rows", "tau"])
