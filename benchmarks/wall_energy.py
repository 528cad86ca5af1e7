"""Does the energy objective choose the power limit a hand calculation at the wall chooses?

    python benchmarks/wall_energy.py [--model llama3-70b] [--gpus 64] [--platform h100]

`recommend --objective energy` searches the GPU power limit (`advisor.search.power_limit`) and
shows #1 across the limits tried. This script recomputes, by hand from that trade-off's own
predicted step time and average board power, the energy per token at each limit — the GPU
boards alone, and at the wall: each GPU's board plus its share of the node's host
(`host_power_w` / GPUs per node, measured at the wall on MLPerf nodes), times the PUE — and
prints both beside advisor's figure. It exits 1 when advisor's wall figure and the hand
calculation differ, or the limit advisor chose is not the one with the least energy at the
wall by hand. The boards' own minimum is shown too: without the host it would sit lower.
"""

from __future__ import annotations

import argparse
import sys

from advisor.catalog import load_model, load_platform
from advisor.core.parallel import make_job
from advisor.predict.predictor import Predictor
from advisor.search.recommend import recommend


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama3-70b")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--platform", default="h100")
    args = parser.parse_args()
    platform = load_platform(args.platform)
    job = make_job(load_model(args.model), platform, num_gpus=args.gpus)
    rec = recommend(job, objective="energy", predictor=Predictor.load())
    best = rec.choices[0]
    tokens = best.config.gbs * best.config.seq_len
    host = (platform.host_power_w or 0.0) / platform.num_gpus_per_node
    pue = platform.pue or 1.0
    print(f"{args.model} on {args.gpus} x {platform.name}: #1 {best.summary}")
    print(f"host {platform.host_power_w} W per node of {platform.num_gpus_per_node} GPUs = "
          f"{host:.1f} W per GPU; PUE {pue:g}; {tokens:,} tokens per step\n")
    print(f"{'limit W':>8} {'step s':>8} {'board W':>8} {'board J/tok':>12} "
          f"{'wall J/tok (hand)':>18} {'wall J/tok (advisor)':>21} {'vs board limit':>15}")
    points = rec.limit_tradeoff
    if not points:
        print("no power-limit trade-off (the platform sets a limit, or the objective does not "
              "search it)")
        return 1
    hand = {}
    status = 0
    board_limit = max(p.power_limit_w for p in points)
    for p in points:
        board = p.avg_power_w * p.step_time_s * job.num_gpus / tokens
        wall = (p.avg_power_w + host) * pue * p.step_time_s * job.num_gpus / tokens
        hand[p.power_limit_w] = (board, wall)
        if abs(wall / p.energy_j_per_token - 1) > 1e-9:
            status = 1
    for p in points:
        board, wall = hand[p.power_limit_w]
        saving = wall / hand[board_limit][1] - 1
        print(f"{p.power_limit_w:>8.0f} {p.step_time_s:>8.2f} {p.avg_power_w:>8.0f} "
              f"{board:>12.4f} {wall:>18.4f} {p.energy_j_per_token:>21.4f} {saving:>+14.1%}")
    by_wall = min(hand, key=lambda w: hand[w][1])
    by_board = min(hand, key=lambda w: hand[w][0])
    chosen = float(rec.job.platform.limit_w)     # the limit the recommendation runs at
    step_cost = next(p.step_time_s for p in points if p.power_limit_w == by_wall) / next(
        p.step_time_s for p in points if p.power_limit_w == board_limit) - 1
    print(f"\nleast energy at the wall by hand: {by_wall:.0f} W "
          f"({hand[by_wall][1] / hand[board_limit][1] - 1:+.1%} energy, {step_cost:+.1%} step "
          f"time against {board_limit:.0f} W); the boards alone would pick {by_board:.0f} W "
          f"({hand[by_board][0] / hand[board_limit][0] - 1:+.1%} board energy)")
    print(f"advisor's --objective energy chose: {chosen:.0f} W "
          f"({'agrees' if chosen == by_wall else 'DISAGREES'} with the hand calculation)")
    if chosen != by_wall:
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
