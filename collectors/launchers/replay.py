"""Replay: "measure" a planned run by looking it up in a table of real measurements.

`advisor collect --launcher replay:FILE` runs the whole loop — plan, measure, append, then
`advisor train` and `recommend` — without a GPU: each planned run is answered by the row of
FILE (a dataset Parquet file or CSV in the dataset schema, e.g. `datasets/published.parquet`)
that ran the same job in the same layout. A run the table does not hold comes back `failed`
with that reason, as a real run that could not start would. What the row measured (throughput,
step time, memory, telemetry) and the stack it ran on (framework, software, source) travel to
the campaign's dataset; nothing is invented.

A row matches when model and platform (by name, config.json and cluster files resolved), GPU
count, precision, sequence length, global and micro batch, every parallel degree, recompute
and sharding agree; a table cell left empty (a source that did not say its recompute) matches
any value. Several matching rows (releases of one recipe) answer with the median throughput.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from collectors.launchers import LauncherError, prepare
from collectors.spec import TELEMETRY_FIELDS, RunResult, RunSpec

MATCH_FIELDS = ("num_gpus", "precision", "seq_len", "gbs", "mbs", "tp", "pp", "cp", "ep", "vp",
                "dp", "recompute", "dp_sharding")
"""Configuration columns a replayed row must agree on (besides model and platform)."""
MEASURED = ("tokens_per_sec_per_gpu", "step_time_s", "peak_mem_gb", "tflops_per_gpu",
            *TELEMETRY_FIELDS)


class ReplayLauncher:
    """Answers each run from `table` (see the module docstring).

    Args:
        table: A dataset file (.parquet) or CSV in the dataset schema.
    """

    name = "replay"

    def __init__(self, table: str | Path) -> None:
        from advisor.core.errors import AdvisorError
        from advisor.data.dataset import load

        self.table = Path(table)
        if not str(table).strip():
            raise LauncherError("--launcher replay:FILE needs the table of measurements, e.g. "
                                "replay:datasets/published.parquet.")
        try:
            frame = (load(self.table) if self.table.suffix.lower() == ".parquet"
                     else pd.read_csv(self.table, dtype=str, keep_default_na=False))
        except FileNotFoundError:
            raise LauncherError(f"replay table {self.table}: no such file.") from None
        except (AdvisorError, ValueError, OSError) as e:
            raise LauncherError(f"replay table {self.table}: {e}") from None
        frame = frame.astype("string").fillna("").astype(object)
        if "status" in frame:
            frame = frame[frame["status"].isin(["", "ok"])]
        self.rows = frame[frame.get("tokens_per_sec_per_gpu", "").astype(str).str.strip() != ""]
        self._keys = pd.DataFrame({"model": _names(self.rows, "model"),
                                   "gpu": _names(self.rows, "gpu")}, index=self.rows.index)

    def launch(self, spec: RunSpec, workdir: Path) -> RunResult:
        from advisor.catalog import load_model, load_platform, scaled_model_name

        prepare(spec, workdir)
        model = load_model(scaled_model_name(spec.model, spec.scale)).name
        platform = load_platform(spec.platform).name
        found = self.rows[(self._keys["model"] == model) & (self._keys["gpu"] == platform)]
        wanted = {**spec.config, "num_gpus": spec.num_gpus}
        for key in MATCH_FIELDS:
            if found.empty:
                break
            cell = found.get(key, pd.Series("", index=found.index)).astype(str).str.strip()
            found = found[(cell == "") | (cell.map(_canonical) == _canonical(wanted[key]))]
        if found.empty:
            return RunResult(spec.run_id, "failed",
                             error=f"replay: {self.table} holds no run of {model} on "
                                   f"{platform} in this layout")
        values = {k: _median(found, k) for k in MEASURED}
        first = found.iloc[0]
        return RunResult(
            spec.run_id, "ok", step_time_s=values["step_time_s"],
            tokens_per_sec_per_gpu=values["tokens_per_sec_per_gpu"],
            tflops_per_gpu=values["tflops_per_gpu"], peak_mem_gb=values["peak_mem_gb"],
            telemetry={k: values[k] for k in TELEMETRY_FIELDS},
            ran_with={"framework": str(first.get("framework", "")),
                      "software": str(first.get("software", "")),
                      "source_name": str(first.get("source_name", "")),
                      "replayed": f"{self.table} ({len(found)} row(s): "
                                  f"{', '.join(map(str, found.get('run_id', found.index)))})"})


def _names(rows: pd.DataFrame, column: str) -> pd.Series:
    """The canonical model or platform name of each row (a row's own specification first)."""
    from advisor.core.errors import AdvisorError
    from advisor.data.row_specs import row_model, row_platform

    resolve = row_model if column == "model" else row_platform
    out = {}
    for i, row in rows.iterrows():
        try:
            out[i] = resolve(row).name
        except AdvisorError:
            out[i] = ""      # a model or platform advisor cannot read answers no run
    return pd.Series(out, dtype=object).reindex(rows.index)


def _canonical(value: object) -> str:
    """A cell as compared: numbers as numbers (`4`, `4.0`), names lower-case."""
    text = str(value).strip().lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else str(number)


def _median(rows: pd.DataFrame, column: str) -> float | None:
    if column not in rows:
        return None
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(np.median(values)) if len(values) else None
