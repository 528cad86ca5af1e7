"""Entry point: `torchrun --standalone --nproc-per-node N -m collectors.workload --spec SPEC.json
--result RESULT.json` (contract in the package docstring).

Failures are results: rank 0 writes `RESULT.json` whenever Python still runs (a native abort
cannot; the launchers turn a missing result into a failed row). A rank other than 0 whose own
code failed (not merely lost its peers) leaves `RESULT.json.rank<N>` for rank 0, which reports
that root cause ("rank 1: OutOfMemoryError: ...") instead of its own broken connection and
deletes the file; one written after rank 0 finished stays behind as a diagnostic.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from collectors.launchers.lifetime import die_with_parent
from collectors.spec import TELEMETRY_FIELDS, RunResult, RunSpec


class Terminated(Exception):
    """SIGTERM arrived (torchrun stops the remaining ranks when one of them fails)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated("terminated by SIGTERM (torchrun stops all ranks when one fails)")


SEED = 1234
"""Weights and the synthetic global batch (each dp rank trains on its slice)."""
PEER_FAILURE_TEXT = ("connection closed by peer", "connection reset by peer", "broken pipe",
                     "terminated by", "timed out", "timeout")
SIDE_FILE_WAIT_S = 2.0
"""How long rank 0 waits for another rank's root cause after losing its peers."""


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m collectors.workload",
                                     description="Train and time one configuration.")
    parser.add_argument("--spec", type=Path, required=True, help="RunSpec JSON to run.")
    parser.add_argument("--result", type=Path, required=True,
                        help="Where rank 0 writes the RunResult JSON.")
    return parser.parse_args(argv)


def _device(kind: str) -> Any:
    import torch

    if kind == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        return device
    if kind != "cpu":
        raise ValueError(f"device {kind!r} is unknown; use cpu (gloo) or cuda (nccl).")
    return torch.device("cpu")


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_mem_bytes(device: Any) -> float:
    """CUDA allocator peak on GPU; peak resident set size of this process on CPU."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(rss if sys.platform == "darwin" else rss * 1024)  # Linux reports KiB


def _open_sampler(spec: RunSpec) -> Any:
    """The telemetry sampler, or None when telemetry is off or its module is not installed."""
    if spec.telemetry == "none":
        return None
    try:
        from collectors.telemetry import open_sampler
    except ImportError as exc:
        print(f"workload: no telemetry ({exc})", file=sys.stderr, flush=True)
        return None
    # The run's own GPUs: on a shared node the others' power is not this run's.
    local = int(os.environ.get("LOCAL_WORLD_SIZE", spec.num_gpus))
    devices = list(range(local)) if spec.device == "cuda" else None
    return open_sampler(spec.telemetry, rate_hz=spec.telemetry_hz, devices=devices)


def _flops_per_token(model: Any, seq_len: int) -> float:
    """advisor's model-FLOPs convention; 6 × parameters if it cannot count this model."""
    try:
        from advisor.perf.flops import model_flops_per_token

        return float(model_flops_per_token(model, seq_len))
    except Exception:  # a counting gap must not cost the measurement
        return 6.0 * model.params.total


def measure(spec: RunSpec, *, rank: int) -> RunResult:
    """Build, train and time `spec` on this rank (every rank); rank 0's result is the run's."""
    import torch
    import torch.distributed as dist

    from advisor.catalog import load_model
    from advisor.core.parallel import ParallelConfig
    from collectors.workload.model import synthetic_batch, workload_spec
    from collectors.workload.parallelize import build_trainer, describe

    if spec.warmup_steps < 0 or spec.measure_steps < 1:
        raise ValueError(f"warmup_steps ({spec.warmup_steps}) must be ≥ 0 and measure_steps "
                         f"({spec.measure_steps}) ≥ 1.")
    config = ParallelConfig(**spec.config)
    model = workload_spec(load_model(spec.model), spec.scale)
    device = _device(spec.device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            timeout=timedelta(seconds=spec.timeout_s),
                            device_id=device if device.type == "cuda" else None)
    trainer = build_trainer(model, config, device=device, seed=SEED)
    names = trainer.mesh.mesh_dim_names or ()
    dp_rank = trainer.mesh["dp"].get_local_rank() if "dp" in names else 0
    inputs, labels = synthetic_batch(num_sequences=config.gbs, seq_len=config.seq_len,
                                     vocab_size=model.vocab_size, seed=SEED, part=dp_rank,
                                     num_parts=config.dp, device=device)
    sampler = _open_sampler(spec) if rank == 0 else None
    times: list[float] = []
    telemetry: dict[str, Any] = {}
    try:
        for i in range(spec.warmup_steps + spec.measure_steps):
            if i == spec.warmup_steps and sampler is not None:
                sampler.begin_window("measure")
            _sync(device)
            dist.barrier()
            start = time.perf_counter()
            trainer.step(inputs, labels)
            _sync(device)
            dist.barrier()  # the step ends when the slowest rank ends
            if i >= spec.warmup_steps:
                times.append(time.perf_counter() - start)
        if sampler is not None:
            summary = sampler.end_window("measure").run_summary()
            telemetry = {k: summary.get(k) for k in TELEMETRY_FIELDS}
    finally:
        if sampler is not None:
            sampler.close()
    layout = {"rank": rank, **describe(trainer), "losses": trainer.global_losses()}
    # One write: torchrun runs `python -u`, where print() writes the newline separately and
    # the ranks' lines interleave.
    sys.stdout.write(f"WORKLOAD_LAYOUT {json.dumps(layout)}\n")
    sys.stdout.flush()
    peak = torch.tensor([_peak_mem_bytes(device)], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    step_time_s = statistics.median(times)
    tokens_per_s = config.gbs * config.seq_len / step_time_s / config.world_size
    return RunResult(run_id=spec.run_id, status="ok", step_time_s=step_time_s,
                     tokens_per_sec_per_gpu=tokens_per_s,
                     tflops_per_gpu=_flops_per_token(model, config.seq_len) * tokens_per_s
                     / 1e12,
                     peak_mem_gb=float(peak.item()) / 1e9, telemetry=telemetry)


def _is_oom(exc: BaseException) -> bool:
    """CUDA's allocator error, Python's MemoryError, or the CPU allocator's RuntimeError."""
    try:
        from torch import OutOfMemoryError
    except BaseException:  # no torch, or SIGTERM left its import half done
        OutOfMemoryError = MemoryError  # noqa: N806
    return isinstance(exc, MemoryError | OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def _is_peer_failure(exc: BaseException) -> bool:
    """This rank failed because another one did (its collective broke or it was stopped)."""
    text = f"{type(exc).__name__}: {exc}".lower()
    return isinstance(exc, Terminated) or "distbackenderror" in text or any(
        t in text for t in PEER_FAILURE_TEXT)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".strip()


def failure(run_id: str, exc: BaseException) -> RunResult:
    """A failed run's result: status oom or failed; error = type and first line, and those of
    the root cause when `exc` wraps one (pipelining re-raises as "failed to run forward")."""
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    error = _first_line(exc) + (f" <- {_first_line(root)}" if root is not exc else "")
    status = "oom" if _is_oom(exc) or _is_oom(root) else "failed"
    return RunResult(run_id=run_id, status=status, error=error)


def _root_cause(result: RunResult, exc: BaseException, result_path: Path) -> RunResult:
    """Rank 0: prefer another rank's own failure to this rank's broken connection."""
    pattern = result_path.name + ".rank*"
    deadline = time.monotonic() + (SIDE_FILE_WAIT_S if _is_peer_failure(exc) else 0.0)
    while not (found := sorted(result_path.parent.glob(pattern))) and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    others = []
    for path in found:
        try:
            others.append((path.name.rsplit(".rank", 1)[1], RunResult.read(path)))
            path.unlink()
        except (OSError, ValueError):
            continue
    for other_rank, other in others:
        if _is_peer_failure(exc) or (other.status == "oom" and result.status != "oom"):
            return RunResult(run_id=result.run_id, status=other.status,
                             error=f"rank {other_rank}: {other.error}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Run one configuration; 0 when it was measured, 1 when it failed (result written)."""
    # First, before anything slow: torchrun sends SIGTERM to every rank as soon as one fails,
    # and rank 0 must turn it into a result rather than die (it may still be importing torch).
    signal.signal(signal.SIGTERM, _on_sigterm)
    # torchrun starts each rank in a session of its own: without this, a rank outlives a
    # torchrun (and a collector) killed with SIGKILL and keeps its GPU memory.
    die_with_parent()
    args = _parse(argv)
    rank = int(os.environ.get("RANK", "0"))
    run_id = args.spec.stem
    code = 0
    try:
        spec = RunSpec.read(args.spec)
        run_id = spec.run_id
        result = measure(spec, rank=rank)
    except BaseException as exc:  # every failure, even KeyboardInterrupt, becomes a result
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish writing the result
        code = 1
        traceback.print_exc()
        result = failure(run_id, exc)
        print(f"workload rank {rank}: {result.status}: {result.error}", file=sys.stderr,
              flush=True)
        if rank == 0:
            result = _root_cause(result, exc, args.result)
        elif not _is_peer_failure(exc):
            # Even errors every rank hits alike: torchrun may stop rank 0 (SIGTERM) before
            # it gets there, and then this is the only record of the cause.
            result.write(args.result.with_name(f"{args.result.name}.rank{rank}"))
    if rank == 0:
        result.write(args.result)
    _shutdown()
    return code


def _shutdown() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception as exc:  # a broken group must not block the exit
        print(f"workload: destroy_process_group failed: {exc}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: torch 2.13 with gloo sometimes aborts in C++ static
    # destructors ("terminate called without an active exception") after a finished run,
    # which would turn a measured run into a non-zero exit.
    os._exit(exit_code)
