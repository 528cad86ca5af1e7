import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "published_runs.csv"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def reference_csv() -> Path:
    if not REFERENCE.exists():
        message = f"reference data not found at {REFERENCE} (shared/ beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI always has shared/: a skip would hide the check
        pytest.skip(message)
    return REFERENCE
