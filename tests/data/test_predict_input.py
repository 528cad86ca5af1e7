import pandas as pd
import pytest

from advisor.core.errors import AdvisorError
from advisor.data.predict_input import read_rows
from advisor.predict.rows import predict_frame

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


def test_one_bad_cell_fails_only_its_row(tmp_path):
    """A NUL byte, an over-long name, a non-ASCII digit, sizes beyond any real system: each
    row says what is wrong, the rows around it are predicted."""
    good = "llama3-8b,h100,8,8192,128"
    f = tmp_path / "runs.csv"
    f.write_text("model,gpu,num_gpus,seq_len,gbs\n" + "\n".join([
        good,
        "llama3-8b\x00x,h100,8,8192,128",
        "m" * 300 + ",h100,8,8192,128",
        "llama3-8b@vocab_size=²,h100,8,8192,128",
        "llama3-8b,h100,1e308,8192,128",
        "llama3-8b,h100,8,8192,1e308",
        "llama3-8b,h100,8,99999999999999999999,128",
        "llama3-8b@hidden_size=99999999999,h100,8,8192,128",
        good]) + "\n", encoding="utf-8")
    out = predict_frame(read_rows(f))
    errors = out["pred_error"].tolist()
    assert errors[0] == errors[-1] == "" and out["pred_tokens_per_sec_per_gpu"].iloc[-1] > 0
    assert "control character '\\x00'" in errors[1]
    assert "unknown model" in errors[2] and "(300 characters)" in errors[2]
    assert "scaled models are written" in errors[3]
    assert errors[4].startswith("num_gpus 1e+308 is beyond advisor's limit")
    assert errors[5].startswith("gbs 1e+308 is beyond advisor's limit")
    assert errors[6].startswith("seq_len 1e+20 is beyond advisor's limit")
    assert "hidden_size 99,999,999,999 is beyond" in errors[7]
    assert all("\n" not in e and len(e) < 400 for e in errors)


def test_rows_are_predicted_as_the_predictor_predicts_them(tmp_path):
    """predict --input gives the Predictor's numbers for the rows it parsed, rounded."""
    from advisor.predict.predictor import Predictor

    rows = [("llama3-8b", "h100", 8, 8192, 128, 1, 1, "selective"),
            ("llama3-70b", "h200", 64, 8192, 256, 4, 4, "none"),
            ("mixtral-8x7b", "h100", 32, 4096, 256, 2, 1, "full")] * 200
    columns = ["model", "gpu", "num_gpus", "seq_len", "gbs", "tp", "pp", "recompute"]
    f = tmp_path / "runs.csv"
    pd.DataFrame(rows, columns=columns).to_csv(f, index=False)
    predictor = Predictor.load()
    out = predict_frame(read_rows(f), predictor)
    direct = predictor.predict(pd.DataFrame(rows, columns=columns))
    assert (out["pred_error"] == "").all() and (direct["pred_error"] == "").all()
    assert set(out["pred_source"]) == {"surrogate"}
    for column in ("pred_tokens_per_sec_per_gpu", "pred_step_time_s", "pred_avg_power_w",
                   "pred_memory_gb"):
        digits = 2 if column == "pred_memory_gb" else 4
        assert (out[column].to_numpy() == direct[column].round(digits).to_numpy()).all(), column


def test_a_dataset_frame_predicts_as_its_csv_does():
    """predict_frame on a dataset read from Parquet (None and NaN in empty cells, as
    schedulers hand it frames) gives what the same rows give through a CSV."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "datasets" / "campaigns" / "h200-single.parquet"
    frame = pd.read_parquet(path)
    assert frame["lora_rank"].isna().any()
    direct = predict_frame(frame)
    assert direct["pred_error"].eq("").all(), direct["pred_error"].unique()
    as_csv = predict_frame(frame.astype(object).where(frame.notna(), "").astype(str))
    assert direct["pred_step_time_s"].tolist() == as_csv["pred_step_time_s"].tolist()


def test_megatron_bridge_moe_rows_run_expert_tensor_parallel_one():
    """Megatron-Bridge's performance recipes set expert_tensor_parallel_size=1 for every MoE
    model; a row of its performance summary that leaves etp empty is read so, where the same
    row from elsewhere takes Megatron-Core's default etp = tp."""
    from advisor.catalog import load_model
    from advisor.data.predict_input import parse_run_row

    row = {"model": "DeepSeek-V3", "gpu": "h100", "num_gpus": "1024", "precision": "fp8-cs",
           "seq_len": "4096", "gbs": "8192", "mbs": "1", "tp": "2", "pp": "8", "ep": "64",
           "vp": "4", "framework": "megatron", "software": "25.09"}
    model = load_model("deepseek-v3")
    bridge, notes = parse_run_row(
        row | {"source_name": "Megatron-Bridge performance summary (NeMo 25.09 container)"},
        model)
    other, _ = parse_run_row(row | {"source_name": "a Megatron-Core paper"}, model)
    stated, _ = parse_run_row(row | {"etp": "2", "source_name": "Megatron-Bridge performance "
                                     "summary (NeMo 25.09 container)"}, model)
    assert (bridge.etp, other.etp, stated.etp) == (1, 2, 2)
    assert any(n.startswith("etp=1") for n in notes)
