"""NeMo 2 adapter: the `nemo llm pretrain` command for a `RunSpec`, and its training log parsed.

The recipe overrides are `advisor.explain.emit.nemo.nemo_overrides`, exactly what `recommend
--emit nemo` writes, followed by the measurement's own: run length, no validation or
checkpoints, one progress line per step (what NeMo's `scripts/performance/helpers.py` sets for
benchmarks).

Log format: `MegatronStrategy` swaps Lightning's progress bar for NeMo's `ProgressPrinter`
(`nemo/lightning/pytorch/callbacks/progress_printer.py`), which prints every `progress_interval`
steps

    `Training epoch 0, iteration 3/5 | lr: 0.0003 | global_batch_size: 32 | global_step: 3 |
    reduced_train_loss: 10.93 | train_step_timing in s: 3.951 | consumed_samples: 128`

(numbers as `{:.4}`, whole floats as ints). `train_step_timing in s` comes from NeMo's
`TimingCallback`, `tflops_per_sec_per_gpu` from `FLOPsMeasurementCallback` where a recipe adds it,
and `peak_memory_usage` (bytes, `torch.cuda.max_memory_reserved()`) from `MegatronStrategy`
when `NEMO_LOG_MEMORY_USAGE=1`. `global_step` is logged before the optimizer step, so it
counts from 0. Logs of the TQDM bar (`MegatronProgressBar`, `key=value` in its postfix) parse too.
"""

from __future__ import annotations

import re

from advisor.core.errors import ConfigError
from advisor.core.model import ModelSpec
from advisor.core.parallel import ParallelConfig
from advisor.explain.emit import shell_command
from advisor.explain.emit.nemo import nemo_command, nemo_factory, nemo_overrides
from collectors.frameworks import (
    Step,
    TrainingLog,
    complete_lines,
    find_failure,
    job_for,
    last_error_line,
    log_lines,
    summarize,
    unique_steps,
)
from collectors.spec import RunResult, RunSpec

_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_METRIC = re.compile(r"(global_step|train_step_timing in s|tflops_per_sec_per_gpu|"
                     r"peak_memory_usage)\s*[:=]\s*" + _NUMBER)
_STEP_TIME = "train_step_timing in s"
#: `RunSpec.scale` keys -> the recipe's `model.config` (megatron-core TransformerConfig) fields.
_SCALE_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden_size",
                 "ffn_hidden_size": "ffn_hidden_size",
                 "num_attention_heads": "num_attention_heads", "num_kv_heads": "num_query_groups"}


def measurement_overrides(spec: RunSpec, config: ParallelConfig) -> list[str]:
    """Run length, no validation or checkpoint saving, and a progress line every step."""
    steps = spec.warmup_steps + spec.measure_steps
    return [f"trainer.max_steps={steps}", f"trainer.val_check_interval={steps}",
            "trainer.limit_val_batches=0",
            # The pretrain recipes' MockDataModule: exactly one epoch of samples.
            f"data.num_train_samples={steps * config.gbs}",
            "trainer.log_every_n_steps=1", "trainer.strategy.progress_interval=1",
            "log.ckpt=None", "trainer.enable_checkpointing=False"]


def scale_overrides(spec: RunSpec, model: ModelSpec) -> list[str]:
    """`model.config` overrides that shrink the recipe's model as `spec.scale` asks.

    The recipe builds its model from its own config, not from the catalog, so the scaled shape
    must be set here (Megatron-LM gets it from `megatron_args`, which reads the scaled model).

    Raises:
        ConfigError: `spec.scale` changes the vocabulary or a field with no override here.
    """
    if not spec.scale:
        return []
    unsupported = sorted(set(spec.scale) - set(_SCALE_FIELDS))
    if unsupported:
        raise ConfigError(f"run {spec.run_id} scales {', '.join(unsupported)}, which the NeMo "
                          f"adapter cannot override (the recipe's tokenizer fixes vocab_size); "
                          f"scale only {', '.join(_SCALE_FIELDS)}.")
    values = [f"model.config.{_SCALE_FIELDS[key]}={getattr(model, key)}" for key in spec.scale]
    # Recipes of models with their own head size set kv_channels; keep it consistent.
    return [*values, f"model.config.kv_channels={model.attention_head_dim}"]


def overrides(spec: RunSpec) -> list[str]:
    """The emitter's overrides for the spec's configuration, then `scale_overrides` and
    `measurement_overrides`."""
    config, job = job_for(spec, framework="NeMo 2")
    return [*nemo_overrides(config, job), *scale_overrides(spec, job.model),
            *measurement_overrides(spec, config)]


def command(spec: RunSpec) -> str:
    """`nemo llm pretrain --yes` (no confirmation prompt) with `overrides`, under the comments
    `recommend --emit nemo` writes; NEMO_LOG_MEMORY_USAGE=1 makes the strategy log peak memory."""
    config, job = job_for(spec, framework="NeMo 2")
    comments = [line[2:] for line in nemo_command(config, job).splitlines()
                if line.startswith("# ")]
    words = ["NEMO_LOG_MEMORY_USAGE=1", "nemo", "llm", "pretrain", "--factory",
             nemo_factory(job.model), "--yes"]
    return shell_command(comments, [words, *([o] for o in overrides(spec))])


def parse_log(text: str) -> TrainingLog:
    """Steps, peak reserved memory and failure lines from a NeMo 2 stdout/stderr log."""
    steps: list[Step] = []
    reserved: list[float] = []
    for line in complete_lines(text):
        metrics = {key: float(value) for key, value in _METRIC.findall(line)}
        if _STEP_TIME not in metrics:
            continue
        step = metrics.get("global_step")
        steps.append(Step(iteration=int(step) + 1 if step is not None else len(steps) + 1,
                          step_time_s=metrics[_STEP_TIME],
                          tflops_per_gpu=metrics.get("tflops_per_sec_per_gpu")))
        if "peak_memory_usage" in metrics:
            reserved.append(metrics["peak_memory_usage"])
    lines = log_lines(text)
    return TrainingLog(steps=unique_steps(steps),
                       peak_reserved_bytes=max(reserved) if reserved else None,
                       failure=find_failure(lines), last_error=last_error_line(lines))


def run_result(text: str, spec: RunSpec) -> RunResult:
    """The `RunResult` a NeMo 2 log shows for `spec` (see `collectors.frameworks.summarize`)."""
    return summarize(parse_log(text), spec)
