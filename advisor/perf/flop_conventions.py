"""Tokens/s from a published TFLOP/s figure, counted the way its source counts.

Some sources print only "model TFLOP/s" per GPU. That is a measurement of tokens/s once the
FLOPs per token are counted exactly as the source counted them; `advisor/catalog/
flop_conventions.toml` says, per source, which convention that is and how it is known.
"""

from __future__ import annotations

import functools
from importlib import resources

from advisor.core.errors import AdvisorError
from advisor.core.model import ModelSpec
from advisor.perf.flops import (
    attention_core_flops_per_token,
    gemm_flops,
    layer_gemms,
    model_flops_per_token,
    sublayer_counts,
)

CONVENTIONS = ("megatron-causal", "full-attention", "narayanan-recompute")


def flops_per_token(model: ModelSpec, seq_len: int, convention: str) -> float:
    """Training FLOPs per token under `convention` (see flop_conventions.toml)."""
    if convention not in CONVENTIONS:
        raise AdvisorError(f"unknown FLOP convention {convention!r}; one of "
                           f"{', '.join(CONVENTIONS)}.")
    causal = model_flops_per_token(model, seq_len)
    if convention == "megatron-causal":
        return causal
    if model.sliding_window:
        raise AdvisorError(f"{model.name}: sliding-window attention has no full-attention "
                           f"FLOP count; only megatron-causal applies.")
    # The causal count attends to seq_len / 2 keys per query on average; full attention to all.
    attention = 3.0 * sublayer_counts(model).attention * attention_core_flops_per_token(
        model, seq_len)
    full = causal + attention
    if convention == "full-attention":
        return full
    output = 3.0 * gemm_flops(layer_gemms(model)["output"])
    return (full - output) * 4.0 / 3.0 + output


@functools.cache
def source_conventions() -> dict[str, str]:
    """Source name → convention, from the bundled flop_conventions.toml."""
    from advisor.catalog import read_toml

    target = resources.files("advisor.catalog").joinpath("flop_conventions.toml")
    with resources.as_file(target) as path:
        data = read_toml(path)
    out = {}
    for name, entry in data.get("sources", {}).items():
        convention = entry.get("convention")
        if convention not in CONVENTIONS or not entry.get("evidence"):
            raise AdvisorError(f"{path}: [sources.{name!r}] needs convention (one of "
                               f"{', '.join(CONVENTIONS)}) and evidence; got {convention!r}.")
        out[name] = convention
    return out


def derived_tokens_per_sec(source_name: str, tflops_per_gpu: str, model: ModelSpec,
                           seq_len: int) -> tuple[float, str] | None:
    """(tokens/s/GPU, how) from a row's published TFLOP/s, or None where its source's
    convention is not known or there is no TFLOP/s figure."""
    convention = source_conventions().get(source_name)
    try:
        tflops = float(tflops_per_gpu)
    except (TypeError, ValueError):
        return None
    if convention is None or not tflops > 0:
        return None
    return (tflops * 1e12 / flops_per_token(model, seq_len, convention),
            f"tokens/s derived from {tflops:g} TFLOP/s/GPU ({convention} FLOP count)")
