"""Generated inputs of five kinds — CLI flags, `predict --input` CSV files, cluster TOML,
campaign TOML and Hugging Face config.json — run through the real `advisor` entry point, and
what each run must give: exit 0 with valid JSON (no NaN or Infinity), or exit 2 with one
`error:` line; never a traceback; never longer than a time budget.

`tests/cli/test_fuzz.py` draws cases with Hypothesis (a fixed budget and seed in CI);
`benchmarks/fuzz.py` runs thousands and prints the table the README quotes. A case is made by
`make_case(kind, rng)` from a `random.Random`, so either driver can replay one from its seed.

Runs are in-process (`advisor.cli.main` with `sys.argv` set and output captured): the same code
path as the installed command without a Python start-up per case. A run that exceeds its budget
is interrupted by SIGALRM and counted as a hang.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import random
import signal
import sys
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("cli", "csv", "cluster", "campaign", "config")
HANG_S = 30
FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]

MODELS = ["llama3-8b", "70b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt3-175b",
          "llama3-8b@num_layers=2,hidden_size=64", "llama4-scout"]
PLATFORMS = ["h100", "h200", "mi250", "b200", "mi300x", "a100", "H100"]
NUMBERS = ["1", "2", "4", "8", "16", "64", "512", "4096"]
ODD_TEXT = ["", " ", "x", "\x00", "nan", "inf", "-inf", "-1", "0", "-0", "1e308", "1e-308",
            "9223372036854775808", "1" * 45, "²", "٣", "0x10", "1_000", " 8 ", "8.5", "1e3",
            "true", "[]", "{}", "a" * 300, "華\u200bh100", "../../etc/passwd", "/dev/zero",
            "/dev/null", "con", "llama3-8b@num_layers=²", "llama3-8b@hidden_size=99999999999",
            "llama3-8b@", "@", "x.toml", "x.json", "\u202e", "\ud800".encode(
                "utf-8", "surrogatepass").decode("utf-8", "replace")]
ODD_VALUES = [True, False, 0, -1, 1, 2**63, 10**40, -(10**40), 1.5, math.nan, math.inf,
              -math.inf, 1e308, "", "x", "²", "\x00", [], [1, 2], {}, {"a": 1}, "a" * 300,
              [[[[]]]], None]
"""Values a file field may be given instead of the right one (None: the key removed)."""


@dataclass
class Case:
    kind: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    """Files the args name, by file name (written into a fresh directory; `{dir}` in args is
    replaced by it)."""


@dataclass
class Outcome:
    case: Case
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    crash: str = ""
    """The traceback of an exception that escaped, or 'hang'."""

    @property
    def problem(self) -> str:
        """Why this run breaks the contract, or '' where it keeps it."""
        if self.crash == "hang":
            return f"hang: over {HANG_S} s"
        if self.crash:
            return "crash: " + self.crash.strip().splitlines()[-1][:200]
        if "Traceback (most recent call last)" in self.stdout + self.stderr:
            return "crash: a traceback was printed"
        if self.code == 2:
            lines = [line for line in self.stderr.splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("error:")]
            if len(errors) != 1 or lines[-1] != errors[0]:
                return f"refusal not one error: line ({len(lines)} stderr lines)"
            return ""
        if self.code != 0:
            return f"exit code {self.code}"
        if "--json" in self.case.args:
            try:
                json.loads(self.stdout, parse_constant=_refuse_constant)
            except ValueError as e:
                return f"bad JSON: {str(e)[:120]}"
        return ""


def _refuse_constant(name: str):
    raise ValueError(f"{name} in JSON output")


class Hang(BaseException):
    """Raised by SIGALRM in a run over its budget (a BaseException: no `except Exception` in
    the code under test swallows it)."""


def run(case: Case, workdir: Path, *, budget_s: float = HANG_S) -> Outcome:
    """`advisor <case.args>` in-process, in `workdir` (its files written there first)."""
    import os

    from advisor.cli import main

    workdir.mkdir(parents=True, exist_ok=True)
    for name, content in case.files.items():
        (workdir / name).write_bytes(content)
    args = [a.replace("{dir}", str(workdir)) for a in case.args]
    out, err = io.StringIO(), io.StringIO()
    code: int | None = None
    crash = ""
    old_argv, old_cwd = sys.argv, os.getcwd()

    def alarm(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    start = time.perf_counter()
    try:
        sys.argv = ["advisor", *args]
        os.chdir(workdir)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except Hang:
        crash = "hang"
    except BaseException:  # noqa: BLE001 - a crash is what this looks for
        crash = traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.argv = old_argv
        os.chdir(old_cwd)
    return Outcome(case, code, out.getvalue(), err.getvalue(), time.perf_counter() - start,
                   crash)


# ---- generators ---------------------------------------------------------------------------

def make_case(kind: str, rng: random.Random) -> Case:
    return {"cli": _cli, "csv": _csv, "cluster": _cluster, "campaign": _campaign,
            "config": _config}[kind](rng)


def _pick(rng: random.Random, good: list[str], odd_share: float = 0.3) -> str:
    return rng.choice(ODD_TEXT) if rng.random() < odd_share else rng.choice(good)


LAYOUT_FLAGS = ("--tp", "--pp", "--cp", "--ep", "--etp", "--vp", "--mbs")
JOB_FLAGS = ("--seq-len", "--gbs")
CHOICE_FLAGS = {"--precision": ["bf16", "fp8", "nvfp4", "fp16"],
                "--recompute": ["none", "selective", "full"],
                "--dp-sharding": ["none", "optimizer", "full"],
                "--finetune": ["none", "lora", "full"],
                "--objective": ["throughput", "energy", "cost", "power", "balanced"],
                "--risk": ["expected", "pessimistic"],
                "--search": ["auto", "exhaustive", "optuna"]}
COMMANDS = {
    "predict": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding",
                                           "--finetune")),
    "explain": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding")),
    "memory": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding")),
    "space": (JOB_FLAGS + ("--limit",), ("--precision",)),
    "recommend": (JOB_FLAGS + ("--tp", "--pp", "--top", "--max-power-w", "--memory-margin",
                               "--max-throttle-risk", "--trials", "--seed"),
                  ("--precision", "--objective", "--risk", "--recompute", "--search")),
    "compare": (JOB_FLAGS + ("--max-power-w", "--memory-margin", "--gpu-hour-price"),
                ("--precision", "--objective")),
}


GOOD_VALUES = {"--tp": ["1", "2", "4", "8"], "--pp": ["1", "2", "4"], "--cp": ["1", "2"],
               "--ep": ["1", "8"], "--etp": ["1"], "--vp": ["1", "2"], "--mbs": ["1", "2"],
               "--seq-len": ["2048", "4096", "8192"], "--gbs": ["128", "256", "1024"],
               "--limit": ["0", "5"], "--top": ["1", "3"], "--max-power-w": ["600", "900"],
               "--memory-margin": ["0", "0.05"], "--max-throttle-risk": ["0.1", "1"],
               "--trials": ["5", "20"], "--seed": ["0", "7"], "--gpu-hour-price": ["2.5"],
               "--gpus": ["8", "16", "64", "128"]}


def _cli(rng: random.Random) -> Case:
    command = rng.choice(sorted(COMMANDS))
    numeric, choice = COMMANDS[command]
    odd = rng.choice([0.0, 0.1, 0.3])     # a third of cases have no odd value at all
    args = [command, "--model", _pick(rng, MODELS, odd)]
    if command == "compare":
        pairs = [f"{p}:{rng.choice(GOOD_VALUES['--gpus'])}" for p in
                 rng.sample(PLATFORMS[:6], rng.randint(1, 3))]
        args += ["--platforms", ",".join(pairs) if rng.random() >= odd
                 else rng.choice(ODD_TEXT)]
    else:
        args += ["--platform", _pick(rng, PLATFORMS, odd),
                 "--gpus", _pick(rng, GOOD_VALUES["--gpus"], odd)]
    for flag in rng.sample(numeric, rng.randint(0, min(2, len(numeric)))):
        args += [flag, _pick(rng, GOOD_VALUES[flag], odd)]
    for flag in rng.sample(choice, rng.randint(0, min(2, len(choice)))):
        args += [flag, _pick(rng, CHOICE_FLAGS[flag], odd)]
    if command == "recommend" and "--search" in args and "--trials" not in args:
        args += ["--trials", rng.choice(["5", "20"])]   # bounded by the generator, not a hang
    if rng.random() < 0.05:
        args.insert(rng.randrange(1, len(args) + 1), rng.choice(["--bogus", "-z", "--tp"]))
    return Case("cli", [*args, "--json"])


CSV_COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "gbs", "tp", "pp", "cp", "ep", "mbs",
               "recompute", "dp_sharding", "precision", "framework", "software")
GOOD_CELLS = {"model": MODELS[:4], "gpu": PLATFORMS[:3], "num_gpus": ["8", "64"],
              "seq_len": ["4096", "8192"], "gbs": ["128", "256"], "tp": ["1", "2", "4"],
              "pp": ["1", "2"], "cp": ["1"], "ep": ["", "1", "8"], "mbs": ["1", "2"],
              "recompute": ["", "none", "full"], "dp_sharding": ["", "optimizer"],
              "precision": ["", "bf16", "fp8"], "framework": ["", "megatron", "nemo"],
              "software": ["", "24.07", "2021"]}


def _csv(rng: random.Random) -> Case:
    import csv

    columns = [c for c in CSV_COLUMNS if c in ("model", "gpu", "num_gpus", "seq_len", "gbs")
               or rng.random() < 0.5]
    if rng.random() < 0.05:
        columns.remove(rng.choice(columns))
    rows = []
    for _ in range(rng.randint(1, 6)):
        rows.append([_pick(rng, GOOD_CELLS[c], 0.15) for c in columns])
    text = io.StringIO()
    csv.writer(text).writerows([columns, *rows])
    data = text.getvalue().encode("utf-8", "surrogateescape")
    if rng.random() < 0.05:
        data = data[:rng.randrange(len(data) + 1)] + bytes([rng.randrange(256)])
    return Case("csv", ["predict", "--input", "{dir}/runs.csv", "--json"], {"runs.csv": data})


CLUSTER = (FIXTURES / "clusters" / "paper-h200.toml").read_text()
CLUSTER_KEYS = ("base", "name", "display_name", "num_nics_per_node", "nic_bandwidth_bytes_per_s",
                "tdp_w", "hbm_bytes", "num_gpus_per_node", "nvlink_domain_size",
                "peak_flops_per_s", "aliases", "sources", "cooling", "chassis",
                "thermal_slowdown_c", "inter_node_latency_s", "hbm_usable_bytes")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") \
            if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)   # a TOML basic string is a JSON string for these
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def _dump_toml(data: dict) -> str:
    """`data` as TOML, every table inline (`budget = { runs = 6 }`): valid for any nesting."""
    return "".join(f"{_key(k)} = {_toml_value(v)}\n" for k, v in data.items())


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() and key.isascii() \
        else json.dumps(key)


def _mutate(rng: random.Random, data: dict, keys: tuple[str, ...]) -> dict:
    """Some fields set, replaced or removed, at the top level or one table down."""
    data = json.loads(json.dumps(data))
    for _ in range(rng.randint(1, 3)):
        target = data
        tables = [k for k, v in data.items() if isinstance(v, dict)]
        if tables and rng.random() < 0.4:
            target = data[rng.choice(tables)]
            key = rng.choice(sorted(target) or ["x"])
        else:
            key = rng.choice(keys)
        value = copy.deepcopy(rng.choice(ODD_VALUES))   # never the shared object itself
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return data


def _damaged(rng: random.Random, text: str) -> bytes:
    raw = bytearray(text.encode())
    if rng.random() < 0.1:
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def _cluster(rng: random.Random) -> Case:
    data = tomllib.loads(CLUSTER)
    text = _dump_toml(_mutate(rng, data, CLUSTER_KEYS) if rng.random() < 0.9 else data)
    command = rng.choice([["catalog", "show", "{dir}/cluster.toml", "--json"],
                          ["predict", "-m", "70b", "-g", "64", "-p", "{dir}/cluster.toml",
                           "--tp", "4", "--pp", "4", "--json"],
                          ["recommend", "-m", "llama3-8b", "-g", "16", "-p",
                           "{dir}/cluster.toml", "--json"]])
    return Case("cluster", command, {"cluster.toml": _damaged(rng, text)})


CAMPAIGN = (ROOT / "collectors" / "templates" / "cpu-smoke.toml").read_text()
CAMPAIGN_KEYS = ("name", "platform", "device", "budget", "steps", "timing", "telemetry",
                 "strategy", "sweep", "models")


def _campaign(rng: random.Random) -> Case:
    data = tomllib.loads(CAMPAIGN)
    text = _dump_toml(_mutate(rng, data, CAMPAIGN_KEYS) if rng.random() < 0.9 else data)
    return Case("campaign", ["collect", "--campaign", "{dir}/campaign.toml", "--dry-run",
                             "--dataset", "{dir}/data.parquet", "--runs-dir", "{dir}/runs",
                             "--json"], {"campaign.toml": _damaged(rng, text)})


CONFIGS = sorted((FIXTURES / "hf_configs").glob("*.json"))


def _config(rng: random.Random) -> Case:
    config = json.loads(rng.choice(CONFIGS).read_text())
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(sorted(config))
        value = copy.deepcopy(rng.choice(ODD_VALUES))
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    data = json.dumps(config).encode()
    roll = rng.random()
    if roll < 0.05:
        data = b"[" * rng.choice([1000, 100_000]) + b"]" * 10
    elif roll < 0.1:
        data = data[:rng.randrange(len(data))] + b"\xff\xfe" + data[rng.randrange(len(data)):]
    elif roll < 0.15:
        data = data.replace(b'"hidden_size": ', b'"hidden_size": 1' + b"0" * 5000 + b", \"x\": ")
    command = rng.choice([["predict", "-g", "8", "-p", "h100", "--tp", "2", "--json"],
                          ["memory", "-g", "8", "-p", "h100", "--json"],
                          ["space", "-g", "8", "-p", "h100", "--json"],
                          ["recommend", "-g", "8", "-p", "h100", "--json"]])
    return Case("config", [*command, "--model", "{dir}/config.json"], {"config.json": data})
