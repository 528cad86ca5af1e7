"""`advisor predict`: predictions for every row of a CSV of runs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from advisor.cli.common import JsonOpt, emit_json, guard
from advisor.predict_input import predict_frame, read_rows


@guard
def predict(input: Annotated[Path, typer.Option(
                "--input", "-i", help="CSV with the columns of published_runs.csv (model, gpu, "
                "num_gpus, seq_len, gbs, mbs, tp, pp, cp, ep, vp, dp, precision, recompute, "
                "dp_sharding); empty cells take stated defaults.")],
            output: Annotated[Path | None, typer.Option(
                "--output", "-o", help="Write the rows with pred_* columns here.")] = None,
            json_out: JsonOpt = False) -> None:
    """Predict per-GPU memory (pred_memory_gb, pred_fits) for each row of a CSV.

    Rows that cannot be predicted get a pred_error and the rest are still predicted; what was
    assumed for empty cells is in pred_assumed.
    """
    frame = predict_frame(read_rows(input))
    if output:
        frame.to_csv(output, index=False)
    if json_out:
        records = frame.to_dict(orient="records")
        for rec in records:
            for k, v in rec.items():
                if isinstance(v, float) and math.isnan(v):
                    rec[k] = None
        emit_json(records)
        return
    errors = int((frame["pred_error"] != "").sum())
    fits = int((frame["pred_fits"] == True).sum())  # noqa: E712 (column holds None too)
    console = Console(stderr=output is None)
    if output is None:
        typer.echo(frame.to_csv(index=False), nl=False)
    console.print(f"{len(frame)} rows: {fits} fit, {len(frame) - fits - errors} do not, "
                  f"{errors} could not be predicted (see pred_error)."
                  + (f" Written to {output}." if output else ""))
