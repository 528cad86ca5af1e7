import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference"
REFERENCE = SHARED_REFERENCE / "published_runs.csv"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def _shared(path: Path) -> Path:
    if not path.exists():
        message = f"reference data not found at {path} (shared/ beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI always has shared/: a skip would hide the check
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def reference_csv() -> Path:
    return _shared(REFERENCE)


@pytest.fixture(scope="session")
def vtrain_dir() -> Path:
    return _shared(SHARED_REFERENCE / "vtrain")
