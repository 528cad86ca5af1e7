"""What the campaign's runs can use, asked of the interpreter that will run them.

`collectors.preflight` runs this file's text with `python -c` under the runs' interpreter and
environment, with one JSON argument ({"module", "device", "telemetry", "hz", "imports"}), and
reads one JSON line back. It imports only the standard library before it has tried torch, so it
answers even in an interpreter that has nothing else: every step that fails says why in its
`*_error` field instead of stopping the probe.
"""

import importlib
import importlib.util
import json
import platform
import sys


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def probe(request: dict) -> dict:
    out: dict = {"python": sys.executable, "python_version": platform.python_version()}
    try:
        import torch
        import torch.distributed as dist
        import torch.distributed.run  # noqa: F401  (what torchrun is)
    except Exception as exc:  # any failure to import is the answer, not a crash
        out["torch_error"] = _error(exc)
        return out
    out["torch_version"] = str(torch.__version__)
    out["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
    out["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
    try:
        out["cuda_devices"] = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception as exc:
        out["cuda_devices"], out["cuda_error"] = 0, _error(exc)
    for name in request.get("imports", []):
        try:
            found = importlib.util.find_spec(name) is not None
            if found and request.get("module") == "collectors.workload":
                importlib.import_module(name)
            elif not found:
                out["module_error"] = f"ModuleNotFoundError: No module named {name!r}"
                break
        except Exception as exc:
            out["module_error"] = _error(exc)
            break
    kind = request.get("telemetry", "none")
    if kind != "none" and "module_error" not in out:
        try:
            from collectors.telemetry import auto_kind, open_sampler

            if kind == "auto":
                kind, out["telemetry_why"] = auto_kind()
            sampler = open_sampler(kind, rate_hz=float(request.get("hz", 20)))
            sampler.close()
            out["telemetry"] = kind
        except Exception as exc:
            out["telemetry"], out["telemetry_error"] = kind, _error(exc)
    return out


if __name__ == "__main__":
    print("PREFLIGHT " + json.dumps(probe(json.loads(sys.argv[1]))), flush=True)
