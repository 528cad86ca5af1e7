"""Published experts as a sanity check: is each configuration NVIDIA tuned and published for a
job among advisor's top picks for the same job — and where not, why does advisor prefer its own?

Only NVIDIA's performance recipes count (NeMo and Megatron-Bridge performance summaries,
including the long-context CP tables): those configurations were tuned per job on current
software. The 2021-22 Megatron-LM papers fixed layouts to study scaling, on software (unfused
attention, no overlap) that `recommend` does not search.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import pandas as pd

from advisor.core.errors import AdvisorError
from advisor.search.objective import Constraints
from advisor.search.recommend import recommend
from advisor.search.why_not import rank_layout

RECIPE_SOURCES = ("NeMo", "Megatron-Bridge")
KNOBS = ("tp", "pp", "cp", "ep", "vp", "mbs")
JOB = ("model", "gpu", "num_gpus", "seq_len", "gbs", "precision")
TOP = 5


@dataclass(frozen=True)
class ExpertVerdict:
    job: str
    recipe: dict
    rank: int | None
    """Position of the recipe's layout among advisor's distinct layouts (1 = advisor's pick);
    None where advisor does not consider it (does not fit, or outside the space)."""
    ratio: float | None
    """advisor's top pick / the recipe's best variant, predicted tokens/s per GPU."""
    why: str
    exact_rank: int | None = None
    """Position counting virtual-pipeline and micro-batch variants as layouts of their own."""

    @property
    def agrees(self) -> bool:
        return self.rank is not None and self.rank <= TOP

    @property
    def agrees_exactly(self) -> bool:
        return self.exact_rank is not None and self.exact_rank <= TOP


def recipe_jobs(reference: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (job, published layout) from NVIDIA's recipes."""
    names = reference["source_name"].astype(str)
    rows = reference[names.str.contains("|".join(RECIPE_SOURCES))].copy()
    for k in KNOBS:
        rows[k] = rows[k].fillna(1).astype(int)
    rows["precision"] = rows["precision"].fillna("bf16").str.lower()
    return rows.drop_duplicates(list(JOB) + list(KNOBS)).reset_index(drop=True)


def check_job(rows: list[pd.Series], *, predictor) -> list[ExpertVerdict]:
    """Where each published layout of one job (rows with the same `JOB` columns) ranks among
    advisor's picks for that job, and why advisor's pick differs: one recommendation, every
    recipe ranked in it."""
    from advisor.catalog import load_model, load_platform
    from advisor.core.parallel import make_job

    row = rows[0]
    recipes = [{k: int(r[k]) for k in KNOBS} for r in rows]
    label = (f"{row['model']} {row['num_gpus']}×{row['gpu']} seq {row['seq_len']} gbs "
             f"{row['gbs']} {row['precision']}")
    try:
        job = make_job(load_model(str(row["model"])), load_platform(str(row["gpu"])),
                       num_gpus=int(row["num_gpus"]), seq_len=int(row["seq_len"]),
                       gbs=int(row["gbs"]), precision=str(row["precision"]))
        rec = recommend(job, top=1, predictor=predictor, constraints=Constraints())
    except AdvisorError as e:
        return [ExpertVerdict(label, recipe, None, None, f"advisor cannot plan this job: {e}")
                for recipe in recipes]
    out = []
    for recipe in recipes:
        # The same "why not this layout?" that `recommend --layout` answers: the recipe's
        # variants are scored directly (Optuna may not have sampled them) and ranked with
        # recommend's rule.
        verdict = rank_layout(rec, recipe, predictor=predictor)
        ratio = None if verdict.gap is None else 1.0 + verdict.gap
        out.append(ExpertVerdict(label, recipe, verdict.rank, ratio, verdict.why,
                                 exact_rank=verdict.exact_rank))
    return out


def agreement(reference: pd.DataFrame, *, workers: int = 1) -> list[ExpertVerdict]:
    """A verdict for every NVIDIA recipe job, in `recipe_jobs` order (`workers` processes;
    one recommendation per distinct job)."""
    recipes = recipe_jobs(reference)
    jobs = [[row for _, row in group.iterrows()]
            for _, group in recipes.groupby(list(JOB), sort=False, dropna=False)]
    if workers <= 1:
        verdicts = [_check_job(rows) for rows in jobs]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # Spawn, not fork: a forked child inherits XGBoost's and torch's thread pools
        # mid-state and can deadlock.
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_share_cores) as pool:
            verdicts = list(pool.map(_check_job, jobs, chunksize=4))
    by_row = {int(row.name): v for rows, vs in zip(jobs, verdicts, strict=True)
              for row, v in zip(rows, vs, strict=True)}
    return [by_row[i] for i in range(len(recipes))]


@functools.cache
def _predictor():
    """One bundled Predictor per process (the pool's workers load their own)."""
    from advisor.predict.predictor import Predictor

    return Predictor.load()


def _share_cores() -> None:
    """In a pool's worker, before XGBoost starts OpenMP: wait passively, since the workers'
    threads share the cores (spinning, two processes' surrogate trainings ran 6x slower in
    tests/conftest.py's measurement)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _check_job(rows: list[pd.Series]) -> list[ExpertVerdict]:
    return check_job(rows, predictor=_predictor())
