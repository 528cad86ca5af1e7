"""Tables of configurations as NumPy columns.

The perf model reads a frame's columns once and works on arrays from there: pandas' cost per
column access (microseconds) dominated a prediction for one configuration. Public functions
still take and return DataFrames; the `*_arrays` functions behind them take `Columns`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from advisor.core.parallel import PARALLEL_FIELDS

Columns = Mapping[str, np.ndarray]
"""One array per column, all of the same length (`ParallelConfig` fields, optional
`framework`)."""
_READ = (*PARALLEL_FIELDS, "framework")


def config_columns(configs: pd.DataFrame | Columns) -> dict[str, np.ndarray]:
    """The columns the perf model reads, as arrays (a mapping of arrays is taken as it is)."""
    if isinstance(configs, pd.DataFrame):
        return {k: configs[k].to_numpy() for k in _READ if k in configs}
    return dict(configs)


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
