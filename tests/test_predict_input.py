import pandas as pd
import pytest

from advisor.core.errors import AdvisorError
from advisor.data.predict_input import predict_frame, read_rows

HEADER = "model,gpu,num_gpus,precision,seq_len,gbs,mbs,tp,pp,cp,ep,vp,dp,recompute,dp_sharding\n"


def test_bad_rows_get_an_error_and_good_rows_are_predicted(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(HEADER
                 + "Llama3-70B,h100,64,fp8,8192,128,1,4,4,2,,5,2,,optimizer\n"
                 + "NoSuchModel,h100,8,bf16,4096,8,1,1,1,1,,,8,,\n"
                 + "Llama3-70B,h100,64,bf16,8192,128,1,3,1,1,,,,,\n"
                 + "Llama3-70B,h100,64,bf16,8192,128,1,8,1,1,,,8,full,optimizer\n"
                 + "Llama3-70B,h100,64,bf16,8192,abc,1,8,1,1,,,8,,\n")
    out = predict_frame(read_rows(f))
    assert out.loc[0, "pred_error"] == "" and out.loc[0, "pred_fits"] == True  # noqa: E712
    assert "unknown model" in out.loc[1, "pred_error"]
    assert "tp (3)" in out.loc[2, "pred_error"] or "divide" in out.loc[2, "pred_error"]
    assert out.loc[3, "pred_error"] == "" and out.loc[3, "pred_memory_gb"] > 0
    assert "gbs" in out.loc[4, "pred_error"]


def test_empty_cells_are_filled_and_said(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("model,gpu,num_gpus,seq_len,gbs\nLlama3-8B,h100,8,8192,64\n")
    out = predict_frame(read_rows(f))
    assumed = out.loc[0, "pred_assumed"]
    assert "dp=8" in assumed and "precision=bf16" in assumed and "recompute=" in assumed


def test_missing_required_column_is_refused(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("model,gpu\nLlama3-8B,h100\n")
    with pytest.raises(AdvisorError, match="missing column.*num_gpus"):
        read_rows(f)


def test_unreadable_csv_is_refused(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text('model,gpu,num_gpus,seq_len,gbs\n"unterminated,h100,8,1,1\n')
    with pytest.raises(AdvisorError, match="not a readable CSV"):
        read_rows(f)


def test_output_keeps_input_columns(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("model,gpu,num_gpus,seq_len,gbs,extra\nLlama3-8B,h100,8,8192,64,keep\n")
    out = predict_frame(read_rows(f))
    assert isinstance(out, pd.DataFrame) and out.loc[0, "extra"] == "keep"
