"""Scale-up against scale-out: the best configuration of one model on each of several
(platform, GPU count) sides, and a verdict in the paper's terms — communication-bound or
compute-bound, memory allowing smaller TP, expert all-to-all staying local."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.catalog import with_fields
from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.core.parallel import default_gbs, default_seq_len, make_job
from advisor.core.platform import Platform
from advisor.search.objective import Constraints
from advisor.search.recommend import Choice, Recommendation, recommend

TIE = 0.05
"""Differences below this are inside the model's error: called a tie."""
COMM_BOUND = 0.2
"""Exposed communication plus bubble above this share of the step: communication-bound."""
COMM = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s")


@dataclass(frozen=True)
class Side:
    label: str
    platform: Platform
    num_gpus: int
    recommendation: Recommendation
    gpu_hour_usd: float | None = None
    """Price of one GPU for an hour (--gpu-hour-price, else the catalog's; None: unknown)."""

    @property
    def usd_per_million_tokens(self) -> float | None:
        """GPU-hour price / tokens per GPU-hour × 1e6, plus the energy at the wall at the
        side's electricity price (`perf.money`; None without a GPU-hour price)."""
        if self.gpu_hour_usd is None:
            return None
        return (self.gpu_hour_usd / (self.tokens_per_sec_per_gpu * 3600.0) * 1e6
                + self.best.prediction.energy_usd_per_million_tokens)

    @property
    def best(self) -> Choice:
        return self.recommendation.choices[0]

    @property
    def tokens_per_sec_per_gpu(self) -> float:
        return self.best.prediction.tokens_per_sec_per_gpu

    @property
    def tokens_per_sec(self) -> float:
        return self.tokens_per_sec_per_gpu * self.num_gpus

    @property
    def energy_j_per_token(self) -> float:
        return self.best.prediction.energy_j_per_token

    @property
    def gpus_per_node(self) -> int:
        return min(self.num_gpus, self.platform.num_gpus_per_node)

    @property
    def peak_power_per_node_w(self) -> float:
        """The node's GPUs at their peak 50 ms samples together (GPUs only, no host)."""
        return self.best.prediction.peak_power_w * self.gpus_per_node

    @property
    def straggler_loss(self) -> float:
        """Share of the step spent waiting for the slowest of the side's GPUs."""
        return self.best.prediction.breakdown.power.straggler_loss

    @property
    def comm_share(self) -> float:
        """Exposed communication plus pipeline bubble, as a share of the step."""
        step = self.best.prediction.breakdown.step
        return sum(getattr(step, c) for c in COMM) / step.step_time_s


@dataclass(frozen=True)
class Comparison:
    model: ModelSpec
    seq_len: int
    gbs: int
    objective: str
    sides: list[Side]
    winner: Side
    verdict: list[str]


def parse_sides(text: str) -> list[tuple[str, int]]:
    """`h200:32,h100:64` → [("h200", 32), ("h100", 64)]; a side may be a cluster .toml."""
    sides = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, count = part.rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ConfigError(f"`platforms` takes PLATFORM:GPUS pairs separated by commas "
                              f"(h200:32,h100:64); {part!r} is not one.")
        sides.append((name, int(count)))
    if len(sides) < 2:
        raise ConfigError("`platforms` needs at least two sides to compare, e.g. "
                          "h200:32,h100:64.")
    return sides


def parse_prices(text: str | None) -> dict[str, float]:
    """`--gpu-hour-price`: `3.5` (every side) or `h100=2.5,h200=3.6` → {"*": 3.5} or
    {"h100": 2.5, "h200": 3.6}."""
    if text is None or not text.strip():
        return {}
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.rpartition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not (price > 0) or (sep and not name.strip()):
            raise ConfigError(f"`gpu_hour_price` takes US dollars per GPU-hour: one number "
                              f"(3.5) or PLATFORM=PRICE pairs (h100=2.5,h200=3.6); {part!r} is "
                              f"not one.")
        out[name.strip().lower() if sep else "*"] = price
    return out


def side_price(platform: Platform, prices: dict[str, float]) -> float | None:
    """The price for `platform`: given by name or alias, else for every side, else the
    catalog's."""
    for name in (platform.name, *platform.aliases):
        if name.lower() in prices:
            return prices[name.lower()]
    return prices.get("*", platform.gpu_hour_usd)


def compare(model: ModelSpec, sides: list[tuple[Platform, int]], *, seq_len: int | None = None,
            gbs: int | None = None, precision: str = "bf16", objective: str = "throughput",
            constraints: Constraints | None = None, predictor=None, finetune: str = "none",
            lora_rank: int = 16, lora_targets: str = "attention",
            prices: dict[str, float] | None = None) -> Comparison:
    """Recommend on every side with the same sequence length and global batch (the largest
    default among the sides unless given), then judge. `prices` (`parse_prices`) override
    the catalog's GPU-hour prices."""
    from advisor.predict.predictor import Predictor

    prices = prices or {}
    if objective == "cost":
        unpriced = [p.name for p, _ in sides if side_price(p, prices) is None]
        if unpriced:
            raise ConfigError(f"`objective` cost needs a GPU-hour price for "
                              f"{', '.join(unpriced)} (the catalog has none): pass "
                              f"`gpu_hour_price` {unpriced[0]}=USD.")
    predictor = predictor or Predictor.load()
    seq_len = seq_len or default_seq_len(model)
    gbs = gbs or max(default_gbs(model, num_gpus=n, seq_len=seq_len) for _, n in sides)
    out = []
    for platform, n in sides:
        price = side_price(platform, prices)
        if price is not None and price != platform.gpu_hour_usd:   # the side's own price
            platform = with_fields(platform, given_by="the command line", gpu_hour_usd=price)
        job = make_job(model, platform, num_gpus=n, seq_len=seq_len, gbs=gbs,
                       precision=precision, finetune=finetune, lora_rank=lora_rank,
                       lora_targets=lora_targets)
        rec = recommend(job, objective=objective, constraints=constraints, top=1,
                        predictor=predictor)
        out.append(Side(f"{n} × {platform.name}", platform, n, rec, gpu_hour_usd=price))
    winner = max(out, key=lambda side: _merit(side, out, objective))
    return Comparison(model, seq_len, gbs, objective, out, winner, verdict(out, winner, model))


def _merit(side: Side, sides: list[Side], objective: str) -> float:
    """Higher is better: job throughput, tokens per joule, or their product relative to the
    best side (the `balanced` objective's knee)."""
    tps, per_j = side.tokens_per_sec, 1.0 / side.energy_j_per_token
    if objective == "throughput":
        return tps
    if objective == "cost":
        return -float(side.usd_per_million_tokens)
    if objective == "energy":
        return per_j
    return (tps / max(s.tokens_per_sec for s in sides)) * (
        per_j / max(1.0 / s.energy_j_per_token for s in sides))


def verdict(sides: list[Side], winner: Side, model: ModelSpec) -> list[str]:
    """Sentences: who wins by how much on throughput, why, and who needs less energy."""
    fastest = max(sides, key=lambda s: s.tokens_per_sec)
    lines = [_pair(fastest, other, model) for other in sides if other is not fastest]
    lines.extend(_slowest_line(sides))
    greenest = min(sides, key=lambda s: s.energy_j_per_token)
    others = [s for s in sides if s is not greenest]
    saving = 1 - greenest.energy_j_per_token / min(s.energy_j_per_token for s in others)
    lines.append(f"Energy: {greenest.label} needs {saving:.0%} less energy per token "
                 f"({greenest.energy_j_per_token:.3f} J)." if saving >= TIE else
                 f"Energy: a tie within {TIE:.0%} ({greenest.energy_j_per_token:.3f} J per "
                 f"token on {greenest.label}).")
    priced = [s for s in sides if s.usd_per_million_tokens is not None]
    if len(priced) >= 2:
        cheapest = min(priced, key=lambda s: s.usd_per_million_tokens)
        dearest = max(priced, key=lambda s: s.usd_per_million_tokens)
        saving = 1 - cheapest.usd_per_million_tokens / dearest.usd_per_million_tokens
        lines.append(f"Cost: {cheapest.label} trains a million tokens for "
                     f"${cheapest.usd_per_million_tokens:.2f} at ${cheapest.gpu_hour_usd:.2f} "
                     f"per GPU-hour, {saving:.0%} less than {dearest.label} "
                     f"(${dearest.usd_per_million_tokens:.2f})." if saving >= TIE else
                     f"Cost: a tie within {TIE:.0%} (${cheapest.usd_per_million_tokens:.2f} per "
                     f"million tokens on {cheapest.label}).")
    if winner is not fastest:
        lines.insert(0, f"Best for this objective: {winner.label}.")
    return lines


def _slowest_line(sides: list[Side]) -> list[str]:
    """The scale-out cost of waiting for the slowest GPU, where the sides' GPU counts differ."""
    if len({s.num_gpus for s in sides}) < 2:
        return []
    parts = ", ".join(f"{s.straggler_loss:.1%} of the step on {s.label}"
                      for s in sorted(sides, key=lambda s: s.num_gpus))
    return [f"Slowest GPU: a synchronous step waits for the slowest of its GPUs (power-capped "
            f"GPUs of one model differ by about ±2.6 % in speed), and more GPUs have a slower "
            f"slowest one: {parts} (included in the throughput above)."]


def _pair(fast: Side, slow: Side, model: ModelSpec) -> str:
    """Why `fast` trains faster than `slow`, with claims only where the numbers support them."""
    gain = fast.tokens_per_sec / slow.tokens_per_sec - 1
    if gain < TIE:
        return (f"{fast.label} and {slow.label} tie within {TIE:.0%} "
                f"({fast.tokens_per_sec:,.0f} vs {slow.tokens_per_sec:,.0f} tokens/s): the "
                f"difference is inside the model's error.")
    head = (f"{fast.label} trains {gain:.0%} faster than {slow.label} "
            f"({fast.tokens_per_sec:,.0f} vs {slow.tokens_per_sec:,.0f} tokens/s)")
    a, b = fast.best.config, slow.best.config
    why = []
    per_gpu = fast.tokens_per_sec_per_gpu / slow.tokens_per_sec_per_gpu - 1
    if fast.num_gpus < slow.num_gpus:
        if slow.comm_share >= COMM_BOUND and slow.comm_share > fast.comm_share:
            why.append(f"scale-up wins: the job is communication-bound on {slow.label} "
                       f"({slow.comm_share:.0%} of its step is exposed communication and "
                       f"bubble, {fast.comm_share:.0%} on {fast.label})")
        else:
            why.append(f"scale-up wins on per-GPU speed: {fast.platform.display_name} does "
                       f"{per_gpu:.0%} more tokens/s per GPU, more than the "
                       f"{slow.num_gpus / fast.num_gpus:.1f}× GPU count makes up")
    elif fast.num_gpus > slow.num_gpus:
        # More GPUs win by number; communication is a cost they pay, never the reason.
        count = fast.num_gpus / slow.num_gpus
        lead = (f"{slow.label} is {-per_gpu:.0%} faster per GPU, not enough to make up "
                f"{count:.1f}× the GPUs" if per_gpu < -0.005 else
                f"{count:.1f}× the GPUs, each as fast or faster")
        comm = (f", despite more exposed communication and bubble ({fast.comm_share:.0%} of "
                f"the step against {slow.comm_share:.0%})"
                if fast.comm_share > slow.comm_share + 0.02 else
                f", and with less exposed communication and bubble ({fast.comm_share:.0%} "
                f"of the step against {slow.comm_share:.0%})"
                if slow.comm_share > fast.comm_share + 0.02 else "")
        why.append(f"scale-out wins on GPU count: {lead}{comm}")
    else:
        why.append(f"per GPU {fast.tokens_per_sec_per_gpu:,.0f} vs "
                   f"{slow.tokens_per_sec_per_gpu:,.0f} tokens/s")
    if a.tp < b.tp and fast.platform.memory_capacity_bytes > slow.platform.memory_capacity_bytes:
        why.append(f"{fast.platform.memory_capacity_bytes / 1e9:.0f} GB per GPU allow TP={a.tp} "
                   f"instead of TP={b.tp}, so less all-reduce traffic per layer")
    if model.is_moe:
        local_a = a.ep * a.etp <= fast.platform.nvlink_domain_size
        local_b = b.ep * b.etp <= slow.platform.nvlink_domain_size
        if local_a and not local_b:
            why.append(f"EP={a.ep} keeps the expert all-to-all inside one {_link(fast)} domain, "
                       f"while EP={b.ep} on {slow.label} sends it across the network")
    return head + ": " + "; ".join(why) + "."


def _link(side: Side) -> str:
    return "NVLink" if side.platform.vendor == "nvidia" else "xGMI"
