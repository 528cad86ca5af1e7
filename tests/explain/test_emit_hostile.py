"""An emitted launch command runs nothing but its framework, whatever the model is called: every
emitter, with model directories named to break out of a shell word, run under bash with the
framework commands replaced by a recorder."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.explain.emit import emit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "llama3.1-405b.json"
HOSTILE = ["m$(touch pwned)", "m`touch pwned`", "m'; touch pwned; '", 'm"; touch pwned; "',
           "m; touch pwned", "m && touch pwned #", "m|touch pwned", "m>pwned"]
RECORDED = ("torchrun", "nemo")


def _recorder(bin_dir: Path, log: Path) -> None:
    """`torchrun` and `nemo` that write their argv (one JSON list per call) and do nothing."""
    for name in RECORDED:
        script = bin_dir / name
        script.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                          f"open({str(log)!r}, 'a').write(json.dumps([{name!r}, *sys.argv[1:]])"
                          " + '\\n')\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)


def _run(text: str, cwd: Path, bin_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "DATA_ARGS": "", "TRAIN_ARGS": ""}
    return subprocess.run(["bash", "-e"], input=text, text=True, cwd=cwd, env=env,
                          capture_output=True, timeout=60)


def _job(tmp_path: Path, name: str, **finetune):
    model_dir = tmp_path / name
    model_dir.mkdir()
    shutil.copy(FIXTURE, model_dir / "config.json")
    model = catalog.load_model(str(model_dir / "config.json"))
    job = make_job(model, catalog.load_platform("h100"), num_gpus=1024, seq_len=8192,
                   gbs=1024, **finetune)
    return job, make_config(job, tp=8, pp=16, vp=1, mbs=1, recompute="full")


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("kind, finetune", [("megatron", {}), ("nemo", {}),
                                            ("nemo", {"finetune": "lora"}),
                                            ("torchtitan", {})])
def test_emitted_commands_run_only_the_framework(tmp_path, name, kind, finetune):
    job, config = _job(tmp_path, name, **finetune)
    text = emit(kind, config, job)
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0, text
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    log = tmp_path / "calls.jsonl"
    _recorder(bin_dir, log)
    result = _run(text, work, bin_dir)
    assert result.returncode == 0, result.stderr
    assert not any(p.name == "pwned" for p in tmp_path.rglob("*")), text
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 1 and calls[0][0] in RECORDED     # the framework, once, and nothing else
    written = [p.name for p in work.iterdir()]             # a heredoc's recipe or script only
    assert all(n.startswith("advisor_") and n.endswith(".py") for n in written), written


@pytest.mark.parametrize("name", HOSTILE)
def test_torchtitan_config_module_keeps_the_name_out_of_its_code(tmp_path, name):
    """The written config module is valid Python whatever the directory is called, and the
    name appears only as data (the tokenizer path), never as code or a path of this machine."""
    import ast

    from advisor.explain.emit.torchtitan import torchtitan_recipe

    job, _ = _job(tmp_path, name)
    source = torchtitan_recipe(job.model, "bf16").source
    tree = ast.parse(source)  # a quote in the name broke out of the string literal before
    paths = [node.value.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
             and getattr(node.targets[0], "attr", "") == "hf_assets_path"]
    assert paths == ["./assets/hf/" + job.model.name]
    assert str(tmp_path) not in source
