"""A toy scheduler loop choosing a GPU type for each arriving job with advisor's Predictor.

    python examples/scheduler_loop.py

Each job asks for some GPUs; the cluster has free GPUs of several types. The loop asks advisor
for the throughput of the job's best configuration on each type it could get (Gavel's
throughput-table shape), prefers the type with the best lower bound (p10: a cautious scheduler
does not bet on an optimistic estimate) among calibrated platforms — an uncalibrated one (no
measured run calibrated its family: MI250 today) is used only when nothing else is free — and
books the GPUs.
"""

from __future__ import annotations

from advisor import Predictor
from advisor.search.scheduling import throughput_table

FREE = {"h100": 64, "h200": 32, "mi300x": 16, "mi250": 32}
JOBS = [("llama3-8b", 16), ("llama3-70b", 32), ("mixtral-8x7b", 16), ("llama3-8b", 32)]


def main() -> None:
    predictor = Predictor.load()
    for model, gpus in JOBS:
        candidates = [p for p, n in FREE.items() if n >= gpus]
        if not candidates:
            print(f"{model} × {gpus}: waits (no GPU type has {gpus} free)")
            continue
        table = throughput_table(predictor, model, candidates, [gpus]).dropna(
            subset=["tokens_per_sec"])
        if table.empty:
            print(f"{model} × {gpus}: no configuration fits on {', '.join(candidates)}")
            continue
        trusted = table[table["calibrated"]]
        if trusted.empty:
            print(f"  (only uncalibrated platforms are free: {', '.join(table['platform'])})")
        best = (trusted if not trusted.empty else table).sort_values(
            "tokens_per_sec_p10", ascending=False).iloc[0]
        FREE[best["platform"]] -= gpus
        print(f"{model} × {gpus} → {best['platform']}: {best['tokens_per_sec']:,.0f} tokens/s "
              f"(p10 {best['tokens_per_sec_p10']:,.0f}, {best['source']}), layout "
              f"{ {k: int(v) if hasattr(v, 'item') else v for k, v in best['config'].items()} }"
              f"; free now {FREE}")


if __name__ == "__main__":
    main()
