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
    bubble_microbatches: float
    """(pp − 1) / vp: the pipeline fill and drain, in micro-batch times."""
    gemm_utilization: np.ndarray
    """How well fed the tensor cores are, against an 8192³ GEMM's (1; configs)."""
    gpus_per_stage: np.ndarray
    """tp · cp · dp (configs)."""

    @property
    def compute_s(self) -> np.ndarray:
        return self.gemm_s + self.attention_s + self.memory_s

    def step_time(self, slowdown: np.ndarray | None = None) -> np.ndarray:
        """Step seconds (configs) with every stage's compute stretched by `slowdown` (≥ 1,
        configs × stages): the slowest stage sets the pace of the pipeline."""
        mb = self.microbatch_s
        if slowdown is not None:
            mb = mb + self.microbatch_compute_s * (slowdown - 1.0)
        return ((self.num_microbatches + self.bubble_microbatches) * mb.max(axis=1)
                + self.tail_s.max(axis=1))
