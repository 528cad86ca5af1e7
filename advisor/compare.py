"""Scale-up against scale-out: the best configuration of one model on each of several
(platform, GPU count) sides, and a verdict in the paper's terms — communication-bound or
compute-bound, memory allowing smaller TP, expert all-to-all staying local."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import ConfigError
from advisor.model import ModelSpec
from advisor.objective import Constraints
from advisor.parallel import default_gbs, default_seq_len, make_job
from advisor.platform import Platform
from advisor.recommend import Choice, Recommendation, recommend

COMM_BOUND = 0.2
"""Exposed communication plus bubble above this share of the step: communication-bound."""
COMM = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s", "bubble_s")


@dataclass(frozen=True)
class Side:
    label: str
    platform: Platform
    num_gpus: int
    recommendation: Recommendation

    @property
    def best(self) -> Choice:
        return self.recommendation.choices[0]

    @property
    def tokens_per_sec_per_gpu(self) -> float:
        return float(self.best.predicted["pred_tokens_per_sec_per_gpu"])

    @property
    def tokens_per_sec(self) -> float:
        return self.tokens_per_sec_per_gpu * self.num_gpus

    @property
    def energy_j_per_token(self) -> float:
        return float(self.best.predicted["pred_energy_j_per_token"])

    @property
    def peak_power_per_node_w(self) -> float:
        per_node = min(self.num_gpus, self.platform.num_gpus_per_node)
        return float(self.best.predicted["pred_peak_power_w"]) * per_node

    @property
    def comm_share(self) -> float:
        """Exposed communication plus pipeline bubble, as a share of the step."""
        step = self.best.analytical.step
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
            raise ConfigError(f"--platforms takes PLATFORM:GPUS pairs separated by commas "
                              f"(h200:32,h100:64); {part!r} is not one.")
        sides.append((name, int(count)))
    if len(sides) < 2:
        raise ConfigError("--platforms needs at least two sides to compare, e.g. "
                          "h200:32,h100:64.")
    return sides


def compare(model: ModelSpec, sides: list[tuple[Platform, int]], *, seq_len: int | None = None,
            gbs: int | None = None, precision: str = "bf16", objective: str = "throughput",
            constraints: Constraints | None = None, predictor=None) -> Comparison:
    """Recommend on every side with the same sequence length and global batch (the largest
    default among the sides unless given), then judge."""
    from advisor.predictor import Predictor

    predictor = predictor or Predictor.load()
    seq_len = seq_len or default_seq_len(model)
    gbs = gbs or max(default_gbs(model, num_gpus=n, seq_len=seq_len) for _, n in sides)
    out = []
    for platform, n in sides:
        job = make_job(model, platform, num_gpus=n, seq_len=seq_len, gbs=gbs,
                       precision=precision)
        rec = recommend(job, objective=objective, constraints=constraints, top=1,
                        predictor=predictor)
        out.append(Side(f"{n} × {platform.name}", platform, n, rec))
    if objective == "energy":
        winner = min(out, key=lambda s: s.energy_j_per_token)
    else:
        winner = max(out, key=lambda s: s.tokens_per_sec)
    return Comparison(model, seq_len, gbs, objective, out, winner, verdict(out, winner, model))


def verdict(sides: list[Side], winner: Side, model: ModelSpec) -> list[str]:
    """Sentences: who wins by how much, and why."""
    lines = []
    for other in (s for s in sides if s is not winner):
        lines.append(_pair(winner, other, model))
    greenest = min(sides, key=lambda s: s.energy_j_per_token)
    others = [s for s in sides if s is not greenest]
    saving = 1 - greenest.energy_j_per_token / min(s.energy_j_per_token for s in others)
    lines.append(f"Energy: {greenest.label} needs {saving:.0%} less energy per token "
                 f"({greenest.energy_j_per_token:.3f} J).")
    return lines


def _pair(win: Side, lose: Side, model: ModelSpec) -> str:
    gain = win.tokens_per_sec / lose.tokens_per_sec - 1
    head = (f"{win.label} trains {gain:.0%} faster than {lose.label} "
            f"({win.tokens_per_sec:,.0f} vs {lose.tokens_per_sec:,.0f} tokens/s)")
    a, b = win.best.config, lose.best.config
    why = []
    if win.num_gpus < lose.num_gpus:
        why.append(f"scale-up wins: the job is communication-bound on {lose.label} "
                   f"({lose.comm_share:.0%} of its step is exposed communication and bubble, "
                   f"{win.comm_share:.0%} on {win.label})")
    elif win.num_gpus > lose.num_gpus:
        bound = ("compute-bound" if max(win.comm_share, lose.comm_share) < COMM_BOUND else
                 "communication-heavy on both sides")
        per_gpu = lose.tokens_per_sec_per_gpu / win.tokens_per_sec_per_gpu - 1
        lead = (f"; per GPU {lose.label} is {per_gpu:.0%} faster, not enough to make up "
                f"{win.num_gpus / lose.num_gpus:.1f}× the GPUs" if per_gpu > 0.005 else "")
        why.append(f"scale-out wins: the job is {bound} (communication and bubble take "
                   f"{win.comm_share:.0%} of the step on {win.label}, {lose.comm_share:.0%} on "
                   f"{lose.label}), so more GPUs outweigh "
                   f"{lose.platform.display_name}'s larger memory{lead}")
    else:
        why.append(f"per GPU {win.tokens_per_sec_per_gpu:,.0f} vs "
                   f"{lose.tokens_per_sec_per_gpu:,.0f} tokens/s")
    if a.tp < b.tp and win.platform.memory_capacity_bytes > lose.platform.memory_capacity_bytes:
        why.append(f"{win.platform.memory_capacity_bytes / 1e9:.0f} GB per GPU allow TP={a.tp} "
                   f"instead of TP={b.tp}, so less all-reduce traffic per layer")
    if model.is_moe:
        domain_a, domain_b = win.platform.nvlink_domain_size, lose.platform.nvlink_domain_size
        local_a, local_b = a.ep * a.etp <= domain_a, b.ep * b.etp <= domain_b
        if local_a and not local_b:
            why.append(f"EP={a.ep} keeps the expert all-to-all inside one NVLink domain, while "
                       f"EP={b.ep} on {lose.label} crosses the network")
    return head + ": " + "; ".join(why) + "."
