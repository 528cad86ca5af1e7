"""How fast one GPU runs the kernels the step model prices with fitted factors and no measured
table: fused causal attention against sequence length, and MoE expert GEMMs against the tokens
each expert receives.

    python -m collectors.kernel_probe --out runs/kernel-probe            # about a minute
    python -m collectors.kernel_probe --out /tmp/k --device cpu --small  # the code path

The GEMM model stands on measured tables (`datasets/reference/gemm`); attention, the grouped
expert GEMMs and their levels against the dense kernels are fitted end to end, and where one
publication series is the only source of MoE runs, holding it out leaves them at their priors
(`benchmarks/calibrate.py --gate`). These are the measurements that would set those priors:

* **attention**: `torch.nn.functional.scaled_dot_product_attention` with a causal mask (the
  fused flash or cuDNN kernel torch picks), BF16, head dimension 128, 16 heads, 32,768 tokens
  per call (batch = 32,768 / sequence), sequences of 1,024 to 32,768 tokens; forward alone and
  forward with backward.
* **experts**: one routed expert's first GEMM, (tokens × 4,096) · (4,096 × 2,048), for 8 local
  experts of 128 to 8,192 tokens each: one kernel per expert (`loop`, as Transformer Engine
  launches them) and one grouped kernel for all (`grouped`, `torch._grouped_mm`, where this
  torch and device have it).
* **scan**: the Mamba-2 chunked state-space scan inside Megatron-Core's Mamba layer
  (`mamba_ssm`'s `mamba_chunk_scan_combined`, Triton, BF16 inputs; the layer's memory-efficient
  path runs the same kernels wrapped with its conv1d), at Nemotron-3 Nano's shape
  (64 heads of dimension 64, state 128, 8 groups, chunks of 128: Megatron's MambaMixer
  default), 32,768 tokens per call in sequences of 2,048 and 8,192, forward alone and with
  backward; where `mamba_ssm` is installed on a CUDA device (NVIDIA's NeMo containers ship it),
  else recorded as missing. The end-to-end fit gives Hopper and Blackwell `scan` factors
  several-fold apart (`advisor/catalog/calibration.toml`), which a probe on each settles.

Each kernel is warmed up, then timed over repeats (CUDA events on a GPU, the host clock on a
CPU); the median is kept. Nothing changes the GPU's settings. Written to `--out`: `kernels.csv`
(kind, variant, batch, seq, heads, head_dim, experts, tokens, hidden, ffn, the call's FLOP as the
step model counts them — a causal mask halves the forward's 4·b·h·s²·d, the backward is 2.5 ×
the forward — seconds, TFLOP/s) and `device.json`
(name, versions, clocks and power limit where NVML reads them).
`benchmarks/kernel_check.py --probe DIR` sets them against the calibrated factors.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.power_probe import check_target, device_facts

ATTENTION_TOKENS = 32768
ATTENTION_HEADS = 16
HEAD_DIM = 128
SEQUENCES = (1024, 2048, 4096, 8192, 16384, 32768)
EXPERTS = 8
EXPERT_HIDDEN = 4096
EXPERT_FFN = 2048
TOKENS_PER_EXPERT = (128, 512, 2048, 8192)
SCAN_TOKENS = 32768
SCAN_SEQUENCES = (2048, 8192)
SCAN_HEADS, SCAN_HEAD_DIM, SCAN_STATE, SCAN_GROUPS, SCAN_CHUNK = 64, 64, 128, 8, 128
"""Nemotron-3 Nano's Mamba layer (mamba_num_heads 64, mamba_head_dim 64, ssm_state_size 128,
n_groups 8: its config.json, advisor/catalog/models/nemotron_h.toml) and Megatron-Core
MambaMixer's default chunk_size 128."""
BACKWARD_RATIO = 2.5
"""Backward FLOPs of attention per forward FLOP as FlashAttention's benchmarks count them (five
products against the forward's two), and as the step model does."""
SHRINK = 16
"""`--small` divides every size by this (a CPU runs the code path in seconds)."""
COLUMNS = ("kind", "variant", "batch", "seq", "heads", "head_dim", "experts", "tokens",
           "hidden", "ffn", "flop", "seconds", "tflops")


def _timer(torch: Any, cuda: bool) -> Callable[[Callable[[], Any], int], float]:
    """Median seconds of `launch` over `repeats` calls, after two warm-up calls."""
    def median(launch: Callable[[], Any], repeats: int) -> float:
        for _ in range(2):
            launch()
        if not cuda:
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                launch()
                times.append(time.perf_counter() - start)
            return statistics.median(times)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
        events[0].record()
        for e in events[1:]:
            launch()
            e.record()
        events[-1].synchronize()
        return statistics.median(a.elapsed_time(b) / 1e3 for a, b in zip(events, events[1:],
                                                                         strict=False))
    return median


def attention_rows(torch: Any, device: Any, *, small: bool, repeats: int) -> list[dict]:
    """Causal fused attention, forward and forward with backward, per sequence length."""
    import torch.nn.functional as F

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shrink = SHRINK if small else 1
    heads, dim = ATTENTION_HEADS, HEAD_DIM // (8 if small else 1)
    timed = _timer(torch, device.type == "cuda")
    rows = []
    for seq in (s // shrink for s in SEQUENCES):
        batch = max(ATTENTION_TOKENS // shrink // seq, 1)
        q, k, v = (torch.randn(batch, heads, seq, dim, device=device, dtype=dtype,
                               requires_grad=True) for _ in range(3))
        grad = torch.randn_like(q)

        def forward(q=q, k=k, v=v) -> Any:
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both(q=q, k=k, v=v, grad=grad) -> None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(out, (q, k, v), grad)

        flop = 2.0 * batch * heads * seq * seq * dim  # causal: half of 4·b·h·s²·d
        for variant, launch, calls in (("forward", forward, 1.0),
                                       ("forward+backward", both, 1.0 + BACKWARD_RATIO)):
            seconds = timed(launch, repeats)
            rows.append({"kind": "attention", "variant": variant, "batch": batch, "seq": seq,
                         "heads": heads, "head_dim": dim, "flop": calls * flop,
                         "seconds": seconds})
    return rows


def expert_rows(torch: Any, device: Any, *, small: bool, repeats: int) -> tuple[list[dict],
                                                                                 str]:
    """One routed expert's first GEMM over `EXPERTS` local experts, one kernel each and one
    grouped kernel; returns the rows and why the grouped kernel is missing ("" if measured)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shrink = SHRINK if small else 1
    hidden, ffn = EXPERT_HIDDEN // shrink, EXPERT_FFN // shrink
    timed = _timer(torch, device.type == "cuda")
    weights = torch.randn(EXPERTS, hidden, ffn, device=device, dtype=dtype)
    grouped_mm = getattr(torch, "_grouped_mm", None)
    missing = "" if grouped_mm else f"torch {torch.__version__} has no torch._grouped_mm"
    rows = []
    for tokens in (max(t // shrink, 8) for t in TOKENS_PER_EXPERT):
        x = torch.randn(EXPERTS * tokens, hidden, device=device, dtype=dtype)
        parts = x.split(tokens)

        def loop(parts=parts) -> list:
            return [torch.matmul(p, weights[e]) for e, p in enumerate(parts)]

        variants: list[tuple[str, Callable[[], Any]]] = [("loop", loop)]
        if grouped_mm is not None:
            offsets = torch.arange(tokens, EXPERTS * tokens + 1, tokens, device=device,
                                   dtype=torch.int32)
            try:
                grouped_mm(x, weights, offs=offsets)
            except Exception as exc:  # not on this device or dtype: the loop still runs
                missing = f"torch._grouped_mm: {type(exc).__name__}: {exc}".splitlines()[0]
            else:
                variants.append(("grouped", lambda x=x, offs=offsets, mm=grouped_mm: mm(
                    x, weights, offs=offs)))
        for variant, launch in variants:
            seconds = timed(launch, repeats)
            rows.append({"kind": "experts", "variant": variant, "experts": EXPERTS,
                         "tokens": tokens, "hidden": hidden, "ffn": ffn,
                         "flop": 2.0 * EXPERTS * tokens * hidden * ffn, "seconds": seconds})
    return rows, missing


def scan_flop(tokens: int) -> float:
    """Forward FLOPs of the probe's scan over `tokens` as the step model counts them
    (`advisor.perf.flops.mamba_scan_flops_per_token`: 6 · d_inner · d_state per token)."""
    return 6.0 * tokens * SCAN_HEADS * SCAN_HEAD_DIM * SCAN_STATE


def scan_rows(torch: Any, device: Any, *, small: bool, repeats: int) -> tuple[list[dict], str]:
    """The Mamba-2 chunked scan, forward and forward with backward, per sequence length;
    returns the rows and why the scan is missing ("" if measured)."""
    if device.type != "cuda":
        return [], "the Mamba-2 scan kernels (mamba_ssm, Triton) run on CUDA devices only"
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except ImportError as exc:
        return [], (f"mamba_ssm is not installed ({exc}); `pip install mamba-ssm` or run in "
                    f"an NVIDIA NeMo container")
    shrink = SHRINK if small else 1
    timed = _timer(torch, True)
    heads, dim = SCAN_HEADS, SCAN_HEAD_DIM
    rows = []
    for seq in (s // shrink for s in SCAN_SEQUENCES):
        batch = max(SCAN_TOKENS // shrink // seq, 1)

        def tensor(*shape: int, dtype: Any = torch.bfloat16) -> Any:
            return torch.randn(*shape, device=device, dtype=dtype).requires_grad_()

        x = tensor(batch, seq, heads, dim)
        dt = tensor(batch, seq, heads, dtype=torch.float32)
        a = (-torch.rand(heads, device=device)).requires_grad_()
        b, c = (tensor(batch, seq, SCAN_GROUPS, SCAN_STATE) for _ in range(2))
        d, dt_bias = (tensor(heads, dtype=torch.float32) for _ in range(2))
        grad = torch.randn_like(x)

        def forward(x=x, dt=dt, a=a, b=b, c=c, d=d, dt_bias=dt_bias) -> Any:
            return mamba_chunk_scan_combined(x, dt, a, b, c, chunk_size=SCAN_CHUNK, D=d,
                                             dt_bias=dt_bias, dt_softplus=True)

        def no_grad(forward=forward) -> Any:
            with torch.no_grad():
                return forward()

        def both(forward=forward, grad=grad, inputs=(x, dt, a, b, c, d, dt_bias)) -> None:
            torch.autograd.grad(forward(), inputs, grad)

        for variant, launch, calls in (("forward", no_grad, 1.0),
                                       ("forward+backward", both, 1.0 + BACKWARD_RATIO)):
            seconds = timed(launch, repeats)
            rows.append({"kind": "scan", "variant": variant, "batch": batch, "seq": seq,
                         "heads": heads, "head_dim": dim, "flop": calls * scan_flop(batch * seq),
                         "seconds": seconds})
    return rows, ""


def run_probe(out: Path, *, device_kind: str = "cuda", small: bool = False,
              repeats: int = 20) -> dict[str, Any]:
    """Time every kernel and write `kernels.csv` and `device.json`; returns the latter."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(device_kind, 0) if device_kind == "cuda" else torch.device("cpu")
    facts = device_facts(torch, device) | {"small": small, "repeats": repeats}
    rows = attention_rows(torch, device, small=small, repeats=repeats)
    experts, facts["grouped_missing"] = expert_rows(torch, device, small=small,
                                                    repeats=repeats)
    rows += experts
    scans, facts["scan_missing"] = scan_rows(torch, device, small=small, repeats=repeats)
    rows += scans
    with (out / "kernels.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow(row | {"tflops": round(row["flop"] / row["seconds"] / 1e12, 3),
                                   "seconds": f"{row['seconds']:.6g}"})
    (out / "device.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for kernels.csv and device.json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--small", action="store_true",
                        help=f"every size / {SHRINK}: the code path in seconds (for CPUs)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per kernel")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    check_target(parser, args.out, args.device, cpu_flags="--device cpu --small")
    facts = run_probe(args.out, device_kind=args.device, small=args.small,
                      repeats=args.repeats)
    print(f"wrote {args.out / 'kernels.csv'} ({facts.get('name', facts['device'])})")
    if facts["grouped_missing"]:
        print(f"note: no grouped expert kernel timed ({facts['grouped_missing']})")
    if facts["scan_missing"]:
        print(f"note: no Mamba-2 scan timed ({facts['scan_missing']})")


if __name__ == "__main__":
    main()
