"""`Table`: configurations and their predictions as one NumPy array per column.

What the space produces and every vectorised stage after it consumes (memory, the Predictor,
search, ranking, the explanations): a struct of arrays, so `advisor recommend` never imports
pandas. `to_frame()` and `Table.from_frame()` convert at the I/O edge (a library caller's
DataFrame, a CSV).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Table:
    """Named columns of equal length, in order. Treat it as immutable: every method returns a
    new `Table` that shares the arrays it did not change."""

    __slots__ = ("_cols", "_n")

    def __init__(self, columns: Mapping[str, np.ndarray] | None = None, *,
                 num_rows: int | None = None) -> None:
        cols = {name: np.asarray(values) for name, values in (columns or {}).items()}
        lengths = {len(v) for v in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"a Table's columns must have one length, got "
                             f"{ {k: len(v) for k, v in cols.items()} }")
        n = lengths.pop() if lengths else (num_rows or 0)
        if num_rows is not None and n != num_rows:
            raise ValueError(f"columns of {n} rows where {num_rows} were expected")
        self._cols, self._n = cols, n

    # --- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def get(self, name: str, default=None):
        return self._cols.get(name, default)

    @property
    def names(self) -> list[str]:
        """Column names, in order."""
        return list(self._cols)

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The columns by name (a new dict of the same arrays)."""
        return dict(self._cols)

    @property
    def empty(self) -> bool:
        return self._n == 0

    def row(self, i: int) -> dict:
        """Row `i` as a dict of plain Python values (ints, floats, bools, strings)."""
        return {k: _plain(v[i]) for k, v in self._cols.items()}

    def rows(self) -> Iterator[dict]:
        """Every row as `row(i)` gives it, in order."""
        names = list(self._cols)
        for values in zip(*(v.tolist() for v in self._cols.values()), strict=True):
            yield dict(zip(names, values, strict=True))

    # --- deriving -------------------------------------------------------------------------

    def take(self, rows: np.ndarray | Sequence[int]) -> Table:
        """The rows at positions `rows` (in that order), or where a boolean mask is true."""
        rows = np.asarray(rows)
        if rows.dtype == bool and rows.all() and len(rows) == self._n:
            return self                      # every row: nothing to copy (columns are shared)
        if rows.dtype != bool:
            rows = rows.astype(np.intp, copy=False)
        return Table({k: v[rows] for k, v in self._cols.items()},
                     num_rows=int(rows.sum()) if rows.dtype == bool else len(rows))

    def head(self, n: int) -> Table:
        return self.take(np.arange(min(n, self._n)))

    def select(self, names: Sequence[str]) -> Table:
        """These columns only, in this order."""
        return Table({k: self._cols[k] for k in names}, num_rows=self._n)

    def drop(self, names: Sequence[str]) -> Table:
        dropped = set(names)
        return Table({k: v for k, v in self._cols.items() if k not in dropped},
                     num_rows=self._n)

    def with_columns(self, columns: Mapping[str, np.ndarray | object]) -> Table:
        """These columns added (or replaced in place); a scalar fills every row."""
        out = dict(self._cols)
        for name, values in columns.items():
            out[name] = (np.asarray(values) if np.ndim(values)
                         else np.full(self._n, values, dtype=_scalar_dtype(values)))
        return Table(out, num_rows=self._n)

    def sort(self, keys: Sequence[str], *, ascending: Sequence[bool]) -> Table:
        """Rows ordered by `keys` (the first decides, the next break ties), stable, NaN last
        whichever the direction (as pandas' `sort_values`)."""
        order = np.lexsort([k for name, up in reversed(list(zip(keys, ascending, strict=True)))
                            for k in _sort_keys(self._cols[name], up)])
        return self.take(order)

    def first_of_each(self, keys: Sequence[str]) -> Table:
        """The first row of each distinct combination of `keys`, in order (NaNs count as
        equal, as in pandas' `drop_duplicates`)."""
        seen: set[tuple] = set()
        keep = []
        columns = [[_NAN if v != v else v for v in self._cols[k].tolist()]
                   if self._cols[k].dtype.kind in "fcO" else self._cols[k].tolist() for k in keys]
        for i, key in enumerate(zip(*columns, strict=True)):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        return self.take(np.asarray(keep, dtype=np.intp))

    @staticmethod
    def concat(tables: Sequence[Table]) -> Table:
        """Rows of `tables` one after another (every table has the first one's columns)."""
        first = tables[0]
        return Table({k: np.concatenate([t[k] for t in tables]) for k in first.names},
                     num_rows=sum(len(t) for t in tables))

    # --- the I/O edge ---------------------------------------------------------------------

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self._cols, index=pd.RangeIndex(self._n))

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> Table:
        return cls({str(k): frame[k].to_numpy() for k in frame.columns}, num_rows=len(frame))

    def __repr__(self) -> str:
        return f"Table({self._n} rows: {', '.join(self._cols)})"


_NAN = object()
"""What a NaN key becomes in `first_of_each` (NaN is not equal to itself)."""


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _scalar_dtype(value) -> object:
    return object if isinstance(value, str) else None


def _sort_keys(values: np.ndarray, ascending: bool) -> list[np.ndarray]:
    """Keys for `np.lexsort` (least significant first) that order `values` as asked, NaN
    last."""
    if values.dtype.kind == "b":
        values = values.astype(np.int8)
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        key = np.where(nan, 0.0, values if ascending else -values)
        return [key, nan]
    if values.dtype.kind in "iu":
        return [values if ascending else -values.astype(np.int64)]
    codes = np.unique(values, return_inverse=True)[1]
    return [codes if ascending else -codes]
