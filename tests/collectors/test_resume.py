"""`advisor collect --resume` is honest: failed runs run again, a campaign file that changed
since it wrote the dataset is refused unless `--extend`, and `[budget] runs` bounds the
campaign's rows, old and new together. The runs are real (torchrun, gloo, the workload)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.data.dataset import load, read_metadata
from collectors.campaign import (
    campaign_from_dict,
    campaign_hash,
    differences,
    identity,
    load_campaign,
)
from collectors.plan import candidates
from collectors.runner import append_result, campaign_record, run_campaign
from collectors.spec import RunResult

SCALE = ("{ num_layers = 2, hidden_size = 64, ffn_hidden_size = 128, num_attention_heads = 4, "
         "num_kv_heads = 2, vocab_size = 256 }")
TINY = {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "num_kv_heads": 2, "vocab_size": 256}


def _toml(name: str, *, runs: int, tp: str = "[1, 2]", gbs: str = "[8]") -> str:
    return f"""name = "{name}"
platform = "cpu"
device = "cpu"
[budget]
runs = {runs}
[steps]
warmup = 1
measure = 2
[timing]
timeout_s = 240
[telemetry]
kind = "none"
[strategy]
kind = "grid"
[[models]]
name = "llama3-8b"
scale = {SCALE}
[sweep]
num_gpus = [2]
seq_len = [32]
gbs = {gbs}
tp = {tp}
"""


def _collect(tmp_path: Path, campaign: Path, *args: str, env: dict | None = None
             ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", "collect", "--campaign",
                           str(campaign), "--dataset", "rows.parquet", "--runs-dir", "runs",
                           *args], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200",
                               **(env or {})})


@pytest.mark.torch
def test_resume_reruns_failed_runs_and_counts_only_measured_ones(tmp_path):
    campaign = tmp_path / "retry.toml"
    campaign.write_text(_toml("retry", runs=1, tp="[1]"))
    # A real failure that the environment causes and a later attempt need not meet: gloo
    # cannot find the network interface it is told to use.
    first = _collect(tmp_path, campaign, env={"GLOO_SOCKET_IFNAME": "advisor-nonexistent0"})
    assert first.returncode == 0, first.stderr
    failed = load(tmp_path / "rows.parquet")
    assert list(failed["status"]) == ["failed"], failed["notes"].tolist()
    assert failed["notes"].str.contains("advisor-nonexistent0").all()
    again = _collect(tmp_path, campaign)
    assert again.returncode == 2 and "(0 measured, 1 to retry): pass --resume" in again.stderr
    resumed = _collect(tmp_path, campaign, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert ("retry: 1 runs (1 ok), 1 of them retried after failing; 0 already measured; "
            "stopped by run budget (1)") in resumed.stdout
    rows = load(tmp_path / "rows.parquet")
    assert list(rows["run_id"]) == list(failed["run_id"])  # replaced, not added
    assert list(rows["status"]) == ["ok"] and rows["tokens_per_sec_per_gpu"].gt(0).all()


@pytest.mark.torch
def test_a_changed_campaign_is_refused_on_resume_and_extended_within_its_budget(tmp_path):
    campaign = tmp_path / "grow.toml"
    campaign.write_text(_toml("grow", runs=1, tp="[1]"))
    first = _collect(tmp_path, campaign)
    assert first.returncode == 0, first.stderr
    dataset = tmp_path / "rows.parquet"
    before = dataset.read_bytes()
    # The second version measures another batch size (the first row is none of its runs) and
    # allows two runs in all.
    campaign.write_text(_toml("grow", runs=2, gbs="[16]"))
    refused = _collect(tmp_path, campaign, "--resume")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: rows.parquet was written by another version of "
                                     "campaign 'grow'") and len(refused.stderr.splitlines()) == 1
    assert "sweep.gbs: [8] -> [16]" in refused.stderr and "--extend" in refused.stderr
    assert dataset.read_bytes() == before
    extended = _collect(tmp_path, campaign, "--extend")
    assert extended.returncode == 0, extended.stderr
    assert ("grow: 1 runs (1 ok); 1 already measured; stopped by run budget (2)"
            in extended.stdout)
    rows = load(dataset)
    assert len(rows) == 2 and sorted(rows["gbs"]) == [8, 16]
    recorded = read_metadata(dataset)["campaigns"]["grow"]
    assert recorded["sha256"] == campaign_hash(load_campaign(str(campaign)))
    # The same campaign rewritten (comments, spacing, key order) is the same campaign.
    text = campaign.read_text().replace("[steps]\nwarmup = 1\nmeasure = 2",
                                        "[steps]  # shorter runs\nmeasure=2\nwarmup  =  1")
    campaign.write_text("# grow, version 2\n" + text)
    resumed = _collect(tmp_path, campaign, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "grow: 0 runs (none); 2 already measured; stopped by run budget (2)" in resumed.stdout
    assert len(load(dataset)) == 2


def _data(**changes) -> dict:
    data = {"name": "same", "platform": "cpu", "device": "cpu", "budget": {"runs": 4},
            "steps": {"warmup": 1, "measure": 2}, "timing": {"timeout_s": 240},
            "telemetry": {"kind": "none"}, "strategy": {"kind": "grid"},
            "models": [{"name": "llama3-8b", "scale": TINY}],
            "sweep": {"num_gpus": [2], "seq_len": [32], "gbs": [8], "tp": [1, 2]}}
    return {**data, **changes}


def test_the_hash_covers_what_a_row_means_and_nothing_else():
    base = campaign_from_dict(_data())
    # Defaults written out, the budgets, the time limit and the strategy: the same runs.
    for same in (_data(steps={"warmup": 1, "measure": 2}, telemetry={"kind": "none", "hz": 20}),
                 _data(budget={"runs": 9, "gpu_hours": 3.0}), _data(timing={"timeout_s": 60}),
                 _data(strategy={"kind": "active", "seed": 7})):
        assert campaign_hash(campaign_from_dict(same)) == campaign_hash(base)
    for changed, named in ((_data(steps={"warmup": 1, "measure": 5}), "steps.measure: 2 -> 5"),
                           (_data(timing={"cooldown_s": 30}), "timing.cooldown_s: 0.0 -> 30.0"),
                           (_data(telemetry={"kind": "cpu"}), 'telemetry.kind: "none" -> "cpu"'),
                           (_data(models=[{"name": "llama3-8b", "scale": {**TINY,
                                                                           "num_layers": 4}}]),
                            "models[0].scale.num_layers: 2 -> 4")):
        other = campaign_from_dict(changed)
        assert campaign_hash(other) != campaign_hash(base)
        assert differences(identity(base), identity(other)) == [named]


def _failed(campaign, dataset: Path, index: int, status: str) -> str:
    """Record what a launcher returns for a run that did not measure (the system edge)."""
    from collectors.plan import spec_for

    spec = spec_for(campaign, candidates(campaign).iloc[index])
    append_result(dataset, campaign, spec, RunResult(spec.run_id, status, error="lost node"),
                  metadata=campaign_record(campaign))
    return spec.run_id


def test_budget_counts_every_row_of_the_campaign_and_reruns_come_first(tmp_path):
    dataset = tmp_path / "rows.parquet"
    sweep = {"num_gpus": [2], "seq_len": [32], "gbs": [8], "tp": [1, 2], "mbs": [1, 2]}
    campaign = campaign_from_dict(_data(budget={"runs": 3}, sweep=sweep))
    ok = _failed(campaign, dataset, 0, "ok")
    timeout = _failed(campaign, dataset, 1, "timeout")
    plan = run_campaign(campaign, launcher=None, dataset=dataset, runs_dir=tmp_path / "runs",
                        resume=True, dry_run=True)
    assert [s.run_id for s in plan.planned][:1] == [timeout] and plan.retried == 1
    assert len(plan.planned) == 2 and ok not in {s.run_id for s in plan.planned}
    assert plan.skipped == 1 and plan.stopped_by == "run budget (3)"
    # A dataset already at the budget: the rerun only.
    full = campaign_from_dict(_data(budget={"runs": 2}, sweep=sweep))
    plan = run_campaign(full, launcher=None, dataset=dataset, runs_dir=tmp_path / "runs",
                        resume=True, dry_run=True)
    assert [s.run_id for s in plan.planned] == [timeout]


def test_extending_records_the_new_version_even_with_no_run_left(tmp_path):
    from advisor.core.errors import ConfigError
    from collectors.runner import check_previous

    dataset = tmp_path / "rows.parquet"
    first = campaign_from_dict(_data(budget={"runs": 1}))
    _failed(first, dataset, 0, "ok")
    second = campaign_from_dict(_data(budget={"runs": 1}, steps={"warmup": 2, "measure": 2}))
    with pytest.raises(ConfigError, match=r"changed since: steps.warmup: 1 -> 2\); resuming"):
        check_previous(second, dataset, resume=True)
    report = run_campaign(second, launcher=None, dataset=dataset, runs_dir=tmp_path / "runs",
                          extend=True)
    assert not report.planned and report.stopped_by == "run budget (1)"
    check_previous(second, dataset, resume=True)  # the dataset is the second version's now
    assert len(load(dataset)) == 1
    with pytest.raises(ConfigError, match=r"steps.warmup: 2 -> 1"):
        check_previous(first, dataset, resume=True)
