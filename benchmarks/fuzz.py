"""Fuzz the `advisor` command with generated inputs of eight kinds and print the table the docs
quote: per kind, inputs tried, crashes (a traceback), hangs (over 30 s), escapes (an emitted
command that runs anything but its framework) and other broken promises (a refusal that is not
one `error:` line, JSON with NaN or Infinity, another exit code).

    python benchmarks/fuzz.py                         # 10,000 inputs, seed 0
    python benchmarks/fuzz.py --cases 500 --seed 3 --kinds cli,config
    python benchmarks/fuzz.py --replay 1234 --kinds csv   # one case again, with its output

The generators and the contract live in tests/fuzzing.py (tests/cli/test_fuzz.py runs a few hundred
in CI). Each case gets its own directory under a temporary root; the problems found are written
to fuzz-problems.jsonl (kind, seed, args, problem) for replay.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fuzzing import KINDS, make_case, run  # noqa: E402

SHARES = {"cli": 0.40, "csv": 0.14, "cluster": 0.10, "campaign": 0.07, "config": 0.11,
          "geometry": 0.08, "paths": 0.05, "emit": 0.05}
"""The first five roughly the mix of the hardening issues (5,000 / 1,800 / 1,200 / 900 / 1,500
of 10,400); then degenerate model shapes, special files for every path option, and hostile
model names through every emitter."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--replay", type=int, help="run the case with this seed and show it")
    parser.add_argument("--problems", type=Path, default=Path("fuzz-problems.jsonl"))
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kind(s) {', '.join(sorted(unknown))}; use {', '.join(KINDS)}")
    root = Path(tempfile.mkdtemp(prefix="advisor-fuzz-"))
    if args.replay is not None:
        case = make_case(kinds[0], random.Random(args.replay))
        outcome = run(case, root / "replay")
        print(json.dumps({"args": case.args, "files": {k: v[:2000].decode("utf-8", "replace")
                                                       for k, v in case.files.items()},
                          "code": outcome.code, "seconds": round(outcome.seconds, 2),
                          "problem": outcome.problem}, indent=2, ensure_ascii=False))
        print("--- stdout\n" + outcome.stdout[-3000:] + "\n--- stderr\n" + outcome.stderr[-3000:]
              + ("\n--- crash\n" + outcome.crash if outcome.crash else ""))
        return
    total = sum(SHARES[k] for k in kinds)
    plan = {k: max(1, round(args.cases * SHARES[k] / total)) for k in kinds}
    counts = {k: collections.Counter() for k in kinds}
    seconds = {k: [] for k in kinds}
    slowest: list[tuple] = []
    start = time.perf_counter()
    with args.problems.open("w") as problems:
        for kind in kinds:
            for i in range(plan[kind]):
                seed = args.seed * 1_000_003 + i
                case = make_case(kind, random.Random(seed))
                outcome = run(case, root / f"{kind}-{i}")
                seconds[kind].append(outcome.seconds)
                slowest.append((outcome.seconds, kind, seed, case.args))
                problem = outcome.problem
                counts[kind]["tried"] += 1
                counts[kind]["exit 0" if outcome.code == 0 else "exit 2"
                             if outcome.code == 2 else "exit other"] += 1
                if problem:
                    label = next((k for k in ("hang", "crash", "escape")
                                  if problem.startswith(k)), "other")
                    counts[kind][label] += 1
                    problems.write(json.dumps({"kind": kind, "seed": seed, "args": case.args,
                                               "problem": problem}, ensure_ascii=False) + "\n")
                    problems.flush()
                if (i + 1) % 250 == 0:
                    print(f"  {kind}: {i + 1}/{plan[kind]} ({time.perf_counter() - start:.0f} s)",
                          file=sys.stderr)
    print(f"\n{sum(c['tried'] for c in counts.values()):,} inputs, seed {args.seed}, "
          f"{time.perf_counter() - start:.0f} s")
    print("| kind | tried | answered (exit 0) | refused (exit 2) | crashes | hangs > 30 s | "
          "escapes | other | median s | max s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        c, s = counts[kind], sorted(seconds[kind])
        print(f"| {kind} | {c['tried']:,} | {c['exit 0']:,} | {c['exit 2']:,} | {c['crash']} | "
              f"{c['hang']} | {c['escape']} | {c['other']} | {s[len(s) // 2]:.2f} | {s[-1]:.1f} |")
    print("\nslowest: " + "; ".join(f"{s:.1f} s {kind} seed {seed} ({' '.join(a)[:90]})"
                                    for s, kind, seed, a in sorted(slowest)[-5:][::-1]))
    print(f"problems: {args.problems}")


if __name__ == "__main__":
    main()
