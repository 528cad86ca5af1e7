"""Where the measured reference data lives: `datasets/reference/` of the checkout (published
runs, MLPerf submissions, power, thermal, vTrain, Megatron-LM CI memory and the GEMM tables,
each folder with its README and licence; `datasets/DATASHEET.md`). The fits, validation
benchmarks and tests read it from here; an installed wheel has no checkout, so commands that
read it take the path as an argument as well."""

from __future__ import annotations

from pathlib import Path

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "datasets" / "reference"
"""The folder in the checkout (`datasets/reference`, copied from the project's shared reference
with its READMEs and licences)."""


def reference_path(*parts: str) -> Path:
    """A file or folder under the reference data, e.g. `reference_path("power")`."""
    return REFERENCE_DIR.joinpath(*parts)
