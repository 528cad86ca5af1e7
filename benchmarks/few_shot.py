"""How fast does advisor learn a new stack from a few of its runs?

    python benchmarks/few_shot.py [--k 0 2 4 8] [--seeds 5] [--json FILE] [--tables FILE]
                                  [--plots DIR]

Each publication series of the bundled published and MLPerf runs (`datasets/published.parquet`,
`datasets/mlperf.parquet`) is held out in turn: the calibration is refitted without it, as for
a stack advisor never saw. Within the held-out series, each platform is one *stack* (one
software line on one kind of cluster: what a team's own runs are); a second table takes each
release of it on one platform as the stack, as a team that measures its current release would
(`STACKS`). vTrain's layout sweeps join as two more stacks (`VTRAIN`: Megatron-DeepSpeed on
A100, priced without the host time the bundled calibration fitted to them): theirs are most of
the jobs measured in several layouts, the choices the regret figures are about. For k = 0, 2,
4, 8 runs of that stack, chosen by the targeted strategy (`advisor.learn.stack.pick_next`: the
run whose measurement most lowers the expected regret of the recommendation; `--seeds` seeds of
its Monte Carlo) and at random (`--seeds` seeds), the stack's host time, its factors and the
offsets of the models they measured are fitted to those runs
(`advisor.learn.stack.fit_stack_host`: each row is priced at every host factor once, in the
held-out tables; the prior sized by the published series' held-out errors, the held-out one
left out; every host factor the runs leave plausible joins the prediction, weighted by its
posterior) and its other runs are predicted. Reported per k and strategy: median over stacks of
the MAPE on the runs not measured, the share of those runs inside the p10-p90 band (pooled over
runs, where vTrain's 1,549 weigh most, and the mean over stacks: `per stack %`), and top-1
regret per job measured in two or more layouts (a job: one model, GPU count, precision,
sequence length, global batch and software release on the stack — runs of one layout in two
releases are no layout choice; the pick is the fastest by measurement where measured, by
prediction elsewhere): the share of jobs within 2 % of their best layout, and the mean regret.
A line per table gives the floor (`ceiling`): every run of each stack fitted, every job's
layout picked by prediction alone — what the stack's factors cannot learn, however many runs;
a last table breaks the targeted strategy down per stack (`by_stack`), floor included.

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
    HOST_FACTORS,
    TERM_COLUMNS,
    StackSpreads,
    fit_stack_host,
    pick_next,
    shares,
)
from advisor.perf.calibration import CURRENT_RELEASE, load_calibration  # noqa: E402

STACK_LABEL = 64
"""Characters of a stack's name the per-stack table prints (a release may be a sentence)."""
JOB = ("model", "num_gpus", "precision", "seq_len", "gbs", "release")
REGRET_GOAL = 0.02
BAND_PROMISE = 0.8
"""The share of runs a p10-p90 band should hold."""


def within_goal_pct(regrets: np.ndarray) -> float:
    """The share (%) of jobs whose top-1 regret is within `REGRET_GOAL`; NaN with no job."""
    if not len(regrets):
        return np.nan
    return round(100 * float((np.asarray(regrets) <= REGRET_GOAL + 1e-12).mean()), 1)


def held_out_tables(ref, calibration, progress) -> pd.DataFrame:
    """The step model's terms for every row, from a calibration fitted without its series, at
    every host-time factor a stack calibration weighs (`HOST_FACTORS`; column `host_factor`)."""
    parts = []
    series = list(ref.rows["series"].unique())
    for i, name in enumerate(series, 1):
        started = time.time()
        held = (ref.rows["series"] == name).to_numpy()
        fitted = fit_all(ref.subset(~held), calibration.with_families({}).with_frameworks({}))
        # a stack's runs are priced as `advisor train --stack` prices a team's own
        stack = ref.subset(held)
        stack.rows = stack.rows.assign(release_year=CURRENT_RELEASE)
        parts += [reference_terms(stack, fitted.with_host_scale(f), TERM_COLUMNS)
                  .assign(host_factor=f) for f in HOST_FACTORS]
        progress(f"series {i}/{len(series)} refitted without it ({time.time() - started:.0f} s):"
                 f" {name}")
    return pd.concat(parts)


def priced(tables: pd.DataFrame, index) -> tuple[np.ndarray, np.ndarray]:
    """Rows `index` of `tables` as (tokens/s/GPU, shares) per `HOST_FACTORS` entry: factors ×
    rows, and factors × rows × 2."""
    by = [tables[tables["host_factor"] == f].loc[index] for f in HOST_FACTORS]
    return (np.stack([t["tokens_per_sec_per_gpu"].to_numpy(float) for t in by]),
            np.stack([shares(t) for t in by]))


def pricing(prices):
    """`StackCalibration.predict_priced`'s price function over `priced`'s arrays."""
    tokens, share = prices
    return lambda f: (tokens[HOST_FACTORS.index(f)], share[HOST_FACTORS.index(f)])


def fit(prices, known: np.ndarray, values: np.ndarray, spread, models, moe):
    """The stack calibration of the `known` runs (`fit_stack_host` over the priced factors),
    and the model's (tokens, shares) of every row at its host factor."""
    tokens, share = prices
    stack = fit_stack_host(lambda f: (tokens[HOST_FACTORS.index(f)][known],
                                      share[HOST_FACTORS.index(f)][known]),
                           values[known], spread, models=models[known], moe=moe[known])
    at = HOST_FACTORS.index(stack.host_factor)
    return stack, tokens[at], share[at]


VTRAIN = {"vTrain single-node A100 sweeps": "ground_truth_single.csv",
          "vTrain multi-node A100 sweeps": "ground_truth_multi.csv"}
"""vTrain's layout sweeps (`datasets/reference/vtrain`): one stack each (Megatron-DeepSpeed
on an A100 node, and on vTrain's 4 x 200 Gb/s cluster), whose jobs are measured in 2-47
layouts each: the layout choices the regret figures are about."""


def vtrain_stacks(calibration) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows and step terms (at every `HOST_FACTORS` entry, as `held_out_tables`) of vTrain's
    sweeps, held out: priced without the host time per layer the bundled calibration fitted to
    them (`advisor.perf.vtrain.fit_host_overhead`:
    Megatron-DeepSpeed's framework entry is dropped, so its host time is the family's prior).
    The sweeps are no publication series of the fit, so nothing else is refitted."""
    from advisor.catalog import load_platform
    from advisor.perf.step import step_table
    from advisor.perf.vtrain import (
        FRAMEWORK,
        load_vtrain,
        vtrain_cluster,
        vtrain_groups,
    )

    held_out = calibration.with_frameworks(
        {k: v for k, v in calibration.frameworks.items() if k != FRAMEWORK})
    rows, tables = [], []
    for series, name in VTRAIN.items():
        frame = load_vtrain(ROOT / "datasets" / "reference" / "vtrain" / name)
        platform = vtrain_cluster() if "multi" in name else load_platform("a100")
        for model, part, configs in vtrain_groups(frame):
            for factor in HOST_FACTORS:
                table = step_table(model, platform, configs, framework=FRAMEWORK,
                                   calibration=held_out.with_host_scale(factor))
                table.index = part.index
                tables.append(table[list(TERM_COLUMNS)].assign(host_factor=factor)
                              .rename(lambda i, s=series: f"{s}:{i}"))
            tokens = (part["gbs"] * part["seq_len"] / (part["measured_ms"] / 1e3)
                      / part["num_gpus"])
            rows.append(pd.DataFrame({
                "series": series, "platform": "a100", "model": model.name,
                "num_gpus": part["num_gpus"], "precision": "fp16", "seq_len": part["seq_len"],
                "gbs": part["gbs"], "measured": tokens, "moe": False, "software": "",
                "spread": False}).rename(lambda i, s=series: f"{s}:{i}"))
    return pd.concat(rows), pd.concat(tables)


def choose(strategy: str, k: int, seed: int, prices, jobs, models, moe, spread,
           truth: np.ndarray) -> np.ndarray:
    """Positions of the k runs measured first; `truth` is revealed one run at a time, as a
    replayed campaign reveals it."""
    n = len(truth)
    if strategy == "random":
        return np.random.default_rng(seed).permutation(n)[:k]
    measured = np.zeros(n, bool)
    values = np.zeros(n)
    for _ in range(k):
        stack, tokens, share = fit(prices, measured, values, spread, models, moe)
        nxt, _ = pick_next(stack, tokens, share, jobs, measured, models, moe, values=values,
                           seed=seed)
        measured[nxt] = True
        values[nxt] = truth[nxt]
    return np.flatnonzero(measured)


def score(picked: np.ndarray, prices, measured, jobs, models, moe, spread) -> dict:
    known = np.zeros(len(measured), bool)
    known[picked] = True
    stack, _, _ = fit(prices, known, measured, spread, models, moe)
    low, mid, high = stack.predict_priced(pricing(prices), models, moe)
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


def ceiling(rows: pd.DataFrame, tables: pd.DataFrame, min_rows: int) -> dict:
    """What the stack calibration could do at best: every run of each stack (of more than
    `min_rows` runs) fitted, every run predicted, each job's layout picked by prediction alone.
    The in-sample MAPE (median over stacks) and the jobs' regret are what the analytical model
    with the stack's own factors, host time and model offsets leaves, however the runs were
    chosen: the floor a few-shot campaign approaches."""
    per_stack, regrets, floors = [], [], {}
    for name, part in rows.groupby("stack", sort=True):
        if len(part) <= min_rows:
            continue
        spread = spread_without(rows, tables, part["series"].iloc[0])
        prices = priced(tables, part.index)
        truth = part["measured"].to_numpy(float)
        models, moe = part["model"].to_numpy(), part["moe"].to_numpy(bool)
        stack, _, _ = fit(prices, np.ones(len(truth), bool), truth, spread, models, moe)
        mid = stack.predict_priced(pricing(prices), models, moe)[1]
        per_stack.append(float(np.mean(np.abs(mid / truth - 1.0)) * 100))
        floors[name] = round(per_stack[-1], 1)
        jobs = part[list(JOB)].astype(str).agg("|".join, axis=1).to_numpy()
        for job in pd.unique(jobs):
            members = np.flatnonzero(jobs == job)
            if len(members) >= 2:
                pick = members[np.argmax(mid[members])]
                regrets.append(truth[members].max() / truth[pick] - 1.0)
    regrets = np.asarray(regrets)
    return {"stacks": len(per_stack),
            "median MAPE %": round(float(np.median(per_stack)), 1) if per_stack else np.nan,
            "jobs": len(regrets),
            f"regret <= {REGRET_GOAL:.0%} %": within_goal_pct(regrets),
            "mean regret %": round(100 * float(regrets.mean()), 2) if len(regrets) else np.nan,
            "per_stack": floors}


def by_stack(results: pd.DataFrame, floors: dict[str, float],
             k: tuple[int, ...] = (0, 4, 8)) -> pd.DataFrame:
    """Per stack: its runs, its jobs of two or more layouts, MAPE on its other runs with no
    run and after `k` targeted ones (mean over seeds), p10-p90 coverage and the share of its
    jobs within the regret goal after each, and the floor (`ceiling`'s in-sample MAPE); sorted
    by MAPE at the middle k — where the median over stacks sits, and which stacks the regret
    figures weigh (each of their jobs counts once)."""
    targeted = results[results["strategy"].isin(["none", "targeted"])
                       & results["k"].isin(list(k))]
    out = []
    for stack, part in targeted.groupby("stack", sort=True):
        row = {"stack": stack, "runs": int(part["rows"].iloc[0]),
               "jobs": len(part["regrets"].iloc[0])}
        for kk, at in part.groupby("k"):
            row[f"MAPE % k={kk}"] = round(float(at["mape"].mean()), 1)
            row[f"coverage % k={kk}"] = round(100 * float(at["inside"].sum()
                                                          / max(at["scored"].sum(), 1)))
            regrets = np.array([r for rs in at["regrets"] for r in rs])
            row[f"regret <= {REGRET_GOAL:.0%} % k={kk}"] = within_goal_pct(regrets)
        row["floor %"] = floors.get(stack, np.nan)
        out.append(row)
    middle = f"MAPE % k={sorted(k)[len(k) // 2]}"
    return pd.DataFrame(out).sort_values(middle, kind="stable").reset_index(drop=True)


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
        tables = pd.read_parquet(args.tables)
        if "host_factor" not in tables:
            raise SystemExit(f"{args.tables}: written before the host-time factors; delete it "
                             f"and rerun to recompute the held-out terms.")
        print(f"held-out step terms read from {args.tables}")
    else:
        tables = held_out_tables(ref, load_calibration(), lambda m: print(m, flush=True))
        if args.tables:
            tables.to_parquet(args.tables)
    more_rows, more_tables = vtrain_stacks(load_calibration())
    rows = pd.concat([rows.assign(spread=True), more_rows])
    tables = pd.concat([tables, more_tables])
    print(f"and {len(more_rows)} runs of vTrain's layout sweeps (held out: priced without the "
          f"host time fitted to them)", flush=True)
    rows["release"] = rows["software"].fillna("").astype(str).replace("", "?")
    results, summary, ceilings = {}, {}, {}
    for by, columns in STACKS.items():
        rows["stack"] = rows[list(columns)].astype(str).agg(" | ".join, axis=1)
        results[by] = pd.DataFrame(score_stacks(rows, tables, args))
        summary[by] = summarise(results[by])
        print(f"\nstack = {' x '.join(columns)}: {summary[by]['stacks'].max()} of "
              f"{rows['stack'].nunique()} stacks have more than {max(args.k)} runs; per k and "
              f"strategy, over them:")
        print(summary[by].to_string(index=False))
        best = ceiling(rows, tables, max(args.k))
        ceilings[by] = best
        print(f"every run of a stack fitted, each job's layout picked by prediction alone (the "
              f"factors' floor): median in-sample MAPE {best['median MAPE %']} % over "
              f"{best['stacks']} stacks; {best['jobs']} jobs, "
              f"{best[f'regret <= {REGRET_GOAL:.0%} %']} % within {REGRET_GOAL:.0%} of their "
              f"best layout, mean regret {best['mean regret %']} %")
        ks = tuple(sorted(set(args.k)))
        stacks = by_stack(results[by], best["per_stack"], ks)
        print(f"per stack, targeted (sorted by MAPE after {ks[len(ks) // 2]} runs; jobs: its "
              f"jobs of two or more layouts, which the regret figures count):")
        long = stacks["stack"].str.len() > STACK_LABEL
        print(stacks.assign(stack=stacks["stack"].where(
            ~long, stacks["stack"].str.slice(0, STACK_LABEL - 1) + "…")).to_string(index=False))
    if args.plots:
        for path in plots(results["platform"], summary["platform"], args.plots):
            print(f"wrote {path}", file=sys.stderr)
    print(f"\n{time.time() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"commit": head(), **{
            f"summary_by_{by}": part.to_dict("records") for by, part in summary.items()}, **{
            f"ceiling_by_{by}": {k: v for k, v in best.items() if k != "per_stack"}
            for by, best in ceilings.items()}}, indent=1) + "\n")
    return 0



STACKS = {"platform": ("series", "platform"), "release": ("series", "platform", "release")}
"""Two views of a stack: a held-out series on one platform (every software release of it
together), and, as the issue defines a stack (cluster, framework, release), one release of it:
releases of one series differ by up to 1.7x on the same layout (Qwen3-30B-A3B on 8 GB200:
23,766 tokens/s per GPU in 25.11, 40,706 in 26.06)."""


def spread_without(rows: pd.DataFrame, tables: pd.DataFrame, series: str) -> StackSpreads:
    """The stack prior's spreads, sized by the held-out errors of the published series other
    than `series` (the stacks of `rows["stack"]`)."""
    others = (rows["series"] != series) & rows["spread"]
    unscaled = tables[tables["host_factor"] == 1.0]
    return StackSpreads.of(rows.loc[others, "measured"],
                           unscaled.loc[others.index[others], "tokens_per_sec_per_gpu"],
                           rows.loc[others, "stack"], rows.loc[others, "model"],
                           rows.loc[others, "moe"].astype(bool))


def score_stacks(rows: pd.DataFrame, tables: pd.DataFrame, args) -> list[dict]:
    """Every (stack, k, strategy, seed) draw's scores, for the stacks of `rows["stack"]` with
    more runs than the largest k."""
    results = []
    for name, part in rows.groupby("stack", sort=True):
        if len(part) <= max(args.k):
            continue            # every k is scored on the same stacks
        spread = spread_without(rows, tables, part["series"].iloc[0])
        prices = priced(tables, part.index)
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
                    picked = choose(strategy, k, seed, prices, jobs, models, moe,
                                    spread, truth)
                    out = score(picked, prices, truth, jobs, models, moe, spread)
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
                    "per stack %": round(100 * float(
                        (part["inside"] / part["scored"].where(part["scored"] > 0))
                        .groupby(part["stack"]).mean().mean()), 1),
                    "jobs": int(len(regrets) / part["seed"].nunique()),
                    f"regret <= {REGRET_GOAL:.0%} %": within_goal_pct(regrets),
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
