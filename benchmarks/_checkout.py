"""The commit a benchmark ran at, for what it writes (fits, baselines): HEAD's short hash, with
`+changes` where the model's files differ from it (what it wrote then belongs to the commit
that lands them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def head(root: Path = ROOT) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "advisor", "benchmarks")
    return f"{commit}+changes" if changed else commit
