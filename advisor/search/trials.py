"""Keeping an Optuna study clean when a search stops early.

advisor asks trials in batches and tells them after one vectorised Predictor call, so a Ctrl-C
between ask and tell would leave the batch RUNNING for ever (Optuna's own heartbeat only works
inside `study.optimize` and on RDB storages), and one inside a storage write can break the
journal's lock. Three rules keep a shared study honest:

- the first Ctrl-C is deferred to the end of the batch in flight (`deferred_interrupt`), so
  the search stops between batches with every trial told; a second one stops at once;
- on an interrupt the process fails the trials it asked and did not tell (`fail_unfinished`);
- when a study is opened, trials RUNNING for longer than any batch takes were left by a process
  that died without cleaning up (kill -9, a lost node) and are failed (`fail_stale`).
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import threading
from collections.abc import Iterable, Iterator

STALE_AFTER_S = 600.0
"""A RUNNING trial older than this is stale. One batch is told within seconds (32 trials, one
Predictor call); ten minutes leaves room for a slow shared database and clock skew between
workers, and never fails a live worker's trial."""


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C during an Optuna search, after the unfinished trials were failed: what the study
    kept, so the caller can say how to resume."""

    def __init__(self, *, study_name: str, storage: str | None, num_told: int) -> None:
        """`storage` as it may be shown (a database URL without its password)."""
        super().__init__(f"interrupted after {num_told} trials")
        self.study_name, self.storage, self.num_told = study_name, storage, num_told


class InterruptFlag:
    """Set by the first Ctrl-C inside `deferred_interrupt`; `check` raises it where it is safe."""

    requested = False

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[InterruptFlag]:
    """Within the block the first SIGINT only sets the flag (the caller checks it between
    batches); a second raises KeyboardInterrupt at once. Outside the main thread (a scheduler
    calling the library from a worker thread) signals cannot be caught and nothing changes."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested:
            raise KeyboardInterrupt
        flag.requested = True

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def fail_unfinished(study, trials: Iterable) -> int:
    """Mark `trials` (asked by this process, not told) FAIL; returns how many were."""
    return _fail(study, [t.number for t in trials])


def fail_stale(study, *, older_than_s: float = STALE_AFTER_S) -> int:
    """Mark FAIL every RUNNING trial started more than `older_than_s` ago; returns how many."""
    import optuna

    now = datetime.datetime.now()
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    return _fail(study, [t.number for t in running if t.datetime_start is not None
                         and (now - t.datetime_start).total_seconds() > older_than_s])


def _fail(study, numbers: list[int]) -> int:
    import optuna

    failed = 0
    for number in numbers:
        try:
            study.tell(number, state=optuna.trial.TrialState.FAIL)
            failed += 1
        except (ValueError, RuntimeError):  # another worker finished or failed it first
            pass
    return failed
