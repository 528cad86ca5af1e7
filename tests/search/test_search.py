import json
import os
import subprocess
import sys
import uuid

import optuna
import pytest

from advisor.catalog import load_model, load_platform
from advisor.core.errors import AdvisorError
from advisor.core.parallel import make_job
from advisor.predict.predictor import Predictor
from advisor.search.engine import SearchEngine, open_storage
from advisor.search.objective import TIE_TOLERANCE, Constraints
from advisor.search.recommend import recommend

ARGS = ["recommend", "-m", "70b", "-g", "64", "-p", "h200", "--json"]


@pytest.fixture(scope="module")
def predictor():
    return Predictor.load()


@pytest.fixture(scope="module")
def job():
    return make_job(load_model("70b"), load_platform("h200"), num_gpus=64)


@pytest.fixture(scope="module")
def exhaustive(job, predictor):
    return recommend(job, predictor=predictor, top=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optuna_finds_what_exhaustive_finds(job, predictor, exhaustive, seed):
    tpe = recommend(job, predictor=predictor, top=1, engine=SearchEngine("optuna", seed=seed))
    assert tpe.engine == "optuna" and tpe.num_trials == 600  # the default
    # TPE scores a few hundred of the fitting layouts and finds one the tie rule counts as
    # tying the best (within TIE_TOLERANCE, 5 %: below what the model resolves between
    # layouts). At 00602a0 seeds 0, 1 and 4 reach 99.9 % of the best score, 2 and 3 96.0 %.
    assert tpe.ranked["score"].max() >= (1 - TIE_TOLERANCE) * exhaustive.ranked["score"].max()
    assert tpe.num_valid < exhaustive.num_fit / 10


def test_optuna_is_reproducible_with_a_seed(job, predictor):
    a = recommend(job, predictor=predictor, top=3, engine=SearchEngine("optuna", trials=96, seed=7))
    b = recommend(job, predictor=predictor, top=3, engine=SearchEngine("optuna", trials=96, seed=7))
    assert [c.config for c in a.choices] == [c.config for c in b.choices]


@pytest.mark.slow  # a 300-trial Optuna search beside an exhaustive one
def test_optuna_steers_towards_a_tight_constraint(job, predictor, exhaustive, tmp_path):
    # A power limit only 2 % of the fitting layouts meet: TPE has to learn from the
    # constraint values (scaled to their limits) to get there.
    limit = float(exhaustive.ranked["pred_peak_power_w"].quantile(0.02))
    tight = Constraints(max_peak_power_w=limit, memory_margin=0.05)
    journal = str(tmp_path / "tight.log")
    rec = recommend(job, predictor=predictor, constraints=tight,
                    engine=SearchEngine("optuna", trials=300, storage=journal, seed=3))
    capacity = job.platform.memory_capacity_bytes / 1e9
    for c in rec.choices:
        assert c.prediction.peak_power_w <= limit
        assert c.prediction.memory_gb <= 0.95 * capacity
    study = optuna.load_study(study_name=rec.study_name, storage=open_storage(journal))
    late = [t for t in study.trials if t.number >= 150]
    feasible = [t for t in late if all(v <= 0 for v in t.constraints.values())]
    early = [t for t in study.trials if t.number < 150]
    # TPE learns from the scaled constraint values: feasible trials get more frequent.
    assert len(feasible) > sum(all(v <= 0 for v in t.constraints.values()) for t in early)


def test_optuna_balanced_is_multi_objective(job, predictor):
    rec = recommend(job, predictor=predictor, engine=SearchEngine("optuna", trials=96),
                    objective="balanced")
    assert rec.engine == "optuna" and rec.choices


def test_optuna_energy_rescores_its_layouts_at_the_chosen_limit(job, predictor, tmp_path):
    """The power-limit search does not sample a second study: #1 at the chosen limit is one of
    the layouts the board-limit trials landed on, and the study holds only those trials. (The
    energy objective: with the host's share at the wall, balanced now keeps the board's.)"""
    journal = str(tmp_path / "limit.log")
    rec = recommend(job, predictor=predictor, objective="energy",
                    engine=SearchEngine("optuna", trials=96, storage=journal, seed=5))
    assert rec.job.platform.power_limit_w is not None  # a limit below the board's was chosen
    assert rec.engine == "optuna" and rec.num_trials == 96
    landed = {tuple(r[k] for k in ("tp", "pp", "cp", "dp", "mbs", "vp"))
              for r in rec.searched.rows()}
    best = rec.choices[0].config
    assert (best.tp, best.pp, best.cp, best.dp, best.mbs, best.vp) in landed
    studies = optuna.get_all_study_summaries(storage=open_storage(journal))
    assert [(s.study_name, s.n_trials) for s in studies] == [(rec.study_name, 96)]


def test_different_pins_get_different_studies(job, predictor, tmp_path):
    journal = str(tmp_path / "pins.log")
    shared = SearchEngine(trials=32, storage=journal)
    a = recommend(job, predictor=predictor, engine=shared)
    b = recommend(job, predictor=predictor, engine=shared, pins={"tp": 4})
    assert a.study_name != b.study_name
    assert all(c.config.tp == 4 for c in b.choices)


def test_optuna_none_found_says_so(job, predictor):
    with pytest.raises(AdvisorError, match=r"Optuna's 8 trials .* found none that"):
        recommend(job, predictor=predictor, engine=SearchEngine("optuna", trials=8),
                  constraints=Constraints(max_power_w=10))


def test_journal_file_accumulates_a_shared_study(job, predictor, tmp_path):
    journal = str(tmp_path / "study.log")
    first = recommend(job, predictor=predictor,
                      engine=SearchEngine("optuna", trials=64, storage=journal))
    second = recommend(job, predictor=predictor,
                       engine=SearchEngine("optuna", trials=64, storage=journal, seed=1))
    assert first.study_name == second.study_name
    study = optuna.load_study(study_name=first.study_name, storage=open_storage(journal))
    assert len(study.trials) == 128
    # The second worker answers from both workers' trials.
    assert second.num_valid >= first.num_valid


def test_exhaustive_with_optuna_options_is_contradictory(tmp_path):
    with pytest.raises(AdvisorError, match="`storage`"):
        SearchEngine("exhaustive", storage=str(tmp_path / "j.log"))
    with pytest.raises(AdvisorError, match="`trials`"):
        SearchEngine("exhaustive", trials=10)
    with pytest.raises(AdvisorError, match="'tpe' is unknown"):
        SearchEngine("tpe")
    assert SearchEngine().resolve(10) == "exhaustive"
    assert SearchEngine(seed=1).resolve(10) == "optuna"


def test_work_a_search_can_be_asked_for_is_bounded():
    """An exhaustive search of more than MOST_EXHAUSTIVE fitting layouts, or more than
    MOST_TRIALS trials, is refused with the way out instead of running for hours."""
    from advisor.search.engine import MOST_EXHAUSTIVE, MOST_TRIALS

    assert SearchEngine("exhaustive").resolve(MOST_EXHAUSTIVE) == "exhaustive"
    with pytest.raises(AdvisorError, match="use `search` optuna \\(or auto\\), or pin"):
        SearchEngine("exhaustive").resolve(MOST_EXHAUSTIVE + 1)
    assert SearchEngine().resolve(MOST_EXHAUSTIVE + 1) == "optuna"
    SearchEngine(trials=MOST_TRIALS)
    with pytest.raises(AdvisorError, match="`trials` must be in 1..100,000"):
        SearchEngine(trials=MOST_TRIALS + 1)


def _advisor(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "advisor", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONHASHSEED": "0"}, **kwargs)


def test_postgres_study_shared_by_worker_processes_loses_no_trial(postgres_url):
    name = f"test-{uuid.uuid4().hex[:8]}"  # a server given by env may keep old studies
    workers = [_advisor(*ARGS, "--storage", postgres_url, "--trials", str(n), "--study-name",
                        name) for n in (48, 64, 80)]
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
