"""`advisor dataset`: import, validate and summarise measurement datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from advisor.cli.common import JsonOpt, emit_json, guard, make_console
from advisor.core.errors import AdvisorError
from advisor.data.reference import reference_path

app = typer.Typer(help="Import, validate and summarise measurement datasets (one row per run, "
                  "Parquet; the schema is advisor.data.dataset.SCHEMA).", no_args_is_help=True)

PUBLISHED_CSV = reference_path("published_runs.csv")
MLPERF_CSV = reference_path("mlperf", "mlperf_runs.csv")

PathArg = Annotated[Path, typer.Argument(help="A dataset file: .parquet, or .csv on input.")]


@app.command("import-published")
@guard
def import_published_cmd(
        source: Annotated[Path, typer.Option(
            "--from", help="published_runs.csv (default: the copy in the checkout's "
            "datasets/reference/).")] = PUBLISHED_CSV,
        output: Annotated[Path, typer.Option(
            "--output", "-o", help="Parquet file to append to.")] = Path(
                "datasets/published.parquet"),
        json_out: JsonOpt = False) -> None:
    """Turn published_runs.csv into canonical rows with provenance and append them to a
    Parquet dataset (rows already there, by run_id, are replaced, not doubled)."""
    from advisor.data.dataset import append, import_published

    rows = import_published(source)
    total = append(output, rows)
    if json_out:
        emit_json({"imported": len(rows), "rows_in_file": total, "path": str(output)})
        return
    make_console().print(f"{len(rows)} published runs imported; {output} now holds {total} rows.")


@app.command("import-mlperf")
@guard
def import_mlperf_cmd(
        source: Annotated[Path, typer.Option(
            "--from", help="mlperf_runs.csv (default: the copy in the checkout's "
            "datasets/reference/mlperf/).")] = MLPERF_CSV,
        output: Annotated[Path, typer.Option(
            "--output", "-o", help="Parquet file to append to.")] = Path(
                "datasets/mlperf.parquet"),
        json_out: JsonOpt = False) -> None:
    """Turn MLPerf Training submissions (each submitter's layout and measured throughput) into
    canonical rows with provenance and append them to a Parquet dataset. Llama-2-70B LoRA rows
    become LoRA fine-tuning runs (rank 16, attention, as MLCommons' reference sets them); rows
    advisor cannot express (an accelerator outside the catalog, no published layout, logs
    repeated from another row) are listed with the reason, never dropped silently."""
    from advisor.data.dataset import append, import_mlperf

    rows, skipped = import_mlperf(source)
    total = append(output, rows)
    if json_out:
        emit_json({"imported": len(rows), "rows_in_file": total, "path": str(output),
                   "skipped": skipped.drop(columns="index").to_dict(orient="records")})
        return
    console = make_console()
    console.print(f"{len(rows)} MLPerf runs imported; {output} now holds {total} rows.")
    if len(skipped):
        table = Table(title=f"{len(skipped)} rows not imported", title_justify="left")
        table.add_column("submission")
        table.add_column("why")
        for _, row in skipped.iterrows():
            table.add_row(row["system"], row["why"])
        console.print(table)


def checkout_datasets() -> Path:
    """The bundled datasets/ directory (published and MLPerf runs with their datasheet): inside
    an installed wheel (advisor/_datasets), else the checkout's datasets/."""
    from advisor.core.files import bundled_dir

    return bundled_dir("advisor._datasets", "datasets")


def resolve_dataset(path: Path) -> Path:
    """`path` as given where it exists; a relative path that does not (`datasets/
    published.parquet` from another directory) read from the bundled datasets/; else an error
    saying where the datasets live."""
    if path.exists() or path.is_absolute():
        return path
    parts = path.parts[1:] if path.parts[:1] == ("datasets",) else path.parts
    candidate = checkout_datasets().joinpath(*parts) if parts else None
    if candidate is not None and candidate.is_file():
        return candidate
    raise AdvisorError(f"{path}: no such file here ({Path.cwd()}) or among advisor's bundled "
                       f"datasets (datasets/published.parquet, datasets/mlperf.parquet): pass "
                       f"a path to a dataset, or build one with `advisor dataset "
                       f"import-published`.")


@app.command("validate")
@guard
def validate_cmd(path: PathArg, json_out: JsonOpt = False) -> None:
    """Check a dataset file against the schema; the first problems name row and column."""
    from advisor.data.dataset import load

    path = resolve_dataset(path)
    frame = load(path)
    if json_out:
        emit_json({"path": str(path), "rows": len(frame), "valid": True})
        return
    make_console().print(f"{path}: {len(frame)} rows, valid.")


@app.command("show")
@guard
def show_cmd(path: PathArg, json_out: JsonOpt = False) -> None:
    """Summarise a dataset: rows by source, status, platform, and which measurements exist."""
    from advisor.data.dataset import load

    path = resolve_dataset(path)
    frame = load(path)
    measured = {c: int(frame[c].notna().sum()) for c in (
        "tokens_per_sec_per_gpu", "step_time_s", "avg_power_w", "peak_power_w", "energy_j",
        "max_temp_c", "throttle_frac_power", "throttle_frac_thermal")}
    by = {k: frame[k].value_counts(dropna=False).to_dict() for k in ("source", "status", "gpu")}
    if json_out:
        emit_json({"rows": len(frame), "by": {k: {str(a): int(b) for a, b in v.items()}
                                               for k, v in by.items()}, "measured": measured})
        return
    console = make_console()
    console.print(f"{path}: {len(frame)} rows")
    for key, counts in by.items():
        console.print(f"  by {key}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    table = Table(title="rows with each measurement")
    table.add_column("column")
    table.add_column("rows", justify="right")
    for column, n in measured.items():
        table.add_row(column, str(n))
    console.print(table)
