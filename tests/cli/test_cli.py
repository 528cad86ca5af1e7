import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.core.parallel import make_job
from advisor.core.space import enumerate_space

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_catalog_platforms_json():
    r = run("catalog", "platforms", "--json")
    assert r.exit_code == 0
    names = {p["name"] for p in json.loads(r.stdout)}
    assert {"h200", "mi250", "gb300"} <= names


def test_catalog_models_table():
    r = run("catalog", "models")
    assert r.exit_code == 0 and "llama3-70b" in r.stdout


def test_catalog_show_gives_sources():
    r = run("catalog", "show", "h200", "--json")
    data = json.loads(r.stdout)
    assert data["hbm_bytes"] == 141e9 and "hbm_bytes" in data["sources"]
    assert run("catalog", "show", "70b").exit_code == 0
    # a Hugging Face id is the model's alias, not a cluster file's path
    by_id = run("catalog", "show", "meta-llama/Meta-Llama-3-70B", "--json")
    assert by_id.exit_code == 0 and json.loads(by_id.stdout)["name"] == "llama3-70b"


def test_space_json_count_matches_library():
    r = run("space", "--model", "70b", "--gpus", "64", "--platform", "h200", "--json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    job = make_job(catalog.load_model("70b"), catalog.load_platform("h200"), num_gpus=64)
    assert data["num_valid"] == len(enumerate_space(job))
    assert 0 < data["num_fit"] < data["num_valid"]
    assert all(c["fits"] for c in data["configs"])


def test_space_accepts_a_cluster_file(fixtures):
    r = run("space", "-m", "70b", "-g", "32", "-p",
            str(fixtures / "clusters" / "paper-h200.toml"))
    assert r.exit_code == 0 and "paper-h200" in r.stdout


def test_memory_breakdown():
    r = run("memory", "-m", "70b", "-g", "64", "-p", "h200", "--tp", "8", "--pp", "2",
            "--json")
    assert r.exit_code == 0
    mem = json.loads(r.stdout)["memory"]
    assert mem["fits"] and mem["total_bytes"] > mem["weights_bytes"] > 0


def test_predict_writes_output(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs,tp\nLlama3-8B,h100,8,8192,64,1\n"
                   "Nope,h100,8,8192,64,1\n")
    dst = tmp_path / "out.csv"
    r = run("predict", "--input", str(src), "--output", str(dst))
    assert r.exit_code == 0
    text = dst.read_text()
    assert "pred_memory_gb" in text and "unknown model" in text
    out = pd.read_csv(dst)
    good = out.iloc[0]
    for column in ("pred_step_time_s", "pred_tokens_per_sec_per_gpu", "pred_tflops_per_gpu",
                   "pred_mfu", "pred_avg_power_w", "pred_peak_power_w",
                   "pred_energy_j_per_token", "pred_throttle_risk"):
        assert good[column] > 0, column
    assert good["pred_source"] == "surrogate"  # Llama 3 on H100: the data supports it
    assert good["pred_tokens_per_sec_per_gpu_p10"] <= good["pred_tokens_per_sec_per_gpu"] <= \
        good["pred_tokens_per_sec_per_gpu_p90"]
    # tokens/s/GPU is the step's tokens over its time and GPUs
    assert good["pred_tokens_per_sec_per_gpu"] == pytest.approx(
        64 * 8192 / good["pred_step_time_s"] / 8, rel=1e-3)
    assert pd.isna(out.iloc[1]["pred_step_time_s"])


def test_predict_one_config_from_flags_json():
    r = run("predict", "-m", "70b", "-p", "h200", "-g", "64", "--tp", "4", "--pp", "2",
            "--mbs", "1", "--gbs", "128", "--seq-len", "8192", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # the headline's source is the throughput's; the breakdown behind it is analytical
    assert d["source"] == d["figures"]["tokens_per_sec_per_gpu"]["source"] \
        == d["learned"]["pred_source"] == "surrogate"
    assert d["step"]["source"] == d["power"]["source"] == "analytical"
    assert d["config"]["dp"] == 8 and d["config"]["sequence_parallel"] is True
    step = d["step"]
    parts = sum(step[k] for k in ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s",
                                  "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s",
                                  "optimizer_s", "overhead_s", "throttle_s"))
    assert parts == pytest.approx(step["step_time_s"])
    assert d["power"]["peak_power_w"] >= d["power"]["avg_power_w"]
    assert d["memory"]["fits"] is True


def test_predict_matches_library():
    from advisor.catalog import load_model, load_platform
    from advisor.core.parallel import make_config, make_job
    from advisor.perf.analytical import predict_config

    r = run("predict", "-m", "mixtral-8x7b", "-p", "h100", "-g", "32", "--tp", "2",
            "--ep", "8", "--recompute", "selective", "--json")
    assert r.exit_code == 0, r.output
    model, platform = load_model("mixtral-8x7b"), load_platform("h100")
    job = make_job(model, platform, num_gpus=32)
    pred = predict_config(model, platform, make_config(job, tp=2, ep=8, recompute="selective"))
    assert json.loads(r.stdout)["step"]["step_time_s"] == pytest.approx(pred.step.step_time_s)


def test_predict_framework_and_torch_compile_from_flags():
    """--framework torchtitan predicts its eager blocks (the BF16 recipes' default) and
    --torch-compile the compiled ones, faster; Megatron-Core has no such switch."""
    job = ["predict", "-m", "8b", "-p", "h100", "-g", "8", "--dp-sharding", "full", "--mbs",
           "2", "--gbs", "16", "--seq-len", "8192", "--analytical", "--json"]
    titan = [*job, "--framework", "torchtitan"]
    eager, compiled = (json.loads(run(*titan, *flag).stdout)
                       for flag in ([], ["--torch-compile"]))
    assert eager["config"]["torch_compile"] is False and compiled["config"]["torch_compile"]
    assert compiled["step"]["tokens_per_sec_per_gpu"] > eager["step"]["tokens_per_sec_per_gpu"]
    megatron = json.loads(run(*job).stdout)
    assert megatron["step"]["tokens_per_sec_per_gpu"] != eager["step"]["tokens_per_sec_per_gpu"]
    _one_line_error(run(*job, "--torch-compile"))
    _one_line_error(run(*job, "--framework", "jax"))


def test_predict_unreadable_input_or_unwritable_output_is_one_line_exit_2(tmp_path):
    _one_line_error(run("predict", "--input", str(tmp_path)))
    src = tmp_path / "in.csv"
    src.write_text("model,gpu,num_gpus,seq_len,gbs\nLlama3-8B,h100,8,8192,64\n")
    _one_line_error(run("predict", "--input", str(src), "--output",
                        str(tmp_path / "missing" / "out.csv")))


def test_predict_needs_a_config_or_a_file():
    _one_line_error(run("predict", "-m", "70b"))


def test_predict_layout_that_does_not_divide_is_one_line_exit_2():
    _one_line_error(run("predict", "-m", "70b", "-p", "h200", "-g", "64", "--tp", "3"))


def test_explain_names_the_bottleneck_and_the_thermal_story():
    r = run("explain", "-m", "gpt3-175b", "-p", "h200", "-g", "32", "--tp", "2", "--pp", "16",
            "--mbs", "1", "--gbs", "128", "--seq-len", "2048")
    assert r.exit_code == 0, r.output
    text = r.output
    assert "Where the time goes" in text and "pipeline bubble" in text
    assert "Biggest loss" in text
    assert "W average" in text and "W peak" in text and "highest 50 ms sample" in text
    assert "Expected loss" in text and "slowest of 32" in text
    assert "analytical" in text


def test_explain_json_has_lines_and_prediction():
    r = run("explain", "-m", "70b", "-p", "b200", "-g", "16", "--tp", "8", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(d["explanation"]) >= 5 and d["prediction"]["step"]["step_time_s"] > 0


def _one_line_error(r):
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert "Traceback" not in r.output


def test_unknown_model_is_one_line_exit_2():
    r = run("space", "-m", "lama3-70b", "-g", "64", "-p", "h200")
    _one_line_error(r)
    assert "Did you mean" in r.output


def test_unknown_platform_is_one_line_exit_2():
    _one_line_error(run("space", "-m", "70b", "-g", "64", "-p", "h300x"))


def test_invalid_config_is_one_line_exit_2():
    _one_line_error(run("memory", "-m", "70b", "-g", "64", "-p", "h200", "--tp", "3"))


def test_bad_toml_is_one_line_exit_2(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("base = [")
    _one_line_error(run("space", "-m", "70b", "-g", "64", "-p", str(f)))


def test_bad_config_json_is_one_line_exit_2(tmp_path):
    f = tmp_path / "config.json"
    f.write_text("{")
    _one_line_error(run("space", "-m", str(f), "-g", "8", "-p", "h100"))


def test_malformed_csv_is_one_line_exit_2(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("a,b\n1,2\n")
    _one_line_error(run("predict", "--input", str(f)))


def test_non_positive_gpus_exit_2():
    assert run("space", "-m", "70b", "-g", "0", "-p", "h200").exit_code == 2


def test_help_explains_terms():
    r = run("space", "--help")
    assert r.exit_code == 0 and "pipeline" in r.stdout and "FSDP" in r.stdout


def test_cli_start_imports_no_heavy_modules():
    code = ("import sys\nfrom advisor.cli import app\nfrom typer.testing import CliRunner\n"
            "CliRunner().invoke(app, ['--help'])\n"
            "print(sorted(m for m in ('torch', 'xgboost', 'optuna', 'pynvml', 'amdsmi', "
            "'sklearn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_recommend_imports_no_pandas():
    """The default recommend runs on `Table`s from the space to the terminal: pandas (about a
    third of a second to import) loads only for the I/O edges (CSV, parquet, library
    DataFrames), nor do XGBoost's package or Optuna load (the trees are walked natively)."""
    code = ("import sys\nfrom advisor.cli import app\nfrom typer.testing import CliRunner\n"
            "r = CliRunner().invoke(app, ['recommend', '-m', '70b', '-g', '64', '-p', 'h200'])\n"
            "assert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in ('pandas', 'pyarrow', 'xgboost', 'optuna', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_platform_without_published_runs_says_uncalibrated():
    r = run("predict", "-m", "8b", "-p", "mi250", "-g", "8", "--tp", "2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["calibrated"] is False
    r = run("explain", "-m", "8b", "-p", "mi250", "-g", "8", "--tp", "2")
    assert "uncalibrated" in r.output and "cdna2" in r.output
    r = run("predict", "-m", "8b", "-p", "mi300x", "-g", "8", "--tp", "2", "--json")
    assert json.loads(r.stdout)["calibrated"] is True  # MI300X/MI325X: MLPerf measured CDNA 3
    r = run("predict", "-m", "8b", "-p", "h200", "-g", "8", "--tp", "2", "--json")
    assert json.loads(r.stdout)["calibrated"] is True  # H200 shares Hopper's calibration


def test_dataset_import_validate_show(tmp_path, reference_csv):
    out = tmp_path / "published.parquet"
    r = run("dataset", "import-published", "--from", str(reference_csv), "-o", str(out),
            "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rows_in_file"] == 569
    r = run("dataset", "import-published", "--from", str(reference_csv), "-o", str(out),
            "--json")
    assert json.loads(r.stdout)["rows_in_file"] == 569  # re-import replaces, never doubles
    assert run("dataset", "validate", str(out)).exit_code == 0
    shown = json.loads(run("dataset", "show", str(out), "--json").stdout)
    assert shown["rows"] == 569 and shown["by"]["source"] == {"published": 569}
    assert shown["measured"]["avg_power_w"] == 0


def test_dataset_with_wrong_schema_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,source,status,model,gpu,num_gpus,precision,seq_len,gbs,colour\n"
                   "a,campaign,ok,llama3-8b,h100,8,bf16,4096,64,blue\n")
    _one_line_error(run("dataset", "validate", str(bad)))


def test_json_output_is_strict_json():
    # NaN bands (no power surrogate) must be null: NaN is not JSON.
    r = run("predict", "-m", "70b", "-p", "h200", "-g", "64", "--tp", "4", "--pp", "2",
            "--json")
    assert r.exit_code == 0, r.output

    def refuse(constant):
        raise ValueError(f"{constant} in JSON output")

    data = json.loads(r.stdout, parse_constant=refuse)
    assert data["learned"]["pred_avg_power_w_p10"] is None


@pytest.mark.parametrize("args, expected", [
    (["recommend", "-m", "70b", "-p", "h200", "-g", "0"], "--gpus"),
    (["recommend", "-m", "70b", "-p", "h200", "-g", "8", "--bogus"], "No such option: --bogus"),
])
def test_usage_errors_are_one_error_line(args, expected):
    out = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True,
                         text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("env", [{"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"},
                                 {"PYTHONIOENCODING": "ascii"}],
                         ids=["LC_ALL=C", "PYTHONIOENCODING=ascii"])
def test_a_narrow_locale_prints_without_crashing(env):
    # packaged TOML is read as UTF-8 whatever the locale; what the terminal cannot show
    # (×, °C) prints as '?'
    import os

    full = {k: v for k, v in os.environ.items()
            if k not in ("LC_ALL", "LANG", "LC_CTYPE", "PYTHONUTF8", "PYTHONIOENCODING")}
    r = subprocess.run([sys.executable, "-m", "advisor", "predict", "-m", "70b", "-g", "64",
                        "-p", "h200", "--tp", "4", "--pp", "2"], env={**full, **env},
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"Traceback" not in r.stderr and b"step time" in r.stdout


@pytest.mark.parametrize("path", ["/dev/zero", "/tmp"])
def test_a_special_file_is_no_optuna_journal(path):
    r = run("recommend", "-m", "8b", "-g", "8", "-p", "h100", "--storage", path,
            "--trials", "4")
    assert r.exit_code == 2 and "not a regular file" in r.stderr


def test_an_output_in_a_missing_directory_says_why(tmp_path):
    rows = tmp_path / "runs.csv"
    rows.write_text("model,gpu,num_gpus,seq_len,gbs\nllama3-8b,h100,8,8192,128\n")
    r = run("predict", "--input", str(rows), "--analytical", "--output",
            str(tmp_path / "missing" / "o.csv"))
    assert r.exit_code == 2 and "cannot write (" in r.stderr and "(None)" not in r.stderr
