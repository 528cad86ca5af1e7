"""The `Predictor`'s input as columns: a DataFrame or a list of (ParallelConfig, Job) pairs read
into one array per column (ParallelConfig defaults in empty cells), rows grouped by model,
platform and framework, and each group's names resolved to catalog entries.

Small inputs take shortcuts (one conversion for the whole frame, string columns converted in
Python) that give exactly what the general path gives: pandas' cost per column and per call
dominates them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from advisor.catalog import OVERRIDABLE, load_model, load_platform, with_fields
from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.table import Table
from advisor.data import framework_defaults
from advisor.data.predict_input import RECOMPUTE_SPELLINGS
from advisor.perf.columns import Columns

if TYPE_CHECKING:
    import pandas as pd

JOB_COLUMNS = ("model", "gpu")
"""What every row names besides its `ParallelConfig` (`platform` is taken for `gpu`)."""
SMALL = 256
"""Up to this many rows `predict` reads a frame's values in one conversion and converts string
columns in Python (pandas' cost per column and per call dominates small inputs)."""


def as_columns(configs: pd.DataFrame | list) -> tuple[dict[str, np.ndarray], pd.Index, dict]:
    """Every column `predict` needs as an array (ParallelConfig defaults for empty cells; model
    and gpu as names or keys into the returned `ModelSpec` / `Platform` objects), and the
    input's index."""
    import pandas as pd

    from advisor.core.model import ModelSpec
    from advisor.core.parallel import DISPATCHER_ALIASES, PARALLEL_FIELDS, SHARDING_ALIASES
    from advisor.core.platform import Platform

    if isinstance(configs, list):
        pairs = _pair_columns(configs)
        if isinstance(pairs, tuple):
            return pairs
        configs = pairs
    if not isinstance(configs, pd.DataFrame):
        raise ConfigError("predict() takes a DataFrame or a list of (ParallelConfig, Job) "
                          "pairs.")
    frame = configs
    gpu = "gpu" if "gpu" in frame or "platform" not in frame else "platform"
    missing = [c for c in JOB_COLUMNS if c not in frame and (c, gpu) != ("gpu", "platform")]
    if missing:
        raise ConfigError(f"predict() needs column(s) {', '.join(missing)} besides the "
                          f"ParallelConfig columns.")
    n = len(frame)
    read = _column_reader(frame)
    objects: dict = {}
    cols: dict[str, np.ndarray] = {}
    for column, source, kind in (("model", "model", ModelSpec), ("gpu", gpu, Platform)):
        values, dtype = read(source)
        cols[column] = (values if isinstance(dtype, pd.StringDtype)   # names only, no objects
                        else _object_keys(values.tolist(), kind, objects))
    overrides = [c for c in OVERRIDABLE if c in frame]
    if overrides:    # conditions and cluster keys, per row: as `predict --input` reads them
        cols["gpu"] = _with_overrides(cols["gpu"], {c: read(c)[0] for c in overrides},
                                      objects)
    defaults = _config_defaults()
    for name in PARALLEL_FIELDS:
        default = defaults[name]
        if name not in frame:
            cols[name] = np.full(n, default, dtype=object if isinstance(default, str)
                                 else type(default))
            continue
        cols[name] = _plain(*read(name), default)
        if cols[name] is not None:
            continue
        column = frame[name]
        if column.isna().any():
            column = column.astype(object).where(column.notna(), default)
        try:
            if isinstance(default, bool):
                column = column.astype(bool)
            elif isinstance(default, int):
                column = column.astype(float).astype(int)
            else:
                column = column.astype(str).str.lower()
        except (TypeError, ValueError) as e:
            raise ConfigError(f"column {name}: {e}") from None
        cols[name] = column.to_numpy()
    if "recompute" in frame:   # the dataset's spellings, read as `predict --input` reads them
        cols["recompute"] = _canonical_recompute(cols["recompute"])
    if "dp_sharding" in frame:   # ddp, zero1, fsdp, ... as none, optimizer, full
        cols["dp_sharding"] = _canonical_names(cols["dp_sharding"], SHARDING_ALIASES)
    if "recompute_modules" in frame:
        cols["recompute_modules"] = _canonical_modules(cols["recompute_modules"])
    if "moe_dispatcher" in frame:   # flex, hybridep, all-to-all as deepep, alltoall
        cols["moe_dispatcher"] = _canonical_names(cols["moe_dispatcher"], DISPATCHER_ALIASES)
    if "num_gpus" in frame:
        _derive_dp(cols, pd.to_numeric(pd.Series(read("num_gpus")[0]), errors="coerce")
                   .to_numpy(float),
                   missing=(np.ones(n, dtype=bool) if "dp" not in frame
                            else pd.isna(frame["dp"]).to_numpy()))
    for name, default in (("framework", "megatron"), ("software", "")):
        values = (read(name)[0].astype(object) if name in frame
                  else np.full(n, default, dtype=object))
        values = np.where(pd.isna(values), default, values)
        if default:
            values[values == ""] = default
        cols[name] = values
    # An alias (torchtitan-fsdp2, mcore) is modelled as its framework: step model, memory,
    # surrogate feature and calibration all key on the canonical name.
    cols["framework"] = framework_defaults.canonical(cols["framework"])
    unset = {name: (np.ones(n, dtype=bool) if name not in frame
                    else pd.isna(frame[name]).to_numpy())
             for name in (*framework_defaults.FIELDS, "etp")}
    source = read("source_name")[0] if "source_name" in frame else None
    _apply_framework_defaults(cols, unset, source)
    return cols, frame.index, objects


def table_columns(table: Table) -> dict[str, np.ndarray]:
    """`as_columns` for a `Table` that sets every `ParallelConfig` field (what `space_table`
    gives): the same arrays, without the frame."""
    from advisor.core.parallel import PARALLEL_FIELDS

    n = len(table)
    defaults = _config_defaults()
    cols: dict[str, np.ndarray] = {}
    for name in PARALLEL_FIELDS:
        if name not in table:   # a table written before the field existed: its default
            default = defaults[name]
            cols[name] = np.full(n, default, dtype=object if isinstance(default, str)
                                 else type(default))
            continue
        default, values = defaults[name], table[name]
        if isinstance(default, bool):
            cols[name] = values.astype(bool)
        elif isinstance(default, int):
            cols[name] = values.astype(float).astype(int)
        elif n and (values == values[0]).all():      # one value (the common case)
            cols[name] = np.full(n, str(values[0]).lower(), dtype=object)
        else:   # `str(v).lower()` of every value, computed once per distinct value
            values = values.tolist()
            lower = {v: str(v).lower() for v in set(values)}
            cols[name] = np.empty(n, dtype=object)
            cols[name][:] = [lower[v] for v in values]
    cols["recompute"] = _canonical_recompute(cols["recompute"])
    cols["recompute_modules"] = _canonical_modules(cols["recompute_modules"])
    cols["framework"] = np.full(n, "megatron", dtype=object)
    cols["software"] = np.full(n, "", dtype=object)
    # Every field is set: nothing is assumed.
    cols["etp_unset"] = np.zeros(n, dtype=bool)
    cols["assumed"] = np.full(n, "", dtype=object)
    return cols


def _canonical_recompute(recompute: np.ndarray) -> np.ndarray:
    """The dataset's recompute spellings as modes, as `predict --input` reads them."""
    for spelling, mode in RECOMPUTE_SPELLINGS.items():
        if spelling != mode and (recompute == spelling).any():
            recompute = np.where(recompute == spelling, mode, recompute).astype(object)
    return recompute


def _canonical_modules(modules: np.ndarray) -> np.ndarray:
    """Each cell of `recompute_modules` in its one written form (`recompute_modules_name`:
    any order, commas or `+`); an empty cell is the default (core_attn). A cell that names no
    module stays as given, for the configuration rules to refuse with its reason."""
    from advisor.core.parallel import recompute_modules_cell

    def name(value: str) -> str:
        try:
            return recompute_modules_cell(value)
        except ConfigError:
            return str(value)

    values, which = np.unique(modules.astype(str), return_inverse=True)
    return np.array([name(v) for v in values], dtype=object)[which]


def _canonical_names(values: np.ndarray, aliases: dict[str, str]) -> np.ndarray:
    """`values` with every alias of `aliases` replaced by its name (one vocabulary:
    `parallel.SHARDING_ALIASES`, `parallel.DISPATCHER_ALIASES`)."""
    for alias, name in aliases.items():
        if (values == alias).any():
            values = np.where(values == alias, name, values).astype(object)
    return values


def _apply_framework_defaults(cols: dict[str, np.ndarray], unset: dict[str, np.ndarray],
                              source: np.ndarray | None) -> None:
    """Fill the cells a frame left unset as `predict --input` does (`framework_defaults`),
    and say so in `cols["assumed"]`; etp (it needs the model) is marked in
    `cols["etp_unset"]` for the Predictor."""
    n = len(cols["tp"])
    cols["etp_unset"] = unset.pop("etp")
    assumed = np.full(n, "", dtype=object)
    if any(mask.any() for mask in unset.values()):
        table = framework_defaults.defaults(cols["framework"], cols["software"], cols["tp"],
                                            cols["dp_sharding"], source, cols["precision"])
        table["overlap_param_gather"] &= cols["dp_sharding"] != "none"
        parts = [[] for _ in range(n)]
        for name, mask in unset.items():
            if not mask.any():
                continue
            cols[name] = np.where(mask, table[name], cols[name]).astype(cols[name].dtype)
            for i in np.flatnonzero(mask):
                parts[i].append(f"{name}={str(table[name][i]).lower()}")
        for i in range(n):
            if parts[i]:
                reason = framework_defaults.why(str(cols["framework"][i]),
                                                str(cols["software"][i]),
                                                "" if source is None else str(source[i]))
                assumed[i] = f"{', '.join(parts[i])} ({reason})"
    cols["assumed"] = assumed


def _derive_dp(cols: dict[str, np.ndarray], gpus: np.ndarray, *, missing: np.ndarray) -> None:
    """dp from num_gpus where the row leaves it empty (what `predict --input` and the CLI do:
    dp = num_gpus / (tp·pp·cp)); `num_gpus` is kept so that a contradiction is a row error."""
    replica = cols["tp"] * cols["pp"] * cols["cp"]
    whole = np.isfinite(gpus) & (gpus > 0) & (np.mod(gpus, np.maximum(replica, 1)) == 0)
    derived = np.where(whole, gpus // np.maximum(replica, 1), cols["dp"])
    cols["dp"] = np.where(missing, derived, cols["dp"]).astype(int)
    # A row that gives dp but no num_gpus uses the GPUs its layout names.
    cols["num_gpus"] = np.where(np.isnan(gpus) & ~missing, replica * cols["dp"], gpus)


def group_rows(cols: Columns) -> list[tuple[tuple, np.ndarray]]:
    """((model, gpu, framework), row positions) for each distinct key, in order of first
    appearance (as `groupby(sort=False, dropna=False)`)."""
    import pandas as pd

    keys = [cols[k] for k in ("model", "gpu", "framework")]
    n = len(keys[0])
    if n == 1:
        return [((keys[0][0], keys[1][0], keys[2][0]), np.zeros(1, dtype=np.intp))]
    group = np.zeros(n, dtype=np.int64)
    for key in keys:
        codes, uniques = pd.factorize(key, use_na_sentinel=False)
        group, _ = pd.factorize(group * len(uniques) + codes)
    if not group.any():
        return [((keys[0][0], keys[1][0], keys[2][0]), np.arange(n))]
    order = np.argsort(group, kind="stable")
    starts = np.flatnonzero(np.diff(group[order], prepend=-1))
    out = []
    for rows in np.split(order, starts[1:]):
        first = rows[0]
        out.append(((keys[0][first], keys[1][first], keys[2][first]), rows))
    return out


def resolve(model_key, gpu_key, objects: dict):
    """The `ModelSpec` and `Platform` a row names (objects passed in win over the catalog)."""
    import pandas as pd

    if pd.isna(model_key) or pd.isna(gpu_key):
        raise ConfigError("model and gpu are required for every row.")
    model = objects.get(model_key) or load_model(str(model_key))
    platform = objects.get(gpu_key) or load_platform(str(gpu_key))
    if isinstance(platform, Exception):   # a row's platform cells the checks refused
        raise platform
    return model, platform


@functools.cache
def _config_defaults() -> dict:
    from advisor.core.parallel import ParallelConfig

    return ParallelConfig().to_dict()


def _column_reader(frame: pd.DataFrame):
    """`read(name) -> (values, dtype)`: a column's values as an array, and its dtype."""
    if len(frame) <= SMALL and frame.columns.is_unique:
        matrix = frame.to_numpy(dtype=object)
        table = {name: (matrix[:, j], dtype) for j, (name, dtype) in
                 enumerate(zip(frame.columns.tolist(), frame.dtypes.tolist(), strict=True))}
        return table.__getitem__
    return lambda name: (frame[name].to_numpy(), frame[name].dtype)


def _with_overrides(gpu: np.ndarray, values: dict[str, np.ndarray], objects: dict
                    ) -> np.ndarray:
    """The gpu keys of rows that fill any platform-key column (`power_limit_w`, `inlet_c`,
    `num_nics_per_node`, ...) replaced by keys of that platform with those cells, checked as
    a cluster file is (`with_fields`); a row whose cells the checks refuse gets its error."""
    import json

    import pandas as pd

    out = np.array(gpu, dtype=object)
    for i, base in enumerate(out.tolist()):
        given = {}
        for column, cells in values.items():
            cell = cells[i]
            if cell is None or (not isinstance(cell, str) and pd.isna(cell)) \
                    or str(cell).strip() == "":
                continue
            try:
                given[column] = float(cell)
            except (TypeError, ValueError):
                given[column] = str(cell).strip()
        if not given or pd.isna(base):
            continue
        key = f"{base}|{json.dumps(given, sort_keys=True)}"
        if key not in objects:
            try:
                platform = objects.get(base) or load_platform(str(base))
                objects[key] = with_fields(platform, given_by="the input row", **given)
            except AdvisorError as e:
                objects[key] = e
        out[i] = key
    return out


def _object_keys(values: list, kind: type, objects: dict) -> np.ndarray:
    """`values` with each `kind` object replaced by a key under which it goes into `objects`."""
    keys = np.empty(len(values), dtype=object)
    seen: dict[int, str] = {}        # a table's rows usually name the same object
    for i, value in enumerate(values):
        if isinstance(value, kind):
            key = seen.get(id(value))
            if key is None:
                key = seen[id(value)] = f"{value.name}#{id(value)}"
                objects[key] = value
            value = key
        keys[i] = value
    return keys


def _plain(values: np.ndarray, dtype, default) -> np.ndarray | None:
    """A column's `values` as the array `predict` needs, where its `dtype` makes that a cheap
    conversion with the same result as the general one (None where it does not)."""
    numpy_dtype = isinstance(dtype, np.dtype)
    if isinstance(default, bool):
        return values.astype(bool) if numpy_dtype and dtype.kind == "b" else None
    if isinstance(default, int):
        return (values.astype(float).astype(int) if numpy_dtype and dtype.kind in "iu"
                else None)
    if len(values) > SMALL:
        return None
    values = values.tolist()
    if not all(isinstance(v, str) and v.isascii() for v in values):
        return None
    out = np.empty(len(values), dtype=object)
    out[:] = [v.lower() for v in values]
    return out


def _pair_columns(pairs: list) -> tuple[dict[str, np.ndarray], pd.Index, dict] | pd.DataFrame:
    """The columns of a list of (ParallelConfig, Job) pairs; a DataFrame of them where some
    value is not of its field's plain type (the DataFrame path converts those)."""
    import pandas as pd

    from advisor.core.model import ModelSpec
    from advisor.core.parallel import PARALLEL_FIELDS, ParallelConfig
    from advisor.core.platform import Platform

    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2
                and isinstance(item[0], ParallelConfig)):
            raise ConfigError("predict() takes a DataFrame or a list of (ParallelConfig, "
                              "Job) pairs.")
    configs = [config for config, _ in pairs]
    jobs = [job for _, job in pairs]
    defaults = _config_defaults()
    cols: dict[str, np.ndarray] = {}
    for name in PARALLEL_FIELDS:
        values = [getattr(config, name) for config in configs]
        kind = type(defaults[name])
        if not all(type(v) is kind and (kind is not int or 0 <= v < 2**53)
                   and (kind is not str or v.isascii()) for v in values):
            break
        if kind is str:
            cols[name] = np.empty(len(values), dtype=object)
            cols[name][:] = [v.lower() for v in values]
        else:
            cols[name] = np.array(values, dtype=kind)
    else:
        objects: dict = {}
        cols["model"] = _object_keys([job.model for job in jobs], ModelSpec, objects)
        cols["gpu"] = _object_keys([job.platform for job in jobs], Platform, objects)
        for name, default in (("framework", "megatron"), ("software", "")):
            values = np.empty(len(jobs), dtype=object)
            values[:] = [getattr(job, name, default) for job in jobs]
            values = np.where(pd.isna(values), default, values)
            if default:
                values[values == ""] = default
            cols[name] = values
        if all(hasattr(job, "num_gpus") for job in jobs):
            cols["num_gpus"] = np.array([job.num_gpus for job in jobs], dtype=float)
        # A ParallelConfig states every field: nothing is assumed.
        cols["assumed"] = np.full(len(pairs), "", dtype=object)
        cols["etp_unset"] = np.zeros(len(pairs), dtype=bool)
        return cols, pd.RangeIndex(len(pairs)), objects
    rows = []
    for config, job in pairs:
        rows.append(config.to_dict() | {
            "model": job.model, "gpu": job.platform,
            "framework": getattr(job, "framework", "megatron"),
            "software": getattr(job, "software", ""),
            "num_gpus": getattr(job, "num_gpus", config.world_size)})
    return pd.DataFrame(rows, columns=[*PARALLEL_FIELDS, "model", "gpu", "framework",
                                       "software", "num_gpus"])
