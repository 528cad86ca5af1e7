""""Why not this layout?": where a layout a user has in mind ranks in a recommendation, its
predicted gap to #1, and the reason.

    from advisor.search.why_not import parse_layout, rank_layout
    verdict = rank_layout(rec, parse_layout("tp4 pp4 vp5 cp2"), predictor=predictor)
    verdict.rank, verdict.gap, verdict.why
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from advisor.core.errors import AdvisorError, ConfigError
from advisor.core.knobs import LAYOUT, overlap
from advisor.core.parallel import DP_SHARDING, PARALLEL_FIELDS, RECOMPUTE, sharding_name
from advisor.core.table import Table
from advisor.explain.rationale import describe, tradeoff
from advisor.search.engine import PRUNE_SHARE, feasible, score_configs, violation_columns
from advisor.search.objective import TIE_TOLERANCE, rank
from advisor.search.recommend import Recommendation, pinned_space

SIZES = ("tp", "pp", "vp", "cp", "dp", "ep", "etp", "mbs")
_TOKEN = re.compile(r"^(tp|pp|vp|cp|dp|ep|etp|mbs)=?(\d+)$")
SYNTAX = ("a layout is sizes such as \"tp4 pp4 vp5 cp2\" (tp, pp, vp, cp, dp, ep, etp, mbs; "
          "'tp=4' works too), optionally with recompute=none|selective|full and "
          "sharding=none|optimizer|full")


def parse_layout(text: str) -> dict:
    """`"tp4 pp4 vp5 cp2 recompute=full"` → `{"tp": 4, "pp": 4, "vp": 5, "cp": 2,
    "recompute": "full"}` (the pins `recommend` takes)."""
    out: dict = {}
    tokens = [t for t in re.split(r"[\s,;/]+", text.strip().lower()) if t]
    if not tokens:
        raise ConfigError(f"`layout` is empty; {SYNTAX}.")
    for token in tokens:
        key, value = _parse_token(token)
        if key in out and out[key] != value:
            raise ConfigError(f"`layout` gives {key} twice ({out[key]} and {value}).")
        out[key] = value
    return out


def _parse_token(token: str) -> tuple[str, object]:
    if match := _TOKEN.match(token):
        value = int(match.group(2))
        if value < 1:
            raise ConfigError(f"`layout` {token}: sizes are at least 1.")
        return match.group(1), value
    key, _, value = token.partition("=")
    if key == "recompute" and value in RECOMPUTE:
        return "recompute", value
    if key in ("sharding", "dp_sharding") and sharding_name(value) in DP_SHARDING:
        return "dp_sharding", sharding_name(value)
    raise ConfigError(f"`layout`: cannot read {token!r}; {SYNTAX}.")


@dataclass(frozen=True)
class LayoutVerdict:
    layout: dict
    rank: int | None
    """Position of the layout among the recommendation's distinct layouts (1 = #1); None where
    it is not a candidate (invalid, does not fit, or breaks a constraint)."""
    exact_rank: int | None
    """Position counting virtual-pipeline and micro-batch variants as layouts of their own."""
    gap: float | None
    """How much higher #1 scores than the layout's best variant (0.05 = #1 is 5 % better)."""
    why: str
    best_variant: dict | None = None
    """The layout's best-scoring variant (recompute, sharding, overlap chosen by advisor)."""
    at_least: bool = False
    """The rank is a floor: the layout runs under `PRUNE_SHARE` of #1, where the search did
    not predict every layout (`Recommendation.num_pruned`), so more may rank above it."""

    def describe(self, model) -> str:
        """`tp4 pp4 vp5 cp2 ranks #3, 2.1 % behind #1 (best variant: ..., 1,234 tokens/s per
        GPU): from it, ...`."""
        text = _show(self.layout)
        if self.rank is None or self.best_variant is None:
            return f"{text} is not a candidate: {self.why}."
        head = (f"{text} ranks #{self.rank}" + (" or lower" if self.at_least else "")
                + (f" (#{self.exact_rank} counting VP and micro-batch variants)"
                   if self.exact_rank != self.rank else ""))
        variant = (f"best variant {describe(self.best_variant, model)}, "
                   f"{float(self.best_variant['pred_tokens_per_sec_per_gpu']):,.0f} tokens/s "
                   f"per GPU")
        if self.rank == 1 and self.gap is not None and self.gap <= 0:
            return f"{head} ({variant}): it is advisor's pick."
        why = f": {self.why}" if self.why else ""
        if self.gap is not None and self.gap < 0:  # ahead on the score, behind on a tie
            return (f"{head} ({variant}), predicted {-self.gap:.1%} faster than #1 but within "
                    f"the {TIE_TOLERANCE:.0%} tie the more conventional #1 wins{why}.")
        return f"{head}, {self.gap:.1%} behind #1 ({variant}){why}."


def _show(layout: dict) -> str:
    return " ".join(f"{k}{v}" if k in SIZES else f"{k}={v}" for k, v in layout.items())


def rank_layout(rec: Recommendation, layout: dict, *, predictor) -> LayoutVerdict:
    """Where `layout` (pins, as `parse_layout` returns) ranks in `rec`, under `rec`'s
    objective, risk and constraints, and why #1 beats it."""
    job = rec.job
    pins = dict(rec.pins) | layout
    clash = {k: (rec.pins[k], layout[k]) for k in layout if k in rec.pins and
             rec.pins[k] != layout[k]}
    if clash:
        raise ConfigError("`layout` contradicts the pins: " + ", ".join(
            f"{k} pinned {a}, layout {b}" for k, (a, b) in clash.items()) + ".")
    if "dp" not in pins and {"tp", "pp", "cp"} <= set(pins):
        pins["dp"] = job.num_gpus // (pins["tp"] * pins["pp"] * pins["cp"])
    try:
        variants = pinned_space(job, pins, framework=rec.framework)
    except AdvisorError as e:
        return LayoutVerdict(layout, None, None, None, f"outside the valid space: {e}")
    scored = score_configs(job, variants, predictor=predictor, constraints=rec.constraints)
    ok = feasible(scored)
    if not ok.any():
        return LayoutVerdict(layout, None, None, None, _infeasible(scored, rec))
    columns = [c for c in rec.ranked_table.names if c in scored]
    pool = Table.concat([rec.ranked_table.select(columns), scored.take(ok).select(columns)])
    ranked = rank(pool.first_of_each(PARALLEL_FIELDS), rec.objective, rec.risk)
    mine = _matching(ranked, pins)
    position = _position(ranked, mine, LAYOUT)
    exact = _position(ranked, mine, (*LAYOUT, "vp", "mbs"))
    best, own = ranked.row(0), ranked.row(mine)
    gap = float(best["score"]) / float(own["score"]) - 1
    why = ""
    if mine != 0:
        why = f"from it, {tradeoff(own, best)}"
        if bool(own["near_best"]) and gap >= 0:
            why += (f" — a tie (within {TIE_TOLERANCE:.0%}), which the more conventional "
                    f"layout wins")
        elif rec.risk == "averse":
            why += " (on the pessimistic p10 the ranking uses)"
    # Under the share of #1 the search left layouts unpredicted: some of them may rank above.
    floor = bool(rec.num_pruned) and float(own["score"]) < PRUNE_SHARE * float(best["score"])
    return LayoutVerdict(layout, position, exact, gap, why, best_variant=own, at_least=floor)


def _matching(ranked: Table, pins: dict) -> int:
    """Index of the best-ranked row with every pin."""
    match = np.ones(len(ranked), dtype=bool)
    for key, value in pins.items():
        column = overlap(ranked) if key == "overlap" else ranked[key]
        match &= column == value
    return int(match.argmax())


def _position(ranked: Table, index: int, key: tuple[str, ...]) -> int:
    """1 + the number of distinct `key` groups that first appear above row `index`, not
    counting the row's own group."""
    own = tuple(ranked[k][index].item() if hasattr(ranked[k][index], "item")
                else ranked[k][index] for k in key)
    groups = set(zip(*(ranked[k][:index].tolist() for k in key), strict=True))
    return len(groups - {own}) + 1


def _infeasible(scored: Table, rec: Recommendation) -> str:
    capacity = rec.job.platform.memory_capacity_bytes / 1e9
    cols = violation_columns(scored)
    memory = scored.get("violates_memory_gb")
    memory_gb = np.asarray(scored["pred_memory_gb"], dtype=float)
    if memory is None or (memory > 0).all() or np.isnan(
            np.asarray(scored["pred_tokens_per_sec_per_gpu"], dtype=float)).all():
        least = np.nanmin(memory_gb) if not np.isnan(memory_gb).all() else np.nan
        return (f"the memory model says it does not fit: at least {least:.0f} GB per GPU of "
                f"{capacity:.0f} GB with any recompute and sharding")
    broken = [c.removeprefix("violates_") for c in cols if (scored[c] > 0).all()]
    best = scored.row(int(np.flatnonzero(memory <= 0)[0]))
    return (f"it fits ({describe(best, rec.job.model)}) but breaks the constraint"
            f"{'s' if len(broken) > 1 else ''} on {', '.join(broken) or 'all of them at once'}")
