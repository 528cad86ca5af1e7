"""What a run's framework does when the run does not say: overlap, sequence parallelism,
gradient-reduce precision, attention kernels, torch.compile and expert tensor parallelism. One
rule, used by `predict --input` rows (`predict_input.parse_run_row`) and by `Predictor.predict`
frames, so the two answer the same question the same way.

Every framework runs sequence parallelism with tensor parallelism. Megatron (Megatron-LM,
Megatron-Core, NeMo, Megatron-Bridge) runs with current Megatron-Core defaults —
gradient-reduce and parameter-gather overlap, TP communication overlap when tp > 1, BF16
gradient reduction, fused (flash) attention — unless
the run names a release from 2022 or earlier (`software` such as "2021" or "22.05", or a
source dated 2019-2022 such as "SC'21"): Megatron-LM as published then had no overlap, reduced
FP32 gradients and ran unfused attention (FlashAttention arrived in Megatron-LM in 2023).
PyTorch FSDP (other frameworks) prefetches gathers and overlaps reduce-scatters by itself.
Megatron-DeepSpeed runs unfused attention unless launched with one of its FlashAttention flags
(`megatron/arguments.py`: `--use-flash-attn-v1`, `-v2`, `-triton` are `store_true`, off by
default), so a run that does not say ran unfused.
Expert tensor parallelism is Megatron-Core's default (etp = tp where the layout allows it,
`advisor.core.parallel.default_etp`) except on runs of Megatron-Bridge's performance summary:
its workload base configs set `expert_tensor_parallel_size=1` for every MoE model it
benchmarks (`scripts/performance/configs/{deepseek,qwen,nemotronh}/*_workload_base_configs.py`
in NVIDIA-NeMo/Megatron-Bridge, commit 0426418), so those runs used etp 1 (`recipe_etp`).
The MoE token dispatcher is advisor's rule (`advisor.core.parallel.token_dispatcher`: DeepEP
across NVIDIA NVLink domains, all-to-all inside one) except where the source's recipe names
another (`recipe_dispatch`): Megatron-Bridge's Qwen3-235B-A22B recipe on H100 runs the
all-to-all dispatcher with the all-to-all overlapped.
TorchTitan compiles its blocks (`torch_compile`) where its own recipes do: its low-precision
llama3 recipes turn torch.compile on (llama3_8b_mxfp8, llama3_405b: torchao's float8, MX and
NVFP4 converters warn that they need it for speed), its BF16 ones leave it off (llama3_8b,
llama3_70b; torchtitan 0.3.0 `models/llama3/config_registry.py`); no other framework compiles.
Frameworks are read under any spelling `advisor.core.frameworks` accepts ("megatron-lm", "nemo"
and "mcore" are Megatron; "automodel-fsdp2" is NeMo AutoModel).
"""

from __future__ import annotations

import re

import numpy as np

from advisor.core.frameworks import find_framework

OLD_RELEASE = re.compile(r"^(?:v?[0-3]\.|(?:20)?(?:19|20|21|22)(?:[.\-]|$))")
"""A `software` release from 2022 or earlier: Megatron-LM v0-v3, or a year / YY.MM container."""
OLD_SOURCE = re.compile(r"(?:'|\b20)(?:19|20|21|22)\b")
"""A source dated 2019-2022 ("Narayanan et al. SC'21", "Korthikanti et al. 2022")."""

RECIPE_ETP_ONE = "Megatron-Bridge performance summary"
"""The source whose MoE runs use expert tensor parallelism 1 when the row does not say."""

RECIPE_DISPATCH = {("qwen3-235b-a22b", "h100"): ("alltoall", True)}
"""(model, gpu) -> (dispatcher, all-to-all overlap) of the runs of `RECIPE_ETP_ONE`'s source
whose recipe leaves advisor's dispatcher rule: QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_BF16_V1 and
_FP8_CS_V1 set `moe_token_dispatcher_type="alltoall"` and `moe_a2a_overlap=True` with EP 32
over 256 H100 (scripts/performance/configs/qwen/qwen3_workload_base_configs.py in
NVIDIA-NeMo/Megatron-Bridge, commit 01b2977). Its other H100 MoE recipes run the flex
dispatcher (Qwen3-30B-A3B and DeepSeek-V3: `moe_flex_dispatcher_backend="hybridep"`), which is
the rule's choice."""

FIELDS = ("sequence_parallel", "overlap_grad_reduce", "overlap_param_gather",
          "tp_comm_overlap", "grad_reduce_in_fp32", "attention", "torch_compile")


def canonical(framework: np.ndarray) -> np.ndarray:
    """Each row's framework under its canonical name (`advisor.core.frameworks`); a name
    advisor does not know stays as written (the caller refuses it where it must)."""
    framework = np.asarray(framework, dtype=object)
    names, where = np.unique(framework.astype(str), return_inverse=True)
    return np.array([find_framework(n) or n for n in names], dtype=object)[where]


def old_megatron(framework: np.ndarray, software: np.ndarray,
                 source: np.ndarray | None = None) -> np.ndarray:
    """Rows run by 2021-22 Megatron-LM (see module docstring)."""
    framework = canonical(framework)
    old = np.array([bool(OLD_RELEASE.match(str(s).strip().lower())) for s in software])
    if source is not None:
        old |= np.array([bool(OLD_SOURCE.search(str(s))) for s in source])
    return (framework == "megatron") & old


def defaults(framework: np.ndarray, software: np.ndarray, tp: np.ndarray,
             sharding: np.ndarray, source: np.ndarray | None = None,
             precision: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Each of `FIELDS` as its framework sets it by default, per row (`precision` None: BF16
    everywhere)."""
    framework = canonical(framework)
    megatron = framework == "megatron"
    old = old_megatron(framework, software, source)
    current = megatron & ~old
    fsdp = ~megatron & (np.asarray(sharding, dtype=object) == "full")
    overlap = current | fsdp
    tp = np.asarray(tp)
    return {"sequence_parallel": tp > 1,
            "overlap_grad_reduce": overlap,
            "overlap_param_gather": overlap & (np.asarray(sharding, dtype=object) != "none"),
            "tp_comm_overlap": current & (tp > 1),
            "grad_reduce_in_fp32": megatron & old,
            "attention": np.where((megatron & old) | (framework == "megatron-deepspeed"),
                                  "unfused", "flash").astype(object),
            "torch_compile": compiles(framework, np.full(len(framework), "bf16", dtype=object)
                                      if precision is None else precision)}


def compiles(framework: np.ndarray, precision: np.ndarray) -> np.ndarray:
    """Whether each row's framework runs torch.compile by default (see module docstring):
    TorchTitan in a low-precision recipe."""
    low = ~np.isin(np.asarray(precision, dtype=object).astype(str), ("bf16", "fp16", "fp32"))
    return (canonical(framework) == "torchtitan") & low


def why(framework: str, software: str, source: str = "") -> str:
    """The assumption in words, for `pred_assumed`."""
    framework = find_framework(framework) or framework
    if framework == "megatron-deepspeed":
        return "megatron-deepspeed's defaults: unfused attention (no --use-flash-attn-* flag)"
    if framework == "torchtitan":
        return ("torchtitan's defaults (PyTorch FSDP prefetch and overlap; torch.compile as its "
                "recipes set it: on for FP8/MX/NVFP4, off for BF16)")
    if framework != "megatron":
        return f"{framework}'s defaults (PyTorch FSDP prefetch and overlap)"
    if bool(old_megatron(np.array([framework]), np.array([software]), np.array([source]))[0]):
        return ("2021-22 Megatron-LM (its release or source is dated then): no overlap, FP32 "
                "gradient reduce, unfused attention")
    if not software.strip():
        return ("framework megatron names no release: current Megatron-Core defaults "
                "(overlap, SP, flash attention, BF16 gradient reduce); set software to a "
                "2021-22 release for old Megatron-LM")
    return f"Megatron-Core {software} defaults (overlap, SP, flash attention, BF16 gradients)"


def recipe_etp(source: str) -> int | None:
    """The expert tensor-parallel size a run's source states for its MoE recipes, or None
    (Megatron-Core's default applies)."""
    return 1 if source.startswith(RECIPE_ETP_ONE) else None


def recipe_dispatch(source: str, model: str, gpu: str) -> tuple[str, bool] | None:
    """(dispatcher, ep_comm_overlap) a run's source states for its recipe of `model` on `gpu`
    (`RECIPE_DISPATCH`), or None (advisor's rule applies, no overlap assumed)."""
    if not source.startswith(RECIPE_ETP_ONE):
        return None
    return RECIPE_DISPATCH.get((model.strip().lower(), gpu.strip().lower()))
