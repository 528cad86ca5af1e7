"""Every JSON output that carries power figures says what they mean (`power_semantics`): an
average that never passes the limit and a peak sample that may. Each command with `--json` is
listed here as carrying power figures (and run) or as carrying none (with the reason), so a new
command fails until it is placed."""

import json

import pytest
import typer
from typer.testing import CliRunner

from advisor.cli import app

RUNS_CSV = ("model,gpu,num_gpus,seq_len,gbs,tp,power_limit_w\n"
            "llama3-8b,h100,8,8192,64,2,\nllama3-8b,h100,8,8192,64,2,500\n")

SMALL = ["-m", "llama3-8b", "-g", "8", "-p", "h100"]

WITH_POWER = {
    "predict": ["predict", *SMALL],
    "predict --input": ["predict", "--input", "{tmp}/runs.csv", "--analytical"],
    "explain": ["explain", *SMALL],
    "recommend": ["recommend", *SMALL],
    "recommend --objective energy": ["recommend", *SMALL, "--objective", "energy", "--top", "1"],
    "compare": ["compare", "-m", "llama3-8b", "--platforms", "h100:8,h200:8"],
    "collect": ["collect", "--campaign", "h200-single", "--dry-run", "--dataset",
                "{tmp}/fresh.parquet"],
}
"""One invocation of each command whose JSON carries predicted or measured power (the
energy objective is the power-limit search)."""

WITHOUT_POWER = {
    "catalog platforms": "the catalog's board limits (tdp_w), not a predicted or measured figure",
    "catalog models": "models only",
    "catalog show": "a catalog entry's fields with their sources",
    "space": "layouts and memory",
    "memory": "memory only",
    "train": "rows used and artifacts written",
    "evaluate": "throughput error metrics",
    "dataset import-published": "row counts",
    "dataset import-mlperf": "row counts",
    "dataset validate": "row count",
    "dataset show": "how many rows measured each column, no figures",
}


def _json_commands(group, prefix: str = "") -> set[str]:
    """Every command under `group` (Typer's, or its vendored Click's) that takes --json."""
    found = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            found |= _json_commands(command, f"{path} ")
        elif any("--json" in p.opts for p in command.params):
            found.add(path)
    return found


def test_every_json_command_is_placed():
    commands = _json_commands(typer.main.get_command(app))
    with_power = {k.split(" --")[0] for k in WITH_POWER}
    assert commands == with_power | set(WITHOUT_POWER), (
        "place each command with --json in WITH_POWER (its JSON then carries power_semantics) "
        "or WITHOUT_POWER (with the reason)")
    assert not with_power & set(WITHOUT_POWER)


@pytest.mark.parametrize("name", sorted(WITH_POWER))
def test_json_with_power_figures_says_what_they_mean(name, tmp_path):
    (tmp_path / "runs.csv").write_text(RUNS_CSV)
    args = [a.replace("{tmp}", str(tmp_path)) for a in WITH_POWER[name]]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # predict --input answers a list of rows: each row carries it, so a row read alone does
    for record in data if isinstance(data, list) else [data]:
        semantics = record["power_semantics"]
        assert "mean per GPU" in semantics["avg_power_w"]
        assert name == "collect" or "never above the limit" in semantics["avg_power_w"]
        assert "may exceed the limit" in semantics["peak_power_w"]
