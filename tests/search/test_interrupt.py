"""Ctrl-C during an Optuna search: no trial stays RUNNING, the exit says how to resume, and a
study that a killed process left RUNNING trials in is cleaned when it is opened again."""

import signal
import subprocess
import sys
import time

import optuna
import pytest

from advisor.cli.recommend_cmd import interrupted_message
from advisor.search.engine import open_storage
from advisor.search.trials import STALE_AFTER_S, SearchInterrupted, fail_stale

ARGS = ["recommend", "-m", "70b", "-g", "64", "-p", "h200", "--search", "optuna",
        "--study-name", "interrupted"]


def _states(storage: str) -> dict[str, int]:
    study = optuna.load_study(study_name="interrupted", storage=open_storage(storage))
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


def _interrupt_when_trials_exist(storage: str) -> subprocess.CompletedProcess:
    """Start a long search, send SIGINT once it has told trials to `storage`, and return how
    the process ended."""
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *ARGS, "--trials", "100000",
                             "--storage", storage], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _states(storage).get("COMPLETE", 0) >= 1:
                break
        except Exception:  # noqa: BLE001 - the study or its tables do not exist yet
            pass
        time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_sigint_fails_the_unfinished_batch_and_says_how_to_resume(tmp_path, kind):
    path = tmp_path / ("study.log" if kind == "journal" else "study.db")
    storage = str(path) if kind == "journal" else f"sqlite:///{path}"
    done = _interrupt_when_trials_exist(storage)
    assert done.returncode == 130, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("interrupted: ") and done.stderr.count("\n") == 1
    assert "'interrupted'" in done.stderr and "run the same command again" in done.stderr
    states = _states(storage)
    assert "RUNNING" not in states, states
    assert set(states) == {"COMPLETE"}, states  # it stopped between batches

    # The same command continues the study: its trials count, and it ends cleanly.
    again = subprocess.run([sys.executable, "-m", "advisor", *ARGS, "--trials", "64",
                            "--storage", storage, "--json"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    after = _states(storage)
    assert after["COMPLETE"] == states["COMPLETE"] + 64 and "RUNNING" not in after


def test_an_interrupted_search_in_memory_says_nothing_was_kept():
    stop = SearchInterrupted(study_name="s", storage=None, num_told=544)
    assert "pass --storage FILE" in interrupted_message(stop)
    stop = SearchInterrupted(study_name="s", storage="study.log", num_told=544)
    assert "'s' in study.log" in interrupted_message(stop)


def test_trials_a_dead_process_left_running_are_failed_only_when_stale(tmp_path):
    storage = str(tmp_path / "study.log")
    study = optuna.create_study(study_name="interrupted", storage=open_storage(storage))
    for _ in range(3):
        study.ask({"x": optuna.distributions.IntDistribution(0, 9)})
    live = study.ask()
    study.tell(live, 1.0)
    assert fail_stale(study) == 0  # just asked: a live worker's, not stale
    assert STALE_AFTER_S >= 60
    assert fail_stale(study, older_than_s=0.0) == 3
    assert _states(storage) == {"FAIL": 3, "COMPLETE": 1}
    assert fail_stale(study, older_than_s=0.0) == 0  # nothing left to fail
