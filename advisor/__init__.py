"""advisor: power-, performance- and thermal-aware configuration advice for LLM training.

Importing `advisor` is cheap (no torch, xgboost or optuna): schedulers import it.
"""

from advisor.errors import AdvisorError
from advisor.parallel import Job, ParallelConfig

__version__ = "0.1.0"
__all__ = ["AdvisorError", "Job", "ParallelConfig", "__version__"]
