import json
import subprocess
import sys

from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app
from advisor.parallel import make_job
from advisor.space import enumerate_space

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
