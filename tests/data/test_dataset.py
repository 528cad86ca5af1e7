"""The measurement dataset: schema validation, the published-runs importer, and appends that
survive crashes and concurrent writers (real processes, real file locks, real Parquet)."""

import multiprocessing as mp
from pathlib import Path

import pandas as pd
import pytest

from advisor.data import dataset
from advisor.data.dataset import DatasetError, append, import_published, load, validate


def _run(i: int, **extra) -> dict:
    row = {"run_id": f"run-{i}", "source": "campaign", "status": "ok", "model": "llama3-8b",
           "gpu": "h200", "num_gpus": 8, "precision": "bf16", "seq_len": 8192, "gbs": 64,
           "tp": 1, "pp": 1, "mbs": 1, "tokens_per_sec_per_gpu": 1000.0 + i,
           "avg_power_w": 550.0, "peak_power_w": 690.0}
    row.update(extra)
    return row


def test_import_published_keeps_every_run_with_provenance(reference_csv):
    rows = import_published(reference_csv)
    raw = pd.read_csv(reference_csv)
    assert len(rows) == len(raw) == 569
    assert rows["run_id"].is_unique
    assert (rows["source"] == "published").all() and (rows["status"] == "ok").all()
    assert rows["source_ref"].str.startswith("http").all()
    assert int(rows["tokens_per_sec_per_gpu"].notna().sum()) == int(
        raw["tokens_per_sec_per_gpu"].notna().sum())
    # ids are stable across imports: a re-import replaces rows instead of doubling them
    again = import_published(reference_csv)
    assert (again["run_id"] == rows["run_id"]).all()


def test_validate_names_row_and_column():
    frame = pd.DataFrame([_run(0), _run(1, num_gpus="eight"), _run(2, status="crashed")])
    with pytest.raises(DatasetError) as e:
        validate(frame, where="f.parquet")
    text = str(e.value)
    assert "f.parquet" in text and "row 1, column num_gpus" in text and "'eight'" in text
    assert "row 2, column status" in text


@pytest.mark.parametrize("change,needle", [
    ({"bogus": 1}, "unknown column(s) bogus"),
    ({"avg_power_w": -5.0}, "below 0"),
    ({"throttle_frac_power": 1.5}, "above 1"),
    ({"tp": 2.5}, "is not a int"),
    ({"model": ""}, "column model: empty, but required"),
    ({"collected_at": "yesterday"}, "column collected_at"),
])
def test_validate_refuses_bad_values(change, needle):
    with pytest.raises(DatasetError, match=None) as e:
        validate(pd.DataFrame([_run(0, **change)]))
    assert needle in str(e.value)


def test_validate_refuses_missing_required_columns():
    frame = pd.DataFrame([_run(0)]).drop(columns=["gpu"])
    with pytest.raises(DatasetError, match="missing required column"):
        validate(frame)


def test_append_creates_dedupes_and_round_trips(tmp_path):
    path = tmp_path / "runs.parquet"
    assert append(path, [_run(0), _run(1)]) == 2
    assert append(path, [_run(1, tokens_per_sec_per_gpu=5.0), _run(2)]) == 3
    back = load(path)
    assert list(back["run_id"]) == ["run-0", "run-1", "run-2"]
    assert back.loc[back["run_id"] == "run-1", "tokens_per_sec_per_gpu"].iloc[0] == 5.0
    assert back["num_gpus"].dtype == "Int64" and back["avg_power_w"].dtype == "Float64"
    # a failed run is a row too
    append(path, [_run(3, status="oom", tokens_per_sec_per_gpu=None)])
    assert (load(path)["status"] == "oom").sum() == 1


def test_append_refuses_bad_rows_and_leaves_the_file(tmp_path):
    path = tmp_path / "runs.parquet"
    append(path, [_run(0)])
    before = path.read_bytes()
    with pytest.raises(DatasetError):
        append(path, [_run(1, gbs=0)])
    assert path.read_bytes() == before


def test_crash_while_writing_leaves_the_old_file_whole(tmp_path, monkeypatch):
    """Fault injection: the Parquet writer dies half-way through the new file."""
    path = tmp_path / "runs.parquet"
    append(path, [_run(0), _run(1)])
    before = path.read_bytes()

    def dying_writer(self, f, **kwargs):
        f.write(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", dying_writer)
    with pytest.raises(DatasetError, match="No space left on device"):
        append(path, [_run(2)])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert len(load(path)) == 2
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_a_killed_writers_temporary_file_is_cleaned_up(tmp_path):
    """A writer killed between writing its temporary file and the rename leaves it behind; the
    next append (holding the lock, so no live writer's file) removes it."""
    path = tmp_path / "runs.parquet"
    append(path, [_run(0)])
    stale = tmp_path / "runs.parquet.k1ll3d.tmp"
    stale.write_bytes(b"PAR1 half a file")
    append(path, [_run(1)])
    assert not stale.exists() and len(load(path)) == 2


def test_append_through_a_symlink_keeps_one_file(tmp_path):
    real = tmp_path / "store" / "runs.parquet"
    append(real, [_run(0)])
    link = tmp_path / "runs.parquet"
    link.symlink_to(real)
    append(link, [_run(1)])
    assert link.is_symlink() and link.resolve() == real
    assert list(load(real)["run_id"]) == ["run-0", "run-1"]


def _appender(args: tuple[str, int, int]) -> None:
    path, worker, batches = args
    for b in range(batches):
        append(Path(path), [_run(worker * 1000 + b * 10 + k) for k in range(3)])


def test_concurrent_appenders_lose_nothing(tmp_path):
    path = tmp_path / "shared.parquet"
    workers, batches = 4, 6
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pool.map(_appender, [(str(path), w, batches) for w in range(workers)])
    frame = load(path)
    assert len(frame) == workers * batches * 3
    assert frame["run_id"].is_unique


def test_corrected_published_number_replaces_the_old_row(tmp_path, reference_csv):
    edited = tmp_path / "published_runs.csv"
    raw = pd.read_csv(reference_csv, dtype=str, keep_default_na=False)
    path = tmp_path / "published.parquet"
    append(path, import_published(reference_csv))
    raw.loc[0, "tokens_per_sec_per_gpu"] = "12345.0"
    raw.to_csv(edited, index=False)
    assert append(path, import_published(edited)) == len(raw)  # replaced, not added
    assert 12345.0 in set(load(path)["tokens_per_sec_per_gpu"].dropna())


def test_infinite_or_zero_throughput_is_refused():
    with pytest.raises(DatasetError, match="not finite"):
        validate(pd.DataFrame([_run(0, tokens_per_sec_per_gpu=float("inf"))]))
    with pytest.raises(DatasetError, match="below"):
        validate(pd.DataFrame([_run(0, tokens_per_sec_per_gpu=0.0)]))


def test_unwritable_destination_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DatasetError, match="cannot write|not writable"):
        append(blocker / "runs.parquet", [_run(0)])


def test_load_reads_csv_and_refuses_garbage(tmp_path):
    csv = tmp_path / "runs.csv"
    pd.DataFrame([_run(0), _run(1)]).to_csv(csv, index=False)
    assert len(load(csv)) == 2
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="not a readable dataset"):
        load(junk)
    with pytest.raises(DatasetError, match="no such file"):
        load(tmp_path / "absent.parquet")


def test_schema_covers_the_design_columns():
    design = ("run_id source source_ref collected_at status step_time_s peak_mem_gb avg_power_w "
              "peak_power_w energy_j max_temp_c max_mem_temp_c mean_sm_clock_mhz "
              "throttle_frac_power throttle_frac_thermal telemetry_hz model gpu num_gpus "
              "precision seq_len gbs mbs tp pp cp ep vp dp recompute dp_sharding framework "
              "software tokens_per_sec_per_gpu tflops_per_gpu mfu").split()
    assert set(design) <= set(dataset.COLUMNS)
    assert list(dataset.empty().columns) == [c.name for c in dataset.SCHEMA]
