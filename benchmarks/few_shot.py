"""How fast does advisor learn a new stack from a few of its runs?

    python benchmarks/few_shot.py [--k 0 2 4 8] [--seeds 5] [--json FILE] [--tables FILE]
                                  [--plots DIR]

Each publication series of the bundled published and MLPerf runs (`datasets/published.parquet`,
`datasets/mlperf.parquet`) is held out in turn: the calibration is refitted without it, as for
a stack advisor never saw. Within the held-out series, each platform is one *stack* (one
software line on one kind of cluster: what a team's own runs are); a second table takes each
release of it on one platform as the stack, as a team that measures its current release would
(`STACKS`). For k = 0, 2, 4, 8 runs of
that stack, chosen by the targeted strategy (`advisor.learn.stack.pick_next`: the run most
likely to be the fastest layout of its job; `--seeds` seeds of its Monte Carlo) and at random
(`--seeds` seeds), the stack's
factors and the offsets of the models they measured are fitted to those runs
(`advisor.learn.stack.fit_stack`, the prior sized by the *other* series' held-out errors) and
its other runs are predicted. Reported per k and
strategy: median over stacks of the MAPE on the runs not measured, the share of those runs
inside the p10-p90 band, and top-1 regret per job measured in two or more layouts (a job: one
model, GPU count, precision, sequence length and global batch on the stack; the pick is the
fastest by measurement where measured, by prediction elsewhere): the share of jobs within 2 %
of their best layout, and the mean regret.

Only the analytical model with the stack's factors is scored: the learned surrogate is not
retrained per draw here (`advisor train --stack` fits the same factors, then trains it).
`--plots DIR` draws the summary's rows against k (`plots`, matplotlib).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _plots  # noqa: E402
from _checkout import head  # noqa: E402

from advisor.data.dataset import load  # noqa: E402
from advisor.learn.fit import fit_all, reference_from_frame, reference_terms  # noqa: E402
from advisor.learn.stack import (  # noqa: E402
    TERM_COLUMNS,
    StackSpreads,
    fit_stack,
    pick_next,
    shares,
)
from advisor.perf.calibration import load_calibration  # noqa: E402

JOB = ("model", "num_gpus", "precision", "seq_len", "gbs")
REGRET_GOAL = 0.02
BAND_PROMISE = 0.8
"""The share of runs a p10-p90 band should hold."""


def held_out_tables(ref, calibration, progress) -> pd.DataFrame:
    """The step model's terms for every row, from a calibration fitted without its series."""
    parts = []
    series = list(ref.rows["series"].unique())
    for i, name in enumerate(series, 1):
        started = time.time()
        held = (ref.rows["series"] == name).to_numpy()
        fitted = fit_all(ref.subset(~held), calibration.with_families({}).with_frameworks({}))
        parts.append(reference_terms(ref.subset(held), fitted, TERM_COLUMNS))
        progress(f"series {i}/{len(series)} refitted without it ({time.time() - started:.0f} s):"
                 f" {name}")
    return pd.concat(parts).loc[ref.rows.index]


def choose(strategy: str, k: int, seed: int, tokens, share, jobs, models, moe, spread,
           truth: np.ndarray) -> np.ndarray:
    """Positions of the k runs measured first; `truth` is revealed one run at a time, as a
    replayed campaign reveals it."""
    n = len(tokens)
    if strategy == "random":
        return np.random.default_rng(seed).permutation(n)[:k]
    measured = np.zeros(n, bool)
    values = np.zeros(n)
    for _ in range(k):
        stack = fit_stack(share[measured], tokens[measured], values[measured], spread,
                          models=models[measured], moe=moe[measured])
        nxt, _ = pick_next(stack, tokens, share, jobs, measured, models, moe, values=values,
                           seed=seed)
        measured[nxt] = True
        values[nxt] = truth[nxt]
    return np.flatnonzero(measured)


def score(picked: np.ndarray, tokens, share, measured, jobs, models, moe, spread) -> dict:
    known = np.zeros(len(tokens), bool)
    known[picked] = True
    stack = fit_stack(share[known], tokens[known], measured[known], spread,
                      models=models[known], moe=moe[known])
    low, mid, high = stack.predict(tokens, share, models, moe)
    rest = ~known
    ape = np.abs(mid[rest] / measured[rest] - 1.0)
    inside = (measured[rest] >= low[rest]) & (measured[rest] <= high[rest])
    regrets = []
    for job in pd.unique(jobs):
        members = np.flatnonzero(jobs == job)
        if len(members) < 2:
            continue
        believed = np.where(known[members], measured[members], mid[members])
        pick = members[np.argmax(believed)]
        regrets.append(measured[members].max() / measured[pick] - 1.0)
    return {"mape": float(ape.mean() * 100) if rest.any() else np.nan,
            "inside": int(inside.sum()), "scored": int(rest.sum()), "regrets": regrets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, nargs="+", default=[0, 2, 4, 8])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--tables", type=Path,
                        help="reuse the held-out step terms from this file if it exists, else "
                             "write them there (the refits take minutes; the strategies "
                             "seconds)")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figure (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)
    started = time.time()
    frame = pd.concat([load(ROOT / "datasets" / f) for f in ("published.parquet",
                                                               "mlperf.parquet")],
                      ignore_index=True)
    ref = reference_from_frame(frame)
    keep = (ref.rows["finetune"] != "lora").to_numpy()     # LoRA rows: another workload
    ref = ref.subset(keep)
    configs = pd.concat([c for _, c in ref.groups.values()]).loc[ref.rows.index]
    rows = ref.rows.assign(seq_len=configs["seq_len"], gbs=configs["gbs"])
    print(f"{len(rows)} runs in {rows['series'].nunique()} series "
          f"(LoRA fine-tuning runs left out); commit {head()}", flush=True)
    if args.tables and args.tables.exists():
        tables = pd.read_parquet(args.tables).loc[ref.rows.index]
        print(f"held-out step terms read from {args.tables}")
    else:
        tables = held_out_tables(ref, load_calibration(), lambda m: print(m, flush=True))
        if args.tables:
            tables.to_parquet(args.tables)
    rows["release"] = rows["software"].fillna("").astype(str).replace("", "?")
    results, summary = {}, {}
    for by, columns in STACKS.items():
        rows["stack"] = rows[list(columns)].astype(str).agg(" | ".join, axis=1)
        results[by] = pd.DataFrame(score_stacks(rows, tables, args))
        summary[by] = summarise(results[by])
        print(f"\nstack = {' x '.join(columns)}: {summary[by]['stacks'].max()} of "
              f"{rows['stack'].nunique()} stacks have more than {max(args.k)} runs; per k and "
              f"strategy, over them:")
        print(summary[by].to_string(index=False))
    if args.plots:
        for path in plots(results["platform"], summary["platform"], args.plots):
            print(f"wrote {path}", file=sys.stderr)
    print(f"\n{time.time() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"commit": head(), **{
            f"summary_by_{by}": part.to_dict("records") for by, part in summary.items()}},
            indent=1) + "\n")
    return 0



STACKS = {"platform": ("series", "platform"), "release": ("series", "platform", "release")}
"""Two views of a stack: a held-out series on one platform (every software release of it
together), and, as the issue defines a stack (cluster, framework, release), one release of it:
releases of one series differ by up to 1.7x on the same layout (Qwen3-30B-A3B on 8 GB200:
23,766 tokens/s per GPU in 25.11, 40,706 in 26.06)."""


def score_stacks(rows: pd.DataFrame, tables: pd.DataFrame, args) -> list[dict]:
    """Every (stack, k, strategy, seed) draw's scores, for the stacks of `rows["stack"]` with
    more runs than the largest k."""
    results = []
    for name, part in rows.groupby("stack", sort=True):
        if len(part) <= max(args.k):
            continue            # every k is scored on the same stacks
        others = rows["series"] != part["series"].iloc[0]
        spread = StackSpreads.of(rows.loc[others, "measured"],
                                 tables.loc[others, "tokens_per_sec_per_gpu"],
                                 rows.loc[others, "stack"], rows.loc[others, "model"],
                                 rows.loc[others, "moe"].astype(bool))
        table = tables.loc[part.index]
        tokens = table["tokens_per_sec_per_gpu"].to_numpy()
        share = shares(table)
        truth = part["measured"].to_numpy(float)
        jobs = part[list(JOB)].astype(str).agg("|".join, axis=1).to_numpy()
        models = part["model"].to_numpy()
        moe = part["moe"].to_numpy(bool)
        for k in args.k:
            for strategy in ("targeted", "random"):
                seeds = range(args.seeds)   # targeted: the seed of its Monte Carlo
                if k == 0 and strategy == "random":
                    continue
                for seed in seeds if k else [0]:
                    picked = choose(strategy, k, seed, tokens, share, jobs, models, moe,
                                    spread, truth)
                    out = score(picked, tokens, share, truth, jobs, models, moe, spread)
                    results.append({"stack": name, "rows": len(part), "k": k,
                                    "strategy": strategy if k else "none", "seed": seed, **out})
    return results


def summarise(results: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (k, strategy), part in results.groupby(["k", "strategy"], sort=True):
        per_stack = part.groupby("stack")["mape"].mean()
        regrets = np.array([r for rs in part["regrets"] for r in rs])
        out.append({"k": k, "strategy": strategy, "stacks": int(per_stack.notna().sum()),
                    "median MAPE %": round(float(per_stack.median()), 1),
                    "p10-p90 coverage %": round(100 * part["inside"].sum()
                                                / max(part["scored"].sum(), 1), 1),
                    "jobs": int(len(regrets) / part["seed"].nunique()),
                    f"regret <= {REGRET_GOAL:.0%} %": round(
                        100 * float((regrets <= REGRET_GOAL + 1e-12).mean()), 1)
                    if len(regrets) else np.nan,
                    "mean regret %": round(100 * float(regrets.mean()), 2)
                    if len(regrets) else np.nan})
    return pd.DataFrame(out)


def plots(results: pd.DataFrame, summary: pd.DataFrame, folder: Path) -> list[Path]:
    """The figure of `--plots`: the rows of `summary` against k, one line per strategy (k = 0,
    no run measured, starts both): median MAPE over stacks (shaded: the stacks' p25-p75),
    p10-p90 coverage against the 80 % it promises, and the share of jobs within the regret
    goal."""
    figures = _plots.Figures(folder)
    fig, axes = _plots.figure(3, width_in=13, height_in=4.6)
    start = summary[summary["strategy"] == "none"]
    per_stack = results.groupby(["k", "strategy", "stack"])["mape"].mean()
    regret = f"regret <= {REGRET_GOAL:.0%} %"
    for strategy, style in (("targeted", "-o"), ("random", "--s")):
        rows = pd.concat([start, summary[summary["strategy"] == strategy]]).sort_values("k")
        line = axes[0].plot(rows["k"], rows["median MAPE %"], style, label=strategy)[0]
        spread = [per_stack.loc[(k, s)].quantile([0.25, 0.75]).to_numpy()
                  for k, s in zip(rows["k"], rows["strategy"], strict=True)]
        axes[0].fill_between(rows["k"], [q[0] for q in spread], [q[1] for q in spread],
                             color=line.get_color(), alpha=0.12, linewidth=0)
        axes[1].plot(rows["k"], rows["p10-p90 coverage %"], style, label=strategy)
        axes[2].plot(rows["k"], rows[regret], style, label=strategy)
    axes[1].axhline(100 * BAND_PROMISE, color="black", linestyle="--", linewidth=1,
                    label=f"promised: {BAND_PROMISE:.0%}")
    titles = ("median MAPE over stacks (%)\nshaded: the stacks' p25-p75",
              "runs inside the p10-p90 band (%)", f"jobs within {REGRET_GOAL:.0%} of their "
              f"best layout (%)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("runs of the stack measured, k")
        ax.set_xticks(sorted(summary["k"].unique()))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylim(bottom=0)
    axes[1].set_ylim(0, 100)
    axes[2].set_ylim(0, 100)
    fig.suptitle(f"A new stack learned from k of its runs: {int(summary['stacks'].max())} "
                 f"stacks (a held-out series on one platform), scored on their other runs; "
                 f"random and targeted: {results['seed'].nunique()} seeds", fontsize=10)
    fig.subplots_adjust(top=0.8, wspace=0.3)
    return [figures.save(fig, "few-shot-against-k",
                         "Against the number k of a stack's runs measured, for the targeted and "
                         "random choices: the median MAPE over stacks on the runs not measured, "
                         "the share of those runs inside the p10-p90 band against the 80 % it "
                         "promises, and the share of jobs within 2 % of their best layout")]


if __name__ == "__main__":
    sys.exit(main())
