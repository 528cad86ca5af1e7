"""Routing around degraded nodes (Go et al., MICRO'25, finding 6: a node power fault made a whole
synchronous job run over 4× slower).

A cluster file or `--degraded-nodes K --degraded-power-w W` marks K of the job's nodes whose GPUs
are held at W. The step model already charges the job for them (the stage they hold runs at
the clock W allows, and everyone waits: `perf.power.degraded_extra`); this module answers the
scheduler's question: keep them, or leave them out and run on the healthy nodes?
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from advisor.core.errors import AdvisorError
from advisor.core.parallel import Job, make_job
from advisor.core.platform import Platform


@dataclass(frozen=True)
class DegradedAdvice:
    """The job on all its nodes (degraded ones included) against the healthy nodes alone."""

    num_degraded_nodes: int
    degraded_power_w: float
    with_tokens_per_sec: float
    """The whole job's tokens/s on every node, the degraded ones included."""
    healthy_gpus: int
    without_tokens_per_sec: float | None
    """On the healthy nodes alone, with the layout best there (None: no layout fits them)."""
    without_layout: str
    why_not: str = ""
    """Why the healthy nodes alone cannot run the job, where they cannot."""

    @property
    def leave_out(self) -> bool:
        """Whether leaving the degraded nodes out is faster."""
        return (self.without_tokens_per_sec is not None
                and self.without_tokens_per_sec > self.with_tokens_per_sec)

    def describe(self) -> str:
        head = (f"{self.num_degraded_nodes} degraded node(s) at {self.degraded_power_w:.0f} W: "
                f"the whole job runs at {self.with_tokens_per_sec:,.0f} tokens/s")
        if self.without_tokens_per_sec is None:
            return f"{head}; the {self.healthy_gpus} healthy GPUs alone cannot run it " \
                   f"({self.why_not})."
        change = self.without_tokens_per_sec / self.with_tokens_per_sec - 1
        verdict = ("leave them out" if self.leave_out else "keep them: the healthy nodes "
                   "alone are slower")
        return (f"{head}; on the {self.healthy_gpus} healthy GPUs alone "
                f"({self.without_layout}) {self.without_tokens_per_sec:,.0f} tokens/s "
                f"({change:+.0%}): {verdict}.")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "leave_out": self.leave_out}


def healthy(platform: Platform) -> Platform:
    """`platform` with no degraded nodes."""
    return dataclasses.replace(platform, degraded_nodes=None, degraded_power_w=None)


def route_around(job: Job, with_tokens_per_sec: float, *, recommend_job) -> DegradedAdvice | None:
    """Compare the job on all its nodes (`with_tokens_per_sec`, from its recommendation) with
    the best layout on the healthy nodes alone; `recommend_job(job)` returns a
    `Recommendation`. None where the job's platform has no degraded nodes."""
    p = job.platform
    if not p.degraded_nodes or p.degraded_power_w is None:
        return None
    gpus = job.num_gpus - p.degraded_nodes * p.num_gpus_per_node
    out = dict(num_degraded_nodes=p.degraded_nodes, degraded_power_w=p.degraded_power_w,
               with_tokens_per_sec=with_tokens_per_sec, healthy_gpus=max(gpus, 0))
    if gpus < 1:
        return DegradedAdvice(**out, without_tokens_per_sec=None, without_layout="",
                              why_not="every node of the job is degraded")
    try:
        smaller = make_job(job.model, healthy(p), num_gpus=gpus,
                           seq_len=job.seq_len, gbs=job.gbs, precision=job.precision,
                           finetune=job.finetune, lora_rank=job.lora_rank,
                           lora_targets=job.lora_targets)
        rec = recommend_job(smaller)
    except AdvisorError as e:
        return DegradedAdvice(**out, without_tokens_per_sec=None, without_layout="",
                              why_not=str(e).split(";")[0])
    best = rec.choices[0]
    return DegradedAdvice(**out, without_tokens_per_sec=best.prediction.tokens_per_sec_per_gpu
                          * gpus, without_layout=best.summary)
