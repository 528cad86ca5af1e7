"""Regenerate the validation pages: run each `benchmarks/` script and write its output, with the
exact command, the commit and the time it took, to `docs/validation/<slug>.md`.

    python docs/generate_validation.py                  # every benchmark below (about 35 minutes)
    python docs/generate_validation.py --only power     # one page
    python docs/generate_validation.py --list

A benchmark that draws figures (`plots=True`: `--plots DIR`, `benchmarks/_plots.py`) runs with
`--plots` into the export; its PNGs are copied to `docs/validation/img/<slug>/` (replacing the
ones there) and shown on the page above the tables, with the alt text the script gave them.

The scripts run on a clean export of the commit (`git archive HEAD`), not on the working tree,
so the page's commit is exactly what produced the figures even while the checkout has
uncommitted edits (the reference data is part of it: `datasets/reference`).
Benchmarks too slow to rerun for every change (the expert check, grouped cross-validation with
`advisor evaluate`, the fuzzer: 15-50 minutes each) are quoted on `docs/validation/index.md`
with their command and the commit that recorded them; nothing here is typed by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "validation"
IMG = OUT / "img"


@dataclass(frozen=True)
class Benchmark:
    slug: str
    title: str
    args: tuple[str, ...]  # after `python`
    about: str  # one paragraph: what the figures are and how to read them
    plots: bool = False  # the script takes `--plots DIR` (PNG figures beside its tables)


BENCHMARKS = (
    Benchmark("calibration-loso", "Analytical model: error on sources never seen",
              ("benchmarks/calibrate.py",),
              "The calibration fit, then leave-one-source-out cross-validation (refit without "
              "each source, predict it; the MLPerf submissions are one source), by source, "
              "platform, model family and precision, Kendall τ within groups sharing model, "
              "platform and GPU count, whole publication series and platform families held "
              "out, and the vTrain single-node scores. About 20 minutes on 2 cores."),
    Benchmark("refit-gate", "Refit gate: each publication series held out, per cell",
              ("benchmarks/calibrate.py", "--gate"),
              "The analytical model refitted with each publication series held out whole (every "
              "release of one performance summary at once) and that series predicted, as error "
              "per platform family × precision × dense/MoE, beside the baseline of the last "
              "landed model (`benchmarks/baselines/loso_series_cells.json`). A change that "
              "raises a cell of 10 or more rows by more than a point fails the gate unless its "
              "commit says why (`--accept`). About 6 minutes.", plots=True),
    Benchmark("gemm", "GEMM kernels: against measured GEMM tables",
              ("benchmarks/gemm_check.py",),
              "The GEMM model's kernel parameters fitted per architecture and number format to "
              "XLA's measured GEMM tables (`datasets/reference/gemm`: 375 shapes each on H100, "
              "B200, MI300X and the MI350 series), the shipped parameters' error on every table "
              "(overall and on training-sized shapes), and torch's best matmul per device "
              "(MAMF) against the model at that shape, which no fit saw.", plots=True),
    Benchmark("collectives", "Collectives: against measured collective tables",
              ("benchmarks/collective_check.py",),
              "Collectives inside each platform's NVLink or xGMI domain: the constants fitted on "
              "A100's NCCL tables (what every platform used before) against each platform's own "
              "fit to XLA's collective tables (all-reduce, all-gather, reduce-scatter, "
              "all-to-all; groups of 2-8 GPUs per host, 4-72 in GB200/GB300 NVL72).",
              plots=True),
    Benchmark("calibration", "Analytical model: calibration fit (in-sample)",
              ("benchmarks/calibrate.py", "--no-loso"),
              "The per-family efficiencies fitted to the published and MLPerf runs and the "
              "in-sample error of tokens/s per GPU, plus the vTrain single-node scores. The "
              "honest (held-out) error needs the full run without `--no-loso`; its last result "
              "is quoted on the [validation page](index.md#quoted-slow-benchmarks).", plots=True),
    Benchmark("power", "Power model: fitted on measured power, each source held out",
              ("benchmarks/power_validation.py",),
              "The five power parameters fitted across chips on `datasets/reference/power` "
              "(Perseus, the GPT-3/BLOOM stage profiles, the Zeus power-limit sweeps), each "
              "source predicted by the others' fit; the H200 probe held out (its own fit beside "
              "the cross-chip level); the MLPerf node-energy rows are never in the fit.",
              plots=True),
    Benchmark("power-probe", "Power limit on an H200: what the probe measured",
              ("benchmarks/power_probe.py",),
              "One H200 at its 700 W limit (`datasets/probes/h200-power`, "
              "`collectors/power_probe.py`): per phase the settled speed, clock, power and "
              "temperature; GEMM speed against time since a burst began; the window after which "
              "the cap acts; per duty cycle the share of the cap's loss escaped, measured and "
              "as the model's window rule predicts; the kernel power ratios it measures.",
              plots=True),
    Benchmark("campaign", "Our own GPU campaigns against the model",
              ("benchmarks/campaign_check.py",),
              "Every campaign in `datasets/campaigns` (so far 16 runs on one H200: micro-batch × "
              "recompute × sequence length of a Llama-3-8B cut to 8 layers, PyTorch eager), "
              "predicted by the analytical model, which was fitted to none of them: throughput, "
              "memory, average power and SM clock per run, then the errors, Kendall τ and the "
              "top-1 regret. The measured clock is the mean of NVML samples, gaps included.",
              plots=True),
    Benchmark("thermal", "Thermal forms: fitted on the V100 fleet",
              ("benchmarks/thermal_validation.py",),
              "Temperature against power per slot, the clock's fall with temperature at the "
              "cap, and the GPU-to-GPU spreads behind the slowest-of-N loss, fitted on "
              "`datasets/reference/thermal`.", plots=True),
    Benchmark("expected-loss", "Expected losses: do power and heat change a decision?",
              ("benchmarks/expected_loss.py",),
              "For two jobs, the expected losses (power cap, slowest of N, heat) of the top "
              "layouts and how the ranking changes with them; one layout's temperatures across "
              "platforms and rooms; the highest average power against the limit."),
    Benchmark("paper-findings", "Research findings the model does not reproduce",
              ("benchmarks/paper_findings.py",),
              "The findings of Go et al. (MICRO 2025) that `tests/perf/test_paper_findings.py` "
              "marks as expected failures, with the model's figures over the paper's 15 "
              "layouts on its testbeds (`examples/paper-h200-cluster.toml`, "
              "`examples/paper-h100-cluster.toml`): 32 H200 against 64 H100 (with one NIC per "
              "GPU and per node), peak temperature against micro-batch, throttling against "
              "pipeline depth. Each xfail's reason names the mechanism these numbers show."),
    Benchmark("memory", "Memory model: against measured peaks",
              ("benchmarks/memory_validation.py",),
              "Megatron-LM's functional tests (`datasets/reference/megatron_ci`) mapped to models "
              "and layouts: advisor's allocated bytes (no reserve) on the rank that logs memory "
              "against `torch.cuda.max_memory_allocated`, the error overall and by feature "
              "(> 0 = under-predicted), the margin the measured under-prediction asks for "
              "(`recommend`'s default `--memory-margin` is sized from it), and how many runs "
              "that ran are predicted not to fit. The eager PyTorch accounting is checked on "
              "this project's own campaign instead ([campaigns](campaign.md)).", plots=True),
    Benchmark("few-shot", "Learning a new stack from a few of its runs",
              ("benchmarks/few_shot.py",),
              "Each publication series held out in turn (the calibration refitted without it); "
              "each platform of it is one stack, and vTrain's single- and multi-node A100 "
              "sweeps are two more (priced without the host time fitted to them): most of the "
              "jobs measured in several layouts are theirs. For k = 0, 2, 4, 8 of a stack's "
              "runs, chosen by the targeted strategy (the run whose measurement most lowers "
              "the expected regret of the recommendation) and at random (5 seeds), the "
              "stack's host time, compute, attention and communication factors and the "
              "offsets of the models they measured are fitted to them (the fit of training "
              "with `--stack`, its prior sized by the other series) and its other runs "
              "predicted: median "
              "MAPE over stacks, p10-p90 coverage (pooled over runs, and per stack), and "
              "top-1 regret per job (one model, GPU count, precision, sequence, batch and "
              "release) measured in two or more layouts; last, per table, the floor: every "
              "run of each stack fitted, each job's layout picked by prediction alone, and a "
              "table per stack of the targeted strategy (MAPE and coverage at each k, its "
              "jobs, its floor): where the median over stacks sits, and that vTrain's "
              "single-node sweeps hold most of the jobs the regret figures count. About "
              "10 minutes.", plots=True),
    Benchmark("wall-energy", "Energy at the wall: the power limit the energy objective chooses",
              ("benchmarks/wall_energy.py",),
              "recommend --objective energy for Llama 3 70B on 64 H100, then its power-limit "
              "trade-off recomputed by hand from its own predicted step times and board power: "
              "energy per token on the boards alone and at the wall (each GPU's share of the "
              "node's measured host power, times the PUE) at every limit tried, advisor's "
              "figure beside it, and the limit each minimum picks. Exits 1 if advisor's choice "
              "is not the hand calculation's. Seconds."),
    Benchmark("layout-ranking", "Layout ranking: the measured layouts of one job, in order?",
              ("benchmarks/layout_ranking.py",),
              "Every job in `datasets/reference` measured in two or more layouts (published and "
              "MLPerf runs of one release, vTrain's single- and multi-node A100 sweeps, "
              "Megatron-LM's functional tests): Kendall τ between predicted and measured "
              "throughput and the top-1 regret (how much faster the best-measured layout ran "
              "than advisor's pick), per job where a job is MoE or its regret exceeds 5 %; "
              "each job over 5 % with its fastest measured layout and advisor's pick and how "
              "far the model misjudged each (measured / predicted); then a summary per source. "
              "The Megatron-LM tests are correctness tests of tiny models, mostly bound by "
              "software overhead; read their regrets with that in mind.", plots=True),
    Benchmark("space-memory", "Configuration space and memory model: speed",
              ("benchmarks/space_memory.py",),
              "Whole spaces enumerated and memory-checked: valid and fitting counts, and "
              "configurations per second (medians of repeats)."),
    Benchmark("perf-model", "Analytical model: speed",
              ("benchmarks/perf_model.py",),
              "Whole spaces predicted by the analytical model, step time alone and with power, "
              "thermal and memory (target: at least 100,000 configurations/s)."),
    Benchmark("predictor-speed", "Predictor: speed",
              ("benchmarks/predictor_speed.py",),
              "What a scheduler sees: `import advisor`, `Predictor.load()`, predictions per "
              "second in batch and one configuration's latency."),
    Benchmark("recommend-speed", "recommend: speed from the shell",
              ("benchmarks/recommend_speed.py", "--repeats", "3"),
              "`advisor recommend` from process start to exit, as a user runs it (wall and CPU "
              "seconds, medians)."),
)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def _export(commit: str, into: Path) -> Path:
    """A clean copy of the commit's tree at into/main, with models/ where the import system
    finds it."""
    tree = into / "main"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    # advisor/_models is the wheel's name for models/ (pyproject's package-dir): without it the
    # editable install's finder would hand the checkout's models/ to the snapshot.
    (tree / "advisor" / "_models").symlink_to(tree / "models")
    return tree


def _alt(text: str) -> str:
    return " ".join(text.replace("[", "(").replace("]", ")").split())


def _figures(bench: Benchmark, figures: list[dict[str, str]]) -> tuple[str, str]:
    """(the table row naming the command that draws the figures, the figures as Markdown)."""
    if not bench.plots:
        return "", ""
    command = "python " + " ".join([*bench.args, "--plots", f"docs/validation/img/{bench.slug}"])
    row = f"| figures | `{command}` (the same run, drawing its rows) |\n"
    if not figures:
        return row, ""
    images = "\n\n".join(f"![{_alt(f['alt'])}](img/{bench.slug}/{f['file']})" for f in figures)
    return row, f"""
The figures are drawn by the same run from the rows of the tables below.

{images}
"""


def _page(bench: Benchmark, commit: str, subject: str, when: str, wall_s: float,
          output: str, returncode: int, load: float,
          figures: list[dict[str, str]] | None = None) -> str:
    command = "python " + " ".join(bench.args)
    status = "" if returncode == 0 else (
        f"\n!!! failure \"exit {returncode}\"\n"
        "    The script failed at this commit; its output is below.\n")
    figures_row, images = _figures(bench, figures or [])
    return f"""# {bench.title}

{bench.about}

| | |
|---|---|
| command | `{command}` (from the repository root) |
| commit | `{commit[:12]}` ({subject}) |
| run | {when} on {os.cpu_count()} CPU cores ({platform.machine()}, Python \
{platform.python_version()}; load average {load:.1f} at the start: other processes share the \
cores), {wall_s:.0f} s |
{figures_row}| regenerate | `python docs/generate_validation.py --only {bench.slug}` |
{status}{images}
Generated by running the command on a clean export of the commit; the output is unedited.

```text
{output.rstrip()}
```
"""


def _copy_figures(bench: Benchmark, drawn: Path) -> list[dict[str, str]]:
    """The figures the script listed in `drawn`/figures.json, copied to docs/validation/img/
    <slug>/ in place of the ones there."""
    target = IMG / bench.slug
    if target.exists():
        for old in target.glob("*.png"):
            old.unlink()
    index = drawn / "figures.json"
    if not index.exists():
        return []
    figures = json.loads(index.read_text(encoding="utf-8"))
    target.mkdir(parents=True, exist_ok=True)
    for figure in figures:
        shutil.copyfile(drawn / figure["file"], target / figure["file"])
    return figures


def run(bench: Benchmark, tree: Path, commit: str, subject: str) -> Path:
    env = {**os.environ, "PYTHONPATH": str(tree), "ADVISOR_COMMIT": commit[:7]}
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]  # speeds are only comparable at a similar load
    drawn = tree.parent / "plots" / bench.slug  # beside the export, not in it
    extra = ("--plots", str(drawn)) if bench.plots else ()
    start = time.monotonic()
    done = subprocess.run([sys.executable, *bench.args, *extra], cwd=tree, env=env,
                          capture_output=True, text=True)
    wall_s = time.monotonic() - start
    output = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.returncode else "")
    figures = _copy_figures(bench, drawn) if bench.plots else []
    path = OUT / f"{bench.slug}.md"
    path.write_text(_page(bench, commit, subject, when, wall_s, output, done.returncode, load,
                          figures), encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="a benchmark's slug (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the slugs and exit")
    parser.add_argument("--commit", default="HEAD", help="the commit to run (default HEAD)")
    args = parser.parse_args()
    if args.list:
        for b in BENCHMARKS:
            print(f"{b.slug:16} python {' '.join(b.args)}" + ("  (+ --plots)" if b.plots else ""))
        return 0
    chosen = [b for b in BENCHMARKS if not args.only or b.slug in args.only]
    unknown = set(args.only or ()) - {b.slug for b in BENCHMARKS}
    if unknown:
        print(f"error: unknown benchmark {sorted(unknown)}; see --list", file=sys.stderr)
        return 2
    commit = _git("rev-parse", args.commit)
    subject = _git("log", "-1", "--format=%cs: %s", commit)[:90].replace("|", "/").replace("`", "'")
    with tempfile.TemporaryDirectory(prefix="advisor-docs-") as tmp:
        tree = _export(commit, Path(tmp))
        for bench in chosen:
            path = run(bench, tree, commit, subject)
            print(f"{bench.slug}: wrote {path.relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
