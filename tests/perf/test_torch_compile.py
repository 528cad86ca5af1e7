"""torch.compile of TorchTitan's eager blocks (`ParallelConfig.torch_compile`): compiled, the
elementwise kernels eager PyTorch runs one by one (RoPE's FP32 complex product, SwiGLU's
activation and product) run fused, so a compiled run is faster; Megatron-Core runs fused
kernels without a switch, and a row that asks it to compile is refused."""

import pandas as pd
import pytest

from advisor import catalog
from advisor.perf.calibration import load_calibration
from advisor.perf.step import step_table
from advisor.perf.step_compute import ROPE_EAGER_BYTES, SWIGLU_EAGER_BYTES, eager_traffic
from advisor.predict.predictor import Predictor

H100 = catalog.load_platform("h100")


def _fsdp(**changes) -> pd.DataFrame:
    """One node of 8 H100 under FSDP at 8,192 tokens, micro-batch 2, selective recompute (the
    layout of torchtitan's published Llama 3.1 8B runs), eager and compiled."""
    rows = pd.DataFrame({"torch_compile": [False, True]})
    return rows.assign(tp=1, pp=1, cp=1, ep=1, etp=1, vp=1, dp=8, mbs=2, gbs=16, seq_len=8192,
                       precision="bf16", recompute="selective", dp_sharding="full",
                       sequence_parallel=False, overlap_grad_reduce=True,
                       overlap_param_gather=True, tp_comm_overlap=False,
                       grad_reduce_in_fp32=False, attention="flash", **changes)


def _steps(model: str, framework: str = "torchtitan") -> pd.DataFrame:
    return step_table(catalog.load_model(model), H100, _fsdp(), calibration=load_calibration(),
                      framework=framework)


def test_compiled_torchtitan_runs_faster_than_eager():
    """The measured direction: torchtitan's docs/performance.md (Llama 3.1 8B, FSDP on 8 and
    128 H100, local batch 2, selective AC) reports 5,762 -> 6,667 and 5,605 -> 6,514 tokens/s
    per GPU with torch.compile. Only the HBM-bound kernels change: the GEMMs and the
    attention cost the same compiled or not."""
    eager, compiled = (row for _, row in _steps("llama3-8b").iterrows())
    assert compiled["tokens_per_sec_per_gpu"] > eager["tokens_per_sec_per_gpu"]
    assert compiled["memory_bound_s"] < eager["memory_bound_s"]
    assert compiled["gemm_s"] == eager["gemm_s"]
    assert compiled["attention_s"] == eager["attention_s"]


def test_megatron_blocks_do_not_change():
    """Megatron-Core's fused kernels are the compiled ones: its step is the same whatever the
    column says (the predictor refuses the row; the step model ignores it)."""
    steps = _steps("llama3-8b", framework="megatron")
    assert steps["step_time_s"].nunique() == 1
    compiled = _steps("llama3-8b")["memory_bound_s"].iloc[1]
    assert steps["memory_bound_s"].iloc[0] == pytest.approx(compiled)


def test_eager_traffic_counts_rope_on_q_and_k_and_swiglu_on_the_ffn():
    model = catalog.load_model("llama3-8b")        # q 4096, kv 1024, FFN 14,336, gated
    extra = eager_traffic(model, tp=pd.Series([1.0, 2.0]).to_numpy()[:, None])
    assert extra["attention"][:, 0].tolist() == [ROPE_EAGER_BYTES * (4096 + 1024),
                                                 ROPE_EAGER_BYTES * (4096 + 1024) / 2]
    assert extra["mlp"][:, 0].tolist() == [SWIGLU_EAGER_BYTES * 14336,
                                           SWIGLU_EAGER_BYTES * 14336 / 2]
    assert (extra["moe"] == 0).all()
    gpt = eager_traffic(catalog.load_model("gpt3-5b"), tp=pd.Series([1.0]).to_numpy()[:, None])
    assert (gpt["attention"] == 0).all() and (gpt["mlp"] == 0).all()   # learned, GeLU


def test_compile_gains_most_where_elementwise_work_weighs_most():
    """Eager bytes grow with the hidden size, GEMM FLOPs with its square: a small model gains
    more from compiling than a large one at the same tokens per GPU."""
    def gain(model: str) -> float:
        eager, compiled = _steps(model)["tokens_per_sec_per_gpu"]
        return compiled / eager - 1.0

    assert gain("llama3-8b") > gain("llama3-70b") > 0.0


def test_predict_rows_take_the_frameworks_compile_default_and_refuse_megatron():
    """An empty torch_compile cell is what torchtitan's recipes set (on for its FP8 family,
    off for BF16); a Megatron row that asks for it gets a row error, not a silent figure."""
    base = dict(model="llama3-8b", gpu="h100", num_gpus=8, seq_len=8192, gbs=16, mbs=2,
                dp_sharding="full", recompute="selective")
    frame = pd.DataFrame([base | {"framework": "torchtitan"},
                          base | {"framework": "torchtitan", "precision": "fp8-row"},
                          base | {"framework": "torchtitan", "torch_compile": True},
                          base | {"framework": "megatron", "torch_compile": True}])
    out = Predictor(None).predict(frame)
    assert "torch_compile=false" in out["pred_assumed"].iloc[0]
    assert "torch_compile=true" in out["pred_assumed"].iloc[1]
    assert out["pred_error"].iloc[:3].tolist() == ["", "", ""]
    assert out["pred_tokens_per_sec_per_gpu"].iloc[2] > out["pred_tokens_per_sec_per_gpu"].iloc[0]
    assert "torch_compile applies to torchtitan" in out["pred_error"].iloc[3]
