"""The commit a benchmark ran at, for what it writes (fits, baselines): HEAD's short hash, with
`+changes` where the model's files differ from it (what it wrote then belongs to the commit
that lands them). Outside a checkout (docs/generate_validation.py runs each script on an export
of the commit) the commit it names in `ADVISOR_COMMIT`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def head(root: Path = ROOT) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=False).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return os.environ.get("ADVISOR_COMMIT", "unknown")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "advisor", "benchmarks")
    return f"{commit}+changes" if changed else commit
