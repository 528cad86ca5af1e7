"""Search engines over a job's configuration space: score everything when that is cheap, Optuna
otherwise. The only module that knows Optuna.

Both engines return the same thing: a table of scored configurations (`ParallelConfig` columns
plus the `Predictor`'s `pred_*` columns and the constraint violations), which `recommend` ranks.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from advisor.errors import AdvisorError, ConfigError
from advisor.objective import Constraints
from advisor.parallel import DP_SHARDING, PARALLEL_FIELDS, RECOMPUTE, Job, divisors
from advisor.perf.memory import memory_table
from advisor.space import tp_choices, vp_choices

ENGINES = ("auto", "exhaustive", "optuna")
EXHAUSTIVE_LIMIT = 150_000
"""Most configurations that fit in memory to score exhaustively: about 1.5 s at the Predictor's
~100k predictions/s (benchmarks/predictor_speed.py); larger spaces go to Optuna."""
DEFAULT_TRIALS = 600
BATCH = 32
"""Trials asked before they are told: one vectorised Predictor call per batch."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SearchResult:
    scored: pd.DataFrame
    """Configurations that fit in memory, with `pred_*` columns and one `violates_*` column per
    constraint (≤ 0 = met)."""
    engine: str
    num_valid: int
    """Valid configurations in the space (for Optuna: valid configurations it tried)."""
    num_fit: int
    num_trials: int = 0
    """Trials this process ran (Optuna only)."""
    study_name: str = ""


def search(job: Job, *, predictor, constraints: Constraints, objective: str,
           space: pd.DataFrame, engine: str = "auto", trials: int | None = None,
           storage: str | None = None, study_name: str | None = None, seed: int = 0,
           progress: Progress | None = None) -> SearchResult:
    """Score `space` (an `enumerate_space` table, pins applied) exhaustively or with Optuna."""
    if engine not in ENGINES:
        raise ConfigError(f"search engine {engine!r} is unknown; use one of {', '.join(ENGINES)}.")
    memory = memory_table(job.model, platform=job.platform, configs=space)
    fitting = space[memory["fits"].to_numpy()]
    if engine == "auto":
        engine = "optuna" if storage or len(fitting) > EXHAUSTIVE_LIMIT else "exhaustive"
    if engine == "exhaustive":
        if storage:
            raise ConfigError("--storage shares an Optuna study; it cannot be combined with "
                              "--search exhaustive (drop one).")
        scored = score_configs(job, fitting, predictor=predictor, constraints=constraints)
        return SearchResult(scored, "exhaustive", num_valid=len(space), num_fit=len(fitting))
    return _optuna(job, space, predictor=predictor, constraints=constraints,
                   objective=objective, trials=trials or DEFAULT_TRIALS, storage=storage,
                   study_name=study_name, seed=seed, progress=progress)


def score_configs(job: Job, configs: pd.DataFrame, *, predictor,
                  constraints: Constraints) -> pd.DataFrame:
    """`configs` with the Predictor's columns and one `violates_*` column per constraint."""
    if configs.empty:
        return configs.reset_index(drop=True)
    frame = configs[list(PARALLEL_FIELDS)].assign(model=job.model, gpu=job.platform)
    predicted = predictor.predict(frame)
    out = pd.concat([configs.reset_index(drop=True), predicted.reset_index(drop=True)], axis=1)
    # Rows the Predictor refuses keep NaN predictions (and are never feasible).
    out = out.reindex(columns=[*out.columns.drop("pred_error", errors="ignore"),
                               *(c for c in _PREDICTED if c not in out.columns)])
    capacity_gb = job.platform.memory_capacity_bytes / 1e9
    violations = constraints.violations(out, capacity_gb)
    for name in violations:
        out[f"violates_{name}"] = violations[name].to_numpy()
    return out


_PREDICTED = ("pred_tokens_per_sec_per_gpu", "pred_tokens_per_sec_per_gpu_p10",
              "pred_memory_gb", "pred_peak_power_w", "pred_throttle_risk",
              "pred_energy_j_per_token", "pred_fits")


def violation_columns(scored: pd.DataFrame) -> list[str]:
    return [c for c in scored.columns if c.startswith("violates_")]


def feasible(scored: pd.DataFrame) -> np.ndarray:
    """Rows that were predicted and meet every constraint (NaN counts as a violation)."""
    cols = violation_columns(scored)
    ok = scored["pred_tokens_per_sec_per_gpu"].notna().to_numpy()
    return ok & (scored[cols].to_numpy() <= 0).all(axis=1) if cols else ok


# --- Optuna -----------------------------------------------------------------------------------

def default_study_name(job: Job, *, objective: str, constraints: Constraints,
                       pins: dict) -> str:
    """Same question → same study: workers started with the same flags share one study."""
    key = json.dumps({"model": job.model.name, "platform": job.platform.name,
                      "gpus": job.num_gpus, "seq": job.seq_len, "gbs": job.gbs,
                      "precision": job.precision, "objective": objective,
                      "constraints": constraints.describe(), "pins": pins},
                     sort_keys=True, default=str)
    return f"advisor-{job.model.name}-{job.num_gpus}x{job.platform.name}-" + \
        hashlib.sha256(key.encode()).hexdigest()[:10]


def open_storage(url: str | None):
    """None (in memory), an Optuna journal file (a path), or a database URL
    (postgresql+psycopg2://..., sqlite:///...). Unreachable storage is a clear error."""
    if not url:
        return None
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    if "://" not in url:
        try:
            return JournalStorage(JournalFileBackend(url))
        except OSError as e:
            raise AdvisorError(f"cannot open the Optuna journal file {url}: {e.strerror}; "
                               f"check the directory exists and is writable.") from None
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except ModuleNotFoundError as e:
            raise AdvisorError(f"storage {url.split('://')[0]}:// needs the {e.name} driver: "
                               f"pip install 'advisor[postgres]'.") from None
        except (IntegrityError, ProgrammingError):
            # Workers starting together on an empty database race to create Optuna's tables;
            # the loser retries and finds them.
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
        except Exception as e:  # SQLAlchemy raises many types for a bad URL or a dead server
            text = str(e).strip()
            first = text.splitlines()[0][:160] if text else type(e).__name__
            raise AdvisorError(f"cannot reach the Optuna storage {_redact(url)}: {first}. "
                               f"Check the host, port, database and credentials.") from None


def _redact(url: str) -> str:
    head, _, tail = url.partition("://")
    if "@" in tail:
        tail = "***@" + tail.split("@", 1)[1]
    return f"{head}://{tail}"


def _choices(job: Job, space: pd.DataFrame) -> dict[str, list]:
    """Static choice lists per knob (Optuna needs the same choices in every trial); which
    combinations are valid is checked per trial."""
    model, n = job.model, job.num_gpus
    pinned = {k: sorted(space[k].unique().tolist()) for k in
              ("tp", "cp", "pp", "vp", "ep", "etp", "mbs", "recompute", "dp_sharding")}
    tps = [t for t in tp_choices(model) if n % t == 0]
    pps = [p for p in divisors(n) if p <= model.num_layers]
    vps = sorted({v for p in pps if p > 1 for v in vp_choices(model, p)} | {1})
    out = {"tp": tps, "cp": divisors(n), "pp": pps, "vp": vps,
           "mbs": divisors(job.gbs), "recompute": list(RECOMPUTE),
           "dp_sharding": list(DP_SHARDING), "overlap": [True, False]}
    if model.is_moe:
        out["ep"] = divisors(model.num_experts)
        out["etp"] = sorted(set(tps))
    for k, values in pinned.items():  # a pinned knob has one value
        if len(values) == 1:
            out[k] = values
    return out


def _suggest(trial, choices: dict[str, list]) -> dict:
    """Define-by-run: vp only with a pipeline, ep/etp only for MoE models."""
    p = {k: trial.suggest_categorical(k, choices[k]) for k in ("tp", "cp", "pp")}
    p["vp"] = trial.suggest_categorical("vp", choices["vp"]) if p["pp"] > 1 else 1
    for k in ("ep", "etp"):
        p[k] = trial.suggest_categorical(k, choices[k]) if k in choices else 1
    for k in ("mbs", "recompute", "dp_sharding", "overlap"):
        p[k] = trial.suggest_categorical(k, choices[k])
    return p


def _lookup(space: pd.DataFrame) -> dict[tuple, int]:
    keys = space[["tp", "cp", "pp", "vp", "ep", "etp", "mbs", "recompute", "dp_sharding"]]
    overlap = (space["overlap_grad_reduce"] | space["overlap_param_gather"]
               | space["tp_comm_overlap"])
    index: dict[tuple, int] = {}
    for i, row in enumerate(zip(*(keys[c] for c in keys.columns), overlap, strict=True)):
        index.setdefault(tuple(row), i)
    return index


def _optuna(job: Job, space: pd.DataFrame, *, predictor, constraints: Constraints,
            objective: str, trials: int, storage: str | None, study_name: str | None,
            seed: int, progress: Progress | None) -> SearchResult:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = (["maximize", "minimize"] if objective == "balanced" else
                  ["minimize"] if objective == "energy" else ["maximize"])
    name = study_name or default_study_name(job, objective=objective,
                                            constraints=constraints, pins={})
    sampler = optuna.samplers.TPESampler(seed=seed)
    try:
        study = optuna.create_study(study_name=name, storage=open_storage(storage),
                                    directions=directions, sampler=sampler,
                                    load_if_exists=True)
    except AdvisorError:
        raise
    except Exception as e:
        raise AdvisorError(f"cannot open the Optuna study {name} in {_redact(storage or '')}:"
                           f" {str(e).splitlines()[0][:160]}") from None
    choices = _choices(job, space)
    index = _lookup(space)
    for preset in _presets(job, space, choices):
        study.enqueue_trial(preset, skip_if_exists=True)
    cache: dict[int, pd.Series] = {}
    done = 0
    while done < trials:
        batch = [study.ask() for _ in range(min(BATCH, trials - done))]
        rows = [index.get(_key(_suggest(t, choices))) for t in batch]
        new = sorted({r for r in rows if r is not None and r not in cache})
        if new:
            part = score_configs(job, space.iloc[new], predictor=predictor,
                                 constraints=constraints)
            for r, (_, row) in zip(new, part.iterrows(), strict=True):
                cache[r] = row
        for trial, r in zip(batch, rows, strict=True):
            _tell(study, trial, cache.get(r), objective, directions)
        done += len(batch)
        if progress:
            progress(done, trials)
    # Every worker sharing the study answers from all of its trials, not only its own.
    tried = sorted({r for t in study.get_trials(deepcopy=False,
                                                states=(optuna.trial.TrialState.COMPLETE,))
                    if (r := index.get(_key({"vp": 1, "ep": 1, "etp": 1, **t.params})))
                    is not None})
    scored = score_configs(job, space.iloc[tried], predictor=predictor,
                           constraints=constraints)
    fits = scored["pred_fits"].astype(bool).to_numpy()
    return SearchResult(scored[fits].reset_index(drop=True), "optuna", num_valid=len(tried),
                        num_fit=int(fits.sum()), num_trials=done, study_name=name)


def _key(p: dict) -> tuple:
    return (p["tp"], p["cp"], p["pp"], p["vp"], p["ep"], p["etp"], p["mbs"], p["recompute"],
            p["dp_sharding"], p["overlap"])


def _tell(study, trial, row: pd.Series | None, objective: str, directions: list[str]) -> None:
    """Invalid layouts are infeasible trials with the worst values, so TPE learns to avoid
    them; constraint values are the predicted excess (≤ 0 = met)."""
    if row is None or row.get("pred_tokens_per_sec_per_gpu") is None or \
            pd.isna(row.get("pred_tokens_per_sec_per_gpu")):
        trial.set_constraint("valid", 1.0)
        worst = [0.0 if d == "maximize" else 1e9 for d in directions]
        study.tell(trial, worst)
        return
    trial.set_constraint("valid", 0.0)
    for col in row.index:
        if col.startswith("violates_"):
            trial.set_constraint(col.removeprefix("violates_"), float(row[col]))
    # The values `objective.score` ranks by: pessimistic (p10) throughput and the energy per
    # token it implies.
    tps = float(row["pred_tokens_per_sec_per_gpu"])
    low = min(float(row.get("pred_tokens_per_sec_per_gpu_p10", tps)), tps)
    energy = float(row["pred_energy_j_per_token"]) * tps / low
    values = {"throughput": [low], "energy": [energy], "balanced": [low, energy]}[objective]
    study.tell(trial, values)


def _presets(job: Job, space: pd.DataFrame, choices: dict[str, list]) -> list[dict]:
    """Known-good starting points, as NVIDIA's recipes choose them: for each tp up to one
    NVLink domain, the smallest pipeline that fits with the least recompute, mbs 1, the
    distributed optimizer and overlap on."""
    candidates = space[(space["cp"] == 1) & (space["mbs"] == space["mbs"].min())
                       & (space["vp"] == 1) & (space["ep"] == space["ep"].max())]
    candidates = candidates[candidates["tp"] <= job.platform.nvlink_domain_size]
    if candidates.empty:
        return []
    fits = memory_table(job.model, platform=job.platform, configs=candidates)["fits"].to_numpy()
    candidates = candidates[fits]
    order = {r: i for i, r in enumerate(RECOMPUTE)}
    out = []
    for _tp, group in candidates.groupby("tp"):
        group = group.assign(_r=group["recompute"].map(order))
        best = group.sort_values(["pp", "_r", "dp_sharding"]).iloc[0]
        preset = {k: _plain(best[k]) for k in ("tp", "cp", "pp", "mbs", "recompute",
                                               "dp_sharding")}
        preset["overlap"] = True
        if "ep" in choices:
            preset.update(ep=_plain(best["ep"]), etp=_plain(best["etp"]))
        out.append(preset)
    return out


def _plain(value):
    return value.item() if hasattr(value, "item") else value
