"""Which configurations a campaign measures, and in which order.

`candidates` expands the campaign's sweep into valid configurations (advisor's own space and
rules). `grid` orders them as enumerated. `active` picks, one at a time, the candidate where a
measurement teaches the most: the widest predicted band (the surrogate's p10–p90, which widens
outside its data) times the distance to everything already measured or picked, plus a bonus for
predicted throughput near the best (the configurations users will be told to run are worth
getting right). `targeted` serves the decision: the candidate whose measurement most lowers the
expected regret of the recommendation under the stack calibration fitted to the runs measured
so far (`advisor.learn.stack.pick_next`, one step ahead over its posterior: mostly a job's
likely leaders and the layouts whose bands overlap them; once every pick is settled, the run
that narrows the others' bands most); a run not yet measured (a dry run) counts as measured at
its prediction. Out-of-memory candidates are
measured by `grid` (the paper reports OOMs) but skipped by `active` and `targeted`.
"""

from __future__ import annotations

import hashlib
import itertools
import json

import numpy as np
import pandas as pd

from advisor.catalog import load_model, load_platform, scaled_model_name
from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.parallel import PARALLEL_FIELDS, make_job
from advisor.core.space import enumerate_space
from collectors.campaign import Campaign
from collectors.spec import RunSpec

JOB_KNOBS = ("num_gpus", "seq_len", "gbs", "precision")
DEFAULTS = {"tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "vp": 1, "mbs": 1,
            "recompute": "none", "dp_sharding": "optimizer", "overlap": True,
            "ep_comm_overlap": False, "moe_dispatcher": "auto"}
"""Knobs the sweep does not list stay at these (what `advisor.core.parallel.make_config` uses;
dp_sharding is `none` where there is nothing to shard over)."""
DISTANCE_KNOBS = ("tp", "pp", "cp", "ep", "vp", "mbs", "dp", "seq_len", "gbs", "num_gpus")
PROMISE_WEIGHT = 0.5


def workload_refuses(model, config: dict, device: str) -> str | None:
    """Why collectors.workload cannot run this (a torch-free mirror of its own checks), or
    None. Planning skips these instead of spending the budget on certain failures."""
    if model.is_moe or model.is_mla or model.layer_pattern:
        return "MoE, MLA and hybrid models (the workload trains dense decoders)"
    if not (model.gated_mlp and model.position_embedding == "rope" and model.norm == "rmsnorm"):
        return ("non-Llama-style models (it would train a Llama block of the same shape under "
                "this model's name)")
    if config["cp"] > 1:
        return "cp > 1 (torch 2.13's context parallelism is GPU-only and not implemented)"
    if config["ep"] > 1:
        return "ep > 1 (no experts in a dense decoder)"
    if model.num_kv_heads % config["tp"] or model.ffn_hidden_size % config["tp"]:
        return "tp not dividing num_kv_heads and ffn_hidden_size"
    if device == "cuda" and config["precision"] not in ("bf16", "fp16"):
        return "FP8/FP4 precisions (the workload trains in BF16)"
    return None


def _refuses(campaign: Campaign, job, model, row: dict) -> str | None:
    if campaign.framework == "pytorch":
        return workload_refuses(model, row, campaign.device)
    from advisor.core.space import config_from_row
    from advisor.explain.emit import emit

    try:  # what the framework's launch command cannot express
        emit(campaign.framework, config_from_row(row), job)
    except AdvisorError as e:
        return f"what {campaign.framework} cannot express ({str(e).split(';')[0][:80]})"
    return None


def candidates(campaign: Campaign) -> pd.DataFrame:
    """Every valid configuration the sweep allows that the workload can run: `model`, `gpu`,
    `num_gpus`, `scale` and the `ParallelConfig` columns. `skipped` in `.attrs` counts the
    others by reason."""
    platform = load_platform(campaign.platform)
    frames = []
    skipped: dict[str, int] = {}
    for entry in campaign.models:
        name = scaled_model_name(entry.name, entry.scale)
        model = load_model(name)
        for n, seq, gbs, precision in itertools.product(
                *(campaign.sweep_values(k, None, entry) for k in JOB_KNOBS)):
            if n is None:
                raise ConfigError(f"{campaign.path}: [sweep] needs num_gpus.")
            try:
                job = make_job(model, platform, num_gpus=int(n), seq_len=seq, gbs=gbs,
                               precision=precision or "bf16")
            except AdvisorError as e:
                raise ConfigError(f"{campaign.path}: {name} on {n} × {platform.name}: {e}") \
                    from None
            space = _with_moe_knobs(enumerate_space(job), campaign, entry, model, platform)
            keep = np.ones(len(space), dtype=bool)
            for knob, default in DEFAULTS.items():
                if knob == "dp_sharding" and knob not in {*campaign.sweep, *entry.sweep}:
                    # Unlisted: the distributed optimizer where there is data parallelism to
                    # shard over, nothing to shard otherwise (as make_config would).
                    replicas = (space["dp"] * space["cp"]).to_numpy()
                    keep &= np.where(replicas > 1, space[knob] == "optimizer",
                                     space[knob] == "none")
                    continue
                values = campaign.sweep_values(knob, default, entry)
                column = (_overlap(space) if knob == "overlap" else space[knob])
                keep &= column.isin(list(values)).to_numpy()
            if "dp" in campaign.sweep or "dp" in entry.sweep:
                keep &= space["dp"].isin(list(campaign.sweep_values("dp", None, entry))
                                         ).to_numpy()
            part = space[keep].drop(columns=["tp_beyond_nvlink"])
            reasons = [_refuses(campaign, job, model, row)
                       for row in part.to_dict(orient="records")]
            for reason in filter(None, reasons):
                skipped[reason] = skipped.get(reason, 0) + 1
            part = part[np.array([r is None for r in reasons], dtype=bool)]
            if campaign.framework == "pytorch":
                part = _one_label_per_run(part)
            # `gpu` as the campaign wrote it: a catalog name, or a cluster file that
            # load_platform reads again when the row is predicted or trained on.
            frames.append(part.assign(model=name, gpu=campaign.platform, num_gpus=int(n),
                                      base_model=entry.name, scale=json.dumps(entry.scale)))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if out.empty and skipped:
        why = "; ".join(f"{n} skipped for {r}" for r, n in skipped.items())
        raise ConfigError(f"{campaign.path}: the workload cannot run any configuration of the "
                          f"sweep: {why}.")
    if out.empty:
        raise ConfigError(f"{campaign.path}: the sweep leaves no valid configuration; check "
                          f"that tp·pp·cp divides num_gpus and the other rules "
                          f"(`advisor space` lists what is valid).")
    out["run_id"] = [run_id(campaign.name, row) for row in out.to_dict(orient="records")]
    out = out.drop_duplicates("run_id").reset_index(drop=True)
    out.attrs["skipped"] = skipped
    return out


MOE_KNOBS = ("ep_comm_overlap", "moe_dispatcher")
"""Knobs the space holds at their default (`DEFAULTS`): a sweep that lists other values adds
a copy of the space for each, less the layouts that cannot run it (ep 1, or a rule of
`advisor.core.space.invalid_rows`)."""


def _with_moe_knobs(space: pd.DataFrame, campaign: Campaign, entry, model,
                    platform) -> pd.DataFrame:
    from advisor.core.space import invalid_rows

    grown = False
    for knob in MOE_KNOBS:
        values = list(dict.fromkeys(campaign.sweep_values(knob, DEFAULTS[knob], entry)))
        if values != [DEFAULTS[knob]]:
            space = pd.concat([space.assign(**{knob: v}) for v in values], ignore_index=True)
            grown = True
    if not grown:
        return space
    cols = {k: space[k].to_numpy() for k in PARALLEL_FIELDS}
    return space[~invalid_rows(model, platform, cols)].reset_index(drop=True)


def _one_label_per_run(part: pd.DataFrame) -> pd.DataFrame:
    """Rows that would run identically get one label: the workload has no overlap switch
    (PyTorch's DDP and FSDP2 overlap by themselves), and with tp or pp > 1 it shards DP as
    FSDP2 without resharding (ZeRO-2) whatever dp_sharding says (DDP refuses DTensor
    parameters in torch 2.13), recorded as `optimizer`."""
    if part.empty:
        return part
    part = part.copy()
    overlap = ~(part["overlap_grad_reduce"] | part["overlap_param_gather"]
                | part["tp_comm_overlap"])
    part = part[~overlap | ~_has_overlap_twin(part)]
    meshed = ((part["tp"] > 1) | (part["pp"] > 1)) & (part["dp"] * part["cp"] > 1)
    part.loc[meshed, "dp_sharding"] = "optimizer"
    part.loc[meshed, "overlap_param_gather"] = part.loc[meshed, "overlap_grad_reduce"]
    return part.drop_duplicates([c for c in part.columns if c not in (
        "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")])


def _has_overlap_twin(part: pd.DataFrame) -> pd.Series:
    """Per row: the same configuration exists with overlap on."""
    keys = [c for c in PARALLEL_FIELDS if c not in (
        "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")]
    on = part[part["overlap_grad_reduce"] | part["overlap_param_gather"]
              | part["tp_comm_overlap"]]
    seen = set(map(tuple, on[keys].astype(str).to_numpy()))
    return pd.Series([tuple(r) in seen for r in part[keys].astype(str).to_numpy()],
                     index=part.index)


def _overlap(space: pd.DataFrame) -> pd.Series:
    return space["overlap_grad_reduce"] | space["overlap_param_gather"] | space["tp_comm_overlap"]


#: ParallelConfig fields added after campaigns had been collected: left out of the run id while
#: they hold their default, so a dataset collected before them resumes with the same ids.
_LATER_FIELDS = {"recompute_modules": "core_attn", "ep_comm_overlap": False,
                 "first_stage_layers": 0, "last_stage_layers": 0, "finetune": "none",
                 "lora_rank": 16, "lora_targets": "attention", "moe_dispatcher": "auto",
                 "dp_shard_size": 0, "torch_compile": False}


def run_id(campaign: str, row: dict) -> str:
    """Stable across processes, machines and advisor versions: the campaign, model, platform
    and configuration."""
    fields = {k: _plain(row[k]) for k in PARALLEL_FIELDS}
    for name, default in _LATER_FIELDS.items():
        if fields.get(name) == default:
            del fields[name]
    key = {"model": row["model"], "gpu": row["gpu"], "num_gpus": int(row["num_gpus"]),
           **fields}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{campaign}-{digest}"


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def spec_for(campaign: Campaign, row: pd.Series | dict) -> RunSpec:
    return RunSpec(
        run_id=str(row["run_id"]), campaign=campaign.name, model=str(row["base_model"]),
        scale=json.loads(row["scale"]), platform=str(row["gpu"]),
        num_gpus=int(row["num_gpus"]),
        config={k: _plain(row[k]) for k in PARALLEL_FIELDS}, warmup_steps=campaign.warmup_steps,
        measure_steps=campaign.measure_steps, telemetry=campaign.telemetry,
        telemetry_hz=campaign.telemetry_hz, device=campaign.device, timeout_s=campaign.timeout_s,
        framework=campaign.framework)


def predicted(cands: pd.DataFrame, predictor, *, breakdown: bool = False) -> pd.DataFrame:
    """The Predictor's view of every candidate (band, throughput, memory fit; with
    `breakdown`, the analytical step's terms)."""
    frame = cands[[*PARALLEL_FIELDS, "model", "gpu"]]
    return predictor.predict(frame, breakdown=breakdown).set_index(cands.index)


JOB_KEYS = ("model", "gpu", "num_gpus", "seq_len", "gbs", "precision")
"""What one job is: the layouts of one job compete for the recommendation."""


def targeted_next(cands: pd.DataFrame, preds: pd.DataFrame, picked: set[str],
                  measured: dict[str, float], spread, *, seed: int = 0,
                  priced: dict[float, pd.DataFrame] | None = None) -> tuple[int | None, str]:
    """Index of the next candidate for the `targeted` strategy, and why. `preds` must carry
    the analytical breakdown (`predicted(..., breakdown=True)`); `priced` the same with every
    host time scaled, by factor (`host_priced`; the stack calibration weighs them, default
    only `preds` at 1); `measured` holds the tokens/s per GPU of the campaign's measured runs,
    by run id (a picked run not in it counts as measured at its prediction)."""
    from advisor.learn.stack import fit_stack_host, pick_next

    priced = priced or {1.0: preds}
    ids = cands["run_id"].astype(str).to_numpy()
    done = np.isin(ids, list(picked))
    known = np.array([i in measured for i in ids]) & done
    values = np.array([measured.get(i, np.nan) for i in ids])
    models = cands["model"].astype(str).to_numpy()
    kinds = {m: load_model(m).is_moe for m in set(models)}
    moe = np.array([kinds[m] for m in models], dtype=bool)
    views = {f: _tokens_and_shares(p) for f, p in priced.items()}
    stack = fit_stack_host(lambda f: tuple(a[known] for a in views[f]), values[known], spread,
                           factors=tuple(sorted(views)), models=models[known], moe=moe[known])
    tokens, share = views[stack.host_factor]
    fits = preds.get("pred_fits")
    eligible = (np.isfinite(tokens) & (fits.fillna(False).to_numpy(bool) if fits is not None
                                       else True))
    jobs = cands[list(JOB_KEYS)].astype(str).agg("|".join, axis=1).to_numpy()
    at, why = pick_next(stack, np.nan_to_num(tokens, nan=1.0), share, jobs, done, models, moe,
                        values=np.where(known, values, tokens), seed=seed, eligible=eligible)
    if at >= 0 and stack.host_factor != 1.0:
        why += f" (host time x{stack.host_factor:g}, as the measured runs say)"
    return (None, why) if at < 0 else (at, why)


def host_priced(cands: pd.DataFrame, predictor, preds: pd.DataFrame
                ) -> dict[float, pd.DataFrame]:
    """`preds` (`predicted(..., breakdown=True)` by `predictor`) and the same with every host
    time scaled by each other host factor of the stack calibration
    (`advisor.learn.stack.HOST_FACTORS`)."""
    from advisor.learn.stack import HOST_FACTORS
    from advisor.predict.predictor import Predictor

    return {f: preds if f == 1.0 else predicted(
        cands, Predictor(predictor.surrogate, predictor.calibration.with_host_scale(f),
                         power=predictor.power, stack=predictor.stack), breakdown=True)
        for f in HOST_FACTORS}


def _tokens_and_shares(preds: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    from advisor.learn.stack import shares
    from advisor.perf.analytical import BREAKDOWN_PREFIX

    terms = {k.removeprefix(BREAKDOWN_PREFIX): preds[k].to_numpy(float)
             for k in preds.columns if k.startswith(BREAKDOWN_PREFIX)}
    return preds["pred_tokens_per_sec_per_gpu"].to_numpy(float), np.nan_to_num(shares(terms))


def next_run(cands: pd.DataFrame, preds: pd.DataFrame, done: set[str], *, strategy: str,
             seed: int = 0) -> int | None:
    """Index of the next candidate to measure (None when nothing is left)."""
    left = ~cands["run_id"].isin(done).to_numpy()
    if strategy == "grid":
        positions = np.flatnonzero(left)
        return int(positions[0]) if len(positions) else None
    fits = preds.get("pred_fits")
    usable = left & (fits.fillna(False).to_numpy(bool) if fits is not None else True)
    if not usable.any():
        return None
    return int(np.argmax(np.where(usable, acquisition(cands, preds, done, seed=seed), -np.inf)))


def acquisition(cands: pd.DataFrame, preds: pd.DataFrame, done: set[str], *,
                seed: int = 0) -> np.ndarray:
    """Band width × novelty + PROMISE_WEIGHT × relative predicted throughput (see module doc)."""
    p50 = preds["pred_tokens_per_sec_per_gpu"].to_numpy(float)
    band = np.log(preds["pred_tokens_per_sec_per_gpu_p90"].to_numpy(float)
                  / preds["pred_tokens_per_sec_per_gpu_p10"].to_numpy(float))
    band = np.nan_to_num(band / max(np.nanmax(band), 1e-12))
    novelty = _novelty(cands, cands["run_id"].isin(done).to_numpy())
    promise = np.nan_to_num(p50 / max(np.nanmax(p50), 1e-12))
    jitter = np.random.default_rng(seed).uniform(0, 1e-9, len(cands))  # seeded tie-break
    return band * novelty + PROMISE_WEIGHT * promise + jitter


def _novelty(cands: pd.DataFrame, measured: np.ndarray) -> np.ndarray:
    """Distance to the nearest measured candidate (log2 knob differences plus one per
    categorical mismatch), scaled to [0, 1]; 1 everywhere before the first measurement."""
    if not measured.any():
        return np.ones(len(cands))
    numeric = np.log2(cands[list(DISTANCE_KNOBS)].to_numpy(float))
    categorical = cands[["model", "recompute", "dp_sharding", "precision"]].astype(str).to_numpy()
    overlap = _overlap(cands).to_numpy()
    best = np.full(len(cands), np.inf)
    for i in np.flatnonzero(measured):
        d = (np.abs(numeric - numeric[i]).sum(axis=1)
             + (categorical != categorical[i]).sum(axis=1) + (overlap != overlap[i]))
        best = np.minimum(best, d)
    return best / max(best.max(), 1e-12)
