"""`advisor space` and `advisor memory`: the valid configurations of a job, and what one of
them needs per GPU."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from advisor.catalog import load_model, load_platform
from advisor.cli.common import (
    EpOverlapOpt,
    EtpOpt,
    FinetuneOpt,
    GbsOpt,
    GpusOpt,
    JsonOpt,
    LoraRankOpt,
    LoraTargetsOpt,
    ModelOpt,
    PlatformOpt,
    PrecisionOpt,
    RecomputeModulesOpt,
    SeqLenOpt,
    ShardSizeOpt,
    emit_json,
    finetune_job,
    gb,
    guard,
    knob_option,
    make_console,
)
from advisor.core.errors import ConfigError
from advisor.core.knobs import TABLE_ORDER, overlap
from advisor.core.parallel import (
    DEFAULT_RECOMPUTE_MODULES,
    ParallelConfig,
    default_etp,
    finetune_label,
    make_job,
    recompute_label,
)

SHOWN = TABLE_ORDER
RecomputeOpt, ShardingOpt = knob_option("recompute"), knob_option("dp_sharding")


@guard
def space(model: ModelOpt, gpus: GpusOpt, platform: PlatformOpt, seq_len: SeqLenOpt = None,
          gbs: GbsOpt = None, precision: PrecisionOpt = "bf16",
          limit: Annotated[int, typer.Option(min=0, help="Rows to print (0 = all).")] = 20,
          fitting: Annotated[bool, typer.Option(
              "--fitting/--all", help="Only configurations that fit in memory.")] = True,
          json_out: JsonOpt = False) -> None:
    """Enumerate every valid parallel configuration for a job and check each against memory.

    Knobs: tp (tensor), pp (pipeline), dp (data), cp (context), ep/etp (expert, expert-tensor),
    vp (virtual pipeline stages), mbs (micro-batch), recompute (none/selective/full),
    dp_sharding (none, optimizer = distributed optimizer, full = FSDP), overlap (on/off).
    """
    m, p = load_model(model), load_platform(platform)
    job = make_job(m, p, num_gpus=gpus, seq_len=seq_len, gbs=gbs, precision=precision)
    from advisor.core.space import enumerate_space
    from advisor.perf.memory import memory_table  # pandas: not on `advisor --help`'s path

    table = enumerate_space(job)
    memory = memory_table(m, platform=p, configs=table)
    table["memory_gb"] = (memory["total_bytes"] / 1e9).round(2)
    table["fits"] = memory["fits"]
    total, fits = len(table), int(memory["fits"].sum())
    shown = table[table["fits"]] if fitting else table
    shown = shown.sort_values(["memory_gb"]) if len(shown) else shown
    rows = shown if limit == 0 else shown.head(limit)
    if json_out:
        emit_json({"model": m.name, "platform": p.name, "num_gpus": gpus,
                   "seq_len": job.seq_len, "gbs": job.gbs, "precision": precision,
                   "num_valid": total, "num_fit": fits,
                   "configs": rows.to_dict(orient="records")})
        return
    console = make_console()
    console.print(f"{m.name} on {gpus} × {p.name}, seq {job.seq_len}, gbs {job.gbs}, "
                  f"{precision}: {total:,} valid configurations, {fits:,} fit in "
                  f"{gb(p.memory_capacity_bytes)} GB.")
    if not len(rows):
        return
    title = (f"{'fitting' if fitting else 'all'} configurations, least memory first "
             f"({len(rows):,} of {len(shown):,}; --limit 0 for all)")
    if len(rows) > RICH_ROWS:
        _print_plain(rows, title)
        return
    out = Table(title=title)
    for col in (*SHOWN, "overlap", "GB/GPU"):
        out.add_column(col, justify="right")
    for _, r in rows.iterrows():
        out.add_row(*(str(r[c]) for c in SHOWN), "on" if overlap(r) else "off",
                    f"{r.memory_gb:,.1f}" + ("" if r.fits else " ✗"),
                    style="yellow" if r.tp_beyond_nvlink else None)
    console.print(out)
    if rows["tp_beyond_nvlink"].any():
        console.print(f"yellow rows: tp spans more than one NVLink domain "
                      f"({p.nvlink_domain_size} GPUs), so TP traffic crosses the network.")


RICH_ROWS = 500
"""Above this many rows the table is plain text: a drawn table costs about 1 ms a row (9,600
configurations of Qwen3-30B-A3B on 8 H200: 10 s drawn, well under 1 s plain)."""


def _print_plain(rows, title: str) -> None:
    """Rows as aligned plain text (tp beyond the NVLink domain marked with *, not colour)."""
    plain = rows[list(SHOWN)].assign(
        overlap=overlap(rows).map({True: "on", False: "off"}),
        **{"GB/GPU": [f"{v:,.1f}" + ("" if ok else " ✗") for v, ok in
                      zip(rows["memory_gb"], rows["fits"], strict=True)]},
        nvlink=rows["tp_beyond_nvlink"].map({True: "*", False: ""}))
    typer.echo(title)
    typer.echo(plain.rename(columns={"nvlink": ""}).to_string(index=False))
    if rows["tp_beyond_nvlink"].any():
        typer.echo("*: tp spans more than one NVLink domain, so TP traffic crosses the network.")


@guard
def memory(model: ModelOpt, gpus: GpusOpt, platform: PlatformOpt,
           tp: Annotated[int, typer.Option(min=1, help="Tensor parallel size.")] = 1,
           pp: Annotated[int, typer.Option(min=1, help="Pipeline parallel size.")] = 1,
           cp: Annotated[int, typer.Option(min=1, help="Context parallel size.")] = 1,
           ep: Annotated[int, typer.Option(min=1, help="Expert parallel size (MoE).")] = 1,
           etp: EtpOpt = None,
           vp: Annotated[int, typer.Option(min=1, help="Virtual pipeline stages per GPU.")] = 1,
           mbs: Annotated[int, typer.Option(min=1, help="Micro-batch size.")] = 1,
           seq_len: SeqLenOpt = None, gbs: GbsOpt = None, precision: PrecisionOpt = "bf16",
           recompute: RecomputeOpt = "none", dp_sharding: ShardingOpt = "optimizer",
           recompute_modules: RecomputeModulesOpt = None, ep_comm_overlap: EpOverlapOpt = False,
           dp_shard_size: ShardSizeOpt = 0, finetune: FinetuneOpt = "none",
           lora_rank: LoraRankOpt = 16,
           lora_targets: LoraTargetsOpt = "attention",
           grad_reduce_in_fp32: Annotated[bool, typer.Option(
               help="FP32 gradient buffer (Megatron-LM default) instead of BF16.")] = False,
           json_out: JsonOpt = False) -> None:
    """Per-GPU memory of one configuration: weights, gradients, optimizer, activations."""
    m, p = load_model(model), load_platform(platform)
    job = make_job(m, p, num_gpus=gpus, seq_len=seq_len, gbs=gbs, precision=precision,
                   **finetune_job(finetune, lora_rank, lora_targets))
    if gpus % (tp * pp * cp):
        raise ConfigError(f"tp × pp × cp ({tp * pp * cp}) must divide --gpus ({gpus}).")
    dp = gpus // (tp * pp * cp)
    if etp is None:
        etp = default_etp(m, tp=tp, cp=cp, dp=dp, ep=ep)
    config = ParallelConfig(tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, etp=etp,
                            vp=vp, mbs=mbs, gbs=job.gbs, seq_len=job.seq_len,
                            precision=precision, recompute=recompute,
                            recompute_modules=recompute_modules or DEFAULT_RECOMPUTE_MODULES,
                            dp_sharding=dp_sharding, dp_shard_size=dp_shard_size,
                            sequence_parallel=tp > 1, grad_reduce_in_fp32=grad_reduce_in_fp32,
                            ep_comm_overlap=ep_comm_overlap,
                            finetune=job.finetune, lora_rank=job.lora_rank,
                            lora_targets=job.lora_targets)
    from advisor.core.space import validate
    from advisor.perf.memory import estimate_memory

    notes = validate(config, m, p, num_gpus=gpus)
    mem = estimate_memory(m, parallel=config, platform=p)
    if json_out:
        emit_json({"config": config.to_dict(), "memory": mem.to_dict(), "notes": notes})
        return
    console = make_console()
    what = finetune_label(config)
    table = Table(title=f"{m.name}, {gpus} × {p.name}{f', {what}' if what else ''}: tp {tp} "
                        f"pp {pp} dp {config.dp} cp {cp}"
                        f"{f' ep {ep} etp {config.etp}' if m.is_moe else ''} vp {vp} mbs {mbs} "
                        f"gbs {job.gbs}, recompute "
                        f"{recompute_label(config.recompute, config.recompute_modules)}, sharding "
                        f"{config.dp_sharding} (pipeline stage {mem.stage}, the heaviest)")
    table.add_column("per GPU")
    table.add_column("GB", justify="right")
    for label, value in (("weights", mem.weights_bytes), ("gradients", mem.gradients_bytes),
                         ("optimizer state", mem.optimizer_bytes),
                         ("activations", mem.activations_bytes),
                         ("reserve (context, NCCL, fragmentation)", mem.reserve_bytes),
                         ("total", mem.total_bytes), ("capacity", mem.capacity_bytes)):
        table.add_row(label, gb(value))
    console.print(table)
    verdict = "fits" if mem.fits else "does NOT fit"
    console.print(f"{verdict}: {gb(abs(mem.headroom_bytes))} GB "
                  f"{'headroom' if mem.fits else 'over'}.")
    for note in notes:
        console.print(f"note: {note}")
