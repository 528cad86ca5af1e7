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

KINDS = ("cli", "csv", "cluster", "campaign", "config", "geometry", "paths", "emit")
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
            "llama3-8b@", "@", "x.toml", "x.json", "\u202e", "1" + "0" * 309, "1e-300",
            "1e300", "-1e400", "`x`", "\ud800".encode(
                "utf-8", "surrogatepass").decode("utf-8", "replace")]
ODD_VALUES = [True, False, 0, -1, 1, 2**63, 10**40, -(10**40), 1.5, math.nan, math.inf,
              -math.inf, 1e308, "", "x", "²", "\x00", [], [1, 2], {}, {"a": 1}, "a" * 300,
              [[[[]]]], None, 10**309, -(10**309), 1e-300, 1e300, 4096.5, 5e-324]
"""Values a file field may be given instead of the right one (None: the key removed)."""


@dataclass
class Case:
    kind: str
    args: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    """Files the args name, by file name (written into a fresh directory; `{dir}` in args is
    replaced by it). A name may hold a folder: `m$(x)/config.json`."""
    specials: dict[str, str] = field(default_factory=dict)
    """Things that are no regular file, by name: "dir", "fifo", "link:TARGET"."""


@dataclass
class Outcome:
    case: Case
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    crash: str = ""
    """The traceback of an exception that escaped, or 'hang'."""
    escape: str = ""
    """What ran that should not have: a `pwned` file, an emitted command bash cannot parse."""

    @property
    def problem(self) -> str:
        """Why this run breaks the contract, or '' where it keeps it."""
        if self.crash == "hang":
            return f"hang: over {HANG_S} s"
        if self.crash:
            return "crash: " + self.crash.strip().splitlines()[-1][:200]
        if self.escape:
            return "escape: " + self.escape[:200]
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
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_bytes(content)
    for name, what in case.specials.items():
        _make_special(workdir / name, what)
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
    seconds = time.perf_counter() - start
    escape = _escape(case, code, out.getvalue(), workdir)
    return Outcome(case, code, out.getvalue(), err.getvalue(), seconds, crash, escape)


def _make_special(path: Path, what: str) -> None:
    import os

    if what == "dir":
        path.mkdir(parents=True, exist_ok=True)
    elif what == "fifo":
        os.mkfifo(path)
    elif what.startswith("link:"):
        path.symlink_to(what.removeprefix("link:"))
    else:
        raise ValueError(what)


RECORDED = ("torchrun", "nemo")
"""The framework launchers an emitted command may run (replaced by a recorder)."""


def _escape(case: Case, code: int | None, stdout: str, workdir: Path) -> str:
    """A `pwned` file anywhere in the case's directory; for an emitted launch command, that
    bash cannot parse it or that running it (frameworks replaced by a recorder) runs anything
    else."""
    import os
    import subprocess

    if case.kind == "emit" and code == 0:
        launch = (json.loads(stdout).get("launch") or {}).get("command")
        if launch:
            if subprocess.run(["bash", "-n"], input=launch, text=True,
                              capture_output=True).returncode:
                return "bash -n rejects the emitted command"
            work, bin_dir = workdir / "exec", workdir / "bin"
            work.mkdir(exist_ok=True)
            bin_dir.mkdir(exist_ok=True)
            for name in RECORDED:
                (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
                (bin_dir / name).chmod(0o755)
            env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                   "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "DATA_ARGS": "",
                   "TRAIN_ARGS": ""}
            subprocess.run(["bash", "-e"], input=launch, text=True, cwd=work, env=env,
                           capture_output=True, timeout=60)
    pwned = [str(p.relative_to(workdir)) for p in workdir.rglob("pwned")]
    return f"a file named pwned was created: {pwned[0]}" if pwned else ""


# ---- generators ---------------------------------------------------------------------------

def make_case(kind: str, rng: random.Random) -> Case:
    return {"cli": _cli, "csv": _csv, "cluster": _cluster, "campaign": _campaign,
            "config": _config, "geometry": _geometry, "paths": _paths,
            "emit": _emit}[kind](rng)


def _pick(rng: random.Random, good: list[str], odd_share: float = 0.3) -> str:
    return rng.choice(ODD_TEXT) if rng.random() < odd_share else rng.choice(good)


LAYOUT_FLAGS = ("--tp", "--pp", "--cp", "--ep", "--etp", "--vp", "--mbs", "--dp-shard-size")
JOB_FLAGS = ("--seq-len", "--gbs")
CHOICE_FLAGS = {"--precision": ["bf16", "fp8", "nvfp4", "fp16", "fp8-row"],
                "--recompute": ["none", "selective", "full"],
                "--recompute-modules": ["moe_act,layernorm", "mlp", "core_attn moe", "mla_up_proj"],
                "--dp-sharding": ["none", "optimizer", "full"],
                "--finetune": ["none", "lora", "full"],
                "--objective": ["throughput", "energy", "cost", "power", "balanced"],
                "--risk": ["expected", "pessimistic"],
                "--search": ["auto", "exhaustive", "optuna"],
                "--moe-dispatcher": ["auto", "alltoall", "deepep", "flex", "allgather"]}
COMMANDS = {
    "predict": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding",
                                           "--finetune", "--recompute-modules",
                                           "--moe-dispatcher")),
    "explain": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding",
                                           "--recompute-modules", "--moe-dispatcher")),
    "memory": (LAYOUT_FLAGS + JOB_FLAGS, ("--precision", "--recompute", "--dp-sharding",
                                          "--recompute-modules")),
    "space": (JOB_FLAGS + ("--limit",), ("--precision",)),
    "recommend": (JOB_FLAGS + ("--tp", "--pp", "--top", "--max-power-w", "--memory-margin",
                               "--max-throttle-risk", "--trials", "--seed", "--dp-shard-size"),
                  ("--precision", "--objective", "--risk", "--recompute", "--search",
                   "--recompute-modules", "--moe-dispatcher")),
    "compare": (JOB_FLAGS + ("--max-power-w", "--memory-margin", "--gpu-hour-price"),
                ("--precision", "--objective")),
}


GOOD_VALUES = {"--tp": ["1", "2", "4", "8"], "--pp": ["1", "2", "4"], "--cp": ["1", "2"],
               "--ep": ["1", "8"], "--etp": ["1"], "--vp": ["1", "2"], "--mbs": ["1", "2"],
               "--seq-len": ["2048", "4096", "8192"], "--gbs": ["128", "256", "1024"],
               "--limit": ["0", "5"], "--top": ["1", "3"], "--max-power-w": ["600", "900"],
               "--memory-margin": ["0", "0.05"], "--max-throttle-risk": ["0.1", "1"],
               "--trials": ["5", "20"], "--seed": ["0", "7"], "--gpu-hour-price": ["2.5"],
               "--gpus": ["8", "16", "64", "128"], "--dp-shard-size": ["0", "2", "8", "3"]}


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
    if command in ("predict", "explain", "memory", "recommend") and rng.random() < 0.1:
        args.append("--ep-comm-overlap")
    if command == "recommend" and "--search" in args and "--trials" not in args:
        args += ["--trials", rng.choice(["5", "20"])]   # bounded by the generator, not a hang
    if rng.random() < 0.05:
        args.insert(rng.randrange(1, len(args) + 1), rng.choice(["--bogus", "-z", "--tp"]))
    return Case("cli", [*args, "--json"])


CSV_COLUMNS = ("model", "gpu", "num_gpus", "seq_len", "gbs", "tp", "pp", "cp", "ep", "mbs",
               "recompute", "recompute_modules", "ep_comm_overlap", "moe_dispatcher",
               "dp_sharding", "dp_shard_size", "precision", "framework", "software")
GOOD_CELLS = {"model": MODELS[:4], "gpu": PLATFORMS[:3], "num_gpus": ["8", "64"],
              "seq_len": ["4096", "8192"], "gbs": ["128", "256"], "tp": ["1", "2", "4"],
              "pp": ["1", "2"], "cp": ["1"], "ep": ["", "1", "8"], "mbs": ["1", "2"],
              "recompute": ["", "none", "full"], "dp_sharding": ["", "optimizer"],
              "recompute_modules": ["", "moe_act layernorm", "mlp"],
              "ep_comm_overlap": ["", "true", "false"],
              "moe_dispatcher": ["", "auto", "alltoall", "flex"],
              "dp_shard_size": ["", "0", "2", "8", "3"],
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


# ---- degenerate model geometry ------------------------------------------------------------

GEOMETRY = {"hidden_size": [16, 64, 4096, 4096.5, 1, 3, 8192],
            "num_attention_heads": [1, 3, 48, 64, 4097],
            "num_key_value_heads": [1, 3, 7, 8, 64],
            "head_dim": [None, 0, 1, 7, 128, 10**6],
            "intermediate_size": [1, 3, 4096.5, 14336, 10**12],
            "vocab_size": [1, 3, 32000, 2**40],
            "num_hidden_layers": [1, 2, 3, 80, 10**6],
            "max_position_embeddings": [None, 1, 8192, 10**9]}
"""Shapes a config.json may have that no real model does: heads that do not divide the width,
fractional widths, one-wide everything, absurd depths and vocabularies."""


def _geometry(rng: random.Random) -> Case:
    config = {"model_type": rng.choice(["llama", "mistral", "qwen3", "mixtral"])}
    for key, values in GEOMETRY.items():
        value = rng.choice(values)
        if value is not None:
            config[key] = value
    if config["model_type"] == "mixtral":
        config.update(num_local_experts=rng.choice([2, 8, 3]),
                      num_experts_per_tok=rng.choice([1, 2, 9]))
    command = rng.choice([["predict", "-g", "8", "-p", "h100", "--json"],
                          ["explain", "-g", "8", "-p", "h100", "--json"],
                          ["memory", "-g", "8", "-p", "h100", "--json"],
                          ["recommend", "-g", "8", "-p", "h100", "--json"]])
    return Case("geometry", [*command, "--model", "{dir}/config.json"],
                {"config.json": json.dumps(config).encode()})


# ---- special files for every path option ---------------------------------------------------

SPECIAL_PATHS = {"/dev/zero": {}, "/dev/null": {}, "{dir}": {}, "{dir}/sub": {"sub": "dir"},
                 "{dir}/fifo": {"fifo": "fifo"}, "{dir}/zero": {"zero": "link:/dev/zero"},
                 "{dir}/loop": {"loop": "link:loop"}, "{dir}/dangling": {"dangling":
                                                                           "link:nowhere"},
                 "{dir}/missing/x": {}, "{dir}/new\nline": {}, "": {},
                 # longer than a file name may be (255 bytes): ENAMETOOLONG, not "no such file"
                 "x" * 300: {}, "{dir}/" + "y" * 300 + ".json": {}}
"""A path option's value, and what the case's directory must hold for it."""
RUNS_CSV = (b"model,gpu,num_gpus,seq_len,gbs,tp,pp\nllama3-8b,h100,8,4096,128,2,1\n")


def _paths(rng: random.Random) -> Case:
    path = rng.choice(sorted(SPECIAL_PATHS))
    job = ["-m", "llama3-8b", "-g", "16", "-p", "h100"]
    command = rng.choice([
        ["recommend", *job, "--search", "optuna", "--trials", "5", "--storage", path, "--json"],
        ["recommend", *job, "--plot", path, "--json"],
        ["predict", "--input", path, "--json"],
        ["predict", "--input", "{dir}/runs.csv", "--output", path],
        ["predict", *job, "--tp", "2", "--models", path, "--json"],
        ["collect", "--campaign", path, "--dry-run", "--dataset", "{dir}/d.parquet",
         "--runs-dir", "{dir}/runs", "--json"],
        ["collect", "--campaign", "{dir}/c.toml", "--dry-run", "--dataset", path,
         "--runs-dir", "{dir}/runs", "--json"],
        ["dataset", "show", path],
        ["dataset", "validate", path],
        ["catalog", "show", path, "--json"],
    ])
    return Case("paths", command, {"runs.csv": RUNS_CSV, "c.toml": CAMPAIGN.encode()},
                dict(SPECIAL_PATHS[path]))


# ---- hostile names through every emitter ---------------------------------------------------

HOSTILE_PIECES = ["m", "$(touch pwned)", "`touch pwned`", "'", '"', ";", " ", "&&", "|",
                  ">pwned", "\n", "\\", "$HOME", "*", "?", "~", "-rf", "--help", "é", "#",
                  "{a,b}", "!", "; touch pwned; ", "$'\\x41'", "\t", "%s", "${IFS}"]
"""Pieces of a model folder's name that a shell would read as code if it were not quoted."""
TINY_LLAMA = json.dumps({"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,
                         "intermediate_size": 8192, "num_attention_heads": 32,
                         "num_key_value_heads": 8, "vocab_size": 128256,
                         "max_position_embeddings": 8192}).encode()


def _emit(rng: random.Random) -> Case:
    name = "m" + "".join(rng.choice(HOSTILE_PIECES) for _ in range(rng.randint(1, 4)))
    extra = rng.choice([[], [], ["--finetune", "lora"], ["--recompute", "selective"],
                        ["--tp", "2"]])
    kind = rng.choice(["megatron", "nemo", "torchtitan"])
    return Case("emit", ["recommend", "-m", "{dir}/" + name, "-g", "16", "-p", "h100",
                         "--emit", kind, *extra, "--json"],
                {f"{name}/config.json": TINY_LLAMA})
