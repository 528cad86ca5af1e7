"""What the H200 power probe measured (`datasets/probes/h200-power`, `collectors/power_probe.py`)
and how the power model's window rule reproduces it.

    python benchmarks/power_probe.py
    python benchmarks/power_probe.py --probe runs/power-probe     # a probe of your own GPU
    python benchmarks/power_probe.py --plots DIR                  # ...and the figure (PNG)

Prints, per phase, the speed in the phase's second half (TFLOP/s, or TB/s for the copy), the mean
SM clock, NVML instantaneous and 1-s average power and the temperature; the speed against time
since a burst began, for bursts after long gaps; the window (ms) after which a burst is held to
the capped clock; and, per duty cycle, the share of the power cap's loss that the bursts escape,
measured and as `advisor.perf.power.windowed_limit` predicts it (first window of a burst at the
clock the windowed limit allows, the rest capped; d = burst / period, the gaps at idle power);
and the capped clock of each GEMM against its utilization, measured and modelled. `--plots DIR`
draws the last two tables (`plots`, matplotlib).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _plots
import numpy as np
import pandas as pd

from advisor import catalog
from advisor.perf.power import windowed_limit
from advisor.perf.power_fit import (
    PROBE_CHIP,
    kernel_ratios,
    load_probe,
    phase_table,
    predict_probe,
    read_probe,
)
from advisor.perf.power_params import load_power_params

DEFAULT = Path(__file__).resolve().parents[1] / "datasets" / "probes" / "h200-power"
PROFILE_BINS_S = (0, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)


def load(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    kernels, samples, facts = read_probe(folder)
    kernels["tflops"] = kernels.flop / kernels.duration_s / 1e12
    return kernels, samples, facts


def burst_profile(kernels: pd.DataFrame, facts: dict) -> pd.DataFrame:
    """Mean TFLOP/s against time since the burst began, for duty phases whose gaps are at
    least as long as their bursts' first 100 ms (the controller has recovered)."""
    out = {}
    for p in facts["phases"]:
        if p["burst_s"] >= 0.2 and p["gap_s"] >= 0.1:
            k = kernels[(kernels.phase == p["name"]) & (kernels.burst > 0)].copy()
            k["since"] = k.start_s - k.groupby("burst").start_s.transform("min")
            out[p["name"]] = k.groupby(pd.cut(k.since, PROFILE_BINS_S), observed=False
                                       ).tflops.mean()
    return pd.DataFrame(out).T


def settled(profile: pd.DataFrame) -> float:
    """The capped speed bursts settle at (0.15-0.5 s in): cooler than continuous load, so a
    little faster (a hotter die leaks more and keeps less of the limit for its clock)."""
    cols = [c for c in profile.columns if 0.15 <= c.left and c.right <= 0.5]
    return float(np.nanmean(profile[cols].to_numpy()))


def window_s(profile: pd.DataFrame, full: float, capped: float) -> float:
    """How long the mean burst runs as if uncapped: the integral over its first 0.15 s of the
    share of the cap's loss it escapes (seconds)."""
    mean = profile.mean(axis=0).to_numpy()
    widths = np.diff(PROFILE_BINS_S)
    keep = np.asarray(PROFILE_BINS_S[1:]) <= 0.15
    share = np.clip((mean - capped) / (full - capped), 0.0, 1.0)
    return float((share * widths)[keep].sum())


def escaped_share(burst_s: float, gap_s: float, window: float, idle_w: float, limit_w: float,
                  platform_name: str = "h200") -> float:
    """The share of the cap's loss a duty cycle escapes under the model's rule: the first
    `window` of each burst (all of a shorter one) at the clock the windowed limit allows, the
    rest at the capped clock."""
    p = load_power_params()
    plat = catalog.load_platform(platform_name)
    static = np.array(plat.tdp_w * p.static_share)
    demand = np.array(p.best_gemm_w(plat))
    capped = p.slowdown(p.capped_clock(static, demand, limit_w))
    allowed, _ = windowed_limit(limit_w, np.array(burst_s), np.array(gap_s), np.array(idle_w))
    windowed = p.slowdown(p.capped_clock(static, demand, allowed))
    free = min(burst_s, window)
    time = free + max(burst_s - free, 0.0)
    work = free / windowed + max(burst_s - free, 0.0) / capped  # full-clock seconds of work
    speed = work / time  # relative to full clock
    return float((speed - 1 / capped) / (1 - 1 / capped))


def plots(duty: pd.DataFrame, gemms: pd.DataFrame, window: float, folder: Path) -> list[Path]:
    """The figure of `--plots`: the share of the cap's loss escaped per duty cycle (`duty`:
    burst_s, gap_s, measured, model), measured and modelled, against the burst's length; and
    each GEMM's capped clock (`gemms`: kernel, utilization, clock_mhz, model_mhz), measured
    and modelled, against its utilization."""
    figures = _plots.Figures(folder)
    fig, axes = _plots.figure(2, width_in=11, height_in=4.8, ratios=(3, 2))
    ax = axes[0]
    even = duty[np.isclose(duty["burst_s"], duty["gap_s"])]
    other = duty[~np.isclose(duty["burst_s"], duty["gap_s"])]
    ax.plot(even["burst_s"] * 1e3, even["measured"], "-o", color="tab:blue",
            label="measured, gap = burst")
    ax.plot(even["burst_s"] * 1e3, even["model"], "--s", color="tab:orange",
            label="model (windowed limit), gap = burst")
    ax.scatter(other["burst_s"] * 1e3, other["measured"], marker="^", s=40, color="tab:blue",
               label="measured, other gaps")
    ax.scatter(other["burst_s"] * 1e3, other["model"], marker="v", s=40, color="tab:orange",
               label="model, other gaps")
    for i, row in enumerate(other.itertuples()):  # alternate sides: equal bursts share an x
        ax.annotate(f"{row.burst_s * 1e3:g}/{row.gap_s * 1e3:g}",
                    (row.burst_s * 1e3, row.measured), textcoords="offset points",
                    xytext=(6, 4 if i % 2 else -10), fontsize=7)
    ax.axvline(window * 1e3, color="grey", linestyle=":", linewidth=1,
               label=f"window: {window * 1e3:.0f} ms")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("burst length (ms); labels: burst / gap (ms)")
    ax.set_ylabel("share of the cap's loss escaped")
    ax.set_title(f"Duty cycles: median |model − measured| "
                 f"{np.median(np.abs(duty['model'] - duty['measured'])):.2f}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5)
    ax = axes[1]
    ax.plot(gemms["utilization"], gemms["clock_mhz"], "o", label="measured")
    ax.plot(gemms["utilization"], gemms["model_mhz"], "s", label="model")
    for row in gemms.itertuples():
        ax.annotate(row.kernel, (row.utilization, row.clock_mhz), textcoords="offset points",
                    xytext=(-4, -12), fontsize=7, ha="right")
    ax.margins(x=0.3, y=0.1)
    ax.set_xlabel("utilization (speed at full clock / the 8192³ GEMM's)")
    ax.set_ylabel("SM clock at the cap (MHz)")
    ax.set_title("GEMMs at the cap", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return [figures.save(fig, "power-probe-escaped-and-clock",
                         f"Left: the share of the power cap's loss that bursts escape, measured "
                         f"and as the windowed limit models it, against the burst length of "
                         f"{len(duty)} duty cycles. Right: the capped SM clock of "
                         f"{len(gemms)} GEMMs, measured and modelled, against their "
                         f"utilization")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", type=Path, default=DEFAULT)
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figure (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)
    kernels, samples, facts = load(args.probe)
    pd.set_option("display.width", 200)
    table = phase_table(kernels, samples, facts)
    print(f"{facts.get('name', facts['device'])}, power limit {facts.get('power_limit_w')} W, "
          f"max SM clock {facts.get('max_sm_clock_mhz')} MHz, driver {facts.get('driver')}")
    print(table.round(1).to_string())
    full = 2.0 * 8192 ** 3 / facts["warm_kernel_s"]["gemm8192"] / 1e12
    capped = float(table.loc["continuous", "speed"])
    idle_w = float(table.loc["idle", "inst_w"])
    print(f"\nGEMM 8192³: {full:.0f} TFLOP/s cold (full clock), {capped:.0f} capped: the cap "
          f"costs {1 - capped / full:.1%} of continuous load")
    profile = burst_profile(kernels, facts)
    print("\nTFLOP/s against seconds since the burst began (bursts after long gaps)")
    print(profile.round(0).to_string())
    capped = settled(profile)
    print(f"bursts settle at {capped:.0f} TFLOP/s (cooler than continuous load)")
    window = window_s(profile, full, capped)
    print(f"\nwindow: a burst after a long gap runs as if uncapped for {window * 1e3:.0f} ms")
    print("\nshare of the cap's loss escaped per duty cycle (burst ms / gap ms)")
    print(f"{'duty':>14} {'measured':>9} {'model':>6}")
    errors, duty = [], []
    for p in facts["phases"]:
        if not p["burst_s"]:
            continue
        measured = (table.loc[p["name"], "speed"] - capped) / (full - capped)
        model = escaped_share(p["burst_s"], p["gap_s"], window, idle_w,
                              float(facts.get("power_limit_w", 700.0)))
        errors.append(model - measured)
        duty.append({"burst_s": p["burst_s"], "gap_s": p["gap_s"], "measured": measured,
                     "model": model})
        print(f"{p['burst_s'] * 1e3:>6g}/{p['gap_s'] * 1e3:<7g} {measured:>9.2f} {model:>6.2f}")
    print(f"median |model − measured|: {np.median(np.abs(errors)):.2f} of the cap's loss")
    shipped = load_power_params()
    print("\nGEMMs at the cap: a GEMM's dynamic power follows how well fed its tensor cores are"
          "\n(utilization: speed at full clock over the 8192³ GEMM's); clock as the model has it")
    gemms = load_probe(args.probe).query("kind == 'gemm'")
    chip_w = shipped.best_gemm_w(catalog.load_platform(PROBE_CHIP))
    _, phi = predict_probe(shipped, gemms, chip_w)
    clocks = gemms.assign(clock_mhz=gemms.clock_frac * facts["max_sm_clock_mhz"],
                          model_mhz=phi * facts["max_sm_clock_mhz"])[
        ["kernel", "utilization", "clock_mhz", "model_mhz"]]
    print(clocks.round(3).to_string(index=False))
    print("\nkernel power ratios (power.toml): derived from this probe / shipped")
    for key, value in kernel_ratios(table, facts).items():
        print(f"  {key:16} {value:.3f} / {getattr(shipped, key):.3f}")
    if args.plots:
        for path in plots(pd.DataFrame(duty), clocks, window, args.plots):
            print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
