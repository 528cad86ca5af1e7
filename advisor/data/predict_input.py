"""Turn rows shaped like the reference data (`published_runs.csv` columns) into jobs and
configurations, filling unknown cells with stated assumptions (`advisor.predict.rows` predicts
them).

A bad row gets an error and the other rows are still read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.catalog import CONDITIONS, load_model, load_platform, with_conditions
from advisor.core import limits
from advisor.core.errors import AdvisorError, ConfigError, first_line
from advisor.core.frameworks import canonical_framework
from advisor.core.model import ModelSpec
from advisor.core.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    MOE_RECOMPUTE_MODULES,
    ParallelConfig,
    default_etp,
    dispatcher_name,
    recompute_label,
    recompute_modules_cell,
)
from advisor.core.platform import Platform
from advisor.core.space import recompute_modules_error, validate
from advisor.data import framework_defaults
from advisor.perf.memory import MemoryBreakdown, estimate_memory, memory_table

if TYPE_CHECKING:
    import pandas as pd

REQUIRED_COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "gbs")
RECOMPUTE_SPELLINGS = {"none": "none", "selective": "selective", "full": "full",
                       "selective+sequence-parallel": "selective"}


@dataclass(frozen=True)
class RowJob:
    """What the `Predictor` needs besides the configuration."""

    model: ModelSpec
    platform: Platform
    framework: str
    software: str


@dataclass
class ParsedRow:
    """One input row read into what the `Predictor` takes, or the reason it cannot be."""

    config: ParallelConfig | None = None
    job: RowJob | None = None
    recompute_unknown: bool = False
    notes: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    error: str = ""


def read_rows(path: Path) -> pd.DataFrame:
    """Read a CSV of runs; refuses a file without the columns every row needs."""
    import pandas as pd

    from advisor.core.files import TABLE_LIMIT_BYTES, check_regular

    check_regular(path, limit_bytes=TABLE_LIMIT_BYTES, what="CSV")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except OSError as e:
        raise AdvisorError(f"{path}: cannot read ({e.strerror}).") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise AdvisorError(f"{path}: not a readable CSV ({first_line(e)}).") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise AdvisorError(f"{path}: missing column(s) {', '.join(missing)}; rows need "
                           f"{', '.join(REQUIRED_COLUMNS)} (the columns of published_runs.csv).")
    return frame


def _int(row: Mapping, key: str, default: int | None, assumed: list[str],
         why: str = "") -> int:
    raw = str(row.get(key, "")).strip()
    if raw == "":
        if default is None:
            raise ConfigError(f"{key} is empty; it is required.")
        assumed.append(f"{key}={default}{' (' + why + ')' if why else ''}")
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key} = {raw!r} is not a number.") from None
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ConfigError(f"{key} = {raw!r} must be a positive whole number.")
    return int(value)


def parse_run_row(row: Mapping, model: ModelSpec) -> tuple[ParallelConfig, list[str]]:
    """The `ParallelConfig` a row describes, and the assumptions made for empty cells."""
    assumed: list[str] = []
    num_gpus = _int(row, "num_gpus", None, assumed)
    limits.check_most("num_gpus", num_gpus, limits.GPUS)
    tp = _int(row, "tp", 1, assumed)
    pp = _int(row, "pp", 1, assumed)
    cp = _int(row, "cp", 1, assumed)
    if num_gpus % (tp * pp * cp):
        raise ConfigError(f"tp × pp × cp ({tp * pp * cp}) does not divide num_gpus ({num_gpus}).")
    dp = _int(row, "dp", num_gpus // (tp * pp * cp), assumed, "num_gpus / (tp·pp·cp)")
    precision = str(row.get("precision", "")).strip().lower() or "bf16"
    if not str(row.get("precision", "")).strip():
        assumed.append("precision=bf16")
    recompute_raw = str(row.get("recompute", "")).strip().lower()
    if recompute_raw and recompute_raw not in RECOMPUTE_SPELLINGS:
        raise ConfigError(f"recompute = {recompute_raw!r}; use none, selective or full.")
    modules = recompute_modules_cell(row.get("recompute_modules"))
    named = RECOMPUTE_SPELLINGS.get(recompute_raw, "none")
    if modules != DEFAULT_RECOMPUTE_MODULES and not recompute_raw:
        named = "selective"  # only selective recompute names modules
    sharding = str(row.get("dp_sharding", "")).strip().lower()
    if not sharding:
        sharding = "optimizer"
        assumed.append("dp_sharding=optimizer (Megatron distributed optimizer)")
    overlap = _framework_defaults(row, tp=tp, sharding=sharding, precision=precision,
                                  assumed=assumed)
    ep = _int(row, "ep", 1, assumed if model.is_moe else [])
    config = ParallelConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=_etp(row, model, tp=tp, cp=cp, dp=dp, ep=ep,
                                                    assumed=assumed),
        vp=_int(row, "vp", 1, assumed),
        mbs=_int(row, "mbs", 1, assumed), gbs=_int(row, "gbs", None, assumed),
        seq_len=_int(row, "seq_len", None, assumed), precision=precision,
        recompute=named, recompute_modules=modules, dp_sharding=sharding,
        dp_shard_size=_shard_size(row, group=dp * cp),
        **_dispatch(row, model, ep=ep, overlap_runs=(pp == 1 or _int(row, "vp", 1, [])
                                                     > 1) and named != "full",
                    assumed=assumed),
        sequence_parallel=tp > 1, first_stage_layers=_stage_layers(row, "first_stage_layers"),
        last_stage_layers=_stage_layers(row, "last_stage_layers"), **_finetune(row), **overlap)
    return config, assumed


def _etp(row: Mapping, model: ModelSpec, *, tp: int, cp: int, dp: int, ep: int,
         assumed: list[str]) -> int:
    """The row's etp; empty: what its source's recipes use (`framework_defaults.recipe_etp`),
    else Megatron-Core's default (the TP size where the layout allows it)."""
    notes = assumed if model.is_moe else []
    recipe = framework_defaults.recipe_etp(str(row.get("source_name", "")))
    if recipe is not None and model.is_moe:
        return _int(row, "etp", recipe, notes, "the source's recipes set it")
    return _int(row, "etp", default_etp(model, tp=tp, cp=cp, dp=dp, ep=ep), notes,
                "Megatron-Core's default: the TP size")


DISPATCHER_COLUMNS = ("moe_dispatcher", "moe_token_dispatcher_type")
"""Where a row names its MoE dispatcher: advisor's column, or Megatron-Core's argument name."""
EP_OVERLAP_COLUMNS = ("ep_comm_overlap", "moe_a2a_overlap", "overlap_moe_expert_parallel_comm")
"""Where a row says whether the all-to-all is overlapped: advisor's column, Megatron-Bridge's
recipe field, Megatron-Core's argument name."""


def _first_cell(row: Mapping, names: tuple[str, ...]) -> str:
    """The first non-empty cell among the columns `names`, stripped; "" when all are empty."""
    for name in names:
        if not _missing(row.get(name)) and str(row.get(name)).strip():
            return str(row.get(name)).strip()
    return ""


def _dispatch(row: Mapping, model: ModelSpec, *, ep: int, overlap_runs: bool,
              assumed: list[str]) -> dict[str, object]:
    """moe_dispatcher (empty: auto, or what the row's source's recipe ran) and ep_comm_overlap
    (empty: off, or the recipe's where the layout can run it: `overlap_runs`); ParallelConfig
    checks the values."""
    given = _first_cell(row, DISPATCHER_COLUMNS)
    overlap_cell = _first_cell(row, EP_OVERLAP_COLUMNS)
    overlap_given = overlap_cell != ""
    out: dict[str, object] = {"ep_comm_overlap": _switch({"ep_comm_overlap": overlap_cell},
                                                         "ep_comm_overlap")}
    if given:
        out["moe_dispatcher"] = dispatcher_name(given)
    if not model.is_moe or ep == 1:
        return out
    recipe = framework_defaults.recipe_dispatch(str(row.get("source_name", "")), model.name,
                                                str(row.get("gpu", "")))
    if recipe is None:
        return out
    if not given:
        out["moe_dispatcher"] = recipe[0]
        assumed.append(f"moe_dispatcher={recipe[0]} (the source's recipe)")
    if not overlap_given and recipe[1] and overlap_runs:
        out["ep_comm_overlap"] = True
        assumed.append("ep_comm_overlap=true (the source's recipe)")
    return out


def _finetune(row: Mapping) -> dict[str, object]:
    """finetune (empty = pre-training), lora_rank (empty = 16) and lora_targets (empty =
    attention); ParallelConfig checks the values."""
    out: dict[str, object] = {}
    finetune = str(row.get("finetune", "")).strip().lower()
    if finetune:
        out["finetune"] = finetune
    if str(row.get("lora_rank", "")).strip():
        out["lora_rank"] = _int(row, "lora_rank", 16, [])
    targets = str(row.get("lora_targets", "")).strip().lower()
    if targets:
        out["lora_targets"] = targets
    return out


def _shard_size(row: Mapping, *, group: int) -> int:
    """Hybrid sharding's group (`ParallelConfig.dp_shard_size`): the `dp_shard_size` column,
    or Megatron-Core's `num_distributed_optimizer_instances` (the group is dp·cp / instances);
    empty: 0, the whole data-parallel group."""
    size = _stage_layers(row, "dp_shard_size")
    if size:
        return size
    instances = _stage_layers(row, "num_distributed_optimizer_instances")
    if instances > 1:
        if group % instances:
            raise ConfigError(f"num_distributed_optimizer_instances = {instances} must divide "
                              f"dp × cp ({group}).")
        return group // instances
    return 0


def _stage_layers(row: Mapping, key: str) -> int:
    """An uneven pipeline split's layer count; empty or 0 is the even share."""
    raw = str(row.get(key, "")).strip()
    if raw == "":
        return 0
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{key} = {raw!r} is not a number.") from None
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise ConfigError(f"{key} = {raw!r} must be a whole number ≥ 0 (0 or empty = even "
                          f"split).")
    return int(value)


def _switch(row: Mapping, key: str) -> bool:
    """An on/off cell: true, 1, yes or on; false, 0, no, off or empty."""
    raw = "" if _missing(row.get(key)) else str(row.get(key)).strip().lower()
    if raw in ("true", "1", "yes", "on"):
        return True
    if raw in ("", "false", "0", "no", "off"):
        return False
    raise ConfigError(f"{key} = {raw!r}; use true or false (empty = false).")


def _framework_defaults(row: Mapping, *, tp: int, sharding: str, precision: str,
                        assumed: list[str]) -> dict[str, bool | str]:
    """Overlap, gradient, attention and compile settings a row's framework runs with when the
    row does not say (`advisor.data.framework_defaults`: current Megatron-Core unless the row
    names a 2021-22 release or source)."""
    # sequence_parallel is the layout's (tp > 1), not the row's.
    given = {k: str(row.get(k, "")).strip().lower() for k in framework_defaults.FIELDS
             if k != "sequence_parallel"}
    framework = canonical_framework(str(row.get("framework", "")))
    software = str(row.get("software", "")).strip()
    source = str(row.get("source_name", ""))
    table = framework_defaults.defaults(np.array([framework], dtype=object),
                                        np.array([software], dtype=object), np.array([tp]),
                                        np.array([sharding], dtype=object),
                                        np.array([source], dtype=object),
                                        np.array([precision], dtype=object))
    out: dict[str, bool | str] = {}
    defaulted = []
    for key in given:
        default = table[key][0]
        default = str(default) if key == "attention" else bool(default)
        if key == "attention":
            out[key] = given[key] or default
            if not given[key]:
                defaulted.append(f"attention={default}")
        elif given[key] in ("true", "1", "yes"):
            out[key] = True
        elif given[key] in ("false", "0", "no"):
            out[key] = False
        else:
            out[key] = default
            defaulted.append(f"{key}={str(default).lower()}")
    if out["overlap_param_gather"] and sharding == "none":
        out["overlap_param_gather"] = False
    if defaulted:
        reason = framework_defaults.why(framework, software, source)
        assumed.append(f"{', '.join(defaulted)} ({reason})")
    return out


def _missing(cell: object) -> bool:
    if cell is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(cell))
    except (TypeError, ValueError):  # a list or array cell: not missing
        return False


def parse_row(row: dict, catalog: dict, conditions: Mapping | None = None) -> ParsedRow:
    """A row's configuration and job, checked against the model and platform; errors are
    captured, never raised (one bad cell must not fail the file). `catalog` keeps the models
    and platforms already loaded, so that rows naming the same share one object (and one
    vectorised group in the Predictor). The platform runs under the row's own `CONDITIONS`
    columns (`power_limit_w`, `inlet_c`, ...) where filled, else under `conditions` (the
    command line's). Missing values (None, NaN, pandas' NA: a dataset frame's empty cells) read
    as empty cells, as in a CSV."""
    out = ParsedRow()
    row = {k: "" if _missing(v) else v for k, v in row.items()}
    try:
        model = _cached(catalog, load_model, str(row["model"]))
        platform = _conditions(catalog, _cached(catalog, load_platform, str(row["gpu"])),
                               row, conditions or {})
        framework = canonical_framework(str(row.get("framework", "")))
        config, out.assumed = parse_run_row(row, model)
        out.notes = validate(config, model, platform, num_gpus=int(float(row["num_gpus"])),
                             framework=framework)
        out.recompute_unknown = not (str(row.get("recompute", "")).strip()
                                     or str(row.get("recompute_modules", "")).strip())
        out.config = config
        out.job = RowJob(model=model, platform=platform, framework=framework,
                          software=str(row.get("software", "")).strip())
    except AdvisorError as e:
        out.error = str(e)
    except (ValueError, TypeError, OverflowError, OSError) as e:
        out.error = f"cannot read this row: {type(e).__name__}: {e}"
    return out


def _conditions(catalog: dict, platform: Platform, row: Mapping,
                defaults: Mapping) -> Platform:
    """`platform` under the row's conditions (its cells where filled, else `defaults`), one
    object per distinct set of them."""
    given = {}
    for key in CONDITIONS:
        cell = row.get(key)
        if cell is None or (isinstance(cell, float) and math.isnan(cell)) or str(cell).strip() \
                == "":
            given[key] = defaults.get(key)
        else:
            given[key] = float(cell)   # a fractional node count is refused by the check
    key = ("conditions", id(platform), tuple(given.items()))
    if key not in catalog:
        catalog[key] = with_conditions(platform, given_by="the input row", **given)
    return catalog[key]


def _cached(catalog: dict, load, name: str):
    key = (load, name)
    if key not in catalog:
        catalog[key] = load(name)
    return catalog[key]


def recompute_ladder(model: ModelSpec, precision: str, *, full: bool = True
                     ) -> list[tuple[str, str]]:
    """The (recompute, recompute_modules) a run that does not say is assumed to use, least
    first: none, selective (core attention), for a MoE model `MOE_RECOMPUTE_MODULES` where
    Megatron-Core takes them at `precision`, then full recompute (`full` False: for tuned
    recipes, which do not run it)."""
    ladder = [("none", DEFAULT_RECOMPUTE_MODULES), ("selective", DEFAULT_RECOMPUTE_MODULES)]
    if model.is_moe and not recompute_modules_error(MOE_RECOMPUTE_MODULES, precision, model):
        ladder.append(("selective", MOE_RECOMPUTE_MODULES))
    return ladder + [("full", DEFAULT_RECOMPUTE_MODULES)] if full else ladder


def lightest_recompute_that_fits(model: ModelSpec, config: ParallelConfig, platform: Platform,
                                 *, full: bool = True
                                 ) -> tuple[ParallelConfig, MemoryBreakdown]:
    """The first rung of `recompute_ladder` on which `config` fits, else the last."""
    for mode, modules in recompute_ladder(model, config.precision,
                                          full=full and not config.ep_comm_overlap):
        candidate = config.replace(recompute=mode, recompute_modules=modules)
        mem = estimate_memory(model, parallel=candidate, platform=platform)
        if mem.fits:
            return candidate, mem
    return candidate, mem


def choose_recompute(rows: list[ParsedRow]) -> None:
    """For rows that do not say: the least recompute that fits (`recompute_ladder`; full
    where nothing fits), as tuned recipes turn it on only when needed. One memory model run
    per rung and (model, platform, precision), not one per row."""
    import pandas as pd

    groups: dict[tuple[int, int, str, bool], list[ParsedRow]] = {}
    for r in rows:
        if r.config is not None and r.recompute_unknown:
            key = (id(r.job.model), id(r.job.platform), r.config.precision,
                   r.config.ep_comm_overlap)
            groups.setdefault(key, []).append(r)
    for members in groups.values():
        model, platform = members[0].job.model, members[0].job.platform
        first = members[0].config     # EP all-to-all overlap does not run with full recompute
        ladder = recompute_ladder(model, first.precision, full=not first.ep_comm_overlap)
        undecided = members
        for mode, modules in ladder:
            configs = pd.DataFrame([r.config.replace(recompute=mode, recompute_modules=modules)
                                    .to_dict() for r in undecided])
            fits = memory_table(model, platform=platform, configs=configs)["fits"].to_numpy()
            last = (mode, modules) == ladder[-1]
            for r, ok in zip(undecided, fits, strict=True):
                if ok or last:
                    r.config = r.config.replace(recompute=mode, recompute_modules=modules)
                    r.assumed.append(f"recompute={recompute_label(mode, modules)} (unknown: the "
                                     f"least recompute that fits, as tuned recipes turn it on "
                                     f"only when needed)")
            undecided = [r for r, ok in zip(undecided, fits, strict=True) if not ok]
            if not undecided:
                break
