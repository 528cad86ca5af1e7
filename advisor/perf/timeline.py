"""One training step as seen by each pipeline stage: how long its GPUs spend in each kind of
phase (arrays of configurations × stages), at full clock. The step model builds it; the power and
thermal model reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StageTimeline:
    """Per pipeline stage, seconds per step at full clock (configs × stages unless said)."""

    gemm_s: np.ndarray
    """Tensor-core GEMMs (recompute included)."""
    attention_s: np.ndarray
    """Fused attention and the Mamba scan (recompute included)."""
    memory_s: np.ndarray
    """HBM-bound kernels, the optimizer step included."""
    hidden_comm_s: np.ndarray
    """Communication running under compute (adds to its draw, not to the time)."""
    exposed_comm_s: np.ndarray
    """Communication the GPU waits for (TP/CP/EP/PP/DP/FSDP not hidden)."""
    interleaved_comm_s: np.ndarray
    """The part of `exposed_comm_s` between one micro-batch's kernels (TP/CP/EP/PP/FSDP, not
    the DP sync at the step's end): gaps far shorter than the power controller's window."""
    host_wait_s: np.ndarray
    """The GPU idle while the CPU launches kernels."""
    burst_s: np.ndarray
    """The stage's sustained compute stretch: its micro-batches back to back (1F1B gathers the
    waiting at the pipeline's fill and drain)."""
    microbatch_s: np.ndarray
    """One micro-batch on the stage's GPUs, communication and host waits included."""
    microbatch_compute_s: np.ndarray
    """The part of `microbatch_s` that scales with the SM clock."""
    tail_s: np.ndarray
    """After the last micro-batch: exposed data-parallel sync and the optimizer."""
    num_microbatches: np.ndarray
    """Micro-batches per step (configs)."""
    virtual_stages: int
    """vp: model chunks per stage (the interleaved schedule's fill and drain pass each other
    stage one chunk at a time)."""
    gemm_utilization: np.ndarray
    """How well fed the tensor cores are, against an 8192³ GEMM's (1; configs)."""
    gpus_per_stage: np.ndarray
    """tp · cp · dp (configs)."""

    @property
    def compute_s(self) -> np.ndarray:
        return self.gemm_s + self.attention_s + self.memory_s

    def step_time(self, slowdown: np.ndarray | None = None) -> np.ndarray:
        """Step seconds (configs) with every stage's compute stretched by `slowdown` (≥ 1,
        configs × stages): the slowest stage sets the pace of the pipeline, and the fill and
        drain pass through each other stage once (`fill_drain`)."""
        mb = self.microbatch_s
        if slowdown is not None:
            mb = mb + self.microbatch_compute_s * (slowdown - 1.0)
        return (self.num_microbatches * mb.max(axis=1) + fill_drain(mb, self.virtual_stages)
                + self.tail_s.max(axis=1))


def fill_drain(microbatch_s: np.ndarray, vp: int) -> np.ndarray:
    """The pipeline bubble (configs) of stages whose micro-batches take `microbatch_s`
    (configs × stages): the first micro-batch's forward reaches the slowest stage through every
    stage before it, and the last one's backward leaves it through every stage after it, so
    outside the slowest stage's m micro-batches the critical path holds one pass of each other
    stage, a chunk (1/vp) of it when interleaved. Equal stages give the textbook
    (pp − 1)/vp micro-batch times (Narayanan et al. SC'21 §2.2). When the last stage is the
    slowest (it also runs the output layer and the loss), its time is in the m micro-batches
    only: the fill and drain no longer count it pp − 1 times. Exact for 1F1B and Megatron's
    interleaved schedule when the slowest stage is the last; within a few per cent of a
    schedule simulation otherwise (the slowest stage elsewhere: an overestimate)."""
    return (microbatch_s.sum(axis=1) - microbatch_s.max(axis=1)) / vp
