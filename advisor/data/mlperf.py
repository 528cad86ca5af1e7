"""MLPerf Training submissions as reference runs (`datasets/reference/mlperf/mlperf_runs.csv`).

Each row is a submitter's measured throughput with the exact layout it ran (see that file's
README for how every field was derived). `mlperf_runs` turns the file into rows shaped like
`published_runs.csv` — which `predict --input`, the calibration and the dataset read — with the
benchmark's job made explicit (Llama-2-70B LoRA is fine-tuning: rank 16 on the attention
projections, as MLCommons' reference implementation sets it), and lists every row it cannot
express with the reason, never dropping one silently.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from advisor.core.errors import AdvisorError

BENCHMARKS = {
    "gpt3": {"model": "gpt3-175b"},
    "llama31_405b": {"model": "llama3.1-405b"},
    "llama31_8b": {"model": "llama3.1-8b"},
    # MLCommons' llama2_70b_lora reference (training/llama2_70b_lora, the task's README and
    # its PEFT config): LoRA rank 16, alpha 32, on the attention's fused QKV and output
    # projections; the base model frozen; sequence 8,192 (padded).
    "llama2_70b_lora": {"model": "llama2-70b", "finetune": "lora", "lora_rank": "16",
                        "lora_targets": "attention"},
}
PRECISIONS = {"fp8": "fp8", "bf16": "bf16", "fp4": "nvfp4"}
"""The file's GEMM precision -> advisor's: FP8 with delayed scaling (Transformer Engine's
default recipe, which the NeMo and Megatron implementations run), and FP4 meaning NVFP4."""
FRAMEWORKS = {"nemo": "megatron"}
"""NeMo runs Megatron-Core; other frameworks keep their own name (their kernel efficiency is
fitted apart, as llm-foundry's is)."""
LAYOUT = ("tp", "pp", "cp", "mbs")
KEEP = ("gpu", "num_gpus", "seq_len", "gbs", "mbs", "tp", "pp", "cp", "ep", "vp", "dp",
        "tokens_per_sec_per_gpu", "framework", "software", "source_url")


def mlperf_runs(csv_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, skipped): the rows advisor can express, in `published_runs.csv` columns plus
    `finetune`, `lora_rank`, `lora_targets`; and the others with `why`.

    Raises:
        AdvisorError: the file is missing or is not the MLPerf table.
    """
    from advisor.catalog import load_platform

    try:
        raw = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise AdvisorError(f"{csv_path}: no such file.") from None
    missing = [c for c in ("benchmark", "round", "submitter", "system", *KEEP)
               if c not in raw.columns]
    if missing:
        raise AdvisorError(f"{csv_path}: missing column(s) {', '.join(missing)}; is this "
                           f"mlperf_runs.csv?")
    runs, skipped = [], []
    for i, row in raw.iterrows():
        why = _inexpressible(row)
        if why is None:
            try:
                load_platform(row["gpu"])
            except AdvisorError:
                why = (f"accelerator {row['gpu']!r} ({row.get('accelerator_model', '')}) is not "
                       f"in the platform catalog")
        if why:
            skipped.append({"index": i, "system": _label(row), "why": why})
            continue
        runs.append(_run(row))
    runs_frame = pd.DataFrame(runs, index=[r["_index"] for r in runs]).drop(columns="_index") \
        if runs else pd.DataFrame()
    return runs_frame, pd.DataFrame(skipped, columns=["index", "system", "why"])


def _inexpressible(row: pd.Series) -> str | None:
    if row["benchmark"] not in BENCHMARKS:
        return f"benchmark {row['benchmark']!r} is not one advisor models"
    if row.get("duplicate_of", "").strip():
        return f"its logs repeat {row['duplicate_of'].strip()} (same MLLOG content)"
    if not row["tokens_per_sec_per_gpu"].strip():
        return "no throughput: its result logs are not in the repository snapshot"
    unknown = [k for k in LAYOUT if not row[k].strip()]
    if unknown:
        return f"no published parallel configuration ({', '.join(unknown)} unknown)"
    if row.get("precision", "").strip().lower() not in PRECISIONS:
        return f"precision {row.get('precision', '')!r} is not known"
    if "cpu_offload" in row.get("recompute", ""):
        return "activation offloading to the CPU is not modelled"
    return None


def _run(row: pd.Series) -> dict:
    out = {k: row[k].strip() for k in KEEP}
    out |= {"finetune": "", "lora_rank": "", "lora_targets": ""} | BENCHMARKS[row["benchmark"]]
    out["_index"] = row.name
    out["precision"] = PRECISIONS[row["precision"].strip().lower()]
    out["framework"] = FRAMEWORKS.get(out["framework"], out["framework"])
    recompute = row.get("recompute", "").strip()
    out["recompute"] = "" if recompute == "unknown" else recompute  # empty: least that fits
    sharding = row.get("dp_sharding", "").strip()
    out["dp_sharding"] = "" if sharding == "unknown" else sharding
    out["source_name"] = f"MLPerf Training {row['round']} {row['submitter']}"
    out["notes"] = (f"MLPerf {row['benchmark']} {row['system']}; throughput "
                    f"{row.get('throughput_method', '')}; config {row.get('match_rule', '')}")
    return out


def _label(row: pd.Series) -> str:
    return f"{row['round']} {row['submitter']} {row['system']} {row['benchmark']}"
