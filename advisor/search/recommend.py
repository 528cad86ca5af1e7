"""`recommend`: the best configurations for a job under an objective and constraints, each with
its prediction, explanation and warnings, plus the Pareto fronts and the trade-offs.

    from advisor.search.recommend import recommend
    rec = recommend(job, objective="throughput", constraints=Constraints(max_power_w=650))
    rec.choices[0].config      # ParallelConfig to launch
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from advisor.catalog import with_conditions
from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.knobs import LAYOUT, NAMES, overlap, sorted_values
from advisor.core.parallel import (
    MOE_DISPATCHERS,
    MOE_RECOMPUTE_MODULES,
    Job,
    ParallelConfig,
    dispatcher_name,
    make_job,
    recompute_modules_name,
)
from advisor.core.space import (
    config_from_row,
    dispatcher_error,
    recompute_modules_error,
    space_table,
    tp_choices,
    validate,
)
from advisor.core.table import Table
from advisor.explain.rationale import (
    contributions_in_words,
    describe,
    layout_reasons,
    neighbours,
    short,
    tradeoff,
    warnings,
)
from advisor.perf.columns import columns_of, config_columns
from advisor.predict.predictor import Prediction, Predictor
from advisor.search import power_limit
from advisor.search.degraded import DegradedAdvice, route_around
from advisor.search.engine import SearchEngine, feasible, search, violation_columns
from advisor.search.objective import (
    HEADROOM_TOLERANCE,
    LOSS_BOUNDS,
    POWER_BOUNDS,
    TIE_TOLERANCE,
    Constraints,
    check_objective,
    check_risk,
    pareto_front,
    rank,
    throughput_basis,
)
from advisor.search.placement import Placement, propose_placement
from advisor.search.power_limit import LIMIT_OBJECTIVES, LimitPoint, best_limit

if TYPE_CHECKING:
    import pandas as pd


class Infeasible(AdvisorError):
    """No configuration meets the job's memory or the user's constraints."""


@dataclass(frozen=True)
class Choice:
    """One recommended configuration."""

    rank: int
    summary: str
    prediction: Prediction
    """Throughput with p10/p90, memory, power, energy, expected losses and thermal risk, their
    source, and the analytical breakdown behind the explanation."""
    reasons: list[str]
    warnings: list[str]
    contributions: str = ""
    placement: Placement | None = None
    """An uneven pipeline split the model predicts better for the objective (None: the even
    split is best, or pp is 1)."""

    @property
    def config(self) -> ParallelConfig:
        """The configuration to launch."""
        return self.prediction.config


@dataclass(frozen=True)
class Recommendation:
    job: Job
    objective: str
    constraints: Constraints
    pins: dict
    engine: str
    num_valid: int
    num_fit: int
    num_feasible: int
    choices: list[Choice]
    tradeoffs: list[str]
    power_front: Table = field(repr=False)
    """The Pareto front of throughput against peak power (`objective.pareto_front`)."""
    energy_front: Table = field(repr=False)
    """... against energy per token."""
    ranked_table: Table = field(repr=False)
    """Every feasible scored configuration, best first."""
    num_trials: int = 0
    study_name: str = ""
    risk: str = "expected"
    ranking: list[str] = field(default_factory=list)
    """How the order was decided, in words: the basis (median or p10), and where a tie rule or
    the risk-averse basis put a layout ahead of a faster one."""
    limit_tradeoff: list[LimitPoint] = field(default_factory=list)
    """#1 across the power limits the search tried (energy, balanced and cost objectives
    without a limit given): empty where the limit was not searched."""
    num_pruned: int = 0
    """Fitting layouts never predicted: their throughput bound was under `PRUNE_SHARE` of the
    best (`engine.score_within_reach`); the trade-offs and Pareto fronts are among the rest."""
    degraded: DegradedAdvice | None = None
    """Where the job's platform marks degraded nodes: the job with them against the healthy
    nodes alone."""
    searched: Table | None = field(default=None, repr=False)
    """Optuna only: the layouts its trials landed on (`SearchResult.tried`)."""
    framework: str = "megatron"
    """The framework whose rules the space follows (`space_table(framework=)`): with
    torchtitan, only the micro-batch counts torch's interleaved schedule runs."""

    @property
    def ranked(self) -> pd.DataFrame:
        """`ranked_table` as a DataFrame."""
        return self.ranked_table.to_frame()

    @property
    def pareto_power(self) -> pd.DataFrame:
        """`power_front` as a DataFrame."""
        return self.power_front.to_frame()

    @property
    def pareto_energy(self) -> pd.DataFrame:
        """`energy_front` as a DataFrame."""
        return self.energy_front.to_frame()


def recommend(job: Job, *, objective: str = "throughput", risk: str = "expected",
              constraints: Constraints | None = None, pins: dict | None = None, top: int = 5,
              predictor=None, engine: SearchEngine | None = None, progress=None,
              search_power_limit: bool = True, framework: str = "megatron") -> Recommendation:
    """Search `job`'s space and return the `top` distinct layouts (see module docstring),
    ranked on the expected (median) prediction, or on the pessimistic p10 with
    `risk="averse"`. The space holds the layouts `framework` runs (`space_table`; the launch
    command's framework: torchtitan interleaves only micro-batch counts torch's schedule
    divides into equal rounds, where Megatron-Core groups others). For the energy, balanced
    and cost objectives the GPU power limit is a knob too (`advisor.search.power_limit`)
    unless the job's platform sets one or `search_power_limit` is False: the layouts are then
    those of the best limit, and `limit_tradeoff` shows #1 across the limits tried. Where the
    job's platform marks degraded nodes, `degraded` says whether leaving them out is
    faster."""
    predictor = predictor or Predictor.load()
    rec = _recommend(job, objective=objective, risk=risk, constraints=constraints, pins=pins,
                     top=top, predictor=predictor, engine=engine, progress=progress,
                     framework=framework)
    advice = route_around(
        job, rec.choices[0].prediction.tokens_per_sec_per_gpu * job.num_gpus,
        recommend_job=lambda healthy: _recommend(
            healthy, objective=objective, risk=risk, constraints=constraints, pins={}, top=1,
            predictor=predictor, engine=engine, progress=None, framework=framework))
    rec = dataclasses.replace(rec, degraded=advice)
    if not (search_power_limit and objective in LIMIT_OBJECTIVES
            and job.platform.power_limit_w is None):
        return rec
    limit = best_limit(job, rec.ranked_table.first_of_each(LAYOUT), predictor,
                       objective=objective, risk=risk)
    board, board_rec = float(job.platform.tdp_w), rec
    current, tried = board, {board}
    # The best layout at the chosen limit may prefer another limit itself (the trade-off shown
    # is its own): follow it until #1 and its limit agree (two rounds at most in practice).
    # An Optuna search is not run again at another limit: the layouts its trials landed on
    # are re-scored there (a second sampling would double the time for the same region).
    while limit != current and limit not in tried:
        limited = dataclasses.replace(job, platform=with_conditions(
            job.platform, power_limit_w=limit, given_by="the search"))
        rec = _recommend(limited, objective=objective, risk=risk, constraints=constraints,
                         pins=pins, top=top, predictor=predictor, engine=engine,
                         progress=progress, space=board_rec.searched, framework=framework)
        if board_rec.searched is not None:
            rec = dataclasses.replace(
                rec, engine=board_rec.engine, num_trials=board_rec.num_trials,
                study_name=board_rec.study_name, num_valid=board_rec.num_valid,
                searched=board_rec.searched)
        current = limit
        tried.add(limit)
        limit = best_limit(job, rec.ranked_table.head(1), predictor, objective=objective,
                           risk=risk)
        if limit == board:  # back to the board's limit: its own search stands
            rec = board_rec
    points = power_limit.tradeoff(job, rec.ranked_table.head(1), predictor)
    return dataclasses.replace(rec, limit_tradeoff=points, degraded=advice)


def _recommend(job: Job, *, objective: str, risk: str, constraints: Constraints | None,
               pins: dict | None, top: int, predictor, engine: SearchEngine | None,
               progress, space: Table | None = None,
               framework: str = "megatron") -> Recommendation:
    """One search of `job`'s (pinned) space as `framework` runs it, or, given `space`
    (layouts an Optuna search already landed on), an exhaustive scoring of those."""
    check_objective(objective)
    check_risk(risk)
    if top < 1:
        raise ConfigError(f"`top` must be at least 1, got {top}.")
    constraints = constraints or Constraints()
    pins = dict(pins or {})
    predictor = predictor or Predictor.load()
    if space is None:
        space = pinned_space(job, pins, framework=framework)
    else:
        engine = SearchEngine("exhaustive")
    result = search(job, predictor=predictor, constraints=constraints, objective=objective,
                    space=space, pins=pins, engine=engine, progress=progress, risk=risk,
                    top=top)
    scored = result.scored
    tried = (f"Optuna's {result.num_trials} trials ({result.num_valid} valid layouts of "
             f"{result.num_space:,}) found none that " if result.engine == "optuna" else "")
    if result.num_fit == 0 or scored.empty:
        raise Infeasible(tried + "fits; raise `trials` or use `search` exhaustive." if tried
                         else no_fit_message(job, pins))
    predicted = ~np.isnan(np.asarray(scored["pred_tokens_per_sec_per_gpu"], dtype=float))
    if not predicted.any():
        errors = [e for e in scored.get("pred_error", np.array([], dtype=object)) if e]
        raise Infeasible(f"no layout of {job.model.name} on {job.num_gpus} × "
                         f"{job.platform.name} could be predicted"
                         + (f": {errors[0]}" if errors else "") + ".")
    scored = scored.take(predicted)
    ok = feasible(scored)
    if not ok.any():
        message = constraint_message(scored, constraints)
        raise Infeasible(tried + "meets the constraints; raise `trials` or use `search` "
                         "exhaustive. Among them: " + message if tried else message)
    ranked = rank(scored.take(ok), objective, risk)
    # One row per layout: variants that differ only in VP, micro-batch, recompute, sharding
    # or overlap show up in the trade-offs instead of crowding the list.
    head = ranked.first_of_each(LAYOUT).head(top)
    shap = _contributions(head, job, predictor)
    choices = [_choice(i + 1, row, job, predictor, shap[i], objective=objective,
                       constraints=constraints)
               for i, row in enumerate(head.rows())]
    best = ranked.row(0)
    lines = [tradeoff(best, other) for other in neighbours(best, ranked)]
    lines += moe_what_ifs(best, job, predictor, pins)
    lines += shard_what_ifs(best, job, predictor, pins)
    return Recommendation(
        job=job, objective=objective, constraints=constraints, pins=pins, engine=result.engine,
        num_valid=result.num_valid, num_fit=result.num_fit, num_feasible=int(ok.sum()),
        choices=choices, tradeoffs=lines,
        power_front=pareto_front(ranked, "pred_peak_power_w"),
        energy_front=pareto_front(ranked, "pred_energy_j_per_token"),
        ranked_table=ranked, num_trials=result.num_trials, study_name=result.study_name,
        risk=risk, ranking=ranking_notes(ranked, job, objective=objective, risk=risk)
        + stack_notes(predictor, job),
        searched=result.tried, num_pruned=result.num_pruned, framework=framework)


def moe_what_ifs(best: dict, job: Job, predictor, pins: dict) -> list[str]:
    """What the MoE switches the search leaves off unless pinned would do for #1's layout:
    NVIDIA's MoE recompute (`MOE_RECOMPUTE_MODULES`) in place of full recompute, and the
    all-to-all overlap (`ep_comm_overlap`). A line each where the layout still fits and runs
    faster."""
    model = job.model
    if not model.is_moe:
        return []
    config = config_from_row(best)
    tries = []
    if (config.recompute == "full" and not {"recompute", "recompute_modules"} & set(pins)
            and not recompute_modules_error(MOE_RECOMPUTE_MODULES, config.precision, model)):
        tries.append((f"--recompute-modules {MOE_RECOMPUTE_MODULES.replace(' ', ',')} "
                      f"(NVIDIA's MoE recompute instead of full)",
                      config.replace(recompute="selective",
                                     recompute_modules=MOE_RECOMPUTE_MODULES)))
    if "ep_comm_overlap" not in pins and config.ep > 1:
        try:
            overlapped = config.replace(ep_comm_overlap=True)
            validate(overlapped, model, job.platform, num_gpus=job.num_gpus)
            tries.append(("--ep-comm-overlap (the MoE all-to-all beside the compute)",
                          overlapped))
        except ConfigError:
            pass     # a layout Megatron-Core cannot overlap: nothing to offer
    out = []
    for label, candidate in tries:
        # A Table, as the search predicts: no DataFrame (nor pandas) on recommend's path.
        row = predictor.predict_table(job.model, job.platform,
                                      Table(columns_of([candidate]))).row(0)
        if row["pred_error"] or not row["pred_fits"]:
            continue
        if row["pred_tokens_per_sec_per_gpu"] > 1.005 * best["pred_tokens_per_sec_per_gpu"]:
            out.append(tradeoff(best, {**candidate.to_dict(), **row}, change=label))
    return out


def shard_what_ifs(best: dict, job: Job, predictor, pins: dict) -> list[str]:
    """What hybrid sharding would do for #1's layout where its sharded data-parallel group
    spans nodes: the shard kept inside each node (`dp_shard_size` = the node's data-parallel
    ranks), the shards all-reduced across nodes — fewer ranks per reduce-scatter and
    all-gather, more memory for the optimizer state. One line where it fits and runs faster."""
    if "dp_shard_size" in pins:
        return []
    config = config_from_row(best)
    group = config.dp * config.cp
    per_node = job.platform.nvlink_domain_size // (config.tp * config.cp) * config.cp
    if (config.dp_sharding == "none" or config.dp_shard_size or per_node < 1
            or group <= per_node or group % per_node):
        return []
    candidate = config.replace(dp_shard_size=per_node)
    # A Table, as the search predicts: no DataFrame on recommend's path.
    row = predictor.predict_table(job.model, job.platform,
                                  Table(columns_of([candidate]))).row(0)
    if row["pred_error"] or not row["pred_fits"]:
        return []
    if row["pred_tokens_per_sec_per_gpu"] <= 1.005 * best["pred_tokens_per_sec_per_gpu"]:
        return []
    return [tradeoff(best, {**candidate.to_dict(), **row},
                     change=f"--dp-shard-size {per_node} (shard within each node, all-reduce "
                            f"the shards across nodes)")]


def stack_notes(predictor, job: Job) -> list[str]:
    """Which stack calibration the predictions used (`advisor train --stack`), if any."""
    stack = predictor.stack_for(job.platform) if hasattr(predictor, "stack_for") else None
    return [f"Predicted with the {stack.describe()}."] if stack is not None else []


def ranking_notes(ranked: Table, job: Job, *, objective: str, risk: str) -> list[str]:
    """How `ranked`'s order was decided: the basis, and any layout the tie rule or the
    risk-averse basis put behind #1 although it is predicted faster."""
    what = {"throughput": "throughput", "energy": "tokens per joule",
            "balanced": "throughput × tokens per joule",
            "cost": "dollars per million tokens (GPU-hours and energy at the wall, priced)"
            }[objective]
    basis = ("expected (median)" if risk == "expected" else
             "pessimistic (p10, risk averse)")
    notes = [f"Ranked on the {basis} {what}; the p10–p90 band is the throughput's "
             f"uncertainty. Layouts within {TIE_TOLERANCE:.0%} of the best count as a tie, "
             f"which the more conventional one wins (no CP, no FSDP, smaller micro-batch, "
             f"less recompute); layouts within {HEADROOM_TOLERANCE:.1%} of each other go to "
             f"the one with more memory headroom."]
    if ranked.empty:
        return notes
    best = ranked.row(0)
    median = np.asarray(ranked["pred_tokens_per_sec_per_gpu"], dtype=float)
    at = int(np.nanargmax(median))
    fastest = ranked.row(at)
    gain = float(fastest["pred_tokens_per_sec_per_gpu"]) / float(
        best["pred_tokens_per_sec_per_gpu"]) - 1
    # Within the headroom rule's reach (0.5 % of a run's leader) the roomier layout won.
    if gain <= HEADROOM_TOLERANCE / (1 - HEADROOM_TOLERANCE) or objective not in (
            "throughput", "cost"):
        return notes
    if risk == "averse":
        low_best, low_fast = (float(x) for x in throughput_basis(ranked.take([0, at]),
                                                                 "averse"))
        notes.append(f"Traded for certainty: {short(fastest, job.model)} is predicted "
                     f"{gain:.1%} faster on the median, but its p10 is {low_fast:,.0f} against "
                     f"#1's {low_best:,.0f} tokens/s per GPU (a wider band: the measured data "
                     f"supports it less).")
    else:
        notes.append(f"{short(fastest, job.model)} ({describe(fastest, job.model)}) is "
                     f"predicted {gain:.1%} faster than #1, within the tie tolerance; #1 is "
                     f"the more conventional layout.")
    return notes


def _choice(position: int, row: dict, job: Job, predictor, contributions: str, *,
            objective: str, constraints: Constraints) -> Choice:
    prediction = Prediction.from_row(row, config_from_row(row))
    placement = propose_placement(job.model, job.platform, prediction.config,
                                  objective=objective, constraints=constraints,
                                  calibration=predictor.calibration)
    return Choice(rank=position, summary=describe(row, job.model), prediction=prediction,
                  reasons=layout_reasons(prediction.breakdown, job.model, job.platform),
                  warnings=warnings(row, job.platform, job.model,
                                    surrogate=predictor.surrogate is not None),
                  contributions=contributions, placement=placement)


def _contributions(rows: Table, job: Job, predictor) -> list[str]:
    """The surrogate's SHAP contributions in words, for rows it predicted ('' otherwise)."""
    supported = rows["pred_source"] == "surrogate"
    shap = (predictor.contribution_table(job.model, job.platform, rows) if supported.any()
            else None)
    if shap is None:
        return [""] * len(rows)
    return [contributions_in_words(shap.row(i), moe=job.model.is_moe) if supported[i] else ""
            for i in range(len(rows))]


# --- pins and infeasibility -------------------------------------------------------------------

PINNABLE = (*NAMES, "recompute_modules", "ep_comm_overlap", "moe_dispatcher", "dp_shard_size")
"""Every knob can be pinned (`overlap`: any of the three overlap switches on), and what
selective recompute recomputes, the MoE all-to-all overlap, the MoE token dispatcher and the
hybrid-sharding group (searched only where pinned; the dispatcher is `token_dispatcher`'s rule
otherwise, the shard group the whole data-parallel group, with a what-if line for #1)."""


def _dispatcher_pin(value: object, job: Job) -> str:
    """A pinned `moe_dispatcher` in its canonical name, refused where it cannot run."""
    name = dispatcher_name(value)
    if name not in MOE_DISPATCHERS:
        raise ConfigError(f"moe_dispatcher {value!r} is unknown; use one of "
                          f"{', '.join(MOE_DISPATCHERS)} (flex and hybridep price as deepep).")
    if name != "auto" and not job.model.is_moe:
        raise ConfigError(f"moe_dispatcher applies to MoE models; {job.model.name} is dense: "
                          f"leave it out.")
    why = dispatcher_error(name, job.platform)
    if why:
        raise ConfigError(why)
    return name


def pinned_space(job: Job, pins: dict, *, framework: str = "megatron") -> Table:
    """The job's valid configurations as `framework` runs them (`space_table`) with `pins`
    applied; a pin that leaves nothing is a `ConfigError` naming the pin and the values the
    others allow."""
    unknown = sorted(set(pins) - set(PINNABLE))
    if unknown:
        raise ConfigError(f"cannot pin {', '.join(unknown)}; pinnable knobs: "
                          f"{', '.join(PINNABLE)}.")
    pins = dict(pins)
    if "recompute_modules" in pins:  # the space holds the default modules unless pinned
        pins["recompute_modules"] = recompute_modules_name(pins["recompute_modules"])
        why = recompute_modules_error(pins["recompute_modules"], job.precision, job.model)
        if why:
            raise ConfigError(why)
    if "moe_dispatcher" in pins:
        pins["moe_dispatcher"] = _dispatcher_pin(pins["moe_dispatcher"], job)
    space = space_table(job, pins={k: pins[k] for k in ("recompute_modules", "ep_comm_overlap",
                                                        "moe_dispatcher", "dp_shard_size")
                                   if k in pins}, framework=framework)
    if space.empty:
        raise Infeasible(empty_space_message(job))
    applied: list[str] = []
    for name, value in pins.items():
        column = overlap(space) if name == "overlap" else space[name]
        allowed = sorted_values(set(column.tolist()))
        if value not in allowed:
            given = " with " + ", ".join(applied) if applied else ""
            raise ConfigError(
                f"`{name}` {_show(value)} is not valid for {job.model.name} on "
                f"{job.num_gpus} GPUs (seq {job.seq_len}, gbs {job.gbs}){given}; valid: "
                f"{', '.join(_show(v) for v in allowed)}.")
        space = space.take(column == value)
        applied.append(f"`{name}` {_show(value)}")
    return space


def _show(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "on" if value else "off"
    return str(value)


def empty_space_message(job: Job) -> str:
    """Why no layout is valid at all (before memory): divisibility, not capacity."""
    n = job.num_gpus
    gbs = -(-job.gbs // n) * n
    return (f"no valid layout of {job.model.name} on {n} GPUs with gbs {job.gbs}: tp × pp × cp "
            f"must divide the {n} GPUs, the global batch must be a multiple of dp = "
            f"{n} / (tp × pp × cp), and tp must divide the attention heads (tp in "
            f"{{{', '.join(map(str, tp_choices(job.model)[:8]))}}}); try `gbs` {gbs} or a GPU "
            f"count that divides {job.gbs}.")


def no_fit_message(job: Job, pins: dict) -> str:
    what = f"{job.model.name} (seq {job.seq_len}) on {job.num_gpus} × {job.platform.name}"
    if pins:
        pinned = ", ".join(f"{k}={_show(v)}" for k, v in pins.items())
        return (f"no configuration of {what} with {pinned} "
                f"fits in {job.platform.memory_capacity_bytes / 1e9:.0f} GB per GPU; drop or "
                f"change the pins (recompute and sharding are the memory knobs).")
    smallest = smallest_fitting_gpus(job)
    hint = (f"the smallest GPU count that fits is {smallest}" if smallest else
            f"it does not fit on up to {MAX_GPUS:,} GPUs either")
    return (f"no configuration of {what} fits in "
            f"{job.platform.memory_capacity_bytes / 1e9:.0f} GB per GPU, even with full "
            f"recompute and FSDP; {hint}.")


MAX_GPUS = 65_536


def smallest_fitting_gpus(job: Job) -> int | None:
    """The fewest GPUs (a power of two, or whole nodes) on which some configuration fits, with
    the job's sequence length and global batch when those allow, else the default batch."""
    from advisor.perf.memory import memory_arrays

    node = job.platform.num_gpus_per_node

    def fits(n: int) -> bool:
        try:
            trial = make_job(job.model, job.platform, num_gpus=n, seq_len=job.seq_len,
                             gbs=max(job.gbs, n // 2), precision=job.precision)
            space = space_table(trial)
        except AdvisorError:
            return False
        light = space.take((space["recompute"] == "full") & (space["mbs"] == 1))
        if light.empty:
            return False
        return bool(np.any(memory_arrays(job.model, platform=job.platform,
                                         cols=config_columns(light))["fits"]))

    n, previous = job.num_gpus * 2, job.num_gpus
    while n <= MAX_GPUS and not fits(n):
        previous, n = n, n * 2
    if n > MAX_GPUS:
        return None
    # Whole nodes between the last power of two that failed and the one that fits.
    for count in range((previous // node + 1) * node, n, node):
        if fits(count):
            return count
    return n


def constraint_message(scored: Table, constraints: Constraints) -> str:
    """Which constraint rules everything out, and how close the best candidate comes."""
    cols = violation_columns(scored)
    parts = []
    for col in cols:
        values = scored[col]
        if (values > 0).all():
            name = col.removeprefix("violates_")
            best = values.min()
            bound = next((k for k, (v, _) in POWER_BOUNDS.items() if v == name), None)
            if bound is not None:
                limit = getattr(constraints, bound)
                parts.append(f"`{bound}` {limit:,.0f}: the lowest predicted "
                             f"{POWER_BOUNDS[bound][1]} is {limit + best:,.0f} W")
            elif name == "throttle_risk":
                parts.append(f"`max_throttle_risk` {constraints.max_throttle_risk:g}: the "
                             f"lowest predicted risk is "
                             f"{constraints.max_throttle_risk + best:.1%}")
            elif (loss := next((k for k, (v, _) in LOSS_BOUNDS.items() if v == name),
                               None)) is not None:
                limit = getattr(constraints, loss)
                parts.append(f"`{loss}` {limit:g}: the lowest predicted "
                             f"{LOSS_BOUNDS[loss][1]} is {limit + best:.1%}")
            else:
                parts.append(f"`memory_margin` {constraints.memory_margin:.2f}: the best "
                             f"configuration needs {best:.1f} GB more than that leaves")
    if not parts:
        parts.append("no configuration meets all constraints at once")
    return (f"{len(scored):,} configurations fit in memory but none meets the constraints ("
            + "; ".join(parts) + "); relax a limit.")
