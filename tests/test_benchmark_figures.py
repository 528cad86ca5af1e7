"""`--plots DIR` of the validation benchmarks (`benchmarks/_plots.py`): each writes its PNGs and
lists them, with their alt text, in figures.json, which `docs/generate_validation.py` embeds.
The fast benchmarks run as the page runs them; few_shot.py (minutes of refits) draws its
figure from a small table of results of the shape its loop produces. The refit gate's, the
power model's and the memory model's figures are tested beside their models
(tests/learn/test_gate.py, tests/perf/test_memory.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmark_scripts import BENCHMARKS, load_benchmark

pytestmark = pytest.mark.plot

ROOT = BENCHMARKS.parent


def _drawn(folder: Path) -> list[dict[str, str]]:
    """figures.json of `folder`, each PNG it lists checked: a PNG of tens of kB."""
    index = json.loads((folder / "figures.json").read_text(encoding="utf-8"))
    assert index, "figures.json lists no figure"
    for figure in index:
        data = (folder / figure["file"]).read_bytes()
        assert data[:4] == b"\x89PNG" and 5_000 < len(data) < 120_000, figure["file"]
        assert len(figure["alt"]) > 40
    assert sorted(p.name for p in folder.glob("*.png")) == sorted(f["file"] for f in index)
    return index


def _run(script: str, folder: Path) -> str:
    done = subprocess.run([sys.executable, f"benchmarks/{script}.py", "--plots", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize(("script", "files"), [
    ("gemm_check", ["gemm-predicted-vs-measured.png"]),
    ("collective_check", ["collectives-predicted-vs-measured.png",
                          "collectives-error-by-size.png"]),
    ("thermal_validation", ["thermal-fit-and-slowest.png"]),
    ("campaign_check", ["campaign-h200-single.png"]),
    ("power_probe", ["power-probe-escaped-and-clock.png"]),
    ("layout_ranking", ["ranking-predicted-vs-measured.png", "ranking-regret-by-source.png"]),
])
def test_plots_flag_writes_the_figures_beside_the_tables(script, files, tmp_path):
    stdout = _run(script, tmp_path)
    assert stdout.strip(), "the tables are still printed"
    assert [f["file"] for f in _drawn(tmp_path)] == files


def test_gemm_points_are_the_scored_rows():
    # The figure's points are the rows `score_table` scores: the same median error per table.
    from advisor.perf import gemm_fit
    from advisor.perf.gemm import load_kernel_table

    bench = load_benchmark("gemm_check")
    tables = gemm_fit.load_tables()
    kernels = load_kernel_table()
    points = bench.table_points(tables, kernels)
    score = gemm_fit.score_table(tables, kernels)
    assert len(points) == score["rows"].sum()
    error = (points["measured"] / points["predicted"] - 1).abs() * 100
    medians = error.groupby(points["device"]).median()
    for row in score.itertuples():
        assert medians[f"{row.platform} {row.format}"] == pytest.approx(row.median_ape_pct)


def _few_shot_results() -> pd.DataFrame:
    """Rows as few_shot.py's loop appends them: three stacks, k = 0, 2, 4, 8, two seeds."""
    rng = np.random.default_rng(0)
    rows = []
    for stack in ("series a | h100", "series b | h100", "series c | a100"):
        for k in (0, 2, 4, 8):
            for strategy in ("none",) if k == 0 else ("targeted", "random"):
                for seed in (0,) if k == 0 else (0, 1):
                    scored = 20 - k
                    rows.append({"stack": stack, "rows": 20, "k": k, "strategy": strategy,
                                 "seed": seed, "mape": 20 / (1 + k) + rng.uniform(0, 5),
                                 "inside": int(rng.integers(scored // 2, scored + 1)),
                                 "scored": scored, "regrets": list(rng.uniform(0, 0.05, 3))})
    return pd.DataFrame(rows)


def test_few_shot_figure_is_drawn_from_the_summary(tmp_path):
    bench = load_benchmark("few_shot")
    results = _few_shot_results()
    summary = bench.summarise(results)
    paths = bench.plots(results, summary, tmp_path)
    assert [p.name for p in paths] == ["few-shot-against-k.png"]
    assert [f["file"] for f in _drawn(tmp_path)] == ["few-shot-against-k.png"]


def test_calibration_in_sample_figures(tmp_path):
    # `calibrate.py --no-loso --plots DIR` (the calibration page): the gate's first two figures
    # for the in-sample predictions, named fit-*; the shipped calibration's predictions stand
    # in for the refit's (a minute).
    from advisor.learn.fit import load_reference, predict_reference
    from advisor.perf.calibration import load_calibration

    calibrate = load_benchmark("calibrate")
    ref = load_reference(calibrate.REFERENCE_DIR / "published_runs.csv",
                         calibrate.REFERENCE_DIR / "mlperf" / "mlperf_runs.csv")
    predicted = predict_reference(ref, load_calibration())
    paths = calibrate.gate_plots(ref.rows, predicted, None, tmp_path, prefix="fit",
                                 how=calibrate.IN_SAMPLE)
    assert [p.name for p in paths] == ["fit-predicted-vs-measured.png", "fit-error-by-gpus.png"]
    index = _drawn(tmp_path)
    assert "every run fitted at once" in index[0]["alt"]


def test_a_benchmark_on_an_export_names_the_commit_it_was_given(tmp_path, monkeypatch):
    """docs/generate_validation.py runs each script on `git archive` output, where git knows no
    HEAD: what the script prints as its commit is the one the page names, not "unknown"."""
    checkout = load_benchmark("_checkout")
    assert checkout.head() not in ("", "unknown")
    monkeypatch.setenv("ADVISOR_COMMIT", "0abc123")
    assert checkout.head(tmp_path) == "0abc123"
    monkeypatch.delenv("ADVISOR_COMMIT")
    assert checkout.head(tmp_path) == "unknown"


def test_few_shot_per_stack_table_reads_the_draws_it_summarises():
    bench = load_benchmark("few_shot")
    results = _few_shot_results()
    table = bench.by_stack(results, {"series a | h100": 3.0}, (0, 2, 4, 8))
    assert list(table["stack"]) == sorted(
        table["stack"], key=lambda s: table.set_index("stack").loc[s, "MAPE % k=4"])
    for stack, row in table.set_index("stack").iterrows():
        draws = results[(results["stack"] == stack) & (results["k"] == 4)
                        & (results["strategy"] == "targeted")]
        assert row["MAPE % k=4"] == pytest.approx(round(draws["mape"].mean(), 1))
        inside = draws["inside"].sum() / draws["scored"].sum()
        assert row["coverage % k=4"] == round(100 * inside)
        regrets = np.concatenate(draws["regrets"].to_list())
        assert row["regret <= 2% % k=4"] == pytest.approx(
            round(100 * (regrets <= 0.02).mean(), 1))
    assert table["jobs"].tolist() == [3, 3, 3]
    assert table.set_index("stack").loc["series a | h100", "floor %"] == 3.0
    assert table.set_index("stack")["floor %"].isna().sum() == 2
