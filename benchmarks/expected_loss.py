"""Do the power and thermal figures change a decision? Prints, for two jobs, the expected losses
of the top layouts and how ranking with them differs from ranking without them; the
temperatures of one layout across platforms and rooms; and the highest average power against
the limit over every layout.

    python benchmarks/expected_loss.py            # 70B × 64 H200 and Mixtral-8x22B × 64 H100
    python benchmarks/expected_loss.py --top 20

Ranking "without them" divides each layout's expected throughput by (1 − its expected loss):
the throughput its GPUs would reach at full clock, every GPU equal, nothing thermal.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.perf.analytical import predict_config
from advisor.predict.predictor import Predictor
from advisor.search.recommend import recommend

JOBS = (("llama3-70b", "h200", 64), ("mixtral-8x22b", "h100", 64))
PLATFORMS = ("h100", "b200", "mi300x")


def loss_table(model: str, platform: str, gpus: int, *, top: int, inlet_c: float | None = None):
    """The top layouts of a job (by expected throughput) with their expected losses, and the
    rank each would have without them."""
    p = catalog.with_conditions(catalog.load_platform(platform), inlet_c=inlet_c)
    job = make_job(catalog.load_model(model), p, num_gpus=gpus)
    rec = recommend(job, predictor=Predictor.load(), top=1)
    ranked = rec.ranked_table.first_of_each(("tp", "pp", "cp", "dp", "ep", "etp")).head(top)
    predictor = Predictor.load()
    full = predictor.predict_table(job.model, job.platform, ranked, breakdown=True)
    loss = np.asarray(full["analytical_throttle_loss"], dtype=float)
    tps = np.asarray(ranked["pred_tokens_per_sec_per_gpu"], dtype=float)
    order = np.argsort(-tps, kind="stable")
    ranked, loss, full = ranked.take(order), loss[order], full.take(order)
    without = np.argsort(np.argsort(-tps[order] / (1.0 - loss), kind="stable"), kind="stable")
    return rec, ranked, full, loss, without


def print_job(model: str, platform: str, gpus: int, top: int,
              inlet_c: float | None = None) -> dict:
    rec, ranked, full, loss, without = loss_table(model, platform, gpus, top=top,
                                                  inlet_c=inlet_c)
    room = "the chassis' default inlet" if inlet_c is None else f"inlet {inlet_c:.0f} °C"
    print(f"\n{model} × {gpus} {platform}, {room}: top {len(ranked)} layouts by expected "
          f"throughput")
    print(f"{'#':>3} {'layout':28} {'tok/s/GPU':>9} {'loss':>6} {'cap':>5} {'N':>5} {'heat':>5} "
          f"{'risk':>5} {'rank w/o':>8}")
    for i, row in enumerate(ranked.rows()):
        layout = (f"TP{row['tp']} PP{row['pp']} VP{row['vp']} CP{row['cp']} DP{row['dp']} "
                  f"EP{row['ep']} MBS{row['mbs']}")
        print(f"{i + 1:3d} {layout:28} {row['pred_tokens_per_sec_per_gpu']:9,.0f} "
              f"{loss[i]:6.1%} {full['analytical_power_cap_loss'][i]:5.1%} "
              f"{full['analytical_straggler_loss'][i]:5.1%} "
              f"{full['analytical_thermal_loss'][i]:5.1%} {row['pred_throttle_risk']:5.0%} "
              f"{without[i] + 1:8d}")
    s = spread(loss, without)
    print(f"distinct losses (0.1-point steps): {s['distinct']}; span {s['span_points']:.1f} "
          f"points; {s['moved']} of {len(loss)} ranks differ without the losses")
    return s


def spread(loss: np.ndarray, without: np.ndarray) -> dict:
    """How much the expected losses of the top layouts differ, and how many of their ranks
    they change: distinct values in 0.1-point steps, span in points, ranks moved."""
    return {"distinct": len(np.unique(np.round(loss, 3))),
            "span_points": float(loss.max() - loss.min()) * 100,
            "moved": int((without != np.arange(len(without))).sum())}


def print_platforms() -> None:
    model = catalog.load_model("llama3-70b")
    print("\nllama3-70b TP8 PP2 MBS1 on 64 GPUs: temperatures and losses by platform and inlet")
    print(f"{'platform':8} {'inlet':>6} {'front':>6} {'rear':>6} {'burst':>6} {'avg W':>6} "
          f"{'limit':>6} {'heat':>6} {'risk':>5}")
    for name in PLATFORMS:
        for inlet in (None, 35.0):
            p = catalog.with_conditions(catalog.load_platform(name), inlet_c=inlet)
            job = make_job(model, p, num_gpus=64, seq_len=8192, gbs=256)
            w = predict_config(model, p, make_config(job, tp=8, pp=2, mbs=1)).power
            print(f"{name:8} {'default' if inlet is None else f'{inlet:.0f} °C':>6} "
                  f"{w.temp_front_c:6.1f} {w.temp_rear_c:6.1f} {w.peak_temp_c:6.1f} "
                  f"{w.avg_power_w:6.0f} {w.power_limit_w:6.0f} {w.thermal_loss:6.2%} "
                  f"{w.throttle_risk:5.0%}")


def print_average_power() -> None:
    from advisor.core.space import enumerate_space
    from advisor.perf.analytical import analytical_table

    print("\nhighest average power over every layout of 70B × 64 (W, against the limit)")
    for name in ("h100", "h200", "b200", "mi300x", "gb200"):
        p = catalog.load_platform(name)
        for limit in (None, 0.6 * p.tdp_w):
            q = catalog.with_conditions(p, power_limit_w=limit)
            model = catalog.load_model("llama3-70b")
            table = analytical_table(model, q, enumerate_space(make_job(model, q, num_gpus=64)))
            print(f"{name:8} limit {q.limit_w:6.0f}: max average {table['avg_power_w'].max():6.1f}"
                  f", max peak sample {table['peak_power_w'].max():6.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20, help="layouts per job (default 20)")
    parser.add_argument("--inlet-c", type=float, action="append",
                        help="also rank in a room this warm (repeatable; default: 35)")
    args = parser.parse_args()
    for job in JOBS:
        for inlet in (None, *(args.inlet_c or [35.0])):
            print_job(*job, args.top, inlet)
    print_platforms()
    print_average_power()
    return 0


if __name__ == "__main__":
    sys.exit(main())
