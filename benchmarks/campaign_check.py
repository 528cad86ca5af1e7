"""How the analytical model predicts this project's own GPU campaigns (nothing was fitted to
them): per run, measured against predicted throughput, memory, average and peak power and SM
clock, then the errors and how well the model orders the runs.

    python benchmarks/campaign_check.py                                  # datasets/campaigns/*
    python benchmarks/campaign_check.py datasets/campaigns/h200-single.parquet
    python benchmarks/campaign_check.py --plots DIR     # ...and a figure (PNG) per campaign

The measured clock is the mean of NVML samples over the measured steps, gaps included; the
predicted one is the capped clock of the slowest GPU while it computes (their trend is what the
power model's GEMM demand, in proportion to how well fed the tensor cores are, has to follow).
`--plots DIR` draws each campaign's table (`plots`, matplotlib): predicted against measured
throughput, memory, average power and clock per run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import _plots
import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from advisor.data.predict_input import choose_recompute, parse_row
from advisor.perf.analytical import predict_config
from advisor.perf.columns import columns_of
from advisor.perf.memory import memory_arrays
from advisor.predict.rows import predict_frame

CAMPAIGNS = Path(__file__).resolve().parents[1] / "datasets" / "campaigns"


PANELS = (("tokens_per_sec_per_gpu", "pred_tokens_per_sec_per_gpu", "tokens/s per GPU"),
          ("peak_mem_gb", "pred_alloc_gb", "peak memory (GB)"),
          ("avg_power_w", "pred_avg_power_w", "average power (W)"),
          ("mean_sm_clock_mhz", "pred_clock_mhz", "SM clock (MHz)"))
"""The figure's panels: measured column, predicted column, what they are."""


def check(path: Path, figures: _plots.Figures | None = None) -> dict[str, float]:
    frame = pd.read_parquet(path)
    frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    out = predict_frame(frame)
    rows = [parse_row(row, {}, None) for row in frame.to_dict("records")]
    choose_recompute(rows)
    clocks, allocated = [], []
    for r in rows:
        # Allocated bytes, as `torch.cuda.max_memory_allocated` counts them: no reserve.
        mem = memory_arrays(r.job.model, platform=r.job.platform, cols=columns_of([r.config]),
                            framework=r.job.framework)
        allocated.append(float(mem["total_bytes"][0] - mem["reserve_bytes"][0]) / 1e9)
        power = predict_config(r.job.model, r.job.platform, r.config).power
        boost = r.job.platform.boost_clock_hz
        clocks.append(power.min_clock_frac * boost / 1e6 if boost else np.nan)
    out["pred_clock_mhz"] = clocks
    out["pred_alloc_gb"] = allocated
    pd.set_option("display.width", 200)
    shown = out.assign(
        tok_s=out.tokens_per_sec_per_gpu.round(0), pred_tok_s=out.pred_tokens_per_sec_per_gpu,
        mem_gb=out.peak_mem_gb.round(1), pred_alloc_gb=out.pred_alloc_gb.round(1),
        avg_w=out.avg_power_w.round(0), pred_avg_w=out.pred_avg_power_w.round(0),
        peak_w=out.peak_power_w.round(0), pred_peak_w=out.pred_peak_power_w.round(0),
        clock=out.mean_sm_clock_mhz.round(0), pred_clock=np.round(clocks, 0))
    cols = ["model", "seq_len", "mbs", "tp", "pp", "recompute", "tok_s", "pred_tok_s", "mem_gb",
            "pred_alloc_gb", "avg_w", "pred_avg_w", "peak_w", "pred_peak_w", "clock", "pred_clock"]
    print(f"\n{path.name}: {len(out)} runs ({frame['gpu'].iloc[0]}, "
          f"{frame['software'].iloc[0]})")
    print(shown[cols].to_string(index=False))
    tps = out.pred_tokens_per_sec_per_gpu / out.tokens_per_sec_per_gpu - 1
    mem = out.pred_alloc_gb / out.peak_mem_gb - 1
    tau = float(kendalltau(out.tokens_per_sec_per_gpu.to_numpy(),
                           out.pred_tokens_per_sec_per_gpu.to_numpy()).statistic)
    best = int(np.argmax(out.pred_tokens_per_sec_per_gpu.to_numpy()))
    regret = 1 - out.tokens_per_sec_per_gpu.iloc[best] / out.tokens_per_sec_per_gpu.max()
    summary = {"runs": len(out), "throughput_mape": float(np.mean(np.abs(tps))),
               "throughput_bias": float(np.median(tps)), "memory_mape": float(np.mean(
                   np.abs(mem))), "memory_bias": float(np.median(mem)), "tau": tau,
               "top1_regret": float(regret)}
    clock = np.asarray(clocks) / out.mean_sm_clock_mhz.to_numpy() - 1
    if np.isfinite(clock).any():
        summary["clock_mape"] = float(np.nanmean(np.abs(clock)))
        summary["clock_tau"] = float(kendalltau(out.mean_sm_clock_mhz.to_numpy(), clocks,
                                                nan_policy="omit").statistic)
    print(f"throughput: MAPE {summary['throughput_mape']:.1%}, median error "
          f"{summary['throughput_bias']:+.1%}; Kendall τ {tau:.2f}; top-1 regret {regret:.1%}")
    print(f"memory: MAPE {summary['memory_mape']:.1%}, median error "
          f"{summary['memory_bias']:+.1%}")
    peak = out.pred_peak_power_w / out.peak_power_w - 1
    if peak.notna().any():
        summary["peak_power_bias"] = float(peak.median())
        print(f"peak power (highest 50 ms sample): median error {summary['peak_power_bias']:+.1%}")
    if "clock_mape" in summary:
        print(f"SM clock: MAPE {summary['clock_mape']:.1%}, Kendall τ "
              f"{summary['clock_tau']:.2f}")
    if figures is not None:
        plots(out, path.stem, figures)
    return summary


def plots(runs: pd.DataFrame, name: str, figures: _plots.Figures) -> Path:
    """The figure of `--plots` for one campaign (`runs`: the rows of its table): predicted
    against measured throughput, memory, average power and SM clock, one colour per sequence
    length and recompute setting, with each panel's MAPE."""
    plt = _plots.pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 10.6))
    group = "seq " + runs["seq_len"].astype(str) + ", recompute " + runs["recompute"].astype(str)
    order = sorted(group.unique())
    for ax, (measured, predicted, unit) in zip(axes.ravel(), PANELS, strict=True):
        ok = runs[measured].notna() & runs[predicted].notna()
        if not ok.any():
            ax.set_axis_off()
            continue
        m, p = runs.loc[ok, measured].astype(float), runs.loc[ok, predicted].astype(float)
        _plots.predicted_vs_measured(ax, m, p, group[ok], unit=unit, log=False, order=order,
                                     size=30)
        ax.set_title(f"{unit}: MAPE {np.mean(np.abs(p / m - 1)):.1%}", fontsize=10)
        if ax.get_legend():
            ax.get_legend().remove()
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False,
               title="micro-batch 1-8 in each group (runs)", title_fontsize=8)
    fig.suptitle(f"Campaign {name}: {len(runs)} runs on {runs['gpu'].iloc[0]}, predicted by the "
                 f"analytical model (nothing fitted to them)\nmemory: measured peak allocated "
                 f"against the predicted allocated bytes (no reserve)", fontsize=10)
    fig.subplots_adjust(bottom=0.12, top=0.92, hspace=0.3, wspace=0.3)
    return figures.save(fig, f"campaign-{name}",
                        f"Predicted against measured tokens/s per GPU, peak memory, average "
                        f"power and SM clock of the {len(runs)} runs of campaign {name}, one "
                        f"colour per sequence length and recompute setting, with the y = x "
                        f"and ±20 % lines")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=Path)
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write a figure (PNG) per campaign into DIR (needs matplotlib)")
    args = parser.parse_args(argv)
    figures = _plots.Figures(args.plots) if args.plots else None
    for path in args.datasets or sorted(CAMPAIGNS.glob("*.parquet")):
        check(path, figures)


if __name__ == "__main__":
    main()
