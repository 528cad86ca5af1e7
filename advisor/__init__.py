"""advisor: power-, performance- and thermal-aware configuration advice for LLM training.

Importing `advisor` is cheap (no torch, xgboost or optuna): schedulers import it. `Predictor`
loads on first use.
"""

from typing import Any

from advisor.core.errors import AdvisorError
from advisor.core.parallel import Job, ParallelConfig

__version__ = "0.1.0"
__all__ = ["AdvisorError", "Job", "ParallelConfig", "Predictor", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Predictor":
        from advisor.predict.predictor import Predictor

        return Predictor
    raise AttributeError(f"module 'advisor' has no attribute {name!r}")
