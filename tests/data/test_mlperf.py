"""MLPerf Training submissions as reference runs: every row imported or listed with its reason,
LoRA rows as LoRA jobs, and every layout that ran predicted to fit (the memory model's bar)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.data.dataset import import_mlperf, load
from advisor.data.mlperf import mlperf_runs
from advisor.predict.rows import predict_frame

runner = CliRunner()


@pytest.fixture(scope="module")
def mlperf(mlperf_csv):
    return mlperf_runs(mlperf_csv)


def test_every_row_is_imported_or_listed_with_its_reason(mlperf, mlperf_csv):
    runs, skipped = mlperf
    raw = pd.read_csv(mlperf_csv, dtype=str, keep_default_na=False)
    assert len(runs) + len(skipped) == len(raw)
    assert set(runs.index).isdisjoint(skipped["index"])
    assert skipped["why"].str.len().gt(10).all()
    # what cannot be expressed says so: an accelerator outside the catalog, no layout, no logs
    why = " ".join(skipped["why"])
    assert "'gaudi2'" in why and "no published parallel configuration" in why
    assert not skipped["why"].str.contains("'mi325x'").any()   # in the catalog now
    lora = runs[runs["finetune"] == "lora"]
    assert set(lora["model"]) == {"llama2-70b"}
    assert (lora["lora_rank"] == "16").all() and (lora["lora_targets"] == "attention").all()
    assert set(runs.loc[runs["finetune"] == "", "model"]) == {"gpt3-175b", "llama3.1-405b"}
    assert runs["source_name"].str.startswith("MLPerf Training v").all()
    assert (runs["framework"] != "nemo").all()   # NeMo runs Megatron-Core


def test_every_mlperf_layout_that_ran_is_predicted_to_fit(mlperf):
    """The memory model's bar: no false out-of-memory on a layout that ran. Every LoRA layout
    fits (the frozen base in FP8, no saved inputs for frozen GEMMs), and so does every
    pre-training row: Llama 3.1 405B on 512 H200 (TP4 PP8 CP2 VP8) was predicted 2.3 % over
    until FP8 parameter all-gather (NVIDIA's FP8_PARAM_GATHER: weights kept in FP8 only, with
    their transpose) was modelled."""
    runs, _ = mlperf
    out = predict_frame(runs)
    assert (out["pred_error"].fillna("") == "").all(), out.loc[out["pred_error"] != "",
                                                               "pred_error"].head()
    lora = (runs["finetune"] == "lora").to_numpy()
    tight = out.sort_values("pred_memory_gb", ascending=False)
    assert out["pred_fits"][lora].all(), tight[["gpu", "num_gpus", "tp", "pred_memory_gb"]].head()
    over = out["pred_memory_gb"] / out["pred_capacity_gb"]
    assert over.max() <= 1 and out["pred_fits"].all()
    assert (out.loc[lora, "pred_source"] == "analytical").all()


def test_import_mlperf_writes_a_valid_dataset(mlperf_csv, tmp_path):
    rows, skipped = import_mlperf(mlperf_csv)
    assert rows["run_id"].is_unique and (rows["source"] == "published").all()
    assert rows["source_ref"].str.startswith("https://github.com/mlcommons/").all()
    out = tmp_path / "mlperf.parquet"
    r = runner.invoke(app, ["dataset", "import-mlperf", "--from", str(mlperf_csv), "-o",
                            str(out), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["imported"] == len(rows) and len(report["skipped"]) == len(skipped)
    again = runner.invoke(app, ["dataset", "import-mlperf", "--from", str(mlperf_csv), "-o",
                                str(out), "--json"])
    assert json.loads(again.stdout)["rows_in_file"] == len(rows)   # replaced, not doubled
    stored = load(out)
    assert (stored["finetune"] == "lora").sum() == (rows["finetune"] == "lora").sum()


def test_import_mlperf_refuses_another_table(reference_csv, tmp_path):
    r = runner.invoke(app, ["dataset", "import-mlperf", "--from", str(reference_csv), "-o",
                            str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "missing column(s) benchmark" in r.stderr
