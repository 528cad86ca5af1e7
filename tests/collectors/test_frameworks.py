"""Framework adapters: commands shared with `recommend --emit`, and logs in the frameworks' real
formats (tests/fixtures/logs/README.md says where each format comes from)."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys

import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.errors import ConfigError
from advisor.core.parallel import make_config, make_job
from advisor.explain.emit.megatron import megatron_args, megatron_command
from advisor.explain.emit.nemo import nemo_overrides
from collectors.frameworks import find_failure, job_for, megatron, nemo
from collectors.spec import RunSpec

#: The fixtures' run: llama3-8b on 8 × H200, tp 2, gbs 32, seq 8192, 2 warm-up + 4 measured.
GBS, SEQ, GPUS = 32, 8192, 8
MIB = 1024**2


def _spec(*, warmup: int = 2, measure: int = 4, scale: dict | None = None, **layout) -> RunSpec:
    job = make_job(load_model("llama3-8b"), load_platform("h200"), num_gpus=GPUS, seq_len=SEQ,
                   gbs=GBS)
    config = make_config(job, **(layout or {"tp": 2}))
    return RunSpec(run_id="run-1", campaign="test", model="llama3-8b", platform="h200",
                   num_gpus=GPUS, config=config.to_dict(), scale=scale or {},
                   warmup_steps=warmup, measure_steps=measure, device="cuda")


@pytest.fixture
def logs(fixtures):
    return lambda name: (fixtures / "logs" / name).read_text()


# ---- Megatron-LM log ----------------------------------------------------------------------
def test_megatron_healthy_run(logs):
    result = megatron.run_result(logs("megatron_ok.log"), _spec())
    measured_ms = [3951.2, 3948.9, 3960.4, 3955.0]  # iterations 3-6
    assert result.status == "ok" and result.error == ""
    assert result.step_time_s == pytest.approx(statistics.median(measured_ms) / 1e3)
    assert result.step_time_s == pytest.approx(3.9531)
    assert result.tokens_per_sec_per_gpu == pytest.approx(GBS * SEQ / 3.9531 / GPUS)
    assert result.tflops_per_gpu == pytest.approx(statistics.median([452.8, 453.1, 451.8, 452.4]))
    # The largest "max allocated" of any rank in any report, MiB -> GB.
    assert result.peak_mem_gb == pytest.approx(71483.02 * MIB / 1e9)


def test_megatron_median_excludes_warmup(logs):
    log = megatron.parse_log(logs("megatron_ok.log"))
    assert [s.iteration for s in log.steps] == [1, 2, 3, 4, 5, 6]
    result = megatron.run_result(logs("megatron_ok.log"), _spec(warmup=1, measure=5))
    assert result.step_time_s == pytest.approx(3.9550)  # median of iterations 2-6, not 1 (14.9 s)
    result = megatron.run_result(logs("megatron_ok.log"), _spec(warmup=5, measure=1))
    assert result.step_time_s == pytest.approx(3.9550)  # iteration 6 alone


def test_megatron_reads_both_memory_figures(logs):
    log = megatron.parse_log(logs("megatron_ok.log"))
    assert log.peak_allocated_bytes == pytest.approx(71483.02 * MIB)
    assert log.peak_reserved_bytes == pytest.approx(74152.00 * MIB)


def test_megatron_oom(logs):
    result = megatron.run_result(logs("megatron_oom.log"), _spec())
    assert result.status == "oom"
    assert result.error.startswith("[rank1]: torch.OutOfMemoryError: CUDA out of memory.")
    assert result.step_time_s is None and result.peak_mem_gb is None


def test_megatron_nccl_timeout(logs):
    result = megatron.run_result(logs("megatron_nccl_timeout.log"), _spec())
    assert result.status == "failed"
    assert "[Rank 11] Watchdog caught collective operation timeout" in result.error
    assert result.step_time_s is None


def test_megatron_crash_reports_the_workers_last_error_line(logs):
    result = megatron.run_result(logs("megatron_crash.log"), _spec())
    assert result.status == "failed"
    assert result.error == ("[rank5]: RuntimeError: CUDA error: an illegal memory access was "
                            "encountered")


def test_megatron_old_timestamp_format(logs):
    log = megatron.parse_log(logs("megatron_nccl_timeout.log"))
    assert [(s.iteration, s.step_time_s) for s in log.steps] == [(1, 15.1024), (2, 2.1339)]


def test_truncated_megatron_log_never_yields_figures(logs):
    """A log cut anywhere before the last iteration line is complete is a failed run."""
    text = logs("megatron_ok.log")
    last_line_end = text.index("\n", text.index("iteration        6/")) + 1
    for cut in [*range(0, last_line_end - 1, 97), last_line_end - 2, last_line_end - 1]:
        result = megatron.run_result(text[:cut], _spec())
        assert result.status == "failed", cut
        assert result.step_time_s is None
        assert result.error.startswith("log ends after iteration"), cut
    assert megatron.run_result(text[:last_line_end], _spec()).status == "ok"


def test_truncated_megatron_log_names_the_last_iteration(logs):
    text = logs("megatron_ok.log")
    cut = text.index("elapsed time", text.index("iteration        5/")) + 40  # mid-number
    result = megatron.run_result(text[:cut], _spec())
    assert result.error.startswith("log ends after iteration 4 of 6")


def test_oom_outranks_nccl_whatever_the_order():
    lines = ["[rank0]: ... Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, ...)",
             "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    assert find_failure(lines) == ("oom", lines[1])
    assert find_failure(lines[:1]) == ("failed", lines[0])
    assert find_failure(["iteration 1/ 6 | lm loss: 9.1 |"]) is None


# ---- NeMo 2 log ---------------------------------------------------------------------------
def test_nemo_healthy_run(logs):
    result = nemo.run_result(logs("nemo_ok.log"), _spec())
    assert result.status == "ok"
    # global_step 2..5 are measured; 0 and 1 are the warm-up.
    assert result.step_time_s == pytest.approx(statistics.median([3.962, 3.958, 3.971, 3.966]))
    assert result.tokens_per_sec_per_gpu == pytest.approx(GBS * SEQ / 3.964 / GPUS)
    assert result.tflops_per_gpu is None  # no FLOPsMeasurementCallback in the recipe
    assert result.peak_mem_gb == pytest.approx(77930577920 / 1e9)  # peak reserved, bytes


def test_nemo_global_step_counts_from_zero(logs):
    log = nemo.parse_log(logs("nemo_ok.log"))
    assert [s.iteration for s in log.steps] == [1, 2, 3, 4, 5, 6]
    assert log.steps[0].step_time_s == 15.12
    assert log.peak_allocated_bytes is None


def test_nemo_tflops_when_the_flops_callback_logs_it(logs):
    text = logs("nemo_ok.log").replace(" | consumed_samples",
                                       " | tflops_per_sec_per_gpu: 452.5 | consumed_samples")
    assert nemo.run_result(text, _spec()).tflops_per_gpu == pytest.approx(452.5)


def test_nemo_tqdm_progress_bar(logs):
    log = nemo.parse_log(logs("nemo_tqdm.log"))
    assert [s.step_time_s for s in log.steps] == [15.12, 4.031, 3.962, 3.958, 3.971, 3.966]
    assert nemo.run_result(logs("nemo_tqdm.log"), _spec()).step_time_s == pytest.approx(3.964)


@pytest.mark.parametrize(("name", "status", "signature"), [
    ("nemo_oom.log", "oom", "torch.OutOfMemoryError: CUDA out of memory"),
    ("nemo_nccl_error.log", "failed", "DistBackendError: NCCL error in:"),
])
def test_nemo_failures(logs, name, status, signature):
    result = nemo.run_result(logs(name), _spec())
    assert result.status == status and signature in result.error


def test_truncated_nemo_log(logs):
    text = logs("nemo_ok.log")
    cut = text.index("train_step_timing in s: 3.966") + len("train_step_timing in s: 3.9")
    result = nemo.run_result(text[:cut], _spec())  # the half-written "3.9" must not count
    assert result.status == "failed"
    assert result.error.startswith("log ends after iteration 5 of 6")


# ---- commands -----------------------------------------------------------------------------
def test_megatron_args_are_the_emitters():
    spec = _spec(tp=2, pp=2)
    config, job = job_for(spec, framework="Megatron-LM")
    emitted = megatron_args(config, job)
    args = megatron.script_args(spec)
    assert args[0] == "pretrain_gpt.py" and args[1:1 + len(emitted)] == emitted
    pairs = list(zip(args, args[1:], strict=False))
    for flag, value in [("--tensor-model-parallel-size", "2"),
                        ("--pipeline-model-parallel-size", "2"), ("--train-iters", "6"),
                        ("--log-interval", "1"), ("--global-batch-size", str(GBS))]:
        assert (flag, value) in pairs
    assert {"--mock-data", "--log-throughput"} <= set(args)
    assert megatron.command(spec).endswith(megatron_command(config, job))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_megatron_command_runs_the_script_args():
    """The shell script hands torchrun exactly `script_args` (DATA_ARGS/TRAIN_ARGS expanded)."""
    spec = _spec(tp=2, pp=2)
    fake = 'torchrun() { printf "%s\\n" "$@"; }\n'
    out = subprocess.run(["bash", "-c", fake + megatron.command(spec)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [f"--nproc-per-node={GPUS}", "--nnodes=1", *megatron.script_args(spec)]


def test_scaled_model_reaches_megatron():
    spec = _spec(scale={"num_layers": 4, "hidden_size": 1024, "ffn_hidden_size": 3584,
                        "num_attention_heads": 8, "num_kv_heads": 8})
    args = megatron.script_args(spec)[1:9]
    pairs = list(zip(args[::2], args[1::2], strict=True))
    assert pairs == [("--num-layers", "4"), ("--hidden-size", "1024"),
                     ("--ffn-hidden-size", "3584"), ("--num-attention-heads", "8")]


def test_nemo_overrides_are_the_emitters():
    spec = _spec(tp=2, pp=2)
    config, job = job_for(spec, framework="NeMo 2")
    emitted = nemo_overrides(config, job)
    values = nemo.overrides(spec)
    assert values[:len(emitted)] == emitted
    assert "trainer.strategy.tensor_model_parallel_size=2" in values
    assert "trainer.strategy.pipeline_model_parallel_size=2" in values
    assert {"trainer.max_steps=6", "trainer.log_every_n_steps=1", "trainer.limit_val_batches=0",
            f"data.num_train_samples={6 * GBS}"} <= set(values)
    command = nemo.command(spec)
    assert "NEMO_LOG_MEMORY_USAGE=1 nemo llm pretrain --factory llama3_8b --yes" in command
    assert all(f"    {v}" in command for v in values)


def test_nemo_scale_overrides():
    spec = _spec(scale={"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8})
    values = nemo.overrides(spec)
    assert {"model.config.num_layers=4", "model.config.hidden_size=1024",
            "model.config.num_attention_heads=8", "model.config.kv_channels=128"} <= set(values)


def test_nemo_refuses_vocab_scaling():
    with pytest.raises(ConfigError, match="vocab_size"):
        nemo.overrides(_spec(scale={"num_layers": 4, "vocab_size": 32000}))


def test_frameworks_need_gpus():
    spec = RunSpec(run_id="cpu-1", campaign="test", model="llama3-8b", platform="cpu",
                   num_gpus=2, config=_spec().config)
    with pytest.raises(ConfigError, match="trains on GPUs"):
        megatron.command(spec)


def test_scale_must_name_model_fields():
    with pytest.raises(ConfigError, match="scale of run run-1"):
        megatron.command(_spec(scale={"num_layer": 4}))


def test_adapters_import_no_framework():
    code = ("import sys, collectors.frameworks.megatron, collectors.frameworks.nemo; "
            "print(sorted({'torch', 'megatron', 'nemo', 'lightning'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
