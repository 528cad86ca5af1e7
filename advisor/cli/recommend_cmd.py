"""`advisor recommend` and `advisor compare`: parse, call `advisor.search.recommend` /
`advisor.search.compare`, render."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from advisor.cli.common import (
    DISPATCHER_HELP,
    SHARD_SIZE_HELP,
    DegradedNodesOpt,
    DegradedPowerOpt,
    ElectricityOpt,
    FinetuneOpt,
    GbsOpt,
    GpuHourOpt,
    GpusOpt,
    InletOpt,
    JsonOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    ModelOpt,
    PlatformOpt,
    PowerLimitOpt,
    PrecisionOpt,
    SeqLenOpt,
    emit_json,
    finetune_job,
    guard,
    knob_option,
    make_console,
)
from advisor.cli.predict_cmd import AnalyticalOpt, ModelsOpt
from advisor.core.errors import ConfigError
from advisor.search.trials import SearchInterrupted

ObjectiveOpt = Annotated[str, typer.Option(
    "--objective", help="throughput (most tokens/s per GPU), energy (most tokens per joule at "
    "the wall: the GPUs, their share of the node's host and the cluster's PUE), "
    "balanced (the knee between them) or cost (fewest dollars per million tokens: the "
    "GPU-hours at --gpu-hour-price plus the energy at the wall at --electricity-price; it "
    "searches the power limit too).")]
PriceOpt = Annotated[str | None, typer.Option(
    "--gpu-hour-price", help="US dollars per GPU-hour, for dollars per million tokens: one "
    "number (3.5) or PLATFORM=PRICE pairs (h100=2.5,h200=3.6). Default: the catalog's public "
    "on-demand rate where it has one (h100, h200, b200, gb200; see advisor catalog "
    "platforms).")]
MaxPowerOpt = Annotated[float | None, typer.Option(
    "--max-power-w", min=1, help="Limit on the predicted AVERAGE power per GPU over the step, "
    "watts (what a rack's power budget sustains; never above the GPU's power limit).")]
MaxPeakPowerOpt = Annotated[float | None, typer.Option(
    "--max-peak-power-w", min=1, help="Limit on the predicted PEAK power per GPU, watts: the "
    "highest 50 ms NVML instantaneous sample, which may pass the power limit briefly.")]
MaxNodePowerOpt = Annotated[float | None, typer.Option(
    "--max-node-power-w", min=1, help="Limit on the predicted average power per node, watts: "
    "its GPUs' average plus the host's draw (CPUs, fans, NICs, switches; the catalog's "
    "host_power_w, measured on MLPerf H100 and B200 nodes).")]
MaxJobPowerOpt = Annotated[float | None, typer.Option(
    "--max-job-power-w", min=1, help="Limit on the predicted average power of all the job's "
    "GPUs together, watts.")]
MaxRiskOpt = Annotated[float | None, typer.Option(
    "--max-throttle-risk", min=0, max=1, help="Limit on the predicted probability that a GPU "
    "of the job reaches its slowdown temperature (0-1), over the room's inlet and the "
    "GPU-to-GPU spread. A probability however little it costs: --max-thermal-loss bounds what "
    "it costs.")]
MaxThermalLossOpt = Annotated[float | None, typer.Option(
    "--max-thermal-loss", min=0, max=0.99, help="Limit on the predicted EXPECTED share of "
    "throughput lost to thermal slowdown (its probability times what it costs; 0.02 = 2 %): "
    "trades throughput only for heat that costs more than the bound.")]
MaxCapLossOpt = Annotated[float | None, typer.Option(
    "--max-cap-loss", min=0, max=0.99, help="Limit on the predicted share of throughput lost to "
    "clocks below maximum under the power limit (0.05 = 5 %).")]
RiskOpt = Annotated[str, typer.Option(
    "--risk", help="expected: rank on the predicted median (the default: what 'fastest' "
    "means). averse: rank on the pessimistic p10, so a layout the measured data supports "
    "poorly (wide band) cannot win on its median; the output says what that traded.")]
MarginOpt = Annotated[float | None, typer.Option(
    "--memory-margin", min=0, max=0.99, help="Fraction of GPU memory to keep free (0.1 = 10 %) "
    "beyond the memory model's allowance for the CUDA context and allocator. The default "
    "0.015 covers the model's measured error (the 95th percentile of what it misses of 511 "
    "Megatron-LM CI peaks, benchmarks/memory_validation.py); 0 uses the last percent.",
    show_default="0.015")]


def _margin(value: float | None) -> dict:
    """The margin given, or none (`Constraints`' default, DEFAULT_MEMORY_MARGIN)."""
    return {} if value is None else {"memory_margin": value}


def _pin(name: str):
    return knob_option(name, pin=True)


@guard
def recommend(
        model: ModelOpt, gpus: GpusOpt, platform: PlatformOpt, seq_len: SeqLenOpt = None,
        gbs: GbsOpt = None, precision: PrecisionOpt = "bf16", finetune: FinetuneOpt = "none",
        lora_rank: LoraRankOpt = 16, lora_targets: LoraTargetsOpt = "attention",
        objective: ObjectiveOpt = "throughput", risk: RiskOpt = "expected",
        max_power_w: MaxPowerOpt = None, max_peak_power_w: MaxPeakPowerOpt = None,
        max_node_power_w: MaxNodePowerOpt = None, max_job_power_w: MaxJobPowerOpt = None,
        max_throttle_risk: MaxRiskOpt = None, max_thermal_loss: MaxThermalLossOpt = None,
        max_cap_loss: MaxCapLossOpt = None, memory_margin: MarginOpt = None,
        power_limit_w: PowerLimitOpt = None, inlet_c: InletOpt = None,
        degraded_nodes: DegradedNodesOpt = None, degraded_power_w: DegradedPowerOpt = None,
        electricity_price: ElectricityOpt = None, gpu_hour_usd: GpuHourOpt = None,
        tp: _pin("tp") = None, pp: _pin("pp") = None, cp: _pin("cp") = None,
        dp: _pin("dp") = None, ep: _pin("ep") = None, etp: _pin("etp") = None,
        vp: _pin("vp") = None, mbs: _pin("mbs") = None, recompute: _pin("recompute") = None,
        dp_sharding: _pin("dp_sharding") = None, overlap: _pin("overlap") = None,
        recompute_modules: Annotated[str | None, typer.Option(
            "--recompute-modules", show_default=False, help="Pin selective recompute of these "
            "Megatron-Core modules (names separated by spaces or commas: core_attn, "
            "mla_up_proj, layernorm, mlp, moe_act, shared_experts, moe), e.g. "
            "\"moe_act,layernorm\" as NVIDIA's Qwen3-235B recipe runs; implies --recompute "
            "selective.")] = None,
        ep_comm_overlap: Annotated[bool | None, typer.Option(
            "--ep-comm-overlap/--no-ep-comm-overlap", show_default=False, help="Pin the MoE "
            "all-to-all overlap (Megatron-Core --overlap-moe-expert-parallel-comm) on, on the "
            "layouts that can run it (ep > 1, a virtual pipeline when pp > 1, no full "
            "recompute); the search leaves it off otherwise.")] = None,
        moe_dispatcher: Annotated[str | None, typer.Option(
            "--moe-dispatcher", show_default=False, help="Pin the " + DISPATCHER_HELP[0].lower()
            + DISPATCHER_HELP[1:] + " Unpinned: auto.")] = None,
        dp_shard_size: Annotated[int | None, typer.Option(
            "--dp-shard-size", min=0, show_default=False, help="Pin hybrid sharding, on the "
            "layouts whose sharded data-parallel group it divides. " + SHARD_SIZE_HELP
            + " Unpinned: the whole group, and a what-if line for #1 where sharding within a "
            "node would be faster.")] = None,
        top: Annotated[int, typer.Option("--top", min=1, help="How many to show.")] = 5,
        layout: Annotated[str | None, typer.Option(
            "--layout", help="Why not this layout? Also print where it ranks, its predicted "
            "gap to #1 and the reason, e.g. --layout \"tp4 pp4 vp5 cp2\" (sizes tp pp vp cp "
            "dp ep etp mbs; optional recompute=full, sharding=fsdp).")] = None,
        emit: Annotated[str | None, typer.Option(
            "--emit", help="Print the launch command of the best: megatron, nemo or "
            "torchtitan.")] = None,
        plot: Annotated[Path | None, typer.Option(
            "--plot", help="Write a PNG of every candidate's throughput against peak power "
            "and energy, with the Pareto fronts (needs matplotlib).")] = None,
        search: Annotated[str, typer.Option(
            "--search", help="auto (exhaustive when it takes about a second, Optuna "
            "otherwise), exhaustive, or optuna.")] = "auto",
        trials: Annotated[int | None, typer.Option(
            "--trials", min=1, help="Optuna trials this process runs (default 600; implies "
            "--search optuna).")] = None,
        storage: Annotated[str | None, typer.Option(
            "--storage", help="Share an Optuna study between workers: a journal file path, or "
            "a database URL (postgresql+psycopg2://user:pw@host/db). Implies --search "
            "optuna.")] = None,
        study_name: Annotated[str | None, typer.Option(
            "--study-name", help="Optuna study name (default: derived from the job, objective, "
            "constraints and pins, so identical commands share a study).")] = None,
        seed: Annotated[int | None, typer.Option(
            "--seed", help="Optuna sampler seed (default 0; workers sharing --storage each "
            "draw their own unless given).")] = None,
        models: ModelsOpt = None, analytical: AnalyticalOpt = False,
        json_out: JsonOpt = False) -> None:
    """Recommend how to train MODEL on GPUS × PLATFORM: the best parallel layouts, predicted
    throughput (with a p10-p90 band), memory, power, energy, expected losses and thermal risk,
    why, and the launch command.

        advisor recommend --model 70b --gpus 64 --platform h200
        advisor recommend -m 70b -g 64 -p h200 --objective energy --max-power-w 650 --emit megatron
        advisor recommend -m 70b -g 64 -p h200 --inlet-c 35 --max-throttle-risk 0.5
        advisor recommend -m 405b -g 1024 -p h100 --tp 8 --recompute none --top 3

        advisor recommend -m 405b -g 1024 -p h100 --layout "tp8 pp8 vp4"

    Every valid layout is scored when that takes about a second (almost always); larger spaces
    are searched with Optuna. The rows are distinct layouts (how TP, PP, CP, DP, EP split the
    GPUs), each with its best VP, micro-batch, recompute, sharding and overlap. Ranking uses
    the expected (median) prediction (--risk averse: the p10); layouts within 5 % of the best
    count as a tie that the most conventional one wins (no context parallelism, no FSDP,
    smaller micro-batch, less recompute). Knobs you pin (--tp 8, --recompute none, ...) are
    held fixed. The energy, balanced and cost objectives also search the GPU power limit
    (unless --power-limit-w sets it) and show #1 across the limits tried.
    """
    from advisor.catalog import load_model, load_platform, with_conditions
    from advisor.core.parallel import make_job
    from advisor.predict.predictor import Predictor
    from advisor.search.engine import SearchEngine
    from advisor.search.objective import Constraints
    from advisor.search.recommend import recommend as run

    _check_emit(emit)
    if plot:  # before the search, not after it
        from advisor.core.files import check_output

        check_output(plot, what="PNG")
    from advisor.search.why_not import parse_layout

    probe = parse_layout(layout) if layout is not None else None
    pins = {k: v for k, v in dict(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp, vp=vp, mbs=mbs,
                                  recompute=_lower(recompute), dp_sharding=_lower(dp_sharding),
                                  overlap=overlap, recompute_modules=recompute_modules,
                                  ep_comm_overlap=ep_comm_overlap,
                                  moe_dispatcher=moe_dispatcher,
                                  dp_shard_size=dp_shard_size).items()
            if v is not None}
    m = load_model(model)
    p = with_conditions(load_platform(platform), power_limit_w=power_limit_w, inlet_c=inlet_c,
                        degraded_nodes=degraded_nodes, degraded_power_w=degraded_power_w,
                        electricity_usd_per_kwh=electricity_price, gpu_hour_usd=gpu_hour_usd)
    job = make_job(m, p, num_gpus=gpus, seq_len=seq_len, gbs=gbs, precision=precision,
                   **finetune_job(finetune, lora_rank, lora_targets))
    constraints = Constraints(max_power_w=max_power_w, max_peak_power_w=max_peak_power_w,
                              max_node_power_w=max_node_power_w,
                              max_job_power_w=max_job_power_w,
                              max_throttle_risk=max_throttle_risk,
                              max_thermal_loss=max_thermal_loss,
                              max_power_cap_loss=max_cap_loss, **_margin(memory_margin))
    predictor = Predictor(None) if analytical else Predictor.load(models)
    start = time.perf_counter()
    try:
        with _progress(enabled=not json_out) as progress:
            # The layouts the launch command's framework runs (torchtitan: torch's
            # interleaving rule), so #1 is one its emitter writes.
            rec = run(job, objective=objective, risk=risk, constraints=constraints, pins=pins,
                      top=top, predictor=predictor, progress=progress,
                      engine=SearchEngine(search, trials=trials, storage=storage,
                                          study_name=study_name, seed=seed),
                      framework=emit or "megatron")
    except SearchInterrupted as stop:
        typer.echo(f"interrupted: {interrupted_message(stop)}", err=True)
        raise typer.Exit(code=130) from None
    verdict = None
    if probe is not None:
        from advisor.search.why_not import rank_layout

        verdict = rank_layout(rec, probe, predictor=predictor)
    elapsed = time.perf_counter() - start
    launch, launch_note = _emit(emit, rec, rec.job) if emit else (None, "")
    if plot:
        from advisor.cli.plots import plot_candidates

        plot_candidates(rec, plot)
        # On stderr: stdout may be the JSON a script reads.
        typer.echo(f"wrote {plot}: {len(rec.ranked):,} candidates' throughput against peak "
                   f"power and energy per token, with the Pareto fronts", err=True)
    if json_out:
        from advisor.cli.render import recommendation_json

        emit_json(recommendation_json(rec, launch=launch, emitter=emit, seconds=elapsed,
                                      launch_note=launch_note, layout=verdict))
    else:
        from advisor.cli.render import print_recommendation

        print_recommendation(make_console(), rec, seconds=elapsed, layout=verdict)
        if launch:
            make_console().print(f"\nLaunch ({emit}){': ' + launch_note if launch_note else ''}",
                            style="bold")
            typer.echo(launch)
    if emit and launch is None:
        raise ConfigError(f"--emit {emit}: {launch_note}")


@guard
def compare(
        model: ModelOpt,
        platforms: Annotated[str, typer.Option(
            "--platforms", help="Sides to compare as PLATFORM:GPUS pairs, e.g. h200:32,h100:64 "
            "(a platform may be a cluster .toml).")],
        seq_len: SeqLenOpt = None, gbs: GbsOpt = None, precision: PrecisionOpt = "bf16",
        finetune: FinetuneOpt = "none", lora_rank: LoraRankOpt = 16,
        lora_targets: LoraTargetsOpt = "attention",
        objective: ObjectiveOpt = "throughput", max_power_w: MaxPowerOpt = None,
        max_peak_power_w: MaxPeakPowerOpt = None, max_node_power_w: MaxNodePowerOpt = None,
        max_job_power_w: MaxJobPowerOpt = None,
        max_throttle_risk: MaxRiskOpt = None, max_thermal_loss: MaxThermalLossOpt = None,
        max_cap_loss: MaxCapLossOpt = None, memory_margin: MarginOpt = None,
        power_limit_w: PowerLimitOpt = None, inlet_c: InletOpt = None,
        gpu_hour_price: PriceOpt = None, electricity_price: ElectricityOpt = None,
        models: ModelsOpt = None, analytical: AnalyticalOpt = False,
        json_out: JsonOpt = False) -> None:
    """Scale-up against scale-out: the best configuration of MODEL on each side, throughput per
    job and per GPU, energy per token, GPU power per node, the slowest-GPU loss and thermal
    risk, and a verdict with its reason (communication- or compute-bound, memory allowing
    smaller TP, expert all-to-all staying local, more GPUs waiting for a slower slowest one).

        advisor compare --model 70b --platforms h200:32,h100:64
        advisor compare -m mixtral-8x22b --platforms h200:32,h100:64 --objective energy
        advisor compare -m 70b --platforms h200:32,h100:64 --objective cost \
            --gpu-hour-price h100=2.2,h200=3.1

    Both sides train the same global batch (the larger default unless --gbs).
    """
    from advisor.catalog import load_model, load_platform, with_conditions
    from advisor.predict.predictor import Predictor
    from advisor.search.compare import compare as run
    from advisor.search.compare import parse_prices, parse_sides
    from advisor.search.objective import Constraints

    sides = [(with_conditions(load_platform(name), power_limit_w=power_limit_w,
                              inlet_c=inlet_c, electricity_usd_per_kwh=electricity_price), n)
             for name, n in parse_sides(platforms)]
    constraints = Constraints(max_power_w=max_power_w, max_peak_power_w=max_peak_power_w,
                              max_node_power_w=max_node_power_w,
                              max_job_power_w=max_job_power_w,
                              max_throttle_risk=max_throttle_risk,
                              max_thermal_loss=max_thermal_loss,
                              max_power_cap_loss=max_cap_loss, **_margin(memory_margin))
    predictor = Predictor(None) if analytical else Predictor.load(models)
    result = run(load_model(model), sides, seq_len=seq_len, gbs=gbs, precision=precision,
                 objective=objective, constraints=constraints, predictor=predictor,
                 prices=parse_prices(gpu_hour_price),
                 **finetune_job(finetune, lora_rank, lora_targets))
    from advisor.cli.render import comparison_json, print_comparison

    if json_out:
        emit_json(comparison_json(result))
    else:
        print_comparison(make_console(), result)


def _lower(value: str | None) -> str | None:
    return value.lower() if value is not None else None


def _check_emit(emit: str | None) -> None:
    from advisor.explain.emit import EMITTERS

    if emit is not None and emit not in EMITTERS:
        raise ConfigError(f"--emit {emit!r} is unknown; use one of {', '.join(EMITTERS)}.")


EMIT_SEARCH_LIMIT = 5000
"""How far down the ranking `--emit` looks for a layout the framework can express when the
shown choices are all refused (each try is a cheap check; the ranking is best first)."""


def _emit(kind: str, rec, job) -> tuple[str | None, str]:
    """The launch command of the best choice the framework can express, and a note naming
    the ones it refused (None and the reasons when it refuses them all). Past the shown
    choices, the rest of the ranking is searched, one row per layout."""
    from advisor.core.knobs import LAYOUT
    from advisor.core.space import config_from_row
    from advisor.explain.emit import emit
    from advisor.explain.rationale import short

    refused: dict[str, list[int]] = {}
    for choice in rec.choices:
        text, note = _choice_command(kind, choice, job, refused)
        if text is None:
            continue
        first = f"#{choice.rank}, the best {kind} can express ({_reasons(refused)})"
        return text, "; ".join(n for n in (first if refused else "", note) if n)
    layouts = rec.ranked_table.first_of_each(LAYOUT).head(EMIT_SEARCH_LIMIT)
    scores = [s for s in layouts["score"].tolist() if s == s] if "score" in layouts else []
    best = max(scores, default=0.0)          # NaN (an unpredicted row) skipped
    for position, row in enumerate(layouts.rows(), 1):
        if position <= len(rec.choices):
            continue
        try:
            text = emit(kind, as_launched(kind, config_from_row(row)), job)
        except ConfigError:
            continue
        behind = (f", score {1 - float(row['score']) / best:.0%} below the best"
                  if best > 0 and float(row.get("score", 0.0)) > 0 else "")
        return text, (f"layout #{position} of the ranking ({short(row, job.model)}"
                      f"{behind}), the best {kind} can express; the shown ones it cannot: "
                      f"{_reasons(refused)}")
    if len(refused) == 1:  # one reason for every layout: that sentence alone says it
        return None, next(iter(refused)) + "."
    return None, f"{kind} cannot express any recommended configuration: {_reasons(refused)}"


def as_launched(kind: str, config):
    """`config` as framework `kind` launches it: recommend prices Megatron-Core's fused
    elementwise kernels, which TorchTitan's blocks match compiled (`torch_compile`)."""
    from advisor.core.frameworks import EAGER_BLOCKS

    return config.replace(torch_compile=True) if kind in EAGER_BLOCKS else config


def _choice_command(kind: str, choice, job,
                    refused: dict[str, list[int]]) -> tuple[str | None, str]:
    """`choice`'s command with its proposed uneven split where `kind` can express that, else
    with the even split; a note saying which. (None, "") and the reason in `refused` when
    `kind` can express neither."""
    from advisor.explain.emit import emit

    placement, placed_error = choice.placement, None
    if placement:
        try:
            return (emit(kind, as_launched(kind, placement.config), job),
                    f"with the proposed placement, {placement.describe()}")
        except ConfigError as e:
            placed_error = str(e).rstrip(".")
    try:
        text = emit(kind, as_launched(kind, choice.config), job)
    except ConfigError as e:
        reason = str(e).rstrip(".")
        if placed_error:
            reason += f" (its proposed uneven split: {placed_error})"
        refused.setdefault(reason, []).append(choice.rank)
        return None, ""
    if placed_error:
        return text, (f"even split: {kind} cannot express the proposed "
                      f"{'/'.join(map(str, placement.layers_after))} split ({placed_error})")
    return text, ""


def _reasons(refused: dict[str, list[int]]) -> str:
    return "; ".join(f"#{', #'.join(map(str, ranks))}: {reason.rstrip('.')}"
                     for reason, ranks in refused.items())


class _progress:
    """A transient progress bar on stderr for Optuna searches (exhaustive ones are instant)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled, self.bar, self.task = enabled, None, None

    def __enter__(self):
        return self

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or not sys.stderr.isatty():  # a log file gets no bar
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("Optuna trials", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def interrupted_message(stop: SearchInterrupted) -> str:
    """What a Ctrl-C during an Optuna search kept, and how to go on from it."""
    if not stop.storage:
        return (f"{stop.num_told:,} trials ran in memory and are gone; pass --storage FILE "
                f"to make a long search resumable.")
    return (f"{stop.num_told:,} finished trials are kept in the Optuna study "
            f"{stop.study_name!r} in {stop.storage} (unfinished ones marked failed); "
            f"run the same command again to continue it: its trials count towards the answer.")
