import json
import os
import subprocess
import sys

import optuna
import pytest

from advisor.catalog import load_model, load_platform
from advisor.errors import AdvisorError
from advisor.objective import Constraints
from advisor.parallel import make_job
from advisor.predictor import Predictor
from advisor.recommend import recommend
from advisor.search import open_storage

ARGS = ["recommend", "-m", "70b", "-g", "64", "-p", "h200", "--json"]


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


@pytest.fixture(scope="module")
def job():
    return make_job(load_model("70b"), load_platform("h200"), num_gpus=64)


def test_optuna_finds_what_exhaustive_finds(job, predictor):
    exhaustive = recommend(job, predictor=predictor, top=1)
    tpe = recommend(job, predictor=predictor, top=1, engine="optuna", trials=400)
    assert tpe.engine == "optuna" and tpe.num_trials == 400
    best = exhaustive.ranked.iloc[0]["score"]
    # TPE scores a few hundred of the 8,402 fitting layouts and lands within 3 % of the best.
    assert tpe.ranked.iloc[0]["score"] >= 0.97 * best
    assert tpe.num_valid < exhaustive.num_fit / 10


def test_optuna_is_reproducible_with_a_seed(job, predictor):
    a = recommend(job, predictor=predictor, top=3, engine="optuna", trials=96, seed=7)
    b = recommend(job, predictor=predictor, top=3, engine="optuna", trials=96, seed=7)
    assert [c.config for c in a.choices] == [c.config for c in b.choices]


def test_optuna_respects_constraints(job, predictor):
    rec = recommend(job, predictor=predictor, engine="optuna", trials=160,
                    constraints=Constraints(max_power_w=700, memory_margin=0.3))
    capacity = job.platform.memory_capacity_bytes / 1e9
    for c in rec.choices:
        assert c.predicted["pred_peak_power_w"] <= 700
        assert c.predicted["pred_memory_gb"] <= 0.7 * capacity


def test_journal_file_accumulates_a_shared_study(job, predictor, tmp_path):
    journal = str(tmp_path / "study.log")
    first = recommend(job, predictor=predictor, engine="optuna", trials=64, storage=journal)
    second = recommend(job, predictor=predictor, engine="optuna", trials=64, storage=journal,
                       seed=1)
    assert first.study_name == second.study_name
    study = optuna.load_study(study_name=first.study_name, storage=open_storage(journal))
    assert len(study.trials) == 128
    # The second worker answers from both workers' trials.
    assert second.num_valid >= first.num_valid


def test_exhaustive_with_storage_is_contradictory(job, predictor, tmp_path):
    with pytest.raises(AdvisorError, match="--storage"):
        recommend(job, predictor=predictor, engine="exhaustive",
                  storage=str(tmp_path / "j.log"))


def _advisor(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "advisor", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONHASHSEED": "0"}, **kwargs)


def test_postgres_study_shared_by_worker_processes_loses_no_trial(postgres_url):
    workers = [_advisor(*ARGS, "--storage", postgres_url, "--trials", str(n), "--seed", str(i))
               for i, n in enumerate((48, 64, 80))]
    results = []
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        results.append(json.loads(out))
    names = {r["study_name"] for r in results}
    assert len(names) == 1
    study = optuna.load_study(study_name=names.pop(), storage=postgres_url)
    states = [t.state for t in study.trials]
    assert len(states) == 48 + 64 + 80 == sum(r["num_trials"] for r in results)
    assert all(s == optuna.trial.TrialState.COMPLETE for s in states)
    assert len({t.number for t in study.trials}) == len(states)
    for r in results:
        assert r["engine"] == "optuna" and r["choices"]


def test_unreachable_storage_is_one_line_and_exit_2():
    w = _advisor(*ARGS, "--storage", "postgresql+psycopg2://nobody:pw@127.0.0.1:9/none")
    out, err = w.communicate(timeout=120)
    assert w.returncode == 2 and out == ""
    assert err.startswith("error: cannot reach the Optuna storage") and err.count("\n") == 1
    assert "pw" not in err  # the password is not echoed
