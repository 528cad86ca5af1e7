"""`Table` orders, filters and joins rows exactly as the pandas operations it replaced."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core.table import Table

FLOATS = st.one_of(st.just(float("nan")), st.sampled_from([-1.5, 0.0, 1.0, 2.5, 1e9]))
ROWS = st.lists(st.tuples(st.booleans(), st.integers(-3, 3), FLOATS, FLOATS,
                          st.sampled_from(["none", "full", "selective"])),
                min_size=0, max_size=40)
NAMES = ("flag", "size", "score", "memory", "label")


def _both(rows) -> tuple[Table, pd.DataFrame]:
    frame = pd.DataFrame(rows, columns=list(NAMES)).astype(
        {"flag": bool, "size": "int64", "score": float, "memory": float, "label": object})
    table = Table.from_frame(frame)
    return table, table.to_frame()     # the dtypes pandas gives a Table's columns


@settings(max_examples=150, deadline=None)
@given(ROWS, st.permutations(NAMES), st.lists(st.booleans(), min_size=5, max_size=5))
def test_sort_is_pandas_stable_multi_column_sort(rows, keys, ascending):
    table, frame = _both(rows)
    keys = list(keys)[:4]
    ascending = ascending[:4]
    got = table.sort(keys, ascending=ascending).to_frame()
    want = frame.sort_values(keys, ascending=ascending, kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@settings(max_examples=100, deadline=None)
@given(ROWS)
def test_first_of_each_is_drop_duplicates(rows):
    table, frame = _both(rows)
    keys = ["flag", "size", "score", "label"]
    want = frame.drop_duplicates(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(table.first_of_each(keys).to_frame(), want, check_exact=True)


def test_rows_are_plain_python_values_in_column_order():
    table = Table({"tp": np.array([1, 2]), "on": np.array([True, False]),
                   "gb": np.array([1.5, 2.0]), "mode": np.array(["a", "b"], dtype=object)})
    assert list(table.rows()) == [table.row(0), table.row(1)]
    row = table.row(0)
    assert row == {"tp": 1, "on": True, "gb": 1.5, "mode": "a"}
    assert [type(v) for v in row.values()] == [int, bool, float, str]
    assert list(row) == table.names
    assert np.isnan(Table({"gb": np.array([np.nan])}).row(0)["gb"])


def test_take_select_with_columns_and_concat():
    table = Table({"a": np.arange(5), "b": np.arange(5) * 2.0})
    assert table.take(np.array([True, False, True, False, False]))["a"].tolist() == [0, 2]
    assert table.take([4, 0])["b"].tolist() == [8.0, 0.0]
    assert len(table.take([])) == 0 and table.take([]).names == ["a", "b"]
    assert table.head(2)["a"].tolist() == [0, 1] and len(table.head(9)) == 5
    more = table.with_columns({"c": "x", "a": np.ones(5)})
    assert more.names == ["a", "b", "c"] and more["c"].dtype == object
    assert more["a"].tolist() == [1.0] * 5 and table["a"].tolist() == [0, 1, 2, 3, 4]
    assert table.select(["b"]).names == ["b"] and more.drop(["a", "c"]).names == ["b"]
    both = Table.concat([table, table.take([1])])
    assert both["a"].tolist() == [0, 1, 2, 3, 4, 1]


def test_columns_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one length"):
        Table({"a": np.arange(3), "b": np.arange(4)})
