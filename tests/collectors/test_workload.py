"""The torch-native workload, run for real under torchrun with gloo on 2 CPU processes.

Each parallelism is checked twice: the result JSON (status, step time, tokens/s, memory) and
the `WORKLOAD_LAYOUT` line each rank prints from the objects it built (DDP/FSDP wrappers,
DTensor placements, pipeline stages, checkpointed modules, forward passes per step). Every
layout starts from the same weights and global batch, so all must report the same losses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch  # torchrun with gloo on 2 CPU processes

from advisor.core.parallel import ParallelConfig  # noqa: E402
from collectors.spec import TELEMETRY_FIELDS, RunResult, RunSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = {"num_layers": 4, "hidden_size": 64, "ffn_hidden_size": 128, "num_attention_heads": 4,
        "num_kv_heads": 2, "vocab_size": 256}
SEQ_LEN, GBS, NUM_LAYERS = 32, 4, TINY["num_layers"]
WARMUP, MEASURE = 1, 2
RUN_TIMEOUT_S = 150  # a run takes ~8 s on 2 idle cores; others' tests may share them
LAYOUTS: dict[str, dict[str, Any]] = {
    "ddp": {"dp": 2, "dp_sharding": "none", "telemetry": "cpu"},
    "zero1_selective": {"dp": 2, "dp_sharding": "optimizer", "recompute": "selective"},
    "fsdp_full_recompute": {"dp": 2, "dp_sharding": "full", "recompute": "full"},
    "tp": {"tp": 2},
    "tp_sp": {"tp": 2, "sequence_parallel": True},
    "pp_1f1b": {"pp": 2},
    "pp_interleaved": {"pp": 2, "vp": 2},
}


@dataclass
class Run:
    returncode: int
    result: RunResult | None
    layouts: list[dict[str, Any]]
    """One per rank, by rank."""
    output: str
    wall_s: float


def _spec(name: str, *, model: str = "llama3-8b", scale: dict[str, int] | None = None,
          telemetry: str = "none", **config: Any) -> RunSpec:
    parallel = ParallelConfig(seq_len=SEQ_LEN, gbs=GBS, mbs=1, **config)
    return RunSpec(run_id=name, campaign="test", model=model, platform="cpu",
                   num_gpus=parallel.world_size, config=parallel.to_dict(),
                   scale=TINY if scale is None else scale, warmup_steps=WARMUP,
                   measure_steps=MEASURE, telemetry=telemetry, timeout_s=60)


def launch(workdir: Path, spec: RunSpec, *, script: Path | None = None) -> Run:
    """torchrun 2 processes on `spec`; kills the whole process group if it hangs."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = workdir / "spec.json", workdir / "result.json"
    spec.write(spec_path)
    target = [str(script)] if script else ["-m", "collectors.workload"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "2", *target, "--spec", str(spec_path),
           "--result", str(result_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers: our own session
        output, _ = proc.communicate()
        pytest.fail(f"{spec.run_id} hung for {RUN_TIMEOUT_S} s:\n{output[-3000:]}")
    decoder = json.JSONDecoder()
    layouts = sorted((decoder.raw_decode(line.split("WORKLOAD_LAYOUT ", 1)[1])[0]
                      for line in output.splitlines() if "WORKLOAD_LAYOUT " in line),
                     key=lambda layout: layout["rank"])
    result = RunResult.read(result_path) if result_path.exists() else None
    return Run(proc.returncode, result, layouts, output, time.monotonic() - start)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Run each layout once per module, on first use."""
    cache: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name not in cache:
            cache[name] = launch(tmp_path_factory.mktemp(name), _spec(name, **LAYOUTS[name]))
        return cache[name]

    return get


def assert_ok(run: Run, world_size: int = 2) -> None:
    assert run.returncode == 0 and run.result is not None, run.output[-4000:]
    result = run.result
    assert result.status == "ok" and result.error == ""
    assert result.step_time_s > 0
    assert result.tokens_per_sec_per_gpu == pytest.approx(
        GBS * SEQ_LEN / result.step_time_s / world_size)
    assert result.tflops_per_gpu > 0
    assert result.peak_mem_gb > 0
    assert [layout["rank"] for layout in run.layouts] == list(range(world_size))


@pytest.mark.slow
def test_ddp_accumulates_gradients_over_microbatches(runs):
    run = runs("ddp")
    assert_ok(run)
    assert set(run.result.telemetry) == set(TELEMETRY_FIELDS)  # the CPU sampler, on rank 0
    for layout in run.layouts:
        assert layout["wrappers"] == ["DistributedDataParallel"]
        assert layout["optimizer"] == "AdamW" and layout["num_dtensor_params"] == 0
        assert layout["num_microbatches"] == 2  # gbs 4 / (mbs 1 × dp 2)
        assert layout["last_step_forwards"] == 2


def test_zero1_shards_optimizer_state_and_selective_recompute(runs):
    zero, ddp = runs("zero1_selective"), runs("ddp")
    assert_ok(zero)
    assert zero.result.telemetry == {}  # telemetry "none"
    total_state = ddp.layouts[0]["optimizer_state_numel"]
    assert sum(layout["optimizer_state_numel"] for layout in zero.layouts) == total_state
    for layout in zero.layouts:
        assert layout["optimizer"] == "ZeroRedundancyOptimizer"
        assert 0 < layout["optimizer_state_numel"] < total_state
        assert layout["num_checkpointed"] == NUM_LAYERS  # one attention core per block


def test_fsdp_shards_parameters_and_recomputes_blocks(runs):
    run = runs("fsdp_full_recompute")
    assert_ok(run)
    global_numel = run.layouts[0]["global_numel"]
    assert sum(layout["local_numel"] for layout in run.layouts) == global_numel
    for layout in run.layouts:
        assert layout["wrappers"] == ["FSDPTransformer"]
        assert layout["placements"] == ["(Shard(dim=0),)"]
        assert layout["num_dtensor_params"] == layout["num_params"]
        assert layout["num_checkpointed"] == NUM_LAYERS  # every block


def test_tp_shards_matrices_by_column_and_row(runs):
    run = runs("tp")
    assert_ok(run)
    for layout in run.layouts:
        assert layout["placements"] == ["(Shard(dim=0),)", "(Shard(dim=1),)"]
        # 7 matrices per block + embedding + output; the norms stay plain tensors.
        assert layout["num_dtensor_params"] == 7 * NUM_LAYERS + 2
        assert layout["local_numel"] < 0.55 * layout["global_numel"]
        assert layout["num_microbatches"] == 4 and layout["last_step_forwards"] == 4


def test_sequence_parallel_shards_norm_activations(runs):
    run = runs("tp_sp")
    assert_ok(run)
    for layout in run.layouts:
        assert "(Replicate(),)" in layout["placements"]  # norms become replicated DTensors
        assert layout["num_dtensor_params"] == layout["num_params"]


def test_pipeline_1f1b_splits_layers_into_stages(runs):
    run = runs("pp_1f1b")
    assert_ok(run)
    assert [layout["stages"] for layout in run.layouts] == [[0], [1]]
    assert [layout["layers"] for layout in run.layouts] == [[0, 1], [2, 3]]
    for layout in run.layouts:
        assert layout["schedule"] == "Schedule1F1B"
        assert layout["last_step_forwards"] == 4  # gbs 4 / (mbs 1 × dp 1) micro-batches


def test_pipeline_interleaved_runs_two_chunks_per_rank(runs):
    run = runs("pp_interleaved")
    assert_ok(run)
    assert [layout["stages"] for layout in run.layouts] == [[0, 2], [1, 3]]
    assert [layout["layers"] for layout in run.layouts] == [[0, 2], [1, 3]]
    for layout in run.layouts:
        assert layout["schedule"] == "ScheduleInterleaved1F1B"
        assert layout["last_step_forwards"] == 8  # 4 micro-batches × 2 chunks


def test_every_layout_trains_the_same_model(runs):
    reference = runs("ddp").layouts[0]["losses"]
    assert len(reference) == WARMUP + MEASURE and reference[-1] < reference[0]
    for name in LAYOUTS:
        for layout in runs(name).layouts:
            assert layout["losses"] == pytest.approx(reference, rel=1e-4), name


@pytest.mark.parametrize(("changes", "reason"), [
    ({"cp": 2}, "runs on GPUs only"),
    ({"dp": 2, "model": "no-such-model"}, "unknown model 'no-such-model'"),
])
def test_refused_run_is_a_failed_result(tmp_path, changes, reason):
    run = launch(tmp_path, _spec("refused", **changes))
    assert run.returncode != 0
    assert run.result is not None and run.result.status == "failed", run.output[-3000:]
    assert reason in run.result.error
    assert run.result.step_time_s is None


def test_failure_on_one_rank_is_reported_by_rank_0_without_hanging(tmp_path):
    script = tmp_path / "inject.py"
    script.write_text(
        "import os, sys\n"
        "from collectors.workload import __main__ as workload, parallelize\n"
        "step = parallelize.Trainer.step\n"
        "def failing_step(self, inputs, labels):\n"
        "    if os.environ['RANK'] == '1' and self.num_steps == 1:\n"
        "        raise RuntimeError('injected failure\\nsecond line')\n"
        "    step(self, inputs, labels)\n"
        "parallelize.Trainer.step = failing_step\n"
        "sys.exit(workload.main())\n")
    run = launch(tmp_path, _spec("injected", dp=2, dp_sharding="none"), script=script)
    assert run.returncode != 0
    assert run.result is not None, run.output[-3000:]
    assert run.result.status == "failed"
    assert run.result.error == "rank 1: RuntimeError: injected failure"
    assert not list(tmp_path.glob("result.json.rank*"))  # rank 0 consumed the side file
    assert run.wall_s < 60


def test_rank_0_stopped_by_torchrun_still_reports_the_cause(tmp_path):
    # Rank 1 fails at once; torchrun then sends SIGTERM to rank 0, still busy elsewhere.
    script = tmp_path / "slow_rank_0.py"
    script.write_text(
        "import sys, time\n"
        "from collectors.workload import __main__ as workload\n"
        "measure = workload.measure\n"
        "def slow_measure(spec, *, rank):\n"
        "    if rank == 0:\n"
        "        time.sleep(30)\n"
        "    return measure(spec, rank=rank)\n"
        "workload.measure = slow_measure\n"
        "sys.exit(workload.main())\n")
    run = launch(tmp_path, _spec("stopped", dp=2, model="no-such-model"), script=script)
    assert run.returncode != 0
    assert run.result is not None, run.output[-3000:]
    assert run.result.error.startswith("rank 1: UnknownNameError: unknown model")
    assert run.wall_s < 30


def _overcommit_refuses_huge_allocations() -> bool:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() in ("0", "2")
    except OSError:
        return False


@pytest.mark.skipif(not _overcommit_refuses_huge_allocations(),
                    reason="needs Linux overcommit mode 0 or 2 to refuse a 16 TiB allocation")
def test_out_of_memory_is_an_oom_result(tmp_path):
    # A 2**24 × 2**16 fp32 embedding (the largest vocabulary advisor accepts, a wide model):
    # 4 TiB, refused at once.
    huge = {**TINY, "vocab_size": 2**24, "hidden_size": 2**16}
    run = launch(tmp_path, _spec("oom", dp=2, dp_sharding="none", scale=huge))
    assert run.returncode != 0
    assert run.result is not None and run.result.status == "oom", run.output[-3000:]
    assert "can't allocate memory" in run.result.error


def test_importing_the_package_imports_no_torch():
    code = "import sys, collectors.workload; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False"


# ---- units (no processes) -----------------------------------------------------------------
def test_stage_layers_split_evenly_earlier_stages_first():
    from collectors.workload.parallelize import stage_layers

    assert stage_layers(4, 2) == [(0, 2), (2, 4)]
    assert stage_layers(5, 3) == [(0, 2), (2, 4), (4, 5)]


def test_workload_spec_applies_scale_and_rederives_head_dim():
    from advisor.catalog import load_model
    from collectors.workload.model import workload_spec

    spec = workload_spec(load_model("qwen3-8b"), TINY)  # head_dim 128 in the catalog
    assert (spec.num_layers, spec.hidden_size, spec.attention_head_dim) == (4, 64, 16)
    gpt = workload_spec(load_model("gpt3-5b"), TINY)
    assert not gpt.tied_embeddings and gpt.gated_mlp and gpt.norm == "rmsnorm"


def test_workload_spec_refuses_moe_models():
    from advisor.catalog import load_model
    from collectors.workload.model import UnsupportedModel, workload_spec

    with pytest.raises(UnsupportedModel, match="MoE"):
        workload_spec(load_model("mixtral-8x7b"), TINY)


def test_ep_is_refused():
    from advisor.catalog import load_model
    from collectors.workload.model import workload_spec
    from collectors.workload.parallelize import UnsupportedConfig, check_supported

    spec = workload_spec(load_model("llama3-8b"), TINY)
    with pytest.raises(UnsupportedConfig, match="ep"):
        check_supported(ParallelConfig(ep=2, seq_len=SEQ_LEN), spec, world_size=1,
                        device_type="cpu")


def test_failure_reports_root_cause_and_oom():
    from collectors.workload.__main__ import failure

    try:
        try:
            raise MemoryError("no room")
        except MemoryError as inner:
            raise RuntimeError("[Stage 0] failed to run forward:\n  args: ...") from inner
    except RuntimeError as exc:
        result = failure("r", exc)
    assert result.status == "oom"
    assert result.error == ("RuntimeError: [Stage 0] failed to run forward: <- "
                            "MemoryError: no room")
