"""Published experts as a sanity check: is each configuration NVIDIA tuned and published for a
job among advisor's top picks for the same job — and where not, why does advisor prefer its own?

Only NVIDIA's performance recipes count (NeMo and Megatron-Bridge performance summaries,
including the long-context CP tables): those configurations were tuned per job on current
software. The 2021-22 Megatron-LM papers fixed layouts to study scaling, on software (unfused
attention, no overlap) that `recommend` does not search.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pandas as pd

from advisor.errors import AdvisorError
from advisor.objective import TIE_TOLERANCE, Constraints, rank
from advisor.parallel import PARALLEL_FIELDS
from advisor.rationale import tradeoff
from advisor.recommend import pinned_space, recommend
from advisor.search import feasible, score_configs

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
    """advisor's top pick / the recipe, predicted tokens/s per GPU."""
    why: str

    @property
    def agrees(self) -> bool:
        return self.rank is not None and self.rank <= TOP


def recipe_jobs(reference: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (job, published layout) from NVIDIA's recipes."""
    names = reference["source_name"].astype(str)
    rows = reference[names.str.contains("|".join(RECIPE_SOURCES))].copy()
    for k in KNOBS:
        rows[k] = rows[k].fillna(1).astype(int)
    rows["precision"] = rows["precision"].fillna("bf16").str.lower()
    return rows.drop_duplicates(list(JOB) + list(KNOBS)).reset_index(drop=True)


def check(row: pd.Series, *, predictor) -> ExpertVerdict:
    """Where the published layout ranks for its job, and why advisor's pick differs."""
    from advisor.catalog import load_model, load_platform
    from advisor.parallel import make_job

    recipe = {k: int(row[k]) for k in KNOBS}
    label = (f"{row['model']} {row['num_gpus']}×{row['gpu']} seq {row['seq_len']} gbs "
             f"{row['gbs']} {row['precision']}")
    try:
        job = make_job(load_model(str(row["model"])), load_platform(str(row["gpu"])),
                       num_gpus=int(row["num_gpus"]), seq_len=int(row["seq_len"]),
                       gbs=int(row["gbs"]), precision=str(row["precision"]))
        rec = recommend(job, top=1, predictor=predictor, constraints=Constraints())
    except AdvisorError as e:
        return ExpertVerdict(label, recipe, None, None, f"advisor cannot plan this job: {e}")
    # Score the recipe's layout directly (Optuna may not have sampled it) and rank it among
    # advisor's candidates with the same rule `recommend` uses.
    try:
        variants = pinned_space(job, recipe | {"dp": job.num_gpus // (
            recipe["tp"] * recipe["pp"] * recipe["cp"])})
    except AdvisorError as e:
        return ExpertVerdict(label, recipe, None, None, f"outside advisor's space: {e}")
    scored = score_configs(job, variants, predictor=predictor, constraints=Constraints())
    fits = scored[feasible(scored)]
    if fits.empty:
        least = scored["pred_memory_gb"].min()
        return ExpertVerdict(label, recipe, None, None,
                             f"the memory model says it does not fit: at least {least:.0f} GB "
                             f"per GPU of {job.platform.memory_capacity_bytes / 1e9:.0f} GB "
                             f"with any recompute and sharding")
    columns = [c for c in rec.ranked.columns if c in fits.columns]
    pool = pd.concat([rec.ranked[columns], fits[columns]], ignore_index=True)
    ranked = rank(pool.drop_duplicates(list(PARALLEL_FIELDS)), "throughput")
    layouts = ranked.drop_duplicates(list(KNOBS)).reset_index(drop=True)
    match = (layouts[list(KNOBS)] == pd.Series(recipe)).all(axis=1).to_numpy()
    if not match.any():  # cannot happen: the recipe's own variants are in the pool
        raise AssertionError(f"{label}: the recipe's layout vanished from its own ranking")
    position = int(match.argmax())
    mine, best = layouts.iloc[position], layouts.iloc[0]
    ratio = float(best["pred_tokens_per_sec_per_gpu"]) / float(mine["pred_tokens_per_sec_per_gpu"])
    why = ""
    if position >= TOP:
        change = tradeoff(mine, best)
        if bool(mine["near_best"]):
            why = (f"the recipe is within {TIE_TOLERANCE:.0%} of advisor's best (pessimistic "
                   f"estimate), where advisor prefers the more conventional layout: from the "
                   f"recipe, {change}")
        else:
            gain = float(best["score"]) / float(mine["score"]) - 1
            why = (f"advisor predicts its pick {gain:.0%} faster on the pessimistic (p10) "
                   f"estimate: from the recipe, {change}")
    return ExpertVerdict(label, recipe, position + 1, ratio, why)


def agreement(reference: pd.DataFrame, *, workers: int = 1) -> list[ExpertVerdict]:
    """A verdict for every NVIDIA recipe job, in `recipe_jobs` order (`workers` processes)."""
    rows = [row for _, row in recipe_jobs(reference).iterrows()]
    if workers <= 1:
        return [_check(row) for row in rows]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Spawn, not fork: a forked child inherits XGBoost's and torch's thread pools mid-state
    # and can deadlock.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_check, rows, chunksize=4))


@functools.cache
def _predictor():
    """One bundled Predictor per process (the pool's workers load their own)."""
    from advisor.predictor import Predictor

    return Predictor.load()


def _check(row: pd.Series) -> ExpertVerdict:
    return check(row, predictor=_predictor())
