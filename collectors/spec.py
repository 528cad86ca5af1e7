"""The two records every part of a campaign shares: what to run (`RunSpec`) and what happened
(`RunResult`). Both travel as JSON between the campaign runner, the launcher and the workload
process, so they hold plain values only."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

FRAMEWORKS = ("pytorch", "megatron", "nemo")
STATUSES = ("ok", "oom", "failed", "timeout")
"""Dataset `status` values (advisor.data.dataset.SCHEMA)."""
TELEMETRY_FIELDS = ("avg_power_w", "peak_power_w", "energy_j", "max_temp_c", "max_mem_temp_c",
                    "mean_sm_clock_mhz", "throttle_frac_power", "throttle_frac_thermal",
                    "telemetry_hz")
"""Run-level telemetry columns of the dataset schema, in its units."""


@dataclass(frozen=True)
class RunSpec:
    """One configuration to measure."""

    run_id: str
    """Stable id (campaign + configuration): resuming skips ids already in the dataset."""
    campaign: str
    model: str
    """Catalog model name (advisor.catalog.load_model)."""
    platform: str
    """Catalog platform name, or `cpu` for CPU campaigns."""
    num_gpus: int
    """World size (processes; GPUs on a GPU platform)."""
    config: dict[str, Any]
    """`advisor.core.parallel.ParallelConfig.to_dict()`."""
    scale: dict[str, int] = field(default_factory=dict)
    """ModelSpec fields overridden to shrink the model (num_layers, hidden_size,
    ffn_hidden_size, num_attention_heads, num_kv_heads, vocab_size); empty = full size."""
    warmup_steps: int = 2
    measure_steps: int = 3
    telemetry: str = "auto"
    """auto, nvml, amdsmi, cpu, none, or replay:PATH."""
    telemetry_hz: float = 20.0
    device: str = "cpu"
    """cpu (gloo) or cuda (nccl)."""
    timeout_s: float = 600.0
    framework: str = "pytorch"
    """What trains: pytorch (collectors.workload), or megatron / nemo through their own
    launch command and logs (collectors.frameworks), where they are installed."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def write(self, path: Path) -> None:
        path.write_text(self.to_json() + "\n")

    @classmethod
    def read(cls, path: Path) -> RunSpec:
        return cls.from_json(path.read_text())


@dataclass
class RunResult:
    """What one run measured; a failure is a result too (status + error)."""

    run_id: str
    status: str
    error: str = ""
    step_time_s: float | None = None
    tokens_per_sec_per_gpu: float | None = None
    tflops_per_gpu: float | None = None
    peak_mem_gb: float | None = None
    telemetry: dict[str, float | None] = field(default_factory=dict)
    """Keys from TELEMETRY_FIELDS."""
    ran_with: dict[str, str] = field(default_factory=dict)
    """What a launcher knows of the stack that ran, beyond the spec: `framework`, `software`,
    `source_name` and `replayed` (the table rows a replayed run came from)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        data = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def write(self, path: Path) -> None:
        """Atomically (write then rename): a reader never sees half a result."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json() + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> RunResult:
        return cls.from_json(path.read_text())
