"""`advisor catalog`: what platforms and models advisor knows."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from advisor import catalog
from advisor.cli.common import JsonOpt, emit_json, gb, guard, make_console
from advisor.core.errors import UnknownNameError, shown, suggest

app = typer.Typer(help="List and show catalog platforms and models.", no_args_is_help=True)


@app.command("platforms")
@guard
def platforms(json_out: JsonOpt = False) -> None:
    """List platforms: memory, dense peak FLOP/s, power limit, NVLink domain, network, and
    whether measured runs calibrated the platform's family ("measured": published or MLPerf
    runs fitted its kernel efficiencies; otherwise predictions use the measured families' mean
    with a wider band and say "uncalibrated")."""
    from advisor.perf.calibration import load_calibration

    items = catalog.platforms().values()
    measured = set(load_calibration().families)
    if json_out:
        emit_json([p.to_dict() | {"calibrated": p.family in measured} for p in items])
        return
    table = Table(title="Platforms (per device; MI250 device = one GCD)")
    for col in ("name", "memory GB", "BF16 TFLOP/s", "FP8 TFLOP/s", "TDP W", "GPUs/node",
                "NVLink domain", "intra GB/s", "network GB/s", "cooling", "measured"):
        table.add_column(col, justify="left" if col in ("name", "cooling") else "right",
                         no_wrap=col == "name")
    for p in items:
        fp8 = p.peak_flops_per_s.get("fp8")
        table.add_row(p.name, gb(p.hbm_bytes), f"{p.peak_flops('bf16') / 1e12:,.0f}",
                      f"{fp8 / 1e12:,.0f}" if fp8 else "-", f"{p.tdp_w:.0f}",
                      str(p.num_gpus_per_node), str(p.nvlink_domain_size),
                      f"{p.intra_domain_bandwidth_bytes_per_s / 1e9:,.0f}",
                      f"{p.inter_node_bandwidth_bytes_per_s / 1e9:,.1f}", p.cooling,
                      "yes" if p.family in measured else "no")
    make_console().print(table)


@app.command("models")
@guard
def models(json_out: JsonOpt = False) -> None:
    """List models: layers, hidden size, heads (KV heads), experts, total/active parameters."""
    items = catalog.models().values()
    if json_out:
        emit_json([m.to_dict() for m in items])
        return
    table = Table(title="Models")
    for col in ("name", "aliases", "layers", "hidden", "heads/kv", "experts (top-k)",
                "params B", "active B"):
        table.add_column(col, justify="left" if col in ("name", "aliases") else "right",
                         no_wrap=col == "name", max_width=24 if col == "aliases" else None)
    for m in items:
        experts = f"{m.num_experts} ({m.moe_top_k})" if m.is_moe else "-"
        table.add_row(m.name, ", ".join(m.aliases[:3]), str(m.num_layers), str(m.hidden_size),
                      f"{m.num_attention_heads}/{m.num_kv_heads}", experts,
                      f"{m.params.total / 1e9:,.1f}", f"{m.params.active / 1e9:,.1f}")
    make_console().print(table)


def _is_model_path(name: str) -> bool:
    from pathlib import Path

    try:
        return name.lower().endswith(".json") or Path(name).is_dir()
    except OSError:  # a name no file system could hold (too long): a catalog name, or unknown
        return False


@app.command("show")
@guard
def show(name: Annotated[str, typer.Argument(help="A platform or model name or alias.")],
         json_out: JsonOpt = False) -> None:
    """Show every field of one platform or model, with the source of each number: a catalog
    name, a cluster file (.toml) or a Hugging Face config.json (or its directory)."""
    try:
        # A config.json (or a model directory) is a model: never read it as a cluster TOML.
        # A model's Hugging Face id (meta-llama/Meta-Llama-3-70B) is a catalog alias, not a
        # cluster file's path.
        hf_id = "/" in name and not _is_model_path(name) and catalog.find_model(name)
        item = (catalog.load_model(name) if _is_model_path(name) else hf_id
                or catalog.load_platform(name))
    except UnknownNameError:
        try:
            item = catalog.load_model(name)
        except UnknownNameError:
            known = list(catalog.platforms()) + list(catalog.models())
            raise UnknownNameError(f"no platform or model named {shown(name)}."
                                   f"{suggest(name, known)} See `advisor catalog platforms` "
                                   f"and `advisor catalog models`.") from None
    data = item.to_dict()
    if json_out:
        emit_json(data)
        return
    sources = data.pop("sources", {})
    table = Table(title=f"{data.get('display_name') or data['name']}", show_lines=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    table.add_column("source", overflow="fold")
    for key, value in data.items():
        if value in (None, 0, 0.0, "", [], False) and key not in ("tied_embeddings",):
            continue
        if isinstance(value, dict):
            for sub, v in value.items():
                table.add_row(f"{key}.{sub}", f"{v:.4g}", sources.get(f"{key}.{sub}", ""))
            continue
        cell = f"{value:.4g}" if isinstance(value, float) else str(value)
        table.add_row(key, cell, sources.get(key, ""))
    if "architecture" in sources:
        table.add_row("architecture", "", sources["architecture"])
    make_console().print(table)
