"""Tables of configurations as NumPy columns.

The perf model reads a table's columns once and works on arrays from there: pandas' cost per
column access (microseconds) dominated a prediction for one configuration. The `*_table`
functions take and return DataFrames (the I/O edge); the `*_arrays` functions behind them take
`Columns` (a `Table`'s columns, or any mapping of arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.parallel import PARALLEL_FIELDS, ParallelConfig
from advisor.core.table import Table

if TYPE_CHECKING:
    import pandas as pd

Columns = Mapping[str, np.ndarray]
"""One array per column, all of the same length (`ParallelConfig` fields, optional
`framework` and `dropout`: the dropout probability of a run that keeps it on, as
Megatron-LM's defaults do; LLM recipes turn it off)."""
_READ = (*PARALLEL_FIELDS, "framework", "dropout")


def config_columns(configs: pd.DataFrame | Table | Columns) -> dict[str, np.ndarray]:
    """The columns the perf model reads, as arrays (a mapping of arrays is taken as it is)."""
    if isinstance(configs, Mapping):
        return dict(configs)
    if isinstance(configs, Table):
        return {k: configs[k] for k in _READ if k in configs}
    return {k: configs[k].to_numpy() for k in _READ if k in configs}


def columns_of(configs: Sequence[ParallelConfig]) -> dict[str, np.ndarray]:
    """The `ParallelConfig` fields of `configs` as columns (strings as objects, as a frame of
    them holds them)."""
    out = {}
    for name in PARALLEL_FIELDS:
        values = [getattr(c, name) for c in configs]
        if values and isinstance(values[0], str):
            column = np.empty(len(values), dtype=object)
            column[:] = values
            out[name] = column
        else:
            out[name] = np.array(values)
    return out


def full_length(cols: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Every column as `n` rows (the models give a scalar where all rows share a value)."""
    return {k: np.broadcast_to(v, (n,)) for k, v in cols.items()}


def num_rows(cols: Columns) -> int:
    return len(cols["tp"])


def take(cols: Columns, rows: np.ndarray | None) -> Columns:
    """The rows `rows` (positions or a mask) of every column; all of them for None."""
    return cols if rows is None else {k: v[rows] for k, v in cols.items()}


def per_value(values: np.ndarray, fn) -> np.ndarray:
    """`fn` applied once per distinct value, broadcast back to `values`' shape."""
    flat = values.ravel()
    if flat.size == 1 or (flat.size and (flat == flat[0]).all()):
        # One value (the common case): no sort.
        return np.repeat(np.array([fn(flat[0])]), flat.size).reshape(values.shape)
    uniq, inverse = np.unique(values, return_inverse=True)
    mapped = np.array([fn(u) for u in uniq])
    return mapped[inverse].reshape(values.shape)


def pipeline_groups(cols: Columns) -> list[tuple[int, int, int, int, np.ndarray | None]]:
    """(pp, vp, first_stage_layers, last_stage_layers, row positions) for each distinct
    pipeline shape, in that order; positions are None when every row has the same shape."""
    n = num_rows(cols)
    keys = [np.asarray(cols["pp"]), np.asarray(cols["vp"])]
    for name in ("first_stage_layers", "last_stage_layers"):
        keys.append(np.asarray(cols[name]) if name in cols else np.zeros(n, dtype=int))
    if not n:
        return []
    if not all(k.dtype.kind in "iu" for k in keys):
        keys = [k.astype(int) for k in keys]
    if all((k == k[0]).all() for k in keys):
        return [(*(int(k[0]) for k in keys), None)]
    order = np.lexsort(keys[::-1])         # stable: positions stay ascending within a shape
    change = np.zeros(n - 1, dtype=bool)
    for k in keys:
        change |= np.diff(k[order]) != 0
    return [(*(int(k[rows[0]]) for k in keys), rows)
            for rows in np.split(order, np.flatnonzero(change) + 1)]
