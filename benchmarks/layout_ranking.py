"""Does advisor rank the measured layouts of one job as they ran? For every job in
`datasets/reference` measured in several layouts: Kendall τ between predicted and measured
throughput, and top-1 regret.

    python benchmarks/layout_ranking.py [--reference DIR] [--analytical] [--jobs] [--plots DIR]

A job is one model on one platform and GPU count with one global batch, sequence length and
precision, measured in at least two distinct layouts (TP, PP, CP, EP, VP, micro-batch,
recompute, sharding, ...) under one software release:

- `published_runs.csv` and the expressible MLPerf Training submissions, read as
  `benchmarks/calibrate.py` reads them (`advisor.learn.fit.load_reference`); a job is also one
  source and software release (one MLPerf round), so a layout change is never confused with
  a software upgrade (`--across-releases` pools a model's releases, as a publication series
  that re-tunes its layout with each container asks; software changes then confound it);
- vTrain's single-node (A100) and multi-node (64-512 A100) sweeps (`advisor.perf.vtrain`:
  `JOB`, the GPT models, Megatron-DeepSpeed's settings, the multi-node cluster's network);
- Megatron-LM's functional tests (`datasets/reference/megatron_ci`), mapped to models and
  layouts as `benchmarks/memory_validation.py` maps them; a job is also one machine and
  container (`env`); tokens/s/GPU = gbs × seq / fastest logged iteration / GPUs. The fastest,
  not the median: about half the tests save and resume a checkpoint inside the run, and a
  few ran on a disturbed machine (median up to 12× the fastest step), so the median times
  the test, not the layout.

Rows of one job that advisor sees as the same layout (a setting it does not model, or the same
layout measured twice) are one layout at their median throughput. Predictions come from the
library's public `Predictor` (`Predictor.load()`: the bundled surrogates where their data
supports a row, the analytical model elsewhere; `--analytical` for the analytical model alone);
a layout predicted not to fit, or not predicted, counts as advisor's last choice (throughput 0).

Per job: layouts, Kendall τ-b (predicted against measured tokens/s/GPU; NaN where either side
has a single value), top-1 regret = measured throughput of the best-measured layout / measured
throughput of advisor's predicted-best − 1 (among layouts tied for advisor's best, the slowest
measured: a tie is no evidence for the lucky one). Summary: median τ and the jobs whose regret
is at most 5 %, overall and per source, and how many of the jobs over it miss by no more than
the spread of their layouts' own repeated runs (an MLPerf layout run by several submitters, each
on its own system: a regret inside that spread is a difference between systems, not layouts).
Each job over that goal is then shown with its fastest
measured layout and advisor's pick, and how far the model misjudged each (measured /
predicted), grouped by source and pick. `--plots DIR` draws the rows of those tables (`plots`,
matplotlib): predicted against measured throughput of every layout per source, and each job's
top-1 regret per source against the 5 % goal.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import _plots
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "datasets" / "reference"
REGRET_GOAL = 0.05
"""Issue 29: every job's top-1 regret at most 5 %."""
LAYOUT = ("tp", "pp", "cp", "ep", "etp", "vp", "dp", "mbs", "recompute", "dp_sharding",
          "sequence_parallel", "attention", "first_stage_layers", "last_stage_layers")
"""What tells two layouts of one job apart (`ParallelConfig` fields)."""
PREDICTED = "predicted_tokens_s"
MEASURED = "measured_tokens_s"


@dataclass(frozen=True)
class Ranking:
    """How advisor ranks one job's measured layouts."""

    num_layouts: int
    kendall_tau: float
    """τ-b between predicted and measured throughput; NaN where either is constant."""
    top1_regret: float
    """best measured / measured of advisor's pick − 1 (0 = advisor picks the fastest)."""


def rank(predicted: np.ndarray, measured: np.ndarray) -> Ranking:
    """`Ranking` of one job: `predicted` and `measured` throughput per layout (higher is
    faster; a layout advisor would not run has predicted 0)."""
    from scipy.stats import kendalltau

    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    if len(predicted) != len(measured) or len(measured) < 2:
        raise ValueError("a job needs at least two layouts, each predicted and measured")
    tau = (float("nan") if np.ptp(predicted) == 0 or np.ptp(measured) == 0
           else float(kendalltau(predicted, measured).statistic))
    regret = float(measured.max() / measured[advisors_pick(predicted, measured)] - 1.0)
    return Ranking(num_layouts=len(measured), kendall_tau=tau, top1_regret=regret)


def advisors_pick(predicted: np.ndarray, measured: np.ndarray) -> int:
    """Index of the layout advisor picks: the best predicted, and among layouts tied for it the
    slowest measured (a tie is no evidence for the lucky one)."""
    tied = np.flatnonzero(predicted >= predicted.max() * (1 - 1e-9))
    return int(tied[np.argmin(measured[tied])])


def _predict(frame: pd.DataFrame, predictor) -> dict[str, np.ndarray]:
    """`PREDICTED` and `refused` for the rows of a `Predictor.predict` frame."""
    return _read(predictor.predict(frame.reset_index(drop=True)))


def _read(out: pd.DataFrame) -> dict[str, np.ndarray]:
    """`PREDICTED` tokens/s/GPU per row of predictions (0 where advisor predicts the layout
    does not fit or refuses it) and `refused` (the layout rules or the model refused the row:
    its `pred_error`)."""
    speed = pd.to_numeric(out["pred_tokens_per_sec_per_gpu"], errors="coerce").to_numpy(float)
    refused = (out["pred_error"].fillna("") != "").to_numpy()
    fits = (out["pred_fits"].astype("boolean").fillna(False).to_numpy(bool)
            if "pred_fits" in out else ~refused)
    return {PREDICTED: np.where(np.isfinite(speed) & fits & ~refused, speed, 0.0),
            "refused": refused}


# ---- the sources ---------------------------------------------------------------------------
def published_rows(reference: Path, predictor, *, across_releases: bool = False
                   ) -> pd.DataFrame:
    """Rows of `published_runs.csv` and the MLPerf submissions with their job, layout,
    measured and predicted throughput. Read as `calibrate.py` reads them
    (`load_reference`: the same two files, the same usable rows, tokens/s derived from TFLOP/s
    where a source gives only those); predicted as `advisor predict --input` predicts them
    (`advisor.predict.rows.predict_frame`: empty cells filled by its stated rules, e.g. the
    least recompute that fits)."""
    from advisor.data.mlperf import mlperf_runs
    from advisor.learn.fit import MLPERF_SOURCE, reference_from_frame
    from advisor.predict.rows import predict_frame

    # `load_reference`'s two frames, kept to predict the rows as they are written.
    raw = pd.concat([pd.read_csv(reference / "published_runs.csv", dtype=str,
                                 keep_default_na=False),
                     mlperf_runs(reference / "mlperf" / "mlperf_runs.csv")[0]],
                    ignore_index=True).fillna("")   # a column of one file is empty in the other
    ref = reference_from_frame(raw)
    configs = pd.concat([c for _, c in ref.groups.values()]).drop(columns="framework")
    rows = ref.rows.join(configs[[c for c in configs.columns if c not in ref.rows.columns]])
    rows = rows.assign(source_set=np.where(rows["source"] == MLPERF_SOURCE, "mlperf",
                                           "published"))
    release = np.where(rows["source_set"] == "mlperf", "MLPerf " + rows["round"].astype(str),
                       rows["source"].astype(str) + " " + rows["software"].astype(str))
    if across_releases:
        release = np.where(rows["source_set"] == "mlperf", "MLPerf", rows["series"])
    rows["job"] = (rows["model"] + " · " + rows["platform"] + " × " +
                   rows["num_gpus"].astype(str) + " · gbs " + rows["gbs"].astype(str) +
                   " · seq " + rows["seq_len"].astype(str) + " · " + rows["precision"] +
                   np.where(rows["finetune"] != "none", " · " + rows["finetune"], "") +
                   " · " + pd.Series(release, index=rows.index).str.strip())
    predicted = predict_frame(raw.loc[rows.index].reset_index(drop=True), predictor)
    rows = rows.assign(**_read(predicted.set_axis(rows.index)))
    rows[MEASURED] = rows["measured"].astype(float)
    return rows


def vtrain_rows(path: Path, predictor, *, multi: bool) -> pd.DataFrame:
    """vTrain's runs (one file) with job, layout, measured and predicted throughput."""
    from advisor.catalog import load_platform
    from advisor.perf.vtrain import FRAMEWORK, JOB, load_vtrain, vtrain_cluster, vtrain_groups

    frame = load_vtrain(path)
    platform = vtrain_cluster() if multi else load_platform("a100")
    parts = []
    for model, part, configs in vtrain_groups(frame):
        configs = configs.assign(model=[model] * len(configs), gpu=[platform] * len(configs),
                                 framework=FRAMEWORK, num_gpus=part["num_gpus"])
        settings = configs[["etp", "cp", "ep", "vp", "recompute", "dp_sharding",
                            "sequence_parallel", "attention"]]
        parts.append(part.assign(**_predict(configs, predictor), moe=False, **settings))
    rows = pd.concat(parts).loc[frame.index]
    rows[MEASURED] = rows["gbs"] * rows["seq_len"] / (rows["measured_ms"] / 1e3) / \
        rows["num_gpus"]
    rows["first_stage_layers"] = rows["last_stage_layers"] = 0
    rows["job"] = rows[list(JOB)].astype(int).astype(str).apply(
        lambda r: f"GPT h{r['hidden']} l{r['layers']} · a100 × {r['num_gpus']} · gbs "
                  f"{r['gbs']}", axis=1)
    rows["source_set"] = "vtrain-multi" if multi else "vtrain-single"
    return rows


def megatron_ci_rows(path: Path, predictor) -> pd.DataFrame:
    """Megatron-LM functional tests mapped as `memory_validation.py` maps them, with job,
    layout, measured and predicted throughput."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from memory_validation import map_row, world_sizes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    frame = pd.read_csv(path)
    world = world_sizes(frame)
    kept = []
    for i, row in frame.iterrows():
        mapped = map_row(row, world)
        if isinstance(mapped, str) or not row["iter_time_median_s"] > 0:
            continue
        m, c = mapped.model, mapped.config
        # The job's model: the architecture without the vocabulary, which Megatron pads to a
        # multiple of 128 × tp (one model, whatever its layout).
        arch = (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads,
                m.num_kv_heads, m.num_experts, m.moe_top_k, m.gated_mlp,
                m.position_embedding, m.tied_embeddings, m.attention_bias)
        kept.append({"index": i, "model": m, "gpu": mapped.platform, **c.to_dict(),
                     "num_gpus": c.world_size, "moe": m.is_moe,
                     "job": (f"{row['model']} {_arch_name(m)} #{_digest(arch)} · "
                             f"{row['platform']} ({row['env']}) × {c.world_size} · gbs {c.gbs}"
                             f" · seq {c.seq_len} · {c.precision}"),
                     "arch": (*arch, m.vocab_size),
                     MEASURED: c.gbs * c.seq_len / row["iter_time_min_s"] / c.world_size})
    if not kept:
        raise ValueError(f"{path}: no row maps to a model and layout")
    rows = pd.DataFrame(kept).set_index("index")
    # One ModelSpec object per architecture: the Predictor groups rows by model object.
    first = rows.groupby("arch")["model"].transform("first")
    rows["model"] = first
    inputs = rows.drop(columns=["moe", "job", "arch", MEASURED])
    rows = rows.assign(**_predict(inputs, predictor), source_set="megatron_ci")
    return rows


def _digest(arch: tuple) -> str:
    """A short name for an architecture, the same on every run (`hash` of a str is not)."""
    import hashlib

    return hashlib.sha256(repr(arch).encode()).hexdigest()[:4]


def _arch_name(model) -> str:
    moe = f" {model.num_experts}e top{model.moe_top_k}" if model.is_moe else ""
    return f"l{model.num_layers} h{model.hidden_size}{moe}"


# ---- ranking -------------------------------------------------------------------------------
def layouts(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (job, layout): median measured and predicted throughput of the rows advisor
    sees as that layout, how many rows it merges, and how far apart their measurements lie
    (`spread_pct`, fastest / slowest − 1: the same layout run twice, or by two MLPerf
    submitters on their own systems; 0 for one run)."""
    keys = ["source_set", "job", *LAYOUT]
    table = rows.assign(**{k: rows[k].astype(str) for k in LAYOUT})
    return (table.groupby(keys, sort=False)
            .agg(**{MEASURED: (MEASURED, "median"), PREDICTED: (PREDICTED, "median"),
                    "moe": ("moe", "first"), "refused": ("refused", "max"),
                    "runs": (MEASURED, "size"),
                    "spread_pct": (MEASURED, lambda m: 100 * (m.max() / m.min() - 1))})
            .reset_index())


def rank_jobs(table: pd.DataFrame) -> pd.DataFrame:
    """Per job with at least two layouts: source, job, moe, runs, layouts, τ, regret, the
    larger repeat spread of the fastest layout and advisor's pick (`layouts`: a regret within
    it is within what the same layout measured on its several runs), how many layouts advisor
    refuses (`validate`'s rules) and how many it predicts not to fit."""
    out = []
    for (source, job), part in table.groupby(["source_set", "job"], sort=False):
        if len(part) < 2:
            continue
        predicted, measured = part[PREDICTED].to_numpy(), part[MEASURED].to_numpy()
        r = rank(predicted, measured)
        pair = part.iloc[[int(np.argmax(measured)), advisors_pick(predicted, measured)]]
        out.append({"source": source, "job": job, "moe": bool(part["moe"].iloc[0]),
                    "runs": int(part["runs"].sum()), "layouts": r.num_layouts,
                    "kendall_tau": r.kendall_tau, "top1_regret_pct": 100 * r.top1_regret,
                    "repeat_spread_pct": float(pair["spread_pct"].max()),
                    "refused": int(part["refused"].sum()),
                    "not_fit": int(((part[PREDICTED] <= 0) & ~part["refused"]).sum())})
    return pd.DataFrame(out)


MISS_COLUMNS = ("source", "job", "regret_pct", "repeat_spread_pct", "fastest",
                "fastest_meas/pred", "picked", "picked_meas/pred")


def misses(table: pd.DataFrame) -> pd.DataFrame:
    """Per job over the regret goal: the fastest measured layout and advisor's pick (the
    `LAYOUT` fields that differ between the two), each with measured / predicted throughput
    (> 1: it ran faster than predicted), so a miss shows which layout the model misjudged,
    and the larger of the two layouts' repeat spreads (`layouts`)."""
    out = []
    for (source, job), part in table.groupby(["source_set", "job"], sort=False):
        if len(part) < 2:
            continue
        r = rank(part[PREDICTED].to_numpy(), part[MEASURED].to_numpy())
        if r.top1_regret <= REGRET_GOAL:
            continue
        best = part.loc[part[MEASURED].idxmax()]
        pick = part.iloc[advisors_pick(part[PREDICTED].to_numpy(), part[MEASURED].to_numpy())]
        differ = [k for k in LAYOUT if best[k] != pick[k]]
        out.append({"source": source, "job": job, "regret_pct": 100 * r.top1_regret,
                    "repeat_spread_pct": max(best["spread_pct"], pick["spread_pct"]),
                    "fastest": _settings(best, differ), "fastest_meas/pred": _ratio(best),
                    "picked": _settings(pick, differ), "picked_meas/pred": _ratio(pick)})
    return pd.DataFrame(out, columns=MISS_COLUMNS)


def _settings(row: pd.Series, keys: list[str]) -> str:
    return " ".join(f"{k}={row[k]}" for k in keys)


def _ratio(row: pd.Series) -> float:
    """Measured / predicted throughput (NaN where advisor predicts it does not fit)."""
    return row[MEASURED] / row[PREDICTED] if row[PREDICTED] > 0 else float("nan")


def summary(jobs: pd.DataFrame) -> pd.DataFrame:
    """Median τ and jobs within the regret goal, overall and per source, and how many of
    those over it miss by no more than their layouts' repeat spread."""
    def one(part: pd.DataFrame) -> dict:
        regret = part["top1_regret_pct"]
        ok = regret <= 100 * REGRET_GOAL
        return {"jobs": len(part), "moe_jobs": int(part["moe"].sum()),
                "median_tau": part["kendall_tau"].median(),
                "median_regret_pct": regret.median(), "max_regret_pct": regret.max(),
                "regret_le_5pct": f"{int(ok.sum())}/{len(part)}",
                "over_within_spread": int((~ok & (regret <= part["repeat_spread_pct"])).sum())}
    rows = {source: one(part) for source, part in jobs.groupby("source", sort=False)}
    rows["all"] = one(jobs)
    return pd.DataFrame.from_dict(rows, orient="index")


def collect(reference: Path, predictor, *, across_releases: bool = False) -> pd.DataFrame:
    """Every source's rows, one frame with the columns `layouts` needs."""
    keep = ["source_set", "job", "moe", "refused", MEASURED, PREDICTED, *LAYOUT]
    parts = [published_rows(reference, predictor, across_releases=across_releases),
             vtrain_rows(reference / "vtrain" / "ground_truth_single.csv", predictor,
                         multi=False),
             vtrain_rows(reference / "vtrain" / "ground_truth_multi.csv", predictor,
                         multi=True),
             megatron_ci_rows(reference / "megatron_ci" / "runs.csv", predictor)]
    return pd.concat([p[keep] for p in parts], ignore_index=True)


def plots(table: pd.DataFrame, jobs: pd.DataFrame, folder: Path) -> list[Path]:
    """The figures of `--plots`: predicted against measured tokens/s/GPU of every layout of a
    ranked job (`layouts`; those predicted not to fit or refused have no point), one colour per
    source, and each job's top-1 regret (`rank_jobs`) per source against `REGRET_GOAL`."""
    figures = _plots.Figures(folder)
    ranked = table.merge(jobs[["source", "job"]], left_on=["source_set", "job"],
                         right_on=["source", "job"])
    drawn = ranked[ranked[PREDICTED] > 0]
    order = list(jobs["source"].unique())
    tau = jobs.groupby("source")["kendall_tau"].median()
    labels = {s: f"{s} ({int((drawn['source'] == s).sum())} layouts; median τ {tau[s]:.2f})"
              for s in order}
    fig, (ax,) = _plots.figure(height_in=7.6)
    _plots.predicted_vs_measured(ax, drawn[MEASURED], drawn[PREDICTED], drawn["source"],
                                 unit="tokens/s per GPU", labels=labels, order=order, size=12,
                                 alpha=0.6)
    _plots.legend_below(ax, title="source (layouts of ranked jobs; median Kendall τ per job)",
                        ncol=2)
    ax.set_title(f"Every layout of the {len(jobs)} jobs measured in two or more layouts\n"
                 f"({len(ranked) - len(drawn)} predicted not to fit or refused: not drawn)",
                 fontsize=10)
    paths = [figures.save(fig, "ranking-predicted-vs-measured",
                          f"Predicted against measured tokens/s per GPU (log-log) of the "
                          f"{len(drawn)} layouts of jobs measured in two or more layouts, one "
                          f"colour per source, with the y = x and ±20 % lines")]
    ok = jobs.groupby("source")["top1_regret_pct"].apply(
        lambda r: f"{int((r <= 100 * REGRET_GOAL).sum())}/{len(r)}")
    names = {s: f"{s}\n{ok[s]} ≤ {REGRET_GOAL:.0%}" for s in order}
    fig, (ax,) = _plots.figure(height_in=4.8)
    _plots.box_by_bin(ax, jobs["top1_regret_pct"], jobs["source"].map(names),
                      order=[names[s] for s in order], ylabel="top-1 regret (%)")
    ax.axhline(100 * REGRET_GOAL, color="tab:red", linestyle="--", linewidth=1,
               label=f"goal: {REGRET_GOAL:.0%}")
    ax.legend(fontsize=8, loc="upper left")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("source: jobs within the goal (jobs)")
    ax.set_title("Top-1 regret per job: how much faster the best-measured layout ran than "
                 "advisor's pick\nbox p25-p75 with the median, whiskers p10-p90, each job a dot",
                 fontsize=10)
    paths.append(figures.save(fig, "ranking-regret-by-source",
                              f"Top-1 regret (%) of the {len(jobs)} jobs measured in two or more "
                              f"layouts, per source, against the {REGRET_GOAL:.0%} goal: median, "
                              f"p25-p75 box, p10-p90 whiskers and every job"))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=REFERENCE_DIR)
    parser.add_argument("--analytical", action="store_true",
                        help="the analytical model alone (no surrogates)")
    parser.add_argument("--across-releases", action="store_true",
                        help="published and MLPerf jobs pool their releases (see above)")
    parser.add_argument("--jobs", action="store_true", help="print every job, not only MoE "
                        "jobs and those over the regret goal")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="also write the figures (PNG) into DIR (needs matplotlib)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from advisor import Predictor

    predictor = Predictor(None) if args.analytical else Predictor.load()
    table = layouts(collect(args.reference, predictor, across_releases=args.across_releases))
    jobs = rank_jobs(table)
    pd.set_option("display.width", 200, "display.max_colwidth", 90, "display.max_rows", 500)
    shown = jobs if args.jobs else jobs[jobs["moe"] | (jobs["top1_regret_pct"] >
                                                      100 * REGRET_GOAL)]
    print(f"## jobs ({'all' if args.jobs else 'MoE and regret > 5 %'}; "
          f"{'analytical' if args.analytical else 'Predictor.load()'})\n")
    print(shown.round(3).to_string(index=False))
    missed = misses(table)
    print(f"\n## the {len(missed)} jobs over the regret goal: the fastest measured layout and "
          f"advisor's pick (the settings that differ), measured / predicted throughput of "
          f"each (> 1: ran faster than predicted)\n")
    print(missed.round(3).to_string(index=False))
    picked = missed.groupby(["source", "picked"]).size().sort_values(ascending=False)
    print("\nmisses by source and pick:\n")
    print("\n".join(line.rstrip() for line in picked.to_string().splitlines()))
    print("\n## summary\n")
    print(summary(jobs).round(3).to_string())
    if args.plots:
        for path in plots(table, jobs, args.plots):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
