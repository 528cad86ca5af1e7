"""Do the calibrated attention, expert-GEMM and scan factors match what one GPU's kernels do?

    python -m collectors.kernel_probe --out runs/kernel-probe        # on the GPU, a minute
    python benchmarks/kernel_check.py --probe runs/kernel-probe      # anywhere
    python benchmarks/kernel_check.py --probe runs/kernel-probe --platform h100

Reads a kernel probe (`collectors/kernel_probe.py`: `kernels.csv`, `device.json`; the platform
from the device's name unless `--platform` names it) and prints, per measured kernel, its TFLOP/s
and the factor it implies in the step model's own terms (`advisor/perf/step_compute.py`):

* **attention**: fused attention is priced at the platform's dense BF16 peak times the family's
  `attention` factor (`advisor/catalog/calibration.toml`), forward and backward alike: the
  implied factor is the measured TFLOP/s over that peak (forward with backward is what a
  training step runs).
* **experts**: an expert GEMM is priced by the measured-kernel model (`advisor/perf/gemm.py`,
  `gemm_kernels.toml`) at the full-clock peak times the family's `gemm` factor, divided by the
  `expert_gemm` level — one kernel per expert, or one grouped kernel for all of them: the
  implied level is the dense price of the same GEMMs over the measured time.
* **scan**: the Mamba-2 scan is priced like attention, at the dense BF16 peak times the family's
  `scan` factor, on the FLOPs the step model counts (6 · d_inner · d_state per token forward,
  backward 2.5 × forward): the implied factor is the measured TFLOP/s over that peak.

The summary sets the median implied factor of each (attention at 4,096 tokens and longer, the
training range) against the calibrated one: where the end-to-end fit stands against the kernels
alone. The calibrated factors also carry what the kernels do not (layouts, the host, the
software stack), so they need not agree; a large gap where one publication series is the only
source of a kernel's runs is what a probe on real GPUs settles.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.catalog import load_platform, platforms
from advisor.core.errors import AdvisorError
from advisor.perf.calibration import load_calibration
from advisor.perf.flops import Gemm
from advisor.perf.gemm import load_kernel_table
from advisor.perf.step_compute import _GemmClock
from collectors.kernel_probe import SHRINK

TRAINING_SEQ = 4096
"""Attention rows from this sequence length up make the summary (training's range)."""


def platform_of(name: str) -> str | None:
    """The catalog platform a device name names (`NVIDIA H100 80GB HBM3` → h100), the longest
    key first (GB200 before B200); None if none."""
    flat = name.lower().replace(" ", "").replace("-", "")
    for key in sorted(platforms(), key=len, reverse=True):
        if key.replace("-", "") in flat:
            return key
    return None


def implied(kernels: pd.DataFrame, platform_name: str) -> pd.DataFrame:
    """`kernels` with the platform's calibrated factor and the one each row implies."""
    platform = load_platform(platform_name)
    calibration = load_calibration()
    eff = calibration.efficiency(platform.family)
    out = kernels.copy()
    # attention and the scan: priced at the dense BF16 peak times their factor
    for kind, factor in (("attention", eff.attention), ("scan", eff.scan)):
        rows = out["kind"] == kind
        out.loc[rows, "implied"] = (out.loc[rows, "flop"] / out.loc[rows, "seconds"]
                                    / platform.peak_flops("bf16"))
        out.loc[rows, "calibrated"] = factor
    experts = out[out["kind"] == "experts"]
    if len(experts):
        # the step model's own GEMM clock at the family's factor, its expert level left out
        clock = _GemmClock(load_kernel_table().kernel(platform, "bf16"),
                           np.array([[platform.full_clock_peak_flops("bf16") * eff.gemm]]), 2.0,
                           platform.hbm_bandwidth_bytes_per_s, platform.num_compute_units)
        grouped = (experts["variant"] == "grouped").to_numpy()[:, None]
        count = experts["experts"].to_numpy(float)[:, None]
        hidden, ffn = (float(experts[c].iloc[0]) for c in ("hidden", "ffn"))  # one shape a probe
        dense = clock.passes((Gemm(k=hidden, n=ffn, split="none"),),
                             experts["tokens"].to_numpy(float)[:, None], np.ones_like(count),
                             batch=np.where(grouped, count, 1.0),
                             launches=np.where(grouped, 1.0, count)).fwd[:, 0]
        out.loc[experts.index, "implied"] = dense / experts["seconds"].to_numpy()
        out.loc[experts.index, "calibrated"] = eff.expert_gemm
    return out


def summary(table: pd.DataFrame, *, small: bool = False) -> pd.DataFrame:
    """Median implied factor per kind and variant (attention from `TRAINING_SEQ` tokens on, or
    its `SHRINK`th in a `small` probe), against the calibrated one."""
    seq = table.get("seq", pd.Series(np.nan, index=table.index))
    keep = (table["kind"] != "attention") | (seq >= TRAINING_SEQ // (SHRINK if small else 1))
    return (table[keep].groupby(["kind", "variant"], sort=False)
            .agg(rows=("implied", "size"), implied=("implied", "median"),
                 calibrated=("calibrated", "first"))
            .assign(ratio=lambda t: t["implied"] / t["calibrated"]).reset_index())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=Path, required=True,
                        help="a kernel probe's folder (kernels.csv, device.json)")
    parser.add_argument("--platform", help="catalog platform of the probed GPU (default: from "
                                           "the device's name)")
    args = parser.parse_args(argv)
    try:
        kernels = pd.read_csv(args.probe / "kernels.csv")
        facts = json.loads((args.probe / "device.json").read_text())
    except OSError as e:
        parser.exit(2, f"error: {args.probe} is not a kernel probe ({e.strerror or e}); write "
                       f"one with `python -m collectors.kernel_probe --out {args.probe}`.\n")
    device = facts.get("name", facts.get("device", ""))
    name = args.platform or platform_of(device)
    if name is None:
        parser.exit(2, f"error: no catalog platform matches the probed device {device!r}; pass "
                       f"--platform (see `advisor catalog platforms`).\n")
    try:
        table = implied(kernels, name)
    except AdvisorError as e:
        parser.exit(2, f"error: {e}\n")
    pd.set_option("display.width", 200)
    print(f"{device} as {name}; torch {facts.get('torch', '?')}")
    shown = ["kind", "variant", "batch", "seq", "experts", "tokens", "tflops", "implied",
             "calibrated"]
    print(table[shown].round(3).to_string(index=False))
    if facts.get("grouped_missing"):
        print(f"\nno grouped expert kernel: {facts['grouped_missing']}")
    if facts.get("scan_missing"):
        print(f"no Mamba-2 scan: {facts['scan_missing']}")
    print(f"\n## Median implied factor against the calibration (attention from {TRAINING_SEQ} "
          "tokens)\n")
    print(summary(table, small=bool(facts.get("small"))).round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
