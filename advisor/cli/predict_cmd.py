"""`advisor predict` and `advisor explain`: one configuration from flags, or every row of a CSV."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from advisor.cli.common import (
    PLATFORM_HELP,
    POWER_SEMANTICS,
    DegradedNodesOpt,
    DegradedPowerOpt,
    DispatcherOpt,
    ElectricityOpt,
    EpOverlapOpt,
    EtpOpt,
    FinetuneOpt,
    FrameworkOpt,
    GbsOpt,
    GpuHourOpt,
    InletOpt,
    JsonOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    PowerLimitOpt,
    PrecisionOpt,
    RecomputeModulesOpt,
    SeqLenOpt,
    ShardSizeOpt,
    TorchCompileOpt,
    emit_json,
    finetune_job,
    guard,
    knob_option,
    make_console,
)
from advisor.core.errors import AdvisorError, first_line
from advisor.core.files import check_output, shown_path
from advisor.core.parallel import finetune_label, make_config, make_job

ModelOptional = Annotated[str | None, typer.Option(
    "--model", "-m", help="Catalog name or alias (70b, mixtral-8x7b, ...) or a Hugging Face "
    "config.json path.")]
PlatformOptional = Annotated[str | None, typer.Option("--platform", "-p", help=PLATFORM_HELP)]
GpusOptional = Annotated[int | None, typer.Option("--gpus", "-g", min=1,
                                                  help="Number of GPUs (MI250: GCDs).")]
TpOpt, PpOpt = knob_option("tp"), knob_option("pp")
CpOpt, EpOpt = knob_option("cp"), knob_option("ep")
VpOpt, MbsOpt = knob_option("vp"), knob_option("mbs")
RecomputeOpt, ShardingOpt = knob_option("recompute"), knob_option("dp_sharding")
ModelsOpt = Annotated[Path | None, typer.Option(
    "--models", help="Directory of surrogate artifacts written by `advisor train` (default: the "
    "bundled ones).")]
AnalyticalOpt = Annotated[bool, typer.Option(
    "--analytical", help="Analytical model only: skip the learned surrogate.")]
FirstStageOpt = Annotated[int, typer.Option(
    "--first-stage-layers", min=0, help="Uneven pipeline split: layers on the first stage "
    "(Megatron-LM --decoder-first-pipeline-num-layers); 0 = the even share.")]
LastStageOpt = Annotated[int, typer.Option(
    "--last-stage-layers", min=0, help="Uneven pipeline split: layers on the last stage, which "
    "also holds the output layer and loss (--decoder-last-pipeline-num-layers); 0 = even.")]
NoOverlapOpt = Annotated[bool, typer.Option(
    "--no-overlap", help="Turn off the overlap NVIDIA's recipes use (TP communication, gradient "
    "reduce, parameter gather).")]


def _prediction(model: str, platform: str, gpus: int, *, seq_len, gbs, precision, tp, pp, cp,
                ep, etp, vp, mbs, recompute, dp_sharding, no_overlap, recompute_modules=None,
                ep_comm_overlap=False, moe_dispatcher="auto", dp_shard_size=0,
                first_stage_layers=0,
                last_stage_layers=0, finetune=None, predictor=None, conditions=None,
                framework="megatron", torch_compile=None):
    """The `Predictor`'s `Prediction` (with its analytical `Breakdown`) of the configuration
    the flags describe, run by `framework` (`torch_compile` None: as the framework's recipes
    set it), and notes. `predictor` None: the analytical model alone (`Predictor(None)`), so
    `predict`, `explain` and `--analytical` read their figures from the same place. The
    analytical model runs once: the breakdown comes with the answer."""
    import numpy as np

    from advisor.catalog import load_model, load_platform, with_conditions
    from advisor.core.frameworks import canonical_framework
    from advisor.core.space import validate
    from advisor.data.framework_defaults import compiles
    from advisor.data.predict_input import RowJob
    from advisor.predict.predictor import Prediction, Predictor

    m, p = load_model(model), with_conditions(load_platform(platform), **(conditions or {}))
    job = make_job(m, p, num_gpus=gpus, seq_len=seq_len, gbs=gbs, precision=precision,
                   **(finetune or {}))
    config = make_config(job, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vp=vp, mbs=mbs,
                         recompute=recompute, dp_sharding=dp_sharding, overlap=not no_overlap)
    if recompute_modules is not None:
        config = config.replace(recompute_modules=recompute_modules)
    if ep_comm_overlap:
        config = config.replace(ep_comm_overlap=True)
    if moe_dispatcher != "auto":
        config = config.replace(moe_dispatcher=moe_dispatcher)
    if dp_shard_size:
        config = config.replace(dp_shard_size=dp_shard_size)
    if first_stage_layers or last_stage_layers:
        config = config.replace(first_stage_layers=first_stage_layers,
                                last_stage_layers=last_stage_layers)
    framework = canonical_framework(framework)
    if torch_compile is None:   # as the framework's recipes set it
        torch_compile = bool(compiles(np.array([framework]), np.array([config.precision]))[0])
    config = config.replace(torch_compile=torch_compile)
    notes = validate(config, m, p, num_gpus=gpus, framework=framework)
    run = [(config, RowJob(m, p, framework, "") if framework != "megatron" else job)]
    analytical = Predictor(None)
    row = (predictor or analytical).predict(run, breakdown=True).iloc[0].to_dict()
    if row["pred_error"] and predictor is not None:
        notes = [*notes, f"surrogate unavailable: {row['pred_error']}"]
        row = analytical.predict(run, breakdown=True).iloc[0].to_dict()
    if row["pred_error"]:
        raise AdvisorError(row["pred_error"])
    learned = {k: v for k, v in row.items() if k.startswith("pred_") and k != "pred_error"}
    stack = predictor.stack_for(p) if predictor is not None else None
    if stack is not None:
        notes = [*notes, f"predicted with the {stack.describe()}"]
    return m, p, Prediction.from_row(row, config), notes, (config, job), learned


def _need(**given) -> None:
    missing = [f"--{k}" for k, v in given.items() if v is None]
    if missing:
        raise AdvisorError(f"{', '.join(missing)} required: give --model, --platform and --gpus "
                           f"(plus layout flags), or --input FILE.csv.")


@guard
def predict(input: Annotated[Path | None, typer.Option(
                "--input", "-i", help="CSV with the columns of published_runs.csv (model, gpu, "
                "num_gpus, seq_len, gbs, mbs, tp, pp, cp, ep, vp, dp, precision, recompute, "
                "dp_sharding); empty cells take stated defaults.")] = None,
            output: Annotated[Path | None, typer.Option(
                "--output", "-o", help="With --input: write the rows with pred_* columns "
                "here.")] = None,
            model: ModelOptional = None, platform: PlatformOptional = None,
            gpus: GpusOptional = None, tp: TpOpt = 1, pp: PpOpt = 1, cp: CpOpt = 1,
            ep: EpOpt = 1, etp: EtpOpt = None, vp: VpOpt = 1, mbs: MbsOpt = 1,
            seq_len: SeqLenOpt = None, gbs: GbsOpt = None, precision: PrecisionOpt = "bf16",
            recompute: RecomputeOpt = "none", dp_sharding: ShardingOpt = "optimizer",
            recompute_modules: RecomputeModulesOpt = None, ep_comm_overlap: EpOverlapOpt = False,
            moe_dispatcher: DispatcherOpt = "auto", dp_shard_size: ShardSizeOpt = 0,
            first_stage_layers: FirstStageOpt = 0, last_stage_layers: LastStageOpt = 0,
            finetune: FinetuneOpt = "none", lora_rank: LoraRankOpt = 16,
            lora_targets: LoraTargetsOpt = "attention",
            framework: FrameworkOpt = "megatron", torch_compile: TorchCompileOpt = None,
            no_overlap: NoOverlapOpt = False, power_limit_w: PowerLimitOpt = None,
            inlet_c: InletOpt = None, degraded_nodes: DegradedNodesOpt = None,
            degraded_power_w: DegradedPowerOpt = None,
            electricity_price: ElectricityOpt = None, gpu_hour_usd: GpuHourOpt = None,
            models: ModelsOpt = None,
            analytical: AnalyticalOpt = False,
            per_gpu: Annotated[bool, typer.Option(
                "--per-gpu", help="Also every GPU: node, slot (front/rear row), pipeline "
                "stage, average and peak power, peak temperature, clock, the share of the step "
                "it runs power-capped and its own thermal risk; the straggler marked.")] = False,
            plot: Annotated[Path | None, typer.Option(
                "--plot", help="Write a per-GPU heat map (nodes × slots, peak temperature, "
                "stage in each cell) to this PNG.")] = None,
            json_out: JsonOpt = False) -> None:
    """Predict step time, throughput, memory, power, temperatures, expected losses and thermal risk.

    One configuration from flags (dp = gpus / (tp·pp·cp)):

        advisor predict --model 70b --platform h200 --gpus 64 --tp 4 --pp 2 --mbs 1

    or every row of a CSV (--input), adding pred_step_time_s, pred_tokens_per_sec_per_gpu,
    pred_tflops_per_gpu, pred_mfu, pred_avg_power_w, pred_peak_power_w,
    pred_energy_j_per_token, pred_throttle_risk, pred_memory_gb, pred_fits, the throughput
    band pred_tokens_per_sec_per_gpu_p10/_p90, pred_extrapolation and pred_source. Throughput
    comes from the learned surrogate where its data supports the row (pred_source = surrogate)
    and from the analytical model elsewhere (pred_source = analytical); power (with bands) and
    the throttle fractions pred_throttle_frac_power/_thermal are learned once `advisor train`
    had campaign runs that measured them (pred_power_source), analytical (no band) until then.
    Rows that cannot be predicted get a pred_error;
    what was assumed for empty cells is in pred_assumed.
    """
    from advisor.predict.predictor import Predictor

    predictor = None if analytical else Predictor.load(models)
    conditions = {"power_limit_w": power_limit_w, "inlet_c": inlet_c,
                  "degraded_nodes": degraded_nodes, "degraded_power_w": degraded_power_w,
                  "electricity_usd_per_kwh": electricity_price, "gpu_hour_usd": gpu_hour_usd}
    if input is None:
        _need(model=model, platform=platform, gpus=gpus)
        m, p, pred, notes, pair, learned = _prediction(
            model, platform, gpus, seq_len=seq_len, gbs=gbs, precision=precision, tp=tp, pp=pp,
            cp=cp, ep=ep, etp=etp, vp=vp, mbs=mbs, recompute=recompute,
            dp_sharding=dp_sharding, no_overlap=no_overlap, recompute_modules=recompute_modules,
            ep_comm_overlap=ep_comm_overlap, moe_dispatcher=moe_dispatcher,
            dp_shard_size=dp_shard_size,
            first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
            finetune=finetune_job(finetune, lora_rank, lora_targets), predictor=predictor,
            conditions=conditions, framework=framework, torch_compile=torch_compile)
        gpus = _per_gpu(m, p, pair[0]) if per_gpu or plot else None
        _print_one(m, p, pred, notes, json_out, learned, gpus if per_gpu else None)
        if plot:
            from advisor.cli.plots import plot_gpu_heatmap

            plot_gpu_heatmap(gpus, plot, title=f"{m.name} on {pair[0].world_size} × {p.name}: "
                             f"peak temperature per GPU (stage in each cell)")
            Console(stderr=True).print(f"wrote the per-GPU heat map to {plot}")
        return
    if per_gpu or plot:
        raise AdvisorError("--per-gpu and --plot describe one configuration: use them with "
                           "--model/--platform/--gpus, not --input.")
    from advisor.data.predict_input import read_rows
    from advisor.predict.rows import predict_frame

    if output:
        check_output(output, what="CSV")
    frame = predict_frame(read_rows(input), predictor, conditions=conditions)
    if output:
        try:
            frame.to_csv(output, index=False)
        except OSError as e:
            raise AdvisorError(f"{shown_path(output)}: cannot write ({first_line(e)}).") \
                from None
    if json_out:
        records = frame.to_dict(orient="records")
        for rec in records:
            for k, v in rec.items():
                if isinstance(v, float) and math.isnan(v):
                    rec[k] = None
            # on every row, not once above them: the output stays a list of rows, each of
            # which a scheduler can read (or forward) alone
            rec["power_semantics"] = POWER_SEMANTICS
        emit_json(records)
        return
    errors = int((frame["pred_error"] != "").sum())
    fits = int((frame["pred_fits"] == True).sum())  # noqa: E712 (column holds None too)
    console = Console(stderr=output is None)
    if output is None:
        typer.echo(frame.to_csv(index=False), nl=False)
    console.print(f"{len(frame)} rows: {fits} fit, {len(frame) - fits - errors} do not, "
                  f"{errors} could not be predicted (see pred_error)."
                  + (f" Written to {output}." if output else ""))


def _as_dict(pred, notes, learned: dict) -> dict:
    """One prediction as JSON: `figures` (the headline, each figure with its `source`), then
    the analytical breakdown behind it (`step`, `memory`, `power`, each marked analytical),
    the `Predictor`'s row (`learned`: every `pred_*` column, power bands included) and the
    notes. `source` is the headline throughput's source."""
    from dataclasses import asdict

    from advisor.predict.figures import figures_json

    b = pred.breakdown
    d = {"source": pred.source, "figures": figures_json(pred, learned), **asdict(b)}
    d["source"], d["breakdown_source"] = pred.source, b.source
    for part in ("step", "memory", "power"):
        d[part]["source"] = b.source
    d["memory"]["headroom_bytes"] = b.memory.headroom_bytes
    d["learned"] = learned
    d["notes"] = notes
    d["power_semantics"] = POWER_SEMANTICS
    return d


def job_title(m, p, config) -> str:
    """`GPT3-175B on 32 × NVIDIA H200 ..., LoRA rank 16 (attention)`: what every header of
    `predict` and `explain` starts with; a fine-tuning job says so."""
    what = finetune_label(config)
    return (f"{m.display_name or m.name} on {config.world_size} × {p.display_name}"
            + (f", {what}" if what else ""))


def _per_gpu(m, p, config):
    from advisor.perf.per_gpu import MAX_GPUS, per_gpu_table

    if config.world_size > MAX_GPUS:
        raise AdvisorError(f"--per-gpu lists at most {MAX_GPUS:,} GPUs; this job has "
                           f"{config.world_size:,}.")
    return per_gpu_table(m, p, config)


def _print_gpus(gpus) -> None:
    from rich.table import Table

    table = Table(title="per GPU (Megatron rank order; * = straggler)")
    for name in ("rank", "node", "slot", "row", "stage", "avg W", "peak W", "peak °C",
                 "clock", "capped", "thermal risk"):
        table.add_column(name, justify="left" if name == "row" else "right")
    for g in gpus.itertuples():
        table.add_row(f"{g.rank}{'*' if g.straggler else ''}", str(g.node), str(g.slot), g.row,
                      str(g.stage), f"{g.avg_power_w:.0f}", f"{g.peak_power_w:.0f}",
                      f"{g.peak_temp_c:.1f}", f"{g.clock_frac:.1%}",
                      f"{g.throttle_frac_power:.0%}", f"{g.throttle_frac_thermal:.0%}")
    make_console().print(table)


def _cost(pred, platform) -> str:
    """`$0.571 ($0.017 of it electricity at $0.086/kWh; GPU-hour $2.69)`, or what is missing."""
    from advisor.perf.money import electricity_usd_per_kwh

    kwh = electricity_usd_per_kwh(platform)
    energy = f"${pred.energy_usd_per_million_tokens:.3f} electricity at ${kwh:.3g}/kWh"
    if platform.gpu_hour_usd is None:
        return f"{energy}; no GPU-hour price (--gpu-hour-price)"
    return (f"${pred.usd_per_million_tokens:.3f} ({energy}; GPU-hour "
            f"${platform.gpu_hour_usd:.2f})")


def _print_one(m, p, pred, notes, json_out: bool, learned: dict, gpus=None) -> None:
    if json_out:
        d = _as_dict(pred, notes, learned)
        if gpus is not None:
            d["gpus"] = gpus.to_dict(orient="records")
        emit_json(d)
        return
    from rich.table import Table

    from advisor.predict.figures import figures

    f = figures(pred, learned)
    b = pred.breakdown
    s, pw, mem = b.step, b.power, b.memory
    tps = f["tokens_per_sec_per_gpu"]
    band = (f"p10-p90 {tps.p10:,.0f}-{tps.p90:,.0f}; " if tps.p10 is not None else "")
    table = Table(title=f"{job_title(m, p, pred.config)} ({pred.source}"
                  f"{'' if pred.calibrated else ', uncalibrated'})", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    for label, value, source in [
        ("step time", f"{pred.step_time_s:.3f} s", f["step_time_s"].source),
        ("tokens/s per GPU", f"{pred.tokens_per_sec_per_gpu:,.0f} (" + "; ".join(
            part for part in (band.removesuffix("; "),
                              "extrapolating" if pred.extrapolation else "",
                              "" if pred.source == "analytical" else
                              f"analytical alone {s.tokens_per_sec_per_gpu:,.0f}") if part)
         + ")", tps.source),
        ("model TFLOP/s per GPU", f"{pred.tflops_per_gpu:,.0f}", f["tflops_per_gpu"].source),
        ("MFU", f"{pred.mfu:.1%}", f["mfu"].source),
        ("memory per GPU", f"{mem.total_bytes / 1e9:.1f} / {mem.capacity_bytes / 1e9:.1f} GB"
                           f" ({'fits' if mem.fits else 'does NOT fit'})", "analytical"),
        ("power limit per GPU", f"{pw.power_limit_w:.0f} W" + (
            "" if pw.power_limit_w == p.tdp_w else f" (board default {p.tdp_w:.0f} W)"), ""),
        ("average power per GPU", f"{pred.avg_power_w:.0f} W (never above the limit)",
         f["avg_power_w"].source),
        ("peak power per GPU", f"{pred.peak_power_w:.0f} W (highest 50 ms sample)",
         f["peak_power_w"].source),
        ("energy per token", f"{pred.energy_j_per_token:.3f} J at the wall (GPU boards "
                             f"{pred.board_energy_j_per_token:.3f} J)",
         "derived: (avg power + host share) × PUE × step"),
        ("cost per million tokens", _cost(pred, p), "derived: GPU-hours and energy, priced"),
        ("samples per MJ", f"{f['samples_per_mj'].value:,.0f}", "derived: from energy"),
        ("temperature", f"front {pw.temp_front_c:.0f} °C, rear {pw.temp_rear_c:.0f} °C, "
                        f"bursts {pw.peak_temp_c:.0f} °C (slowdown {p.thermal_slowdown_c:.0f} "
                        f"°C)", "analytical"),
        ("expected loss", f"{pw.throttle_loss:.1%}: power cap {pw.power_cap_loss:.1%}, "
                          f"slowest of {pred.config.world_size:,} GPUs "
                          f"{pw.straggler_loss:.1%}, thermal {pw.thermal_loss:.1%}"
                          + (f", degraded nodes {pw.degraded_loss:.1%}"
                             if pw.degraded_loss > 0 else ""), "analytical"),
        ("thermal risk", f"{pred.throttle_risk:.0%} (probability that a GPU reaches its "
                         f"slowdown point)", "analytical"),
    ]:
        table.add_row(label, value, source)
    console = make_console()
    console.print(table)
    parts = Table(title="step breakdown (analytical)", show_header=True)
    parts.add_column("component")
    parts.add_column("seconds", justify="right")
    parts.add_column("share", justify="right")
    for k, v in s.components().items():
        parts.add_row(k.removesuffix("_s"), f"{v:.3f}", f"{v / s.step_time_s:.1%}")
    parts.add_row("step (analytical)", f"{s.step_time_s:.3f}", "100.0%", style="bold")
    console.print(parts)
    if gpus is not None:
        _print_gpus(gpus)
    for note in notes:
        console.print(f"note: {note}")


@guard
def explain(model: ModelOptional = None, platform: PlatformOptional = None,
            gpus: GpusOptional = None, tp: TpOpt = 1, pp: PpOpt = 1, cp: CpOpt = 1,
            ep: EpOpt = 1, etp: EtpOpt = None, vp: VpOpt = 1, mbs: MbsOpt = 1,
            seq_len: SeqLenOpt = None, gbs: GbsOpt = None, precision: PrecisionOpt = "bf16",
            recompute: RecomputeOpt = "none", dp_sharding: ShardingOpt = "optimizer",
            recompute_modules: RecomputeModulesOpt = None, ep_comm_overlap: EpOverlapOpt = False,
            moe_dispatcher: DispatcherOpt = "auto", dp_shard_size: ShardSizeOpt = 0,
            first_stage_layers: FirstStageOpt = 0, last_stage_layers: LastStageOpt = 0,
            finetune: FinetuneOpt = "none", lora_rank: LoraRankOpt = 16,
            lora_targets: LoraTargetsOpt = "attention",
            framework: FrameworkOpt = "megatron", torch_compile: TorchCompileOpt = None,
            no_overlap: NoOverlapOpt = False, power_limit_w: PowerLimitOpt = None,
            inlet_c: InletOpt = None, degraded_nodes: DegradedNodesOpt = None,
            degraded_power_w: DegradedPowerOpt = None,
            electricity_price: ElectricityOpt = None, gpu_hour_usd: GpuHourOpt = None,
            models: ModelsOpt = None,
            analytical: AnalyticalOpt = False, json_out: JsonOpt = False) -> None:
    """Explain one configuration in words and numbers: where the time goes, what is exposed,
    what limits power, why it might throttle. Its figures are `advisor predict`'s for the same
    flags (the learned surrogate where its data supports the layout).

        advisor explain --model 70b --platform h200 --gpus 32 --tp 8 --pp 2 --mbs 4
    """
    from advisor.predict.predictor import Predictor

    _need(model=model, platform=platform, gpus=gpus)
    m, p, pred, notes, _, learned = _prediction(
        model, platform, gpus, seq_len=seq_len, gbs=gbs, precision=precision, tp=tp, pp=pp,
        cp=cp, ep=ep, etp=etp, vp=vp, mbs=mbs, recompute=recompute, dp_sharding=dp_sharding,
        no_overlap=no_overlap, recompute_modules=recompute_modules,
        ep_comm_overlap=ep_comm_overlap, moe_dispatcher=moe_dispatcher,
        dp_shard_size=dp_shard_size,
        first_stage_layers=first_stage_layers, last_stage_layers=last_stage_layers,
        finetune=finetune_job(finetune, lora_rank, lora_targets),
        framework=framework, torch_compile=torch_compile,
        predictor=None if analytical else Predictor.load(models),
        conditions={"power_limit_w": power_limit_w, "inlet_c": inlet_c,
                    "degraded_nodes": degraded_nodes, "degraded_power_w": degraded_power_w,
                    "electricity_usd_per_kwh": electricity_price, "gpu_hour_usd": gpu_hour_usd})
    lines = explanation(pred, m, p) + _placement_lines(m, p, pred.config)
    lines += [f"Note: {n}" for n in notes]
    if json_out:
        emit_json({"explanation": lines, "power_semantics": POWER_SEMANTICS,
                   "prediction": _as_dict(pred, notes, learned)})
        return
    for line in lines:
        typer.echo(line)


def explanation(pred, m, p) -> list[str]:
    """`advisor.explain.bottlenecks.explain`'s sentences about `pred`'s analytical breakdown,
    with the headline figures (step, throughput, power, energy) the `Predictor`'s, as
    `predict` prints them, and their sources said."""
    from dataclasses import replace

    from advisor.explain.bottlenecks import explain as explain_lines
    from advisor.predict.figures import figures

    b, f = pred.breakdown, figures(pred)
    headline_power = replace(b.power, avg_power_w=pred.avg_power_w,
                             peak_power_w=pred.peak_power_w,
                             energy_j_per_token=pred.board_energy_j_per_token,
                             samples_per_mj=1e6 / (pred.board_energy_j_per_token
                                                   * pred.config.seq_len))
    lines = explain_lines(replace(b, power=headline_power), m, p)
    power_line = next(i for i, ln in enumerate(lines) if ln.startswith("Power: "))
    lines[power_line] += (f" At the wall, with each GPU's share of its node's host and the "
                          f"PUE: {pred.energy_j_per_token:.3f} J per token "
                          f"({f['samples_per_mj'].value:,.0f} samples per MJ).")
    c, tps = pred.config, f["tokens_per_sec_per_gpu"]
    what = finetune_label(c)
    if what:
        lines[0] = lines[0].removesuffix(".") + f", {what}."
    band = (f" (p10-p90 {tps.p10:,.0f}-{tps.p90:,.0f})" if tps.p10 is not None else "")
    lines[1] = (f"Step {pred.step_time_s:.2f} s → {pred.tokens_per_sec_per_gpu:,.0f} tokens/s "
                f"per GPU{band}, {pred.tflops_per_gpu:,.0f} model TFLOP/s per GPU (MFU "
                f"{pred.mfu:.0%} of {c.precision_class.upper()} peak), from the {pred.source} "
                f"model" + ("" if pred.source == "analytical" else
                            f"; the analytical model alone: {b.step.step_time_s:.2f} s, "
                            f"{b.step.tokens_per_sec_per_gpu:,.0f} tokens/s, whose breakdown "
                            f"follows") + ".")
    if pred.source != "analytical" or pred.power_source != "analytical":
        lines = [ln.replace("These are analytical predictions",
                            f"Throughput is the {pred.source} model's and average power the "
                            f"{pred.power_source} model's; the breakdown, memory and thermal "
                            f"figures are analytical predictions", 1) for ln in lines]
    return lines


def _placement_lines(m, p, config) -> list[str]:
    """A thermal-aware uneven split worth trying, for an evenly split pipeline."""
    from advisor.search.placement import propose_placement

    if config.pp < 2 or config.uneven:
        return []
    proposal = propose_placement(m, p, config)
    if proposal is None:
        return ["Placement: no uneven split within a few layers of the even one is predicted "
                "to help (the stages are balanced, or moving layers only moves the straggler)."]
    c = proposal.config
    return [f"Placement: {proposal.describe()}; predict it with --first-stage-layers "
            f"{c.first_stage_layers} --last-stage-layers {c.last_stage_layers}."]
