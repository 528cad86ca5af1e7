"""The findings of Go et al. (MICRO 2025) the model does not reproduce, with the model's own
figures over the paper's layouts, so each xfail in `tests/perf/test_paper_findings.py` can say
why with numbers that never go stale.

    python benchmarks/paper_findings.py

F1  32 H200 against 64 H100 (the H100 cluster doubles PP, or DP where PP is 1): the job's
    tokens/s and samples per MJ of each of the paper's 15 layouts, whether each side fits its
    GPUs' memory (else with full recompute, as the paper's optimisation sweep allows), and the
    same with one 100 Gb/s NIC per node instead of one per GPU (the paper states only the link
    speed).
F6  Peak temperature against micro-batch (1, 2, 4, 8 at GBS 128) on 32 H200, per layout.
F9  Thermal risk and expected throttling loss against pipeline depth on 32 H200.

Testbeds: `examples/paper-h200-cluster.toml` and `examples/paper-h100-cluster.toml`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor import catalog
from advisor.core.parallel import make_config, make_job
from advisor.perf.analytical import Breakdown, predict_config

ROOT = Path(__file__).resolve().parents[1]
SEQ = {"gpt3-175b": 2048, "llama3-70b": 8192, "mixtral-8x7b": 4096, "mixtral-8x22b": 4096}
GBS = 128
LAYOUTS = (
    # (model, the 32-H200 layout) as the paper's parallelism sweep names them; "fsdp" = TP8
    # with the weights, gradients and optimizer sharded over data parallelism.
    ("gpt3-175b", dict(tp=2, pp=16)), ("gpt3-175b", dict(tp=4, pp=8)),
    ("gpt3-175b", dict(tp=8, pp=4)), ("gpt3-175b", dict(tp=1, pp=32)),
    ("gpt3-175b", dict(tp=8, pp=1, dp_sharding="full")),
    ("llama3-70b", dict(tp=8, pp=2)), ("llama3-70b", dict(tp=4, pp=4)),
    ("llama3-70b", dict(tp=2, pp=8)), ("llama3-70b", dict(tp=1, pp=16)),
    ("llama3-70b", dict(tp=8, pp=1, dp_sharding="full")),
    ("mixtral-8x7b", dict(tp=1, pp=1, ep=8)), ("mixtral-8x7b", dict(tp=2, pp=1, ep=4)),
    ("mixtral-8x22b", dict(tp=1, pp=4, ep=8)), ("mixtral-8x22b", dict(tp=2, pp=2, ep=8)),
    ("mixtral-8x22b", dict(tp=4, pp=1, ep=8)),
)
"""The paper's 15 layouts on 32 H200 (its notes: `Workloads and sweeps`)."""


def platforms(nics: int | None = None):
    """The paper's H200 and H100 testbeds, with `nics` NICs per node where given."""
    out = []
    for name in ("paper-h200-cluster.toml", "paper-h100-cluster.toml"):
        platform = catalog.load_platform_override(ROOT / "examples" / name)
        if nics is not None:
            platform = catalog.with_fields(platform, num_nics_per_node=nics,
                                           given_by="benchmarks/paper_findings.py")
        out.append(platform)
    return out


def predict(model_name: str, platform, gpus: int, **knobs) -> Breakdown:
    model = catalog.load_model(model_name)
    job = make_job(model, platform, num_gpus=gpus, seq_len=SEQ[model_name], gbs=GBS)
    return predict_config(model, platform, make_config(job, **knobs))


def fitting(model_name: str, platform, gpus: int, **knobs) -> tuple[Breakdown, str]:
    """The layout as given, or with full recompute where it does not fit (the paper's
    optimisation sweep runs both)."""
    result = predict(model_name, platform, gpus, **knobs)
    if result.memory.fits:
        return result, ""
    return predict(model_name, platform, gpus, recompute="full", **knobs), "R"


def scaled_out(knobs: dict) -> dict:
    """The 64-H100 layout: PP doubled, or DP where the 32-H200 layout has none."""
    return dict(knobs, pp=knobs["pp"] * 2) if knobs["pp"] > 1 else dict(knobs)


def finding1(nics: int | None) -> int:
    h200, h100 = platforms(nics)
    label = "one NIC per GPU (the testbed files)" if nics is None else f"{nics} NIC per node"
    print(f"F1: 32 H200 against 64 H100, {label}; job tokens/s and samples per MJ "
          f"(R: full recompute to fit)")
    print(f"{'model':<14} {'32 H200':<22} {'64 H100':<22} {'H200 tok/s':>11} {'H100 tok/s':>11}"
          f" {'ratio':>6} {'MJ ratio':>8}")
    wins = 0
    for model_name, knobs in LAYOUTS:
        up, up_note = fitting(model_name, h200, 32, **knobs)
        out_knobs = scaled_out(knobs)
        out, out_note = fitting(model_name, h100, 64, **out_knobs)
        up_tps = up.step.tokens_per_sec_per_gpu * 32
        out_tps = out.step.tokens_per_sec_per_gpu * 64
        ratio = up_tps / out_tps
        wins += ratio > 1
        print(f"{model_name:<14} {_name(knobs) + up_note:<22} {_name(out_knobs) + out_note:<22} "
              f"{up_tps:11,.0f} {out_tps:11,.0f} {ratio:6.2f} "
              f"{up.power.samples_per_mj / out.power.samples_per_mj:8.2f}")
    print(f"32 H200 ahead on job throughput in {wins} of {len(LAYOUTS)} layouts (the paper: "
          f"GPT3-175B TP2-PP16)\n")
    return wins


def finding6() -> int:
    h200, _ = platforms()
    print("F6: peak temperature (°C) against micro-batch on 32 H200, GBS 128")
    print(f"{'model':<14} {'layout':<22} {'MBS 1':>6} {'2':>6} {'4':>6} {'8':>6}  direction")
    falls = counted = 0
    for model_name, knobs in LAYOUTS:
        temps = {m: predict(model_name, h200, 32, mbs=m, **knobs).power.peak_temp_c
                 for m in (1, 2, 4, 8) if GBS % (m * 32 // (knobs["tp"] * knobs["pp"])) == 0}
        largest = max(temps)
        fell = temps[largest] < temps[1]
        falls, counted = falls + fell, counted + 1
        print(f"{model_name:<14} {_name(knobs):<22} "
              + " ".join(f"{temps[m]:6.1f}" if m in temps else f"{'-':>6}" for m in (1, 2, 4, 8))
              + f"  {'falls' if fell else 'rises'} (MBS 1 to {largest})")
    print(f"falls from MBS 1 to the largest that divides the batch in {falls} of {counted} "
          f"(the paper: rises in all; '-': the micro-batch does not divide GBS {GBS})\n")
    return falls


def finding9() -> None:
    h200, _ = platforms()
    print("F9: throttling against pipeline depth on 32 H200 (thermal risk; expected loss; "
          "average power of the hungriest GPU)")
    for model_name, depths in (("gpt3-175b", ((8, 4), (4, 8), (2, 16), (1, 32))),
                               ("llama3-70b", ((8, 2), (4, 4), (2, 8), (1, 16)))):
        for tp, pp in depths:
            result = predict(model_name, h200, 32, tp=tp, pp=pp)
            power, step = result.power, result.step
            print(f"{model_name:<14} TP{tp}-PP{pp:<3} risk {100 * power.throttle_risk:5.2f} %  "
                  f"loss {100 * power.throttle_loss:5.1f} %  average {power.avg_power_w:5.0f} W"
                  f"  bubble {step.bubble_s / step.step_time_s:4.0%} of the step")
    print("the paper: throttling grows with pipeline depth\n")


def _name(knobs: dict) -> str:
    parts = [f"TP{knobs['tp']}", f"PP{knobs['pp']}"]
    if knobs.get("ep", 1) > 1:
        parts.insert(0, f"EP{knobs['ep']}")
    if knobs.get("dp_sharding") == "full":
        parts.append("FSDP")
    return "-".join(parts)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    finding1(None)
    finding1(1)
    finding6()
    finding9()


if __name__ == "__main__":
    main()
