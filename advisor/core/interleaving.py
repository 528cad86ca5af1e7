"""Which micro-batch counts an interleaved (virtual-pipeline) schedule runs, and in groups of how
many: the rule `space.validate` applies, the memory model's warm-up depth and the group-size
flag the Megatron emitter writes.

* **Megatron-Core** (`megatron/core/pipeline_parallel/schedules.py`,
  `forward_backward_pipelining_with_interleaving`, megatron-core 0.16): the M micro-batches of
  a step run in groups of N per virtual stage (`microbatch_group_size_per_vp_stage`, flag
  `--microbatch-group-size-per-virtual-pipeline-stage`, default N = pp). It needs
  pp ≤ N ≤ M, and the last group (M mod N) empty or at least pp. With the default, M must be a
  multiple of pp; with N set, any M ≥ pp runs (N = M always qualifies). The smallest N that
  qualifies is taken: the warm-up holds (vp − 1)·N chunk micro-batches, so a smaller group
  keeps less in flight. Megatron-LM CI runs PP 4 VP 3 with 5 and 10 micro-batches
  (`datasets/reference/megatron_ci`).
* **`torch.distributed.pipelining`** (TorchTitan, NeMo AutoModel, PyTorch FSDP2 with PP;
  `ScheduleInterleaved1F1B`, torch 2.x): M micro-batches run in max(1, M // pp) rounds of equal
  size, so M must be a multiple of the number of rounds (M < pp runs as one round). The round
  plays the part of N.
"""

from __future__ import annotations

import numpy as np

from advisor.core.frameworks import PP_WITH_FSDP, find_framework

TORCH_PIPELINING = PP_WITH_FSDP
"""Frameworks whose pipeline schedule is `torch.distributed.pipelining`'s."""


def uses_torch_pipelining(framework: str) -> bool:
    return find_framework(framework) in TORCH_PIPELINING


def group_sizes(microbatches, pp, *, torch_pipelining: bool) -> np.ndarray:
    """N per row: the micro-batches of one group of the interleaved schedule; 0 where the
    schedule cannot run M micro-batches on pp stages (see the module docstring)."""
    m, p = np.broadcast_arrays(np.asarray(microbatches, dtype=np.int64),
                               np.maximum(np.asarray(pp, dtype=np.int64), 1))
    if torch_pipelining:
        rounds = np.maximum(m // p, 1)
        return np.where((m >= 1) & (m % rounds == 0), m // rounds, 0)
    out = np.where((m >= p) & (m % p == 0), p, 0)
    todo = (out == 0) & (m >= p)
    n = p.copy()
    while todo.any():   # ends: N = M leaves no remainder
        n = n + 1
        rest = m % n
        found = todo & (n <= m) & ((rest == 0) | (rest >= p))
        out = np.where(found, n, out)
        todo &= ~found
    return out


def group_size(microbatches: int, pp: int, framework: str = "megatron") -> int:
    """`group_sizes` for one configuration (0: the schedule cannot run it)."""
    return int(group_sizes(microbatches, pp,
                           torch_pipelining=uses_torch_pipelining(framework)))


def interleaving_error(microbatches: int, pp: int, vp: int, framework: str = "megatron"
                       ) -> str | None:
    """Why `framework`'s interleaved schedule cannot run `microbatches` per step on `pp`
    stages, or None where it can (or `vp` is 1)."""
    if vp <= 1 or group_size(microbatches, pp, framework):
        return None
    if uses_torch_pipelining(framework):
        rounds = max(microbatches // pp, 1)
        return (f"with vp {vp}, torch.distributed.pipelining's interleaved schedule runs the "
                f"{microbatches} micro-batches per step in {rounds} rounds of equal size "
                f"(micro-batches // pp), and {rounds} does not divide {microbatches}; change mbs "
                f"or gbs, or use vp 1.")
    return (f"with vp {vp}, Megatron-Core's interleaved schedule needs at least pp ({pp}) "
            f"micro-batches per step, got {microbatches}; lower mbs, raise gbs, or use vp 1.")
