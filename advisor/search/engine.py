"""Search engines over a job's configuration space: score everything when that is cheap, Optuna
otherwise. The only module that knows Optuna.

Both engines return the same thing: a `Table` of scored configurations (`ParallelConfig`
columns plus the `Predictor`'s `pred_*` columns and the constraint violations), which
`recommend` ranks.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from advisor.core.errors import AdvisorError, ConfigError, first_line
from advisor.core.knobs import LAYOUT, overlap
from advisor.core.knobs import SEARCH_ORDER as KNOBS
from advisor.core.parallel import PARALLEL_FIELDS, RECOMPUTE, Job
from advisor.core.table import Table
from advisor.perf.columns import config_columns, full_length
from advisor.perf.memory import memory_table, space_memory
from advisor.search.objective import POWER_BOUNDS, Constraints, throughput_basis
from advisor.search.trials import (
    SearchInterrupted,
    deferred_interrupt,
    fail_stale,
    fail_unfinished,
)

if TYPE_CHECKING:
    import pandas as pd

ENGINES = ("auto", "exhaustive", "optuna")
EXHAUSTIVE_LIMIT = 150_000
"""Most configurations that fit in memory to score exhaustively: about 1.5 s at the Predictor's
~100k predictions/s (benchmarks/predictor_speed.py); larger spaces go to Optuna."""
MOST_EXHAUSTIVE = 4 * EXHAUSTIVE_LIMIT
"""Most fitting configurations `search` exhaustive scores when asked to: beyond, the answer
would take minutes and gigabytes on a 2-core machine, so it is refused with the way out."""
MOST_TRIALS = 100_000
"""Most Optuna trials one process runs (about 5 ms each: a quarter of an hour)."""
DEFAULT_TRIALS = 600
BATCH = 32
"""Trials asked before they are told: one vectorised Predictor call per batch."""
PRUNE_ABOVE = 20_000
"""Exhaustive searches for throughput with more fitting configurations than this predict them
best bound first (`score_within_reach`); smaller spaces are predicted whole (fast already)."""
PRUNE_SHARE = 0.7
"""A configuration whose throughput bound is under this share of the best predicted throughput
is not predicted: it cannot be among the picks (the tie rule reaches 5 % below the best), nor
a trade-off a user would take; `recommend` says how many were left out."""
MOST_PRUNED = 2 * EXHAUSTIVE_LIMIT
"""Most fitting configurations an exhaustive search with a bound takes on (auto): Kimi-K2 on
1,024 GB200 fits 168,184, which Optuna's 600 trials took longer to sample than this scores
(benchmarks/recommend_speed.py)."""
PRUNE_CHUNK = 4_096
"""Configurations predicted first, best bound first, to find the best that the rest are
pruned against."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SearchResult:
    scored: Table
    """Configurations that fit in memory, with `pred_*` columns and one `violates_*` column per
    constraint (≤ 0 = met)."""
    engine: str
    num_valid: int
    """Valid configurations in the space (for Optuna: valid configurations it tried)."""
    num_fit: int
    num_trials: int = 0
    """Trials this process ran (Optuna only)."""
    study_name: str = ""
    num_space: int = 0
    """Valid configurations in the (pinned) space."""
    tried: Table | None = None
    """Optuna only: the configurations its trials landed on (configuration columns), so that
    a search at another power limit can re-score them instead of sampling again."""
    num_pruned: int = 0
    """Exhaustive only: fitting configurations never predicted, their throughput bound under
    `PRUNE_SHARE` of the best (`score_within_reach`)."""


@dataclass(frozen=True)
class SearchEngine:
    """How a job's space is searched: `kind` exhaustive (score every layout that fits),
    optuna (multi-objective TPE over the knobs, `trials` per process, a study shared through
    `storage` under `study_name`, sampler `seed`), or auto: Optuna when an Optuna setting is
    given or more than `EXHAUSTIVE_LIMIT` layouts fit, exhaustive otherwise.

    Raises:
        ConfigError: an unknown `kind`, or an Optuna setting with `kind` exhaustive.
    """

    kind: str = "auto"
    trials: int | None = None
    storage: str | None = None
    study_name: str | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ConfigError(f"`search` engine {self.kind!r} is unknown; use one of "
                              f"{', '.join(ENGINES)}.")
        if self.trials is not None and not 1 <= self.trials <= MOST_TRIALS:
            raise ConfigError(f"`trials` must be in 1..{MOST_TRIALS:,} (about 5 ms each), got "
                              f"{self.trials:,}; share a study between workers (`storage`) "
                              f"for more.")
        if self.kind == "exhaustive" and self.optuna_settings():
            raise ConfigError(f"{', '.join(f'`{s}`' for s in self.optuna_settings())} set(s) "
                              f"up an Optuna search; it cannot be combined with `search` "
                              f"exhaustive (drop one).")

    def optuna_settings(self) -> list[str]:
        """The Optuna-only settings given."""
        return [name for name in ("trials", "storage", "study_name", "seed")
                if getattr(self, name) is not None]

    def resolve(self, num_fit: int) -> str:
        """exhaustive or optuna, for a space in which `num_fit` layouts fit."""
        if self.kind == "exhaustive" and num_fit > MOST_EXHAUSTIVE:
            raise ConfigError(f"{num_fit:,} layouts fit: more than `search` exhaustive scores "
                              f"({MOST_EXHAUSTIVE:,}, about 10 s and 2 GB); use `search` optuna "
                              f"(or auto), or pin some knobs.")
        if self.kind != "auto":
            return self.kind
        return ("optuna" if self.optuna_settings() or num_fit > EXHAUSTIVE_LIMIT
                else "exhaustive")


def search(job: Job, *, predictor, constraints: Constraints, objective: str,
           space: Table, pins: dict | None = None,
           engine: SearchEngine | None = None, progress: Progress | None = None,
           risk: str = "expected", top: int = 5) -> SearchResult:
    """Score `space` (a `space_table` with `pins` applied) as `engine` says (default:
    `SearchEngine()`, auto)."""
    engine = engine or SearchEngine()
    memory = full_length(space_memory(job.model, platform=job.platform,
                                      cols=config_columns(space)), len(space))
    fits = memory["fits"]
    fitting = space.take(fits)
    # The memory model's answer for the fitting rows goes with them: it runs once.
    fit_memory = {k: v[fits] for k, v in memory.items()}
    # Searching for throughput, an upper bound on each layout's throughput (about a third of
    # a prediction's cost) lets exhaustive scoring skip the layouts that cannot come near the
    # best, so it takes on spaces up to MOST_PRUNED, which would otherwise go to Optuna.
    bound = (predictor.throughput_bound(job.model, job.platform, fitting, memory=fit_memory)
             if objective == "throughput" and PRUNE_ABOVE < len(fitting) <= MOST_PRUNED
             and engine.kind != "optuna" and not engine.optuna_settings()
             and hasattr(predictor, "throughput_bound") else None)
    if bound is not None or engine.resolve(len(fitting)) == "exhaustive":
        if bound is None:
            scored, pruned = score_configs(job, fitting, predictor=predictor,
                                           constraints=constraints, memory=fit_memory), 0
        else:
            scored, pruned = score_within_reach(job, fitting, bound, predictor=predictor,
                                                constraints=constraints, memory=fit_memory,
                                                risk=risk, top=top)
        return SearchResult(scored, "exhaustive", num_valid=len(space), num_fit=len(fitting),
                            num_space=len(space), num_pruned=pruned)
    return _optuna(job, space, engine, predictor=predictor, constraints=constraints,
                   objective=objective, pins=pins or {}, progress=progress, risk=risk)


def score_configs(job: Job, configs: Table, *, predictor, constraints: Constraints,
                  memory: dict[str, np.ndarray] | None = None, all_refused: bool = True
                  ) -> Table:
    """`configs` with the Predictor's columns and one `violates_*` column per constraint
    (`memory`: the memory model's columns for `configs`, where the caller ran it)."""
    if configs.empty:
        return configs
    # With the analytical breakdown: recommend explains its choices from these columns
    # instead of running the analytical model again.
    predicted = predictor.predict_table(job.model, job.platform,
                                        configs.select(PARALLEL_FIELDS), breakdown=True,
                                        memory=memory)
    errors = predicted["pred_error"]
    if all_refused and (errors != "").all():
        # The space holds valid layouts only: all of them refused is the job's or the
        # platform's problem (a cluster file naming an unknown chassis, say), not theirs.
        raise AdvisorError(f"no layout of {job.model.name} on {job.platform.name} could be "
                           f"predicted: {errors[0]}")
    columns = configs.columns
    columns.update((k, predicted[k]) for k in predicted.names if k != "pred_error")
    # Rows the Predictor refuses keep NaN predictions (and are never feasible).
    columns.update((c, np.full(len(configs), np.nan)) for c in _PREDICTED if c not in columns)
    out = Table(columns, num_rows=len(configs))
    capacity_gb = job.platform.memory_capacity_bytes / 1e9
    violations = constraints.violations(out, capacity_gb, platform=job.platform)
    return out.with_columns({f"violates_{name}": values for name, values in violations.items()})


def score_within_reach(job: Job, configs: Table, bound: np.ndarray, *, predictor,
                       constraints: Constraints, memory: dict[str, np.ndarray],
                       risk: str = "expected", top: int = 5) -> tuple[Table, int]:
    """`score_configs` for the configurations that can come within `PRUNE_SHARE` of the best
    throughput: predicted highest `bound` (an upper bound on each one's predicted tokens/s per
    GPU) first, until the next bound is under that share of the best feasible prediction so
    far, and at least `top` distinct layouts (`knobs.LAYOUT`) have a feasible variant above
    it (else the rest are predicted too: the picks are always those of scoring everything).
    Returns the scored rows, in `configs`' order, and how many were left out."""
    order = np.argsort(-bound, kind="stable")
    parts, best, done = [], -np.inf, 0
    while done < len(order):
        cut = PRUNE_SHARE * best
        if parts and bound[order[done]] < cut:
            if _layouts_above(parts, cut, risk) >= top:
                break
            cut = -np.inf                 # too few layouts within reach: predict the rest
        # The first chunk finds a best to prune by; the next takes every row still within
        # reach of it at once (one vectorised call, not many small ones).
        end = (done + PRUNE_CHUNK if not parts or not np.isfinite(cut) else
               done + int(np.count_nonzero(bound[order[done:]] >= cut)))
        rows = order[done:max(end, done + 1)]
        part = score_configs(job, configs.take(rows), predictor=predictor,
                             constraints=constraints, all_refused=False,
                             memory={k: v[rows] for k, v in memory.items()})
        parts.append((rows, part))
        ok = feasible(part)
        if ok.any():
            best = max(best, float(np.nanmax(throughput_basis(part.take(ok), risk))))
        done += len(rows)
    rows = np.concatenate([r for r, _ in parts])
    back = np.argsort(rows, kind="stable")        # the space's order: ties rank as before
    scored = Table.concat([p for _, p in parts]).take(back)
    if np.isnan(np.asarray(scored["pred_tokens_per_sec_per_gpu"], dtype=float)).all():
        # Every row refused: predicting one again raises score_configs' error with its reason.
        score_configs(job, configs.take(order[:1]), predictor=predictor,
                      constraints=constraints)
    return scored, len(order) - done


def _layouts_above(parts: list[tuple[np.ndarray, Table]], cut: float, risk: str) -> int:
    """Distinct layouts with a feasible variant whose throughput basis is at least `cut`."""
    keys = set()
    for _, part in parts:
        ok = feasible(part)
        ok[ok] = throughput_basis(part.take(ok), risk) >= cut
        above = part.take(ok)
        keys.update(zip(*(above[k].tolist() for k in LAYOUT), strict=True))
    return len(keys)


_PREDICTED = ("pred_tokens_per_sec_per_gpu", "pred_tokens_per_sec_per_gpu_p10",
              "pred_memory_gb", "pred_avg_power_w", "pred_peak_power_w", "pred_throttle_risk",
              "pred_energy_j_per_token", "pred_usd_per_million_tokens", "pred_thermal_loss",
              "pred_power_cap_loss", "pred_fits")


def violation_columns(scored: Table) -> list[str]:
    return [c for c in scored.names if c.startswith("violates_")]


def feasible(scored: Table) -> np.ndarray:
    """Rows that were predicted and meet every constraint (NaN counts as a violation)."""
    ok = ~np.isnan(np.asarray(scored["pred_tokens_per_sec_per_gpu"], dtype=float))
    for col in violation_columns(scored):
        ok &= scored[col] <= 0
    return ok


# --- Optuna -----------------------------------------------------------------------------------

def default_study_name(job: Job, *, objective: str, constraints: Constraints,
                       pins: dict, risk: str = "expected") -> str:
    """Same question → same study: workers started with the same flags share one study."""
    key = json.dumps({"model": job.model.name, "platform": job.platform.name,
                      "gpus": job.num_gpus, "seq": job.seq_len, "gbs": job.gbs,
                      "precision": job.precision, "objective": objective,
                      "constraints": constraints.describe(), "pins": pins,
                      **({"risk": risk} if risk != "expected" else {})},
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
        path = Path(url)
        if path.exists() and not path.is_file():
            # A directory, a device (/dev/zero would be read for ever), a pipe: no journal.
            raise AdvisorError(f"cannot use {url} as an Optuna journal: it is not a regular "
                               f"file; give a file path (created if missing) or a database "
                               f"URL.")
        try:
            return JournalStorage(JournalFileBackend(url))
        except OSError as e:
            raise AdvisorError(f"cannot open the Optuna journal file {url}: {first_line(e)}; "
                               f"check the directory exists and is writable.") from None
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(5):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
        except ModuleNotFoundError as e:
            raise AdvisorError(f"storage {url.split('://')[0]}:// needs the {e.name} driver: "
                               f"pip install 'advisor[postgres]'.") from None
        except (IntegrityError, ProgrammingError) as e:
            # Workers starting together on an empty database race to create Optuna's tables;
            # the loser retries and finds them.
            if attempt == 4:
                raise AdvisorError(f"cannot set up Optuna's tables in {_redact(url)}: "
                                   f"{first_line(e)}") from None
            time.sleep(0.2 * (attempt + 1))
        except Exception as e:  # SQLAlchemy raises many types for a bad URL or a dead server
            raise AdvisorError(f"cannot reach the Optuna storage {_redact(url)}: "
                               f"{first_line(e)}. "
                               f"Check the host, port, database and credentials.") from None


def _redact(url: str) -> str:
    head, _, tail = url.partition("://")
    if "@" in tail:
        tail = "***@" + tail.split("@", 1)[1]
    return f"{head}://{tail}"


INVALID = 10.0
"""Constraint value of a configuration that could not be predicted: worse than any real
violation (those are scaled to fractions of their limit)."""


def _with_overlap(space: pd.DataFrame) -> pd.DataFrame:
    return space.assign(overlap=overlap(space))


def _choices(space: pd.DataFrame) -> dict[str, list]:
    """Per knob, the values the (pinned) space takes. The lists are the same in every trial
    of a study (Optuna refuses changing choices): pins are part of the study's name."""
    return {k: sorted(space[k].unique().tolist(), key=str) for k in KNOBS}


def _suggest(trial, choices: dict[str, list]) -> dict:
    """Define-by-run: vp only with a pipeline; a knob with one value is not a parameter."""

    def pick(name: str):
        values = choices[name]
        return values[0] if len(values) == 1 else trial.suggest_categorical(name, values)

    p = {k: pick(k) for k in ("tp", "cp", "pp")}
    p["vp"] = pick("vp") if p["pp"] > 1 else 1
    for k in ("ep", "etp", "mbs", "recompute", "dp_sharding", "overlap"):
        p[k] = pick(k)
    return p


class _Nearest:
    """Maps a sampled combination of knobs to a configuration of the space: itself when
    valid, else the nearest valid one (log2 distance on sizes, one per differing category).
    Most combinations of independently sampled sizes break a divisibility rule; repairing
    them keeps every trial informative instead of teaching TPE what is invalid."""

    NUMERIC = ("tp", "cp", "pp", "vp", "ep", "etp", "mbs")
    CATEGORICAL = ("recompute", "dp_sharding", "overlap")

    def __init__(self, space: pd.DataFrame) -> None:
        # Each knob's values as small integers, and each row as one integer in mixed radix:
        # a big MoE space has millions of rows, too many for a dict of tuples.
        import pandas as pd

        self.codes: dict[str, dict] = {}
        row_codes: dict[str, np.ndarray] = {}
        for k in KNOBS:
            row_codes[k], uniques = pd.factorize(space[k].to_numpy())
            self.codes[k] = {_plain(u): i for i, u in enumerate(uniques.tolist())}
        radix = np.array([max(len(self.codes[k]), 1) for k in KNOBS], dtype=np.int64)
        if np.prod(radix.astype(float)) >= 2.0 ** 62:
            raise AdvisorError("the space's knobs take too many values to index")
        self.place = dict(zip(KNOBS, (np.cumprod(radix[::-1])[::-1] // radix).tolist(),
                              strict=True))          # each knob's weight in the row's integer
        combined = np.zeros(len(space), dtype=np.int64)
        for k in KNOBS:
            combined += row_codes[k].astype(np.int64) * self.place[k]
        # The first row of each distinct combination (np.unique reports first occurrences).
        self.keys, self.first = np.unique(combined, return_index=True)
        self.sizes = np.log2(space[list(self.NUMERIC)].to_numpy(float))
        self.categories = np.stack([row_codes[k] for k in self.CATEGORICAL], axis=1)
        # Repairs search among rows with the sampled tp and pp first (a big MoE space has
        # millions of rows; most repairs only need to fix the sizes that follow).
        self.by_layout = {key: np.asarray(rows) for key, rows in
                          space.groupby(["tp", "pp"]).indices.items()}

    def _exact(self, p: dict) -> int | None:
        """The first row with exactly `p`'s knobs, or None."""
        key = 0
        for k in KNOBS:
            code = self.codes[k].get(_plain(p[k]))
            if code is None:
                return None
            key += code * self.place[k]
        at = int(np.searchsorted(self.keys, key))
        return int(self.first[at]) if at < len(self.keys) and self.keys[at] == key else None

    def __call__(self, p: dict) -> int:
        exact = self._exact(p)
        if exact is not None:
            return exact
        sizes = np.log2(np.array([p[k] for k in self.NUMERIC], dtype=float))
        categories = np.array([self.codes[k].get(_plain(p[k]), -1) for k in self.CATEGORICAL])
        rows = self.by_layout.get((p["tp"], p["pp"]))
        if rows is None:
            rows = np.arange(len(self.sizes))
        distance = (np.abs(self.sizes[rows] - sizes).sum(axis=1)
                    + (self.categories[rows] != categories).sum(axis=1))
        return int(rows[np.argmin(distance)])


def _optuna(job: Job, space: Table, engine: SearchEngine, *, predictor,
            constraints: Constraints, objective: str, pins: dict, progress: Progress | None,
            risk: str = "expected") -> SearchResult:
    import optuna

    trials, storage, seed = engine.trials or DEFAULT_TRIALS, engine.storage, engine.seed
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = (["maximize", "minimize"] if objective == "balanced" else
                  ["minimize"] if objective == "energy" else ["maximize"])
    name = engine.study_name or default_study_name(job, objective=objective,
                                                   constraints=constraints, pins=pins, risk=risk)
    if seed is None and storage is None:
        seed = 0  # reproducible alone; workers sharing a study each draw their own
    # Multivariate TPE for every objective (Optuna's default only for a single objective): one
    # joint density per trial instead of one per knob, which for `balanced` (two objectives)
    # cut a 600-trial search from 22.5 to 7.9 CPU-seconds and reached twice the valid layouts
    # (gpt3-175b on 16 MI300X, PP pinned to 1: 216 against 105, the same #1).
    sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True)
    try:
        study = optuna.create_study(study_name=name, storage=open_storage(storage),
                                    directions=directions, sampler=sampler,
                                    load_if_exists=True)
    except AdvisorError:
        raise
    except Exception as e:
        raise AdvisorError(f"cannot open the Optuna study {name} in {_redact(storage or '')}:"
                           f" {first_line(e)}") from None
    fail_stale(study)
    keyed = _with_overlap(space.to_frame())
    choices, nearest = _choices(keyed), _Nearest(keyed)
    for preset in _presets(job, keyed, choices):
        study.enqueue_trial(preset, skip_if_exists=True)
    capacity_gb = job.platform.memory_capacity_bytes / 1e9
    cache: dict[int, dict] = {}
    row_of_trial: dict[int, int] = {}
    done, batch, told = 0, [], set()
    try:
        with deferred_interrupt() as interrupt:
            while done < trials:
                interrupt.check()
                batch = []
                for _ in range(min(BATCH, trials - done)):
                    batch.append(study.ask())
                try:
                    rows = [nearest(_suggest(t, choices)) for t in batch]
                except ValueError as e:  # Optuna: a parameter's choices differ from the study's
                    raise AdvisorError(f"the Optuna study {name} was created with other choices "
                                       f"({first_line(e)}); pass a new `study_name`.") from None
                new = sorted({r for r in rows if r not in cache})
                if new:
                    part = score_configs(job, space.take(new), predictor=predictor,
                                         constraints=constraints)
                    for r, row in zip(new, part.rows(), strict=True):
                        cache[r] = row
                for trial, r in zip(batch, rows, strict=True):
                    row_of_trial[trial.number] = r
                    _tell(study, trial, cache.get(r), objective, directions,
                          scales=_scales(constraints, capacity_gb), risk=risk)
                    told.add(trial.number)
                done += len(batch)
                if progress:
                    progress(done, trials)
    except BaseException as e:  # Ctrl-C or an error: no trial of ours stays RUNNING
        fail_unfinished(study, [t for t in batch if t.number not in told])
        if isinstance(e, KeyboardInterrupt) and not isinstance(e, SearchInterrupted):
            raise SearchInterrupted(study_name=name, storage=storage and _redact(storage),
                                    num_told=len(told)) from None
        raise
    # Every worker sharing the study answers from all of its trials, not only its own.
    # (This process's trials were mapped as they ran.)
    tried = sorted({row_of_trial[t.number] if t.number in row_of_trial
                    else nearest({**_fixed(choices), **t.params})
                    for t in study.get_trials(deepcopy=False,
                                              states=(optuna.trial.TrialState.COMPLETE,))})
    landed = space.take(tried)
    scored = score_configs(job, landed, predictor=predictor, constraints=constraints)
    fits = scored["pred_fits"].astype(bool) if len(scored) else np.zeros(0, bool)
    return SearchResult(scored.take(fits), "optuna", num_valid=len(tried),
                        num_fit=int(fits.sum()), num_trials=done, study_name=name,
                        num_space=len(space), tried=landed)


def _fixed(choices: dict[str, list]) -> dict:
    """Values of knobs that are not parameters (one choice), and vp 1 without a pipeline."""
    return {"vp": 1, **{k: v[0] for k, v in choices.items() if len(v) == 1}}


def _scales(constraints: Constraints, capacity_gb: float) -> dict[str, float]:
    """Divisors that make every violation a fraction of its limit (GB and W are not
    comparable, and TPE ranks infeasible trials by their summed violation)."""
    return {"memory_gb": capacity_gb, "throttle_risk": 1.0,
            **{violation: getattr(constraints, name) or 1.0
               for name, (violation, _) in POWER_BOUNDS.items()}}


def _tell(study, trial, row: dict | None, objective: str, directions: list[str], *,
          scales: dict[str, float], risk: str = "expected") -> None:
    """Invalid layouts are infeasible trials with the worst values, so TPE learns to avoid
    them; constraint values are the predicted excess as a fraction of the limit (≤ 0 = met)."""
    if row is None or math.isnan(row.get("pred_tokens_per_sec_per_gpu", math.nan)):
        trial.set_constraint("valid", INVALID)
        worst = [0.0 if d == "maximize" else 1e9 for d in directions]
        study.tell(trial, worst)
        return
    trial.set_constraint("valid", 0.0)
    for col in row:
        if col.startswith("violates_"):
            name = col.removeprefix("violates_")
            trial.set_constraint(name, float(row[col]) / scales.get(name, 1.0))
    # The values `objective.score` ranks by: the median throughput (the p10 when risk-averse)
    # and the energy per token it implies.
    tps = float(row["pred_tokens_per_sec_per_gpu"])
    low = (min(float(row.get("pred_tokens_per_sec_per_gpu_p10", tps)), tps)
           if risk == "averse" else tps)
    energy = float(row["pred_energy_j_per_token"]) * tps / low
    usd = float(row.get("pred_usd_per_million_tokens", float("nan"))) * tps / low
    # Cost: million tokens per dollar, maximised; without a GPU-hour price, the throughput
    # order (as `objective.score`).
    values = {"throughput": [low], "cost": [1.0 / usd if usd == usd else low],
              "energy": [energy],
              "balanced": [low, energy]}[objective]
    study.tell(trial, values)


def _presets(job: Job, space: pd.DataFrame, choices: dict[str, list]) -> list[dict]:
    """Known-good starting points, as NVIDIA's recipes choose them: for each tp up to one
    NVLink domain, the smallest pipeline that fits with the least recompute, the smallest
    micro-batch, no context parallelism, and overlap where the space allows it."""
    candidates = space[(space["cp"] == space["cp"].min()) & (space["mbs"] == space["mbs"].min())
                       & (space["vp"] == space["vp"].min())]
    candidates = candidates[candidates["tp"] <= job.platform.nvlink_domain_size]
    if candidates.empty:
        return []
    fits = memory_table(job.model, platform=job.platform, configs=candidates)["fits"].to_numpy()
    candidates = candidates[fits]
    order = {r: i for i, r in enumerate(RECOMPUTE)}
    out = []
    for _, group in candidates.groupby("tp"):
        group = group.assign(_r=group["recompute"].map(order), _o=~group["overlap"])
        best = group.sort_values(["pp", "_r", "_o", "dp_sharding"]).iloc[0]
        preset = {k: _plain(best[k]) for k in KNOBS if len(choices[k]) > 1}
        if best["pp"] == 1:
            preset.pop("vp", None)
        out.append(preset)
    return out


def _plain(value):
    return value.item() if hasattr(value, "item") else value
