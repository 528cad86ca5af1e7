"""Run a campaign: plan, launch each run, append each finished run to the dataset at once.

A run that fails (OOM, NCCL/gloo error, timeout, crash) is a row with its status and error,
and the campaign goes on. Every row is appended atomically the moment its run ends, keyed by a
stable run id, so a campaign killed at any moment resumes (`resume=True`) with nothing lost
and nothing measured twice; a run that was in flight when it was killed runs again.

Resuming counts a run as done only when it was measured (`ok`, or `oom`: running out of memory
is what that configuration does); a `failed` or `timeout` row is run again and its new row
replaces it. `[budget] runs` bounds the campaign's rows in the dataset, old and new together.
The dataset's metadata records which version of the campaign wrote it (`campaign_hash` of its
`identity`); resuming with a campaign file that changed since is refused unless `extend=True`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from advisor.catalog import load_platform
from advisor.core.errors import ConfigError
from advisor.core.parallel import PRECISIONS, ParallelConfig, token_dispatcher
from advisor.learn.stack import spread_of
from collectors.campaign import Campaign, campaign_hash, differences, identity
from collectors.plan import (
    candidates,
    host_priced,
    next_run,
    predicted,
    spec_for,
    targeted_next,
)
from collectors.spec import TELEMETRY_FIELDS, RunResult, RunSpec

Progress = Callable[[int, int, RunSpec, RunResult | None], None]
FRAMEWORK = "pytorch"
"""The `framework` of rows measured by collectors.workload (PyTorch-native parallelism)."""


DONE_STATUSES = ("ok", "oom")
"""Statuses of a measured run; `failed` and `timeout` runs are retried by resume."""


@dataclass
class CampaignReport:
    campaign: str
    dataset: Path
    planned: list[RunSpec] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)
    skipped: int = 0
    """Runs already measured in the dataset (resume)."""
    retried: int = 0
    """Planned runs that are reruns of a failed or timed-out row."""
    unsupported: dict[str, int] = field(default_factory=dict)
    """Configurations of the sweep the workload cannot run, by reason (not planned)."""
    stopped_by: str = ""
    campaign_hash: str = ""
    changed: list[str] = field(default_factory=list)
    """How the campaign differs from the version that wrote the dataset (empty: the same, or
    no version recorded)."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Why each planned run was picked (`targeted`), by run id."""

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out


@dataclass(frozen=True)
class PreviousRuns:
    """What the dataset already holds of one campaign."""

    ids: frozenset[str] = frozenset()
    """Every run of the campaign, whatever its status."""
    done: frozenset[str] = frozenset()
    """The measured ones (DONE_STATUSES)."""
    measured: dict = field(default_factory=dict)
    """Tokens/s per GPU of the `ok` runs, by run id."""
    recorded: dict | None = None
    """The campaign's record in the dataset's metadata ({"sha256", "identity"}), if any."""

    @property
    def retry(self) -> frozenset[str]:
        return self.ids - self.done


def previous_runs(dataset: Path, campaign: str) -> PreviousRuns:
    from advisor.data.dataset import load, read_metadata

    if not dataset.exists():
        return PreviousRuns()
    frame = load(dataset)
    mine = frame[frame["source_ref"] == campaign]
    done = mine["status"].isin(DONE_STATUSES).fillna(False).to_numpy(bool)
    campaigns = read_metadata(dataset).get("campaigns")
    record = campaigns.get(campaign) if isinstance(campaigns, dict) else None
    ok = mine[(mine["status"] == "ok").fillna(False) & mine["tokens_per_sec_per_gpu"].notna()]
    return PreviousRuns(ids=frozenset(mine["run_id"].astype(str)),
                        done=frozenset(mine.loc[done, "run_id"].astype(str)),
                        recorded=record if isinstance(record, dict) else None,
                        measured=dict(zip(ok["run_id"].astype(str),
                                          ok["tokens_per_sec_per_gpu"].astype(float),
                                          strict=True)))


def run_campaign(campaign: Campaign, *, launcher, dataset: Path, runs_dir: Path,
                 resume: bool = False, extend: bool = False, dry_run: bool = False,
                 predictor=None, progress: Progress | None = None) -> CampaignReport:
    """Measure the campaign's runs (see module docstring); `dry_run` only plans. `extend`
    resumes a dataset written by an earlier version of the campaign."""
    from advisor.predict.predictor import Predictor

    report = CampaignReport(campaign.name, dataset, campaign_hash=campaign_hash(campaign))
    previous, report.changed = check_previous(campaign, dataset, resume=resume, extend=extend,
                                              dry_run=dry_run)
    report.skipped = len(previous.done)
    cands = candidates(campaign)
    report.unsupported = dict(cands.attrs.get("skipped", {}))
    predictor = predictor or Predictor.load()
    targeted = campaign.strategy == "targeted"
    preds = predicted(cands, predictor, breakdown=targeted)
    measured = dict(previous.measured)
    spread = spread_of(predictor.calibration) if targeted else None
    priced = host_priced(cands, predictor, preds) if targeted else None
    # Reruns first, in plan order; they replace their rows, so they spend no run budget.
    retries = [i for i, rid in enumerate(cands["run_id"]) if rid in previous.retry]
    new_allowed = (math.inf if campaign.max_runs is None
                   else max(0, campaign.max_runs - len(previous.ids)))
    left = int((~cands["run_id"].isin(previous.ids)).sum())
    total = len(retries) + int(min(new_allowed, left))
    picked = set(previous.ids)
    ledger = runs_dir / "gpu_hours.json"
    spent_gpu_h = 0.0 if dry_run else _spent(ledger)
    metadata = campaign_record(campaign)
    if report.changed and extend and not dry_run:
        from advisor.data.dataset import update_metadata

        update_metadata(dataset, metadata)  # extended now, even if no run is left to add
    new_runs = 0
    while True:
        if retries:
            index = retries.pop(0)
            report.retried += 1
            why = "rerun of a failed or timed-out run"
        elif new_runs >= new_allowed:
            report.stopped_by = f"run budget ({campaign.max_runs})"
            break
        else:
            if targeted:
                index, why = targeted_next(cands, preds, picked, measured, spread,
                                           seed=campaign.seed, priced=priced)
            else:
                index = next_run(cands, preds, picked, strategy=campaign.strategy,
                                 seed=campaign.seed)
                why = ""
            if index is None:
                report.stopped_by = "no candidates left"
                break
            new_runs += 1
        row = cands.iloc[index]
        estimate = _gpu_hours(campaign, preds.iloc[index], int(row["num_gpus"]))
        if campaign.max_gpu_hours is not None and spent_gpu_h + estimate > campaign.max_gpu_hours:
            report.stopped_by = f"GPU-hour budget ({campaign.max_gpu_hours:g})"
            break
        spec = spec_for(campaign, row)
        picked.add(spec.run_id)
        report.planned.append(spec)
        report.reasons[spec.run_id] = why
        if dry_run:
            spent_gpu_h += estimate
            continue
        if progress:
            progress(len(report.results), total, spec, None)
        started = time.monotonic()
        result = launcher.launch(spec, _workdir(runs_dir, spec))
        spent_gpu_h += (time.monotonic() - started) * spec.num_gpus / 3600
        _record_spent(ledger, spent_gpu_h)  # the GPU-hour budget survives --resume
        append_result(dataset, campaign, spec, result, metadata=metadata)
        report.results.append(result)
        if result.status == "ok" and result.tokens_per_sec_per_gpu:
            measured[spec.run_id] = float(result.tokens_per_sec_per_gpu)
        if progress:
            progress(len(report.results), total, spec, result)
        if campaign.cooldown_s:
            time.sleep(campaign.cooldown_s)
    return report


def campaign_record(campaign: Campaign) -> dict:
    """What the dataset's metadata says about the version of `campaign` that wrote it."""
    return {"campaigns": {campaign.name: {"sha256": campaign_hash(campaign),
                                          "identity": identity(campaign)}}}


def check_previous(campaign: Campaign, dataset: Path, *, resume: bool, extend: bool = False,
                   dry_run: bool = False) -> tuple[PreviousRuns, list[str]]:
    """What `dataset` holds of the campaign, and how the campaign changed since the version
    that wrote it (empty: unchanged, or no version recorded). Refuses to add to a dataset that
    holds the campaign unless resuming (`extend` implies it), and to resume one written by
    another version of the campaign unless extending; a dry run only reports."""
    previous = previous_runs(dataset, campaign.name)
    recorded = previous.recorded or {}
    changed: list[str] = []
    if previous.ids and recorded.get("sha256") not in (None, campaign_hash(campaign)):
        changed = (differences(recorded.get("identity") or {}, identity(campaign))
                   or ["its definition (no record of what it was)"])
    if not previous.ids or dry_run:
        return previous, changed
    if not (resume or extend):
        retry = f", {len(previous.retry)} to retry" if previous.retry else ""
        raise ConfigError(f"{dataset} already has {len(previous.ids)} run(s) of campaign "
                          f"{campaign.name!r} ({len(previous.done)} measured{retry}): pass "
                          f"--resume to continue it, or choose another --dataset.")
    if changed and not extend:
        raise ConfigError(f"{dataset} was written by another version of campaign "
                          f"{campaign.name!r} ({len(previous.ids)} run(s); changed since: "
                          f"{'; '.join(changed)}); resuming would mix runs of both versions. "
                          f"Pass --extend to add this version's runs to that dataset (the run "
                          f"budget counts both), or choose another --dataset or campaign name.")
    return previous, changed


def _spent(ledger: Path) -> float:
    try:
        return float(json.loads(ledger.read_text())["gpu_hours"])
    except (OSError, ValueError, KeyError):
        return 0.0


def _record_spent(ledger: Path, gpu_hours: float) -> None:
    ledger.parent.mkdir(parents=True, exist_ok=True)
    tmp = ledger.with_suffix(".tmp")
    tmp.write_text(json.dumps({"gpu_hours": gpu_hours}) + "\n")
    tmp.replace(ledger)


def _workdir(runs_dir: Path, spec: RunSpec) -> Path:
    path = runs_dir / spec.run_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def _gpu_hours(campaign: Campaign, pred: pd.Series, num_gpus: int) -> float:
    """Predicted steps plus a minute of start-up, times the GPUs."""
    step = pred.get("pred_step_time_s")
    step = float(step) if step is not None and pd.notna(step) else campaign.timeout_s
    seconds = 60.0 + step * (campaign.warmup_steps + campaign.measure_steps)
    return min(seconds, campaign.timeout_s) * num_gpus / 3600.0


def append_result(dataset: Path, campaign: Campaign, spec: RunSpec, result: RunResult, *,
                  metadata: dict | None = None) -> None:
    """One dataset row for a finished run (any status), appended atomically with `metadata`
    merged into the file's. A value outside the schema's range (a sensor glitch, an MFU
    against a placeholder peak) is dropped and named in `notes` rather than losing the run."""
    from advisor.data.dataset import DatasetError, append

    row = to_row(campaign, spec, result)
    try:
        append(dataset, [row], metadata=metadata)
    except DatasetError as e:
        dropped = [k for k in (*TELEMETRY_FIELDS, "mfu", "tflops_per_gpu", "peak_mem_gb")
                   if row.get(k) is not None]
        for key in dropped:
            row[key] = None
        row["notes"] = "; ".join(filter(None, [row.get("notes"), f"dropped {', '.join(dropped)}"
                                               f" after a schema error: {e}"]))
        append(dataset, [row], metadata=metadata)


def to_row(campaign: Campaign, spec: RunSpec, result: RunResult) -> dict:
    """The dataset row of a finished run; a config.json model or a cluster file travels with
    it as `model_spec` / `platform_spec` (`advisor.data.row_specs`)."""
    from advisor.catalog import scaled_model_name
    from advisor.data.row_specs import spec_columns

    c = spec.config
    platform = load_platform(spec.platform)
    peak = platform.peak_flops_per_s.get(PRECISIONS[c["precision"]])
    tflops = result.tflops_per_gpu
    row = {
        "run_id": spec.run_id, "source": "campaign", "source_ref": campaign.name,
        "source_name": f"advisor collect {campaign.name}",
        "collected_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": result.status, "model": scaled_model_name(spec.model, spec.scale),
        "gpu": spec.platform, "num_gpus": spec.num_gpus,
        "framework": result.ran_with.get("framework") or (
            FRAMEWORK if spec.framework == "pytorch" else "megatron"),
        "software": result.ran_with.get("software") or (
            _torch_version() if spec.framework == "pytorch" else spec.framework),
        **{k: c[k] for k in ("precision", "seq_len", "gbs", "mbs", "tp", "pp", "cp", "ep",
                             "etp", "vp", "dp", "recompute", "dp_sharding")},
        **_moe_and_recompute_labels(spec, platform),
        "tokens_per_sec_per_gpu": result.tokens_per_sec_per_gpu,
        "tflops_per_gpu": tflops, "mfu": tflops * 1e12 / peak if tflops and peak else None,
        "step_time_s": result.step_time_s, "peak_mem_gb": result.peak_mem_gb,
        "notes": "; ".join(filter(None, [result.error, *_what_ran(spec, result)])) or None,
        **spec_columns(scaled_model_name(spec.model, spec.scale), spec.platform),
    }
    for key in TELEMETRY_FIELDS:
        row[key] = result.telemetry.get(key)
    return row


def _moe_and_recompute_labels(spec: RunSpec, platform) -> dict:
    """What selective recompute recomputed (where it ran) and, with expert parallelism, the
    all-to-all overlap and the token dispatcher the launch command used (auto resolved as the
    emitter resolved it: `token_dispatcher`); empty where they do not apply."""
    from advisor.catalog import load_model, scaled_model_name

    config = ParallelConfig(**spec.config)
    row = {"recompute_modules": (config.recompute_modules if config.recompute == "selective"
                                 else None), "ep_comm_overlap": None, "moe_dispatcher": None}
    if config.ep > 1:
        model = load_model(scaled_model_name(spec.model, spec.scale))
        row["ep_comm_overlap"] = config.ep_comm_overlap
        row["moe_dispatcher"] = token_dispatcher(model, config, platform)
    return row


def _what_ran(spec: RunSpec, result: RunResult) -> list[str]:
    """Where the workload's run differs from the row's labels; where a replayed one came from."""
    c, notes = spec.config, []
    if "replayed" in result.ran_with:
        return [f"replayed from {result.ran_with['replayed']}"
                + (f", measured by {result.ran_with['source_name']}"
                   if result.ran_with.get("source_name") else "")]
    if spec.framework != "pytorch":
        return notes
    if spec.device == "cpu":
        notes.append(f"CPU run: computed in FP32 (labelled {c['precision']})")
    if (c["tp"] > 1 or c["pp"] > 1) and c["dp"] * c["cp"] > 1:
        notes.append("DP ran as FSDP2 without resharding (ZeRO-2): DDP refuses DTensor "
                     "parameters in torch 2.13")
    return notes


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"torch {version('torch')}"
    except PackageNotFoundError:
        return ""
