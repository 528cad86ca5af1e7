"""XGBoost's C predictor for large batches, called through its C API without importing the
xgboost Python package.

`import xgboost` imports scikit-learn and SciPy whenever they are installed (NeMo installs
them): 2.6 s on a 2-core machine, three times the rest of a `recommend`. Prediction needs
three functions of the shared library the package ships (`lib/libxgboost.so`), documented in
XGBoost's C API reference: `XGBoosterCreate`, `XGBoosterLoadModelFromBuffer` and
`XGBoosterPredictFromDense` (what `Booster.inplace_predict` calls for a NumPy array, with the
same arguments). Loading the library takes about 10 ms. Where the library is not beside the
package (a build that puts it elsewhere), `load` answers None and the caller imports xgboost.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np

from advisor.core.errors import AdvisorError

LIBRARY = {"linux": "libxgboost.so", "darwin": "libxgboost.dylib", "win32": "xgboost.dll"}
"""The shared library's name in the package's `lib/` folder, per platform (xgboost's
`libpath.find_lib_path`)."""

_library: ctypes.CDLL | None = None


class NativeBooster:
    """One XGBoost model loaded into the C library from its JSON form (`raw`)."""

    def __init__(self, lib: ctypes.CDLL, raw: bytes) -> None:
        self._lib = lib
        self._handle = ctypes.c_void_p()
        self._check(lib.XGBoosterCreate(None, ctypes.c_uint64(0), ctypes.byref(self._handle)),
                    "create a booster")
        buffer = ctypes.create_string_buffer(bytes(raw), len(raw))
        self._check(lib.XGBoosterLoadModelFromBuffer(self._handle, buffer,
                                                     ctypes.c_uint64(len(raw))),
                    "load the model")
        # Every core for a batch (what `Booster.set_param({"nthread": 0})` sets).
        self._check(lib.XGBoosterSetParam(self._handle, b"nthread", b"0"), "set nthread")

    def predict(self, x: np.ndarray) -> np.ndarray:
        """What `Booster.inplace_predict(x)` gives for a 2-D float32 array, as a flat copy."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        interface = json.dumps({"data": [x.ctypes.data, True], "shape": list(x.shape),
                                "strides": None, "typestr": "<f4", "version": 3})
        config = json.dumps({"type": 0, "training": False, "iteration_begin": 0,
                             "iteration_end": 0, "missing": math.nan, "strict_shape": False,
                             "cache_id": 0})
        shape = ctypes.POINTER(ctypes.c_uint64)()
        dims = ctypes.c_uint64()
        out = ctypes.POINTER(ctypes.c_float)()
        self._check(self._lib.XGBoosterPredictFromDense(
            self._handle, interface.encode(), config.encode(), None, ctypes.byref(shape),
            ctypes.byref(dims), ctypes.byref(out)), "predict")
        size = math.prod(shape[i] for i in range(dims.value))
        if not size:
            return np.zeros(0, dtype=np.float32)
        # The library owns `out` until the next call: copy it.
        return np.ctypeslib.as_array(out, shape=(size,)).copy()

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            message = self._lib.XGBGetLastError().decode("utf-8", "replace")
            # The first line says what failed; the rest is the library's stack trace.
            raise AdvisorError(f"XGBoost's library could not {what}: "
                               f"{message.strip().splitlines()[0] if message.strip() else '?'}")

    def __del__(self) -> None:
        if getattr(self, "_handle", None) and self._handle.value:
            self._lib.XGBoosterFree(self._handle)


def load(raw: bytes) -> NativeBooster | None:
    """The model in XGBoost's C library, or None where the library is not found beside the
    installed package (the caller then imports xgboost)."""
    lib = _load_library()
    return None if lib is None else NativeBooster(lib, raw)


def _load_library() -> ctypes.CDLL | None:
    global _library
    if _library is None:
        path = library_path()
        if path is None:
            return None
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            return None
        lib.XGBGetLastError.restype = ctypes.c_char_p
        _library = lib
    return _library


def library_path() -> Path | None:
    """Where the installed xgboost package keeps its shared library (found without importing
    the package), or None."""
    if "xgboost.core" in sys.modules:        # imported anyway: the library it loaded
        path = getattr(getattr(sys.modules["xgboost.core"], "_LIB", None), "path", None)
        return Path(path) if path else None
    try:
        spec = importlib.util.find_spec("xgboost")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    name = LIBRARY.get(sys.platform, LIBRARY["linux"])
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "lib" / name
        if path.is_file():
            return path
    return None
