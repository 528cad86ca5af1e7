"""What every command shares: option types, error mapping, output helpers."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from advisor.core.errors import AdvisorError, shown
from advisor.core.knobs import BY_NAME

F = TypeVar("F", bound=Callable[..., Any])

ModelOpt = Annotated[str, typer.Option(
    "--model", "-m", help="Catalog name or alias (70b, llama3.1-405b, mixtral-8x7b, ...) or a "
    "Hugging Face config.json path.")]
PLATFORM_HELP = ("Catalog platform (h100, h200, b200, gb200, mi300x, ...) or a cluster file "
                 "(.toml with base = \"h200\"). Measured runs calibrate A100, H100/H200, "
                 "B200/B300, GB200/GB300 and MI300X/MI325X; MI250 is uncalibrated (wider band): "
                 "`advisor catalog platforms`, column measured.")
PlatformOpt = Annotated[str, typer.Option("--platform", "-p", help=PLATFORM_HELP)]
GpusOpt = Annotated[int, typer.Option("--gpus", "-g", min=1, help="Number of GPUs (MI250: GCDs).")]
SeqLenOpt = Annotated[int | None, typer.Option(
    "--seq-len", min=1, help="Tokens per sequence. Default: the model's native context, capped "
    "at 8192.")]
GbsOpt = Annotated[int | None, typer.Option(
    "--gbs", min=1, help="Global batch size in sequences per optimizer step. Default: about 2M "
    "tokens (0.5M below 5B parameters) as a power of two, and at least gpus/2 sequences so the "
    "batch grows with the job (405B on 1,024 GPUs: GBS 512, as NVIDIA's recipes run).")]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="bf16, fp16, or an FP8 recipe by its scaling: fp8 (per tensor, "
    "delayed), fp8-cs (per tensor, current), fp8-row (per row: TorchTitan's float8), fp8-block "
    "(per 128-block), mxfp8 (per 32); nvfp4.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of tables.")]
FinetuneOpt = Annotated[str, typer.Option(
    "--finetune", help="none (pre-training), lora (LoRA adapters on a frozen base: no weight "
    "gradients for the base, adapters' gradients and optimizer only) or full (fine-tune every "
    "weight: pre-training's work per step).")]
LoraRankOpt = Annotated[int, typer.Option(
    "--lora-rank", min=1, help="With --finetune lora: the adapter rank (MLPerf llama2_70b_lora: "
    "16).")]
RecomputeModulesOpt = Annotated[str | None, typer.Option(
    "--recompute-modules", help="With --recompute selective: what it recomputes, Megatron-Core's "
    "--recompute-modules names separated by spaces or commas: core_attn (the default), "
    "mla_up_proj, layernorm, mlp, moe_act, shared_experts, moe; e.g. \"moe_act,layernorm\" "
    "(NVIDIA's Qwen3-235B recipe).", show_default=False)]
EpOverlapOpt = Annotated[bool, typer.Option(
    "--ep-comm-overlap", help="Overlap the MoE all-to-all of one micro-batch with another's "
    "compute (Megatron-Core --overlap-moe-expert-parallel-comm; needs ep > 1, --vp > 1 with "
    "--pp > 1, no full recompute; one more micro-batch in flight).")]
DISPATCHER_HELP = ("MoE token dispatcher: auto (the flex dispatcher with DeepEP where the "
                   "expert group leaves an NVIDIA NVLink domain, all-to-all inside one), "
                   "alltoall (Megatron-Core's alltoall: every remote copy of a token crosses "
                   "the network) or deepep (flex with DeepEP or HybridEP: one network copy per "
                   "remote node; NVIDIA only). flex and hybridep are read as deepep.")
DispatcherOpt = Annotated[str, typer.Option(
    "--moe-dispatcher", help=DISPATCHER_HELP + " Needs --ep > 1 unless auto.")]
SHARD_SIZE_HELP = ("Hybrid sharding: shard the optimizer (or, with --dp-sharding full, "
                   "everything) over this many data-parallel ranks and replicate across the "
                   "groups (Megatron-Core --num-distributed-optimizer-instances = dp·cp / this; "
                   "TorchTitan HSDP data_parallel_shard_degree; ZeRO within a node: the GPUs "
                   "of a node / tp). 0 = the whole data-parallel group.")
ShardSizeOpt = Annotated[int, typer.Option("--dp-shard-size", min=0, help=SHARD_SIZE_HELP)]
FrameworkOpt = Annotated[str, typer.Option(
    "--framework", help="The framework that runs the job, which sets its kernels, defaults and "
    "rules: megatron (Megatron-Core, also NeMo and Megatron-Bridge; what the model is "
    "calibrated on), torchtitan, automodel (NeMo AutoModel), pytorch-fsdp, ... (every name "
    "`predict --input` accepts in its framework column).")]
TorchCompileOpt = Annotated[bool | None, typer.Option(
    "--torch-compile/--no-torch-compile", help="TorchTitan's torch.compile (--compile.enable): "
    "fuses the elementwise kernels its eager blocks run one by one (RoPE, SwiGLU). Default: "
    "as torchtitan's recipes set it, on for FP8, MXFP8 and NVFP4, off for BF16. Needs "
    "--framework torchtitan.", show_default=False)]
LoraTargetsOpt = Annotated[str, typer.Option(
    "--lora-targets", help="With --finetune lora: attention (QKV and output projections, the "
    "MLPerf reference) or all-linear (also the MLP GEMMs).")]


POWER_SEMANTICS = {
    "avg_power_w": "mean per GPU over the step, never above the limit",
    "peak_power_w": "highest 50 ms NVML instantaneous sample per GPU; may exceed the limit "
                    "briefly"}
"""What the predicted power figures of every JSON output mean (recommend and its power-limit
search, compare, predict, predict --input on each row, explain)."""

MEASURED_POWER_SEMANTICS = {
    "avg_power_w": "mean per GPU of each GPU's time-weighted mean over the measured window",
    "peak_power_w": "largest NVML sample of any GPU (instantaneous where the driver has it, "
                    "else its running average) at telemetry_hz; may exceed the limit briefly"}
"""What the measured power figures of `collect`'s JSON mean (`collectors.telemetry.summary`)."""


def _etp_option():
    return knob_option("etp", optional=True, more=" Default: the TP size, as Megatron-Core "
                       "and NeMo 2 do when it is unset (1 where ep × tp does not divide the "
                       "GPUs of a pipeline stage).")


def finetune_job(finetune: str, lora_rank: int, lora_targets: str) -> dict[str, Any]:
    """`make_job` keyword arguments for the fine-tuning options."""
    return {"finetune": finetune.strip().lower(), "lora_rank": lora_rank,
            "lora_targets": lora_targets.strip().lower()}


def knob_option(name: str, *, pin: bool = False, optional: bool = False, more: str = ""):
    """The option that sets knob `name`, or with `pin` fixes it for the search (then it is
    optional): its flag, meaning and values from `advisor.core.knobs`, `more` added to the
    help."""
    knob = BY_NAME[name]
    what = f"{knob.meaning}: {knob.values}" if knob.values else knob.meaning
    kind = bool if name == "overlap" else str if knob.values else int
    text = (f"Pin {'the ' if kind is int else ''}{what}." if pin
            else f"{what[0].upper()}{what[1:]}.")
    option: dict[str, Any] = {"help": text + more}
    if name == "dp_sharding":   # one vocabulary: ddp, zero1, fsdp, ... read as its names
        option["callback"] = _sharding_name
    if kind is int:
        option["min"] = 1
    if kind is bool or optional:
        option["show_default"] = False
    return Annotated[kind | None if pin or optional else kind, typer.Option(knob.flag, **option)]


def _sharding_name(value: str | None) -> str | None:
    from advisor.core.parallel import sharding_name

    return sharding_name(value)


def guard(fn: F) -> F:
    """Map `AdvisorError` to one line on stderr and exit code 2 (traceback with ADVISOR_DEBUG=1);
    the parameters the library's message names (`max_power_w`) become this command's flags.
    An operating-system error about a path the user gave (a name too long for the file system,
    a folder where a file belongs, no permission) is one line too; one without a path is a
    bug and keeps its traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AdvisorError as e:
            if os.environ.get("ADVISOR_DEBUG") == "1":
                raise
            print(f"error: {one_line(as_flags(str(e), fn))}", file=sys.stderr)
            raise typer.Exit(code=2) from None
        except OSError as e:
            if e.filename is None or os.environ.get("ADVISOR_DEBUG") == "1":
                raise
            name = (os.fsdecode(e.filename) if isinstance(e.filename, (str, bytes))
                    else str(e.filename))
            print(f"error: {shown(name)}: {e.strerror or e}.", file=sys.stderr)
            raise typer.Exit(code=2) from None

    return wrapper  # type: ignore[return-value]


def one_line(message: str) -> str:
    """`message` on one line: a newline or another control character (from a path or a name
    the user gave) is shown escaped, as `repr` writes it; other text is left as written."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


_PARAMETER = re.compile(r"`([a-z][a-z0-9_]*)`")


def as_flags(message: str, command: Callable) -> str:
    """`message` with each backquoted parameter of `command` written as its option
    (`max_power_w` -> --max-power-w, `overlap` -> --overlap); everything else is left as
    written, backquotes included (a model named `m` in an error keeps its quotes). Library
    errors name parameters, not flags: a scheduler calling the library gets advice in its own
    terms."""
    flags = command_flags(command)
    return _PARAMETER.sub(lambda m: flags.get(m.group(1), m.group(0)), message)


def command_flags(command: Callable) -> dict[str, str]:
    """Parameter name -> the long option typer gives it (from the `typer.Option` declarations
    in its annotations; typer's default `--name-with-dashes` otherwise)."""
    flags = {}
    for name, hint in get_type_hints(command, include_extras=True).items():
        info = next((m for m in getattr(hint, "__metadata__", ())
                     if isinstance(m, typer.models.OptionInfo)), None)
        if info is None:
            continue
        longs = [d for d in (info.param_decls or ()) if d.startswith("--")]
        flags[name] = longs[0] if longs else "--" + name.replace("_", "-")
    return flags


PIPED_WIDTH = 200
"""Columns for tables when stdout is not a terminal (a pipe or a file): wide enough that no
table is cut with "…" (Rich would assume 80)."""


def make_console():
    """A Rich console: the terminal's width on a terminal; piped, `COLUMNS` or `PIPED_WIDTH`,
    so `advisor ... | less` and logs keep every column."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    return Console(width=int(os.environ.get("COLUMNS") or PIPED_WIDTH))


def emit_json(data: Any) -> None:
    """Print `data` as JSON; NaN and infinities (no JSON for them) become null."""
    typer.echo(json.dumps(_finite(data), indent=2, default=_jsonable, allow_nan=False))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # NumPy scalars
        return _finite(value.item())
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def gb(value: float) -> str:
    return f"{value / 1e9:,.1f}"


PowerLimitOpt = Annotated[float | None, typer.Option(
    "--power-limit-w", min=1, show_default=False,
    help="GPU power limit in watts, as `nvidia-smi -pl` or `amd-smi set --power-cap` sets it. "
    "Default: the board's (its TDP, `advisor catalog show PLATFORM`). A lower limit trades "
    "throughput for energy per token (the Zeus/Perseus lever).")]
ElectricityOpt = Annotated[float | None, typer.Option(
    "--electricity-price", min=0, show_default=False,
    help="Price of electricity at the cluster, US dollars per kWh, for dollars per million "
    "tokens (energy at the wall, host and PUE included). Default: the cluster file's "
    "electricity_usd_per_kwh, else 0.0861, the 2025 US industrial average (EIA). 0 where a "
    "rental rate already includes power.")]
GpuHourOpt = Annotated[float | None, typer.Option(
    "--gpu-hour-price", min=0.0001, show_default=False,
    help="US dollars per GPU-hour besides power (a rental rate, or the purchase amortised), "
    "for dollars per million tokens. Default: the catalog's public on-demand rate where it has "
    "one (h100, h200, b200, gb200).")]
InletOpt = Annotated[float | None, typer.Option(
    "--inlet-c", show_default=False,
    help="The room's inlet air temperature (the coolant supply for liquid-cooled racks), °C. "
    "Default: the chassis' (25 °C air, 35 °C water; advisor/catalog/chassis.toml). Raises "
    "every GPU's temperature and the thermal risk and loss.")]
DegradedNodesOpt = Annotated[int | None, typer.Option(
    "--degraded-nodes", min=1, show_default=False,
    help="Nodes of the job whose GPUs are held at --degraded-power-w (a power fault, a capped "
    "PSU): the synchronous job waits for the stage they hold.")]
DegradedPowerOpt = Annotated[float | None, typer.Option(
    "--degraded-power-w", min=1, show_default=False,
    help="The power limit of the degraded nodes' GPUs, watts (with --degraded-nodes).")]



EtpOpt = _etp_option()
"""`--etp` on every command that takes one layout (`predict`, `explain`, `memory`): unset,
Megatron-Core's rule etp = tp (`advisor.core.parallel.default_etp`), as recommend uses."""
