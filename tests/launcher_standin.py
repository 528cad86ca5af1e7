"""A stand-in for `collectors.workload`, for the launchers' tests only.

`python -m launcher_standin --spec SPEC --result RESULT` (tests/ on PYTHONPATH), started by
torchrun like the real workload; `spec.campaign` picks the behaviour:

- `ok`: the ranks form a gloo group and all-reduce a one each; rank 0 writes an `ok` result whose
  `telemetry["world_size"]` is that sum, proving torchrun started `num_gpus` processes that met.
- `crash`: every rank raises `RuntimeError`.
- `oom`: every rank prints PyTorch's CUDA out-of-memory message and exits 1.
- `sleep`: every rank sleeps an hour (for timeouts).
- `silent`: every rank exits 3 without a word.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from collectors.launchers.lifetime import die_with_parent
from collectors.spec import RunResult, RunSpec

OOM_MESSAGE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
               "GPU 0 has a total capacity of 139.72 GiB of which 1.06 GiB is free.")


def _ok(spec: RunSpec, result: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.ones(1)
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        RunResult(spec.run_id, "ok", telemetry={"world_size": float(total.item())}).write(result)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    die_with_parent()  # as collectors.workload does
    spec = RunSpec.read(args.spec)
    rank = os.environ.get("RANK", "?")
    if spec.campaign == "ok":
        _ok(spec, args.result)
        return 0
    if spec.campaign == "crash":
        raise RuntimeError(f"stand-in crash on rank {rank}")
    if spec.campaign == "oom":
        print(OOM_MESSAGE, file=sys.stderr)
        return 1
    if spec.campaign == "sleep":
        time.sleep(3600)
        return 0
    if spec.campaign == "silent":
        return 3
    raise SystemExit(f"unknown stand-in behaviour {spec.campaign!r}")


if __name__ == "__main__":
    sys.exit(main())
