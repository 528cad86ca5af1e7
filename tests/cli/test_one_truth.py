"""One truth per figure (issue 30, item 4) and no NaN ever (issue 28, item 3), through the CLI:
predict and explain print the same numbers from the same source, fine-tuning shows in every
header, one sharding vocabulary, etp = tp by default, clear errors for odd files."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from advisor import catalog
from advisor.cli import app

runner = CliRunner()
GPT3 = ["-m", "gpt3-175b", "-p", "h200", "-g", "32", "--tp", "2", "--pp", "16"]
"""The issue's case: predict said 475 tok/s (surrogate), explain 446 (analytical)."""
LORA = ["-m", "llama2-70b", "-p", "h100", "-g", "64", "--tp", "4", "--cp", "2", "--gbs", "8",
        "--seq-len", "8192", "--finetune", "lora", "--lora-rank", "16"]
GROK1 = {  # xai-org/grok-1 README: 64 layers, 48 query / 8 KV heads, 6,144 wide, 8 experts
    # (2 active), vocabulary 131,072, 8,192 context; FFN 32,768 (hpcai-tech/grok-1 config.json)
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 6144,
    "intermediate_size": 32768, "num_hidden_layers": 64, "num_attention_heads": 48,
    "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
    "vocab_size": 131072, "max_position_embeddings": 8192, "tie_word_embeddings": False}


def run(*args: str):
    return runner.invoke(app, list(args))


def _json(*args: str) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _one_line_error(r, *words: str) -> str:
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_predict_and_explain_give_the_same_figures_from_the_same_source():
    predicted = _json("predict", *GPT3)
    explained = _json("explain", *GPT3)["prediction"]
    assert predicted["figures"] == explained["figures"]
    figures = predicted["figures"]
    # the headline is the Predictor's (the surrogate covers this layout), the breakdown not
    assert predicted["source"] == figures["tokens_per_sec_per_gpu"]["source"] == "surrogate"
    assert predicted["step"]["source"] == "analytical"
    assert figures["tokens_per_sec_per_gpu"]["value"] != pytest.approx(
        predicted["step"]["tokens_per_sec_per_gpu"], rel=1e-3)
    for name, figure in figures.items():
        assert figure["source"], name


def test_energy_per_token_comes_from_the_headline_step_and_power():
    d = _json("predict", *GPT3)
    f, c = d["figures"], d["config"]
    tokens = c["gbs"] * c["seq_len"]
    board = f["avg_power_w"]["value"] * f["step_time_s"]["value"] * 32 / tokens
    assert f["board_energy_j_per_token"]["value"] == pytest.approx(board, rel=1e-9)
    # At the wall: each GPU also carries its share of the node's host (the catalog's H200
    # host_power_w over 8 GPUs), PUE 1.
    host = catalog.load_platform("h200").host_power_w / 8
    assert f["energy_j_per_token"]["value"] == pytest.approx(
        (f["avg_power_w"]["value"] + host) * f["step_time_s"]["value"] * 32 / tokens, rel=1e-9)
    assert "step time (surrogate)" in f["energy_j_per_token"]["source"]
    assert f["samples_per_mj"]["value"] == pytest.approx(
        1e6 / (f["energy_j_per_token"]["value"] * c["seq_len"]), rel=1e-9)


def test_predict_table_and_explain_text_print_the_same_numbers():
    table, text = run("predict", *GPT3), run("explain", *GPT3)
    assert table.exit_code == 0 and text.exit_code == 0, table.output + text.output
    tps = re.search(r"tokens/s per GPU\s*│\s*([\d,]+) ", table.stdout).group(1)
    step = re.search(r"step time\s*│\s*([\d.]+) s", table.stdout).group(1)
    energy = re.search(r"energy per token\s*│\s*([\d.]+) J", table.stdout).group(1)
    assert f"→ {tps} tokens/s per GPU" in text.stdout
    # the table shows 3 decimals, the text 2: 140.745 and 140.74 are the same figure
    shown = re.search(r"Step ([\d.]+) s", text.stdout).group(1)
    assert abs(float(shown) - float(step)) <= 0.0051
    assert f"{energy} J per token" in text.stdout
    assert "surrogate" in table.stdout.splitlines()[0] and "from the surrogate model" in text.stdout


def test_analytical_flag_gives_the_analytical_figures_on_both_commands():
    predicted = _json("predict", *GPT3, "--analytical")
    explained = _json("explain", *GPT3, "--analytical")["prediction"]
    assert predicted["figures"] == explained["figures"]
    assert predicted["source"] == "analytical"
    assert predicted["figures"]["step_time_s"]["value"] == pytest.approx(
        predicted["step"]["step_time_s"])


def test_lora_shows_in_every_header_and_table():
    table = run("predict", *LORA)
    assert table.exit_code == 0, table.output
    assert "LoRA rank 16 (attention)" in table.stdout.splitlines()[0]
    text = run("explain", *LORA)
    assert "LoRA rank 16 (attention)" in text.stdout.splitlines()[0]
    memory = run("memory", *LORA)
    assert memory.exit_code == 0, memory.output
    assert "LoRA rank 16 (attention)" in memory.stdout
    rec = run("recommend", "-m", "llama2-70b", "-p", "h100", "-g", "64", "--gbs", "8",
              "--finetune", "lora", "--top", "1")
    assert rec.exit_code == 0, rec.output
    assert "LoRA rank 16 (attention)" in rec.stdout.splitlines()[0]
    assert "Recommended configurations, LoRA rank 16 (attention)" in rec.stdout
    full = run("recommend", "-m", "8b", "-p", "h100", "-g", "8", "--finetune", "full",
               "--top", "1")
    assert "full fine-tuning" in full.stdout.splitlines()[0]
    d = _json("recommend", "-m", "8b", "-p", "h100", "-g", "8", "--finetune", "lora",
              "--top", "1")
    assert d["training"] == "LoRA rank 16 (attention)"


def test_compare_says_what_it_trains_and_that_node_power_is_gpus_only():
    r = run("compare", "-m", "8b", "--platforms", "h100:8,h200:8", "--finetune", "lora")
    assert r.exit_code == 0, r.output
    assert "LoRA rank 16 (attention)" in r.stdout.splitlines()[0]
    assert "GPUs" in r.stdout and "only: avg·peak" in r.stdout
    d = _json("compare", "-m", "8b", "--platforms", "h100:8,h200:8")
    assert d["training"] == "pre-training"
    assert "peak_power_per_node_gpus_w" in d["sides"][0]
    assert "peak_power_per_node_w" not in d["sides"][0]


@pytest.mark.parametrize("alias, name", [("ddp", "none"), ("zero1", "optimizer"),
                                         ("ZeRO-1", "optimizer"), ("fsdp", "full"),
                                         ("zero3", "full"), ("optimizer", "optimizer")])
def test_sharding_aliases_are_read_as_the_one_vocabulary(alias, name):
    d = _json("predict", "-m", "8b", "-p", "h100", "-g", "8", "--tp", "2", "--analytical",
              "--dp-sharding", alias)
    assert d["config"]["dp_sharding"] == name
    assert d["config"]["overlap_param_gather"] is (name != "none")


def test_sharding_pin_alias_in_recommend_and_rows(tmp_path):
    d = _json("recommend", "-m", "8b", "-p", "h100", "-g", "8", "--dp-sharding", "fsdp",
              "--top", "1")
    assert d["pins"] == {"dp_sharding": "full"}
    assert d["choices"][0]["config"]["dp_sharding"] == "full"
    rows = tmp_path / "rows.csv"
    rows.write_text("model,gpu,num_gpus,seq_len,gbs,tp,dp_sharding\n"
                    "llama3-8b,h100,8,8192,64,2,ddp\nllama3-8b,h100,8,8192,64,2,ZeRO1\n")
    out = _json("predict", "--input", str(rows), "--analytical")
    assert [r["pred_error"] for r in out] == ["", ""]
    assert [r["dp_sharding"] for r in out] == ["none", "optimizer"]


def test_unknown_sharding_names_the_vocabulary():
    _one_line_error(run("predict", "-m", "8b", "-p", "h100", "-g", "8", "--dp-sharding",
                        "zero9"), "none, optimizer, full")


@pytest.fixture
def grok1(tmp_path):
    path = tmp_path / "grok-1" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(GROK1))
    return str(path)


def test_etp_defaults_to_tp_on_every_command(grok1):
    job = ["-m", grok1, "-p", "gb200", "-g", "128", "--tp", "4", "--ep", "8"]
    memory = _json("memory", *job)
    predicted = _json("predict", *job, "--analytical")
    explained = _json("explain", *job, "--analytical")["prediction"]
    assert memory["config"]["etp"] == predicted["config"]["etp"] \
        == explained["config"]["etp"] == 4
    assert memory["memory"]["total_bytes"] == pytest.approx(
        predicted["memory"]["total_bytes"])
    assert memory["memory"]["fits"] is True
    rec = _json("recommend", *job[:6], "--tp", "4", "--ep", "8", "--top", "1")
    assert rec["choices"][0]["config"]["etp"] == 4
    # etp 1 given by hand is what it was: the expert weights no longer split four ways
    one = _json("memory", *job, "--etp", "1")
    assert one["config"]["etp"] == 1 and one["memory"]["fits"] is False


def test_catalog_show_reads_a_config_json_as_a_model(grok1):
    d = _json("catalog", "show", grok1)
    assert d["num_layers"] == 64 and d["num_experts"] == 8
    r = run("catalog", "show", grok1.removesuffix("/config.json"))
    assert r.exit_code == 0 and "num_layers" in r.stdout


def test_cluster_file_names_a_misspelled_key_first(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text('base = "h200"\nnic_bandwith_bytes_per_s = 50e9\n')
    line = _one_line_error(run("predict", "-m", "70b", "-p", str(path), "-g", "64", "--tp",
                               "4"), "unknown key", "nic_bandwith_bytes_per_s",
                           "did you mean nic_bandwidth_bytes_per_s")
    assert "[sources]" not in line


@pytest.mark.parametrize("command", ["predict", "explain", "recommend"])
def test_absurd_cluster_numbers_are_refused_at_load(tmp_path, command):
    path = tmp_path / "cluster.toml"
    path.write_text('base = "h200"\nnum_nics_per_node = 8\nnic_bandwidth_bytes_per_s = 1e-300\n'
                    '[sources]\nnum_nics_per_node = "test"\nnic_bandwidth_bytes_per_s = "test"\n')
    r = run(command, "-m", "70b", "-p", str(path), "-g", "64")
    line = _one_line_error(r, "nic_bandwidth_bytes_per_s", "1e-300", "bytes/s")
    assert "nan" not in line.lower()


def test_dataset_show_finds_the_checkout_datasets_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    d = _json("dataset", "show", "datasets/published.parquet")
    assert d["rows"] > 0
    _one_line_error(run("dataset", "show", "datasets/nothing.parquet"),
                    "bundled datasets", "advisor dataset import-published")
