"""The measurement dataset: one row per run (published or measured by a campaign), the canonical
schema of DESIGN.md, stored as Parquet.

`validate` checks types, ranges, allowed values and required columns and names the row and
column of the first problems; `load` reads Parquet or CSV and validates; `append` adds rows to a
Parquet file atomically under a file lock (a crash leaves the old file whole; concurrent
appenders all land) and de-duplicates by `run_id`; `import_published` turns
`datasets/reference/published_runs.csv` into canonical rows with provenance. Beside the rows, a
Parquet dataset carries a small JSON document of file-level facts (`read_metadata`; `append`
merges into it and every rewrite keeps it): `advisor collect` records there which version of
each campaign wrote the file.

A failed run is a row (`status` oom/failed/timeout), never a lost measurement.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from advisor.core.errors import AdvisorError, first_line
from advisor.core.parallel import (
    DISPATCHER_ALIASES,
    DP_SHARDING,
    FINETUNE,
    LORA_TARGETS,
    MOE_DISPATCHERS,
    PRECISIONS,
    RECOMPUTE,
)


class DatasetError(AdvisorError):
    """A dataset file or row that does not follow the schema."""


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    """`str`, `int`, `float`, `bool` or `time` (ISO 8601 string)."""
    doc: str
    required: bool = False
    low: float | None = None
    high: float | None = None
    allowed: tuple[str, ...] = ()


STATUSES = ("ok", "oom", "failed", "timeout")
SOURCES = ("published", "campaign")
_PRECISION_SPELLINGS = tuple(PRECISIONS)
_RECOMPUTE_SPELLINGS = (*RECOMPUTE, "selective+sequence-parallel")

SCHEMA: tuple[Column, ...] = (
    Column("run_id", "str", "unique id of the run (a hash of the configuration and source for "
           "published rows; the campaign's id for measured ones)", required=True),
    Column("source", "str", "published or campaign", required=True, allowed=SOURCES),
    Column("source_ref", "str", "where the number comes from: a URL, or campaign name/host"),
    Column("source_name", "str", "human name of the source (e.g. the document and release)"),
    Column("collected_at", "time", "when the run was measured or imported (ISO 8601, UTC)"),
    Column("status", "str", "ok, oom, failed or timeout", required=True, allowed=STATUSES),
    Column("model", "str", "catalog model name or alias, a scaled catalog model or a Hugging "
           "Face config.json path", required=True),
    Column("gpu", "str", "catalog platform name or a cluster file path", required=True),
    Column("num_gpus", "int", "GPUs (MI250: GCDs)", required=True, low=1),
    Column("precision", "str", "training precision recipe", required=True,
           allowed=_PRECISION_SPELLINGS),
    Column("seq_len", "int", "tokens per sequence", required=True, low=1),
    Column("gbs", "int", "global batch in sequences", required=True, low=1),
    Column("mbs", "int", "micro-batch in sequences", low=1),
    Column("tp", "int", "tensor parallel", low=1),
    Column("pp", "int", "pipeline parallel", low=1),
    Column("cp", "int", "context parallel", low=1),
    Column("ep", "int", "expert parallel", low=1),
    Column("etp", "int", "expert tensor parallel", low=1),
    Column("vp", "int", "virtual pipeline stages", low=1),
    Column("dp", "int", "data parallel", low=1),
    Column("recompute", "str", "none, selective or full (empty: unknown)",
           allowed=_RECOMPUTE_SPELLINGS),
    Column("recompute_modules", "str", "with recompute selective: what it recomputes, "
           "Megatron-Core --recompute-modules names separated by spaces (empty: core_attn, "
           "the default)"),
    Column("ep_comm_overlap", "bool", "MoE all-to-all of one micro-batch overlapped with "
           "another's compute (Megatron-Core --overlap-moe-expert-parallel-comm; empty: off, "
           "or what the source's recipe ran)"),
    Column("moe_dispatcher", "str", "MoE token dispatcher: auto, alltoall or deepep (flex and "
           "hybridep read as deepep; empty: advisor's rule, or what the source's recipe ran)",
           allowed=(*MOE_DISPATCHERS, *DISPATCHER_ALIASES)),
    Column("dp_sharding", "str", "none, optimizer or full", allowed=DP_SHARDING),
    Column("finetune", "str", "none (pre-training, also when empty), lora or full",
           allowed=FINETUNE),
    Column("lora_rank", "int", "LoRA adapter rank (LoRA runs)", low=1),
    Column("lora_targets", "str", "modules LoRA adapts: attention or all-linear",
           allowed=LORA_TARGETS),
    Column("framework", "str", "megatron, llm-foundry, torchtitan, ..."),
    Column("software", "str", "container or library release, where known"),
    Column("tokens_per_sec_per_gpu", "float", "measured throughput per GPU", low=1e-9),
    Column("tflops_per_gpu", "float", "model TFLOP/s per GPU as the source counts it", low=0),
    Column("mfu", "float", "model FLOPs utilisation as the source printed it", low=0, high=1.5),
    Column("step_time_s", "float", "seconds per optimizer step", low=1e-9),
    Column("peak_mem_gb", "float", "peak allocated GPU memory, GB", low=0),
    Column("avg_power_w", "float", "time-weighted average power per GPU (W)", low=0, high=5000),
    Column("peak_power_w", "float", "largest instantaneous power sample of any GPU (W)", low=0,
           high=5000),
    Column("energy_j", "float", "energy over the measured steps, all GPUs, from the energy "
           "counter (J)", low=0),
    Column("max_temp_c", "float", "hottest GPU temperature seen (°C)", low=-20, high=150),
    Column("max_mem_temp_c", "float", "hottest HBM temperature seen (°C)", low=-20, high=150),
    Column("mean_sm_clock_mhz", "float", "mean SM clock over GPUs and samples (MHz)", low=0),
    Column("throttle_frac_power", "float", "share of samples with the power-cap reason set",
           low=0, high=1),
    Column("throttle_frac_thermal", "float", "share of samples with a thermal reason set",
           low=0, high=1),
    Column("telemetry_hz", "float", "telemetry sampling rate", low=0),
    Column("notes", "str", "what the source said beyond the columns"),
    Column("model_spec", "str", "the model's full specification as JSON where it is not a "
           "catalog model (a config.json): rows stay usable where the file is not "
           "(advisor.data.row_specs)"),
    Column("platform_spec", "str", "the platform's full specification as JSON where `gpu` is "
           "a cluster file (advisor.data.row_specs)"),
)
COLUMNS = {c.name: c for c in SCHEMA}
REQUIRED = tuple(c.name for c in SCHEMA if c.required)
_DTYPES = {"str": "string", "time": "string", "int": "Int64", "float": "Float64",
           "bool": "boolean"}


def empty() -> pd.DataFrame:
    """A frame with every schema column and no rows."""
    return pd.DataFrame({c.name: pd.Series(dtype=_DTYPES[c.kind]) for c in SCHEMA})


def validate(frame: pd.DataFrame, *, where: str = "dataset", max_errors: int = 5) -> pd.DataFrame:
    """The frame with schema dtypes and every schema column present; refuses unknown columns,
    missing required columns or values, wrong types, values out of range or not allowed. The
    error names the file, row and column of the first problems."""
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if unknown:
        raise DatasetError(f"{where}: unknown column(s) {', '.join(unknown)}; the schema's "
                           f"columns are listed in advisor/data/dataset.py (SCHEMA).")
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise DatasetError(f"{where}: missing required column(s) {', '.join(missing)}.")
    out = {}
    problems: list[str] = []
    for col in SCHEMA:
        if col.name not in frame.columns:
            out[col.name] = pd.Series(pd.NA, index=frame.index, dtype=_DTYPES[col.kind])
            continue
        raw = frame[col.name]
        try:
            typed, bad = _coerce(raw, col)
        except (TypeError, ValueError) as e:
            raise DatasetError(f"{where}: column {col.name} holds values that are not "
                               f"{col.kind}s ({str(e)[:80]}).") from None
        for i in bad[:max_errors]:
            problems.append(f"row {i}, column {col.name}: {raw.loc[i]!r} is not a {col.kind}")
        blank = typed.isna()
        if col.required:
            for i in typed.index[blank][:max_errors]:
                problems.append(f"row {i}, column {col.name}: empty, but required")
        if col.kind in ("int", "float"):
            numbers = typed.astype("Float64")
            infinite = numbers.isin([float("inf"), float("-inf")]).fillna(False)
            for i in typed.index[infinite][:max_errors]:
                problems.append(f"row {i}, column {col.name}: {typed.loc[i]} is not finite")
            if col.low is not None:
                for i in typed.index[(numbers < col.low).fillna(False)][:max_errors]:
                    problems.append(f"row {i}, column {col.name}: {typed.loc[i]} is below "
                                    f"{col.low}")
            if col.high is not None:
                for i in typed.index[(numbers > col.high).fillna(False)][:max_errors]:
                    problems.append(f"row {i}, column {col.name}: {typed.loc[i]} is above "
                                    f"{col.high}")
        if col.allowed:
            lowered = typed.str.lower()
            outside = ~blank & ~lowered.isin(col.allowed).fillna(False)
            for i in typed.index[outside][:max_errors]:
                problems.append(f"row {i}, column {col.name}: {typed.loc[i]!r} is not one of "
                                f"{', '.join(col.allowed)}")
            typed = lowered
        out[col.name] = typed
        if len(problems) >= max_errors:
            break
    if problems:
        more = "" if len(problems) < max_errors else " (first problems only)"
        raise DatasetError(f"{where}: " + "; ".join(problems[:max_errors]) + more + ".")
    return pd.DataFrame(out, index=frame.index)


def _coerce(raw: pd.Series, col: Column) -> tuple[pd.Series, list]:
    """Typed series and the index labels whose values could not be read."""
    if col.kind in ("str", "time"):
        typed = raw.astype("string")
        typed = typed.mask(typed.str.strip() == "")
        if col.kind == "time":
            parsed = pd.to_datetime(typed, errors="coerce", utc=True, format="ISO8601")
            bad = typed.index[typed.notna() & parsed.isna()].tolist()
            return typed, bad
        return typed, []
    if col.kind == "bool":
        text = raw.astype("string").str.strip().str.lower()
        mapping = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        typed = text.map(mapping).astype("boolean")
        bad = text.index[text.notna() & (text != "") & typed.isna()].tolist()
        return typed, bad
    numbers = pd.to_numeric(raw.replace("", pd.NA), errors="coerce").astype("Float64")
    bad = raw.index[raw.notna() & (raw.astype("string").str.strip() != "")
                    & numbers.isna()].tolist()
    if col.kind == "int":
        fractional = numbers.notna() & (numbers != numbers.round())
        bad += numbers.index[fractional.fillna(False)].tolist()
        numbers = numbers.mask(fractional).round().astype("Int64")
    return numbers, bad


def load(path: Path) -> pd.DataFrame:
    """Read a dataset file (Parquet, or CSV on input) and validate it."""
    from advisor.core.files import TABLE_LIMIT_BYTES, check_regular

    path = Path(path)
    check_regular(path, limit_bytes=TABLE_LIMIT_BYTES, what="dataset (.parquet or .csv)",
                  error=DatasetError)
    try:
        if path.suffix.lower() == ".csv":
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        else:
            frame = pd.read_parquet(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file.") from None
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise DatasetError(f"{path}: not a readable dataset ({first_line(e)}).") \
            from None
    return validate(frame, where=str(path))


def dedupe(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run_id: the last one written wins (a rerun replaces its earlier record)."""
    return frame.drop_duplicates(subset="run_id", keep="last").reset_index(drop=True)


METADATA_KEY = "advisor"
"""Key of the file-level document in the frame's `attrs`, which pandas (2.1 and later) keeps
as JSON under `PANDAS_ATTRS` in the Parquet schema's key-value metadata."""
_ATTRS_KEY = b"PANDAS_ATTRS"


def read_metadata(path: Path) -> dict:
    """The file-level document of the Parquet dataset at `path` ({} for a file without one, a
    CSV or a missing file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file() or path.suffix.lower() == ".csv":
        return {}
    try:
        raw = (pq.read_schema(path).metadata or {}).get(_ATTRS_KEY)
    except (OSError, pa.ArrowException) as e:
        raise DatasetError(f"{path}: not a readable dataset ({first_line(e)}).") from None
    if raw is None:
        return {}
    try:
        document = json.loads(raw).get(METADATA_KEY, {})
    except (ValueError, AttributeError):
        raise DatasetError(f"{path}: its {_ATTRS_KEY.decode()} metadata is not a JSON object; "
                           f"was the file written by another tool?") from None
    return document if isinstance(document, dict) else {}


def _merged(old: dict, new: dict) -> dict:
    """`old` updated by `new`: a table (dict) at the top is updated entry by entry, each entry
    replaced whole (`{"campaigns": {name: ...}}` replaces one campaign's record)."""
    out = dict(old)
    for key, value in new.items():
        both = isinstance(out.get(key), dict) and isinstance(value, dict)
        out[key] = {**out[key], **value} if both else value
    return out


def append(path: Path, rows: pd.DataFrame | Iterable[dict], *, timeout_s: float = 60.0,
           metadata: dict | None = None) -> int:
    """Append validated rows to the Parquet file at `path` (created if absent) and return how
    many rows the file now holds. Holds `path.lock` while reading, merging and replacing, and
    replaces the file atomically (write a temporary file beside it, fsync, rename), so a crash
    never leaves a partial file and concurrent appenders never lose each other's rows.
    `metadata` (plain JSON values) is merged into the file-level document (`read_metadata`)
    under the same lock; the document is kept whether or not it is given."""
    from filelock import FileLock, Timeout

    # Through a symlink to the file it names: replacing the link itself would split the data
    # in two (the link's target keeps the old rows, a new plain file gets the new ones).
    path = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    new = validate(rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows)),
                   where=f"rows for {path}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK):
            raise DatasetError(f"{path.parent}: not writable; choose another output.")
        with FileLock(str(path) + ".lock", timeout=timeout_s):
            # A temporary file exists only while its writer holds the lock: any now is what a
            # killed writer left.
            for stale in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):
                stale.unlink(missing_ok=True)
            merged = new if not path.exists() else pd.concat([load(path), new],
                                                             ignore_index=True)
            merged = dedupe(merged)
            document = _merged(read_metadata(path), metadata or {})
            _atomic_write(merged, path, document)
            return len(merged)
    except Timeout:
        raise DatasetError(f"{path}: another writer has held {path}.lock for over "
                           f"{timeout_s:.0f} s; is a stuck process holding it?") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot write ({e.strerror or e}).") from None


def update_metadata(path: Path, metadata: dict, *, timeout_s: float = 60.0) -> None:
    """Merge `metadata` into the file-level document of the existing Parquet dataset at
    `path` (as `append` does), its rows unchanged."""
    from filelock import FileLock, Timeout

    path = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    try:
        with FileLock(str(path) + ".lock", timeout=timeout_s):
            _atomic_write(load(path), path, _merged(read_metadata(path), metadata))
    except Timeout:
        raise DatasetError(f"{path}: another writer has held {path}.lock for over "
                           f"{timeout_s:.0f} s; is a stuck process holding it?") from None
    except OSError as e:
        raise DatasetError(f"{path}: cannot write ({e.strerror or e}).") from None


def _atomic_write(frame: pd.DataFrame, path: Path, document: dict | None = None) -> None:
    frame = frame.copy(deep=False)
    frame.attrs = {METADATA_KEY: document} if document else {}
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            frame.to_parquet(f, index=False)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file private; keep the old file's mode, or a normal data file's.
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # make the rename itself durable
        finally:
            os.close(directory)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- published runs ----------------------------------------------------------------------------
_PUBLISHED_KEEP = ("model", "gpu", "num_gpus", "precision", "seq_len", "gbs", "mbs", "tp", "pp",
                   "cp", "ep", "vp", "dp", "recompute", "dp_sharding", "framework", "software",
                   "tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu", "notes", "source_name")


_PUBLISHED_IDENTITY = ("source_url", "source_name", "model", "gpu", "num_gpus", "precision",
                       "seq_len", "gbs", "mbs", "tp", "pp", "cp", "ep", "vp", "dp",
                       "recompute", "dp_sharding", "framework", "software")


def published_run_id(row: pd.Series, occurrence: int = 0) -> str:
    """Stable id of a published row: its source and configuration (not its result, so a
    corrected number replaces the old one on re-import), plus which occurrence of that
    configuration in the source it is (some tables print two results for one layout)."""
    key = "|".join(str(row.get(k, "")) for k in _PUBLISHED_IDENTITY) + f"|{occurrence}"
    return "pub-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def import_published(csv_path: Path, *, collected_at: str | None = None) -> pd.DataFrame:
    """Canonical rows for `published_runs.csv` (every row is an `ok` run from its source)."""
    try:
        raw = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise DatasetError(f"{csv_path}: no such file.") from None
    missing = [c for c in ("source_url", *_PUBLISHED_KEEP) if c not in raw.columns]
    if missing:
        raise DatasetError(f"{csv_path}: missing column(s) {', '.join(missing)}; is this "
                           f"published_runs.csv?")
    return _canonical(raw, list(_PUBLISHED_KEEP), str(csv_path), collected_at)


def import_mlperf(csv_path: Path, *, collected_at: str | None = None
                  ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Canonical rows for the MLPerf Training table (`datasets/reference/mlperf/mlperf_runs.csv`,
    `advisor.data.mlperf`), and the rows it cannot express with `why`."""
    from advisor.data.mlperf import mlperf_runs

    runs, skipped = mlperf_runs(csv_path)
    keep = [c for c in (*_PUBLISHED_KEEP, "finetune", "lora_rank", "lora_targets")
            if c in runs.columns]
    return _canonical(runs, keep, str(csv_path), collected_at), skipped


def _spec_columns(raw: pd.DataFrame, where: str) -> pd.DataFrame:
    """`model_spec` and `platform_spec` of each row: as the file gives them, else read from the
    config.json or cluster file a row names (catalog rows: empty)."""
    from advisor.data.row_specs import MODEL_SPEC, PLATFORM_SPEC, spec_columns

    out = pd.DataFrame(index=raw.index, columns=[MODEL_SPEC, PLATFORM_SPEC], dtype=object)
    for (model, gpu), part in raw.groupby(["model", "gpu"], sort=False):
        try:
            specs = spec_columns(str(model), str(gpu))
        except AdvisorError as e:
            raise DatasetError(f"{where}: row {int(part.index[0]) + 2} (model {model!r}, gpu "
                               f"{gpu!r}): {e}") from None
        for column, text in specs.items():
            out.loc[part.index, column] = text
    for column in (MODEL_SPEC, PLATFORM_SPEC):
        if column in raw:
            given = raw[column].astype("string").fillna("").str.strip() != ""
            out.loc[given, column] = raw.loc[given, column]
    return out


def _canonical(raw: pd.DataFrame, keep: list[str], where: str,
               collected_at: str | None) -> pd.DataFrame:
    frame = raw[keep].copy()
    frame = frame.join(_spec_columns(raw, where))
    occurrence = raw.groupby(list(_PUBLISHED_IDENTITY)).cumcount()
    frame["run_id"] = [published_run_id(row, int(n))
                       for (_, row), n in zip(raw.iterrows(), occurrence, strict=True)]
    frame["source"] = "published"
    frame["source_ref"] = raw["source_url"]
    frame["status"] = "ok"
    frame["collected_at"] = collected_at or pd.Timestamp.now(tz="UTC").isoformat()
    return validate(frame, where=where)
