"""Every `advisor ...` command README.md shows is run, so its examples cannot go stale.

The commands are read from README.md when the tests are collected: the ```bash / ```console /
```sh blocks (a line or an `&&`-chain; only the advisor part of `pip install . && advisor ...`
runs), and inline `advisor ...` code in tables and prose. In a table `\\|` is a literal `|`;
a synopsis such as `advisor predict --input runs.csv [--output out.csv \\| --json]` runs bare and
once with each alternative of each bracketed group; `advisor catalog platforms` / `models` is
also `advisor catalog models`. In prose a bare `advisor train` names the subcommand: it gets
`--help`. Placeholders become files the checkout has (PLACEHOLDERS);
every output path, given or implied by a default that writes into the checkout, goes to a
temporary directory, and a command that changes datasets/, models/ or runs/ there fails.
NOT_RUNNABLE lists the few commands that cannot run here, with the reason.

Each runs the installed `advisor` in a subprocess from the repository root and must exit 0 with
output on stdout (valid JSON for `--json`). `tests/test_docs_commands.py` runs the commands of
docs/**/*.md with the same machinery (`commands_in`, `cases`, `run_command`).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMEOUT_S = 900  # one command; `advisor train` takes about 2 minutes on 2 busy cores
SHELL_LANGS = {"bash", "console", "sh", "shell"}

DOCS = sorted((ROOT / "docs").rglob("*.md"))  # the documentation site's pages

#: Command text (after placeholders are read as written) -> why this test cannot run it. A regex,
#: searched in the command; each must match a command of README.md or docs/
#: (test_not_runnable_is_current).
NOT_RUNNABLE = {
    r"^advisor evaluate(?! --help$)":
        "grouped cross-validation retrains the surrogate per fold: 13-50 minutes per split "
        "(docs/guide/train-evaluate.md)",
    r"--launcher slurm": "submits sbatch jobs: needs a Slurm cluster (tests/collectors/ runs "
                         "collect on the one-node cluster fixture)",
}

#: (option before it or None, placeholder) -> what runs instead. Paths are relative to ROOT;
#: "{reference}" is datasets/reference/published_runs.csv (the `reference_csv` fixture).
PLACEHOLDERS = {
    (None, "runs.csv"): "{reference}",  # any CSV of runs; the reference runs are one
    ("--vtrain", "FILE"): "datasets/reference/vtrain/ground_truth_single.csv",
    (None, "FILE"): "datasets/published.parquet",  # a dataset file the checkout has
    # A user's campaign and what collecting it wrote: the checkout has a campaign file
    # (the cpu-smoke template) but no campaign dataset; the MLPerf dataset stands in for one.
    (None, "my-sweep.toml"): "collectors/templates/cpu-smoke.toml",
    (None, "datasets/campaigns/my-sweep.parquet"): "datasets/mlperf.parquet",
    (None, "my-campaign.parquet"): "datasets/mlperf.parquet",
    # `advisor train -o models-mine` wrote it into another command's temporary directory.
    ("--models", "models-mine"): "models",
}
#: Options whose value is a file the command writes: it goes to the temporary directory.
OUTPUT_OPTIONS = {"--plot", "--output", "-o"}
#: Commands whose default output is inside the checkout (a tracked file or a new one there):
#: (subcommand words, option, file name in the temporary directory) appended when not given.
DEFAULT_OUTPUTS = [
    (("train",), "-o", "models"),
    (("dataset", "import-published"), "-o", "published.parquet"),
    (("dataset", "import-mlperf"), "-o", "mlperf.parquet"),
    (("collect",), "--dataset", "campaign.parquet"),
    (("collect",), "--runs-dir", "runs"),
]
TMP = "{tmp}"


@dataclass
class Command:
    text: str  # as the page shows it (placeholders included), one alternative of a synopsis
    sources: list[str] = field(default_factory=list)  # FILE:LINE (kind)


# ---- extraction --------------------------------------------------------------------------------

def _fences(lines: list[str]):
    """(first line number, language, body lines) of each fenced block; None for other lines."""
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^\s*```(\S*)", lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1).lower(), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        out.append((start, lang, body))
        i += 1
    return out


def _shell_commands(start: int, body: list[str]):
    """(line, command) for each `advisor` part of each line or `&&`-chain of a shell block."""
    logical, first = "", None
    for n, line in enumerate(body, start + 1):
        first = first or n
        if line.rstrip().endswith("\\"):  # continued on the next line
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        text = re.sub(r"^\s*\$\s+", "", logical)  # a console prompt
        for part in text.split("&&"):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:  # unbalanced quotes: fine in a line that runs no advisor
                if re.search(r"(^|\s)advisor\s", part):
                    raise
                continue
            if words[:1] == ["advisor"]:
                yield first, shlex.join(words)
        logical, first = "", None


def _expand_synopsis(text: str) -> list[str]:
    """`advisor x [--a 1|2] [--b]` -> bare, then with each alternative of each group."""
    groups = re.findall(r"\[([^\]]*)\]", text)
    base = " ".join(re.sub(r"\[[^\]]*\]", " ", text).split())
    out = [base]
    for group in groups:
        alternatives = [a.strip() for a in group.split("|")]
        option = alternatives[0].split()[0] if len(alternatives[0].split()) == 2 else None
        for k, alt in enumerate(alternatives):
            if k and option and not alt.startswith("-"):
                alt = f"{option} {alt}"  # `--launcher local|slurm`: values of one option
            out.append(f"{base} {alt}")
    return out


def _inline_commands(text: str, lines: list[str]):
    """(line, command) for each inline `advisor ...` outside fenced blocks."""
    for m in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = " ".join(m.group(1).split())  # a code span may wrap across lines
        if not span.startswith("advisor "):
            continue
        n = text.count("\n", 0, m.start()) + 1
        row = lines[n - 1]
        if row.lstrip().startswith("|"):  # a table: `\|` is a literal `|`
            span = span.replace("\\|", "|")
            cell = re.split(r"(?<!\\)\|", row.strip())[1]
            fragments = re.findall(r"`([^`]+)`", cell)
            if fragments and fragments[0] == m.group(1):
                # `advisor catalog platforms` / `models`: a fragment replaces the last word
                head = span.split()[:-1]
                for frag in fragments[1:]:
                    if not frag.startswith("advisor"):
                        yield n, " ".join([*head, *frag.split()])
            for alternative in _expand_synopsis(span):
                yield n, alternative
        elif len(span.split()) == 2 and not span.split()[1].startswith("-"):
            yield n, f"{span} --help"  # prose naming a subcommand (`advisor train`)
        else:
            yield n, span


def readme_commands() -> list[Command]:
    return commands_in([README])


def commands_in(paths: list[Path]) -> list[Command]:
    """Every `advisor ...` command the Markdown files show, in order, each text once (with
    every place it appears)."""
    found: dict[str, Command] = {}
    for path in paths:
        _commands_of(path, found)
    return list(found.values())


def _commands_of(path: Path, found: dict[str, Command]) -> None:
    raw = path.read_text(encoding="utf-8")
    lines = raw.splitlines()
    name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name

    def add(text: str, source: str) -> None:
        found.setdefault(text, Command(text)).sources.append(source)

    blanked = list(lines)
    for start, lang, body in _fences(lines):
        for k in range(start - 1, start + len(body) + 1):
            if k < len(blanked):
                blanked[k] = ""  # keep the line numbers for the inline pass
        if lang in SHELL_LANGS:
            for n, command in _shell_commands(start, body):
                add(command, f"{name}:{n} (```{lang})")
    for n, command in _inline_commands("\n".join(blanked), lines):
        add(command, f"{name}:{n} (inline)")


# ---- turning a README command into an argv -----------------------------------------------------

def _not_runnable(text: str) -> str | None:
    return next((why for pattern, why in NOT_RUNNABLE.items() if re.search(pattern, text)), None)


def resolve(text: str) -> tuple[list[str], list[str]]:
    """The argv to run (placeholders filled, outputs under {tmp}) and the outputs it must write."""
    words = shlex.split(text)
    argv, outputs = [], []
    for k, word in enumerate(words):
        before = words[k - 1] if k else None
        if word == "...":
            continue  # "and more of the same"
        if (before, word) in PLACEHOLDERS or (None, word) in PLACEHOLDERS:
            word = PLACEHOLDERS.get((before, word), PLACEHOLDERS.get((None, word)))
        elif re.fullmatch(r"[A-Z_]{3,}|<[^>]*>", word) or "<" in word:
            raise ValueError(f"{text!r}: placeholder {word!r} has no entry in PLACEHOLDERS")
        if before in OUTPUT_OPTIONS and not word.startswith("-"):
            word = f"{TMP}/{Path(word).name}"
            outputs.append(word)
        argv.append(word)
    sub = [w for w in argv[1:3] if not w.startswith("-")]
    for words_of, option, name in DEFAULT_OUTPUTS:
        if tuple(sub[:len(words_of)]) == words_of and "--help" not in argv and not any(
                w == option or (option == "-o" and w == "--output") for w in argv):
            argv += [option, f"{TMP}/{name}"]
    return argv, outputs


def cases(commands: list[Command], *, already: set[tuple[str, ...]] = frozenset()):
    """pytest params (command, why not runnable) for each distinct argv; argvs in `already`
    (run by another test) are left out."""
    out, seen = [], {}
    for command in commands:
        why = _not_runnable(command.text)
        marks = []
        if why is None:
            argv, _ = resolve(command.text)
            key = tuple(argv)
            if key in already:
                continue
            if key in seen:  # e.g. `advisor train -o models` is `advisor train` here
                seen[key].sources += [f"{s} as {command.text!r}" for s in command.sources]
                continue
            seen[key] = command
            if "--plot" in argv:
                marks.append(pytest.mark.plot)
            if argv[1] == "collect" and "--dry-run" not in argv and "--help" not in argv:
                marks.append(pytest.mark.torch)  # torchrun (the collect extra)
        out.append(pytest.param(command, why, id=command.text, marks=marks))
    return out


def argvs(commands: list[Command]) -> set[tuple[str, ...]]:
    """The argvs these commands run (the runnable ones)."""
    return {tuple(resolve(c.text)[0]) for c in commands if _not_runnable(c.text) is None}


CASES = cases(readme_commands())


def _advisor() -> str:
    """The entry point installed beside this interpreter (the venv's), else the one on PATH."""
    here = Path(sys.executable).parent / "advisor"
    found = str(here) if here.exists() else shutil.which("advisor")
    if not found:
        pytest.fail("the advisor entry point is not installed (pip install -e .)")
    return found


def _error_line(out: str, err: str) -> str:
    lines = [x.strip() for x in (err + "\n" + out).splitlines() if x.strip()]
    errors = [x for x in lines if x.lower().startswith("error")]
    return (errors or lines or ["(no output)"])[-1]


@pytest.mark.slow  # about 30 commands, CPU campaigns and a training among them
@pytest.mark.parametrize(("command", "not_runnable"), CASES)
def test_readme_command(command: Command, not_runnable: str | None, tmp_path, request):
    run_command(command, not_runnable, tmp_path, request)


def run_command(command: Command, not_runnable: str | None, tmp_path, request) -> None:
    """Run one shown command as the module docstring says, or skip it with its reason."""
    if not_runnable:
        pytest.skip(f"not runnable here: {not_runnable}")
    argv, outputs = resolve(command.text)
    if "{reference}" in argv:
        argv[argv.index("{reference}")] = str(request.getfixturevalue("reference_csv"))
    argv = [_advisor(), *(w.replace(TMP, str(tmp_path)) for w in argv[1:])]
    watched = _checkout_outputs()
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command.text}: still running after {TIMEOUT_S} s")
    shown = f"{command.text}  [{', '.join(command.sources)}]\n$ {shlex.join(argv)}"
    assert done.returncode == 0, (
        f"{shown}\nexit {done.returncode}: {_error_line(done.stdout, done.stderr)}")
    assert done.stdout.strip(), f"{shown}\nprinted nothing on stdout"
    if "--json" in argv:
        try:
            json.loads(done.stdout)
        except json.JSONDecodeError as e:
            pytest.fail(f"{shown}\n--json printed invalid JSON ({e}): {done.stdout[:200]!r}")
    for output in outputs:
        path = Path(output.replace(TMP, str(tmp_path)))
        assert path.exists(), f"{shown}\nwrote no {path.name}"
    after = _checkout_outputs()
    changed = sorted(k for k in watched.keys() | after.keys() if watched.get(k) != after.get(k))
    assert not changed, f"{shown}\nwrote into the checkout (or something else did meanwhile): " \
                        f"{', '.join(changed)}"


def _checkout_outputs() -> dict[str, tuple[int, int]]:
    """What a command writing its default outputs would change: the top-level entries and every
    file under datasets/, models/ and runs/ (size, mtime)."""
    state = {p.name: (0, 0) for p in ROOT.iterdir()}
    for top in ("datasets", "models", "runs"):
        for p in (ROOT / top).rglob("*") if (ROOT / top).is_dir() else ():
            if p.is_file():
                st = p.stat()
                state[str(p.relative_to(ROOT))] = (st.st_size, st.st_mtime_ns)
    return state


# ---- the extraction itself --------------------------------------------------------------------

def test_readme_commands_are_found():
    texts = {c.text for c in readme_commands()}
    assert len(texts) >= 10  # one example per command
    assert "advisor recommend --model 70b --gpus 64 --platform h200" in texts  # quick start chain
    assert "advisor collect --campaign paper-h200-parallelism --dry-run" in texts
    assert "advisor train -o models-new" in texts
    assert not any(t.startswith(("pip", "python", "mkdocs")) or "&&" in t for t in texts)


def test_readme_test_command_is_what_ci_runs():
    """The README's test command is the command `.ci/run` runs (after making its venv)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    shown = [line for _, lang, body in _fences(README.read_text(encoding="utf-8").splitlines())
             if lang in SHELL_LANGS for line in body if "pytest" in line]
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert ci.startswith("pip install ") and "mkdocs build --strict" in ci
    assert shown and shown[0].strip() == venv + ci


def test_extraction_of_tables_synopses_prose_and_chains(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "| command | what |\n|---|---|\n"
        "| `advisor catalog platforms` / `models` | the catalog |\n"
        "| `advisor predict --input runs.csv [--output out.csv \\| --json]` | rows |\n\n"
        "Run `advisor train` to refit; `advisor space -m 8b -g 8 -p h100` counts.\n\n"
        "```bash\npip install . && advisor recommend -m 8b \\\n    -g 8 -p h100  # comment\n```\n"
        "```console\n$ advisor memory -m 8b -g 8 -p h100\nit's output, not a command\n```\n"
        "```text\nadvisor predict -m 8b   (output: never run)\n```\n", encoding="utf-8")
    texts = [c.text for c in commands_in([page])]
    assert sorted(texts) == sorted([
        "advisor catalog platforms", "advisor catalog models",
        "advisor predict --input runs.csv", "advisor predict --input runs.csv --output out.csv",
        "advisor predict --input runs.csv --json", "advisor train --help",
        "advisor space -m 8b -g 8 -p h100", "advisor recommend -m 8b -g 8 -p h100",
        "advisor memory -m 8b -g 8 -p h100"])


def test_not_runnable_is_current():
    """Each entry still matches a command of the README or the docs (an entry for a removed
    example would silently skip a new one)."""
    texts = [c.text for c in commands_in([README, *DOCS])]
    for pattern in NOT_RUNNABLE:
        assert any(re.search(pattern, t) for t in texts), f"NOT_RUNNABLE {pattern!r} matches none"


def test_outputs_go_to_the_temporary_directory():
    assert resolve("advisor train -o models") == (["advisor", "train", "-o", "{tmp}/models"],
                                                  ["{tmp}/models"])
    assert resolve("advisor train")[0] == ["advisor", "train", "-o", "{tmp}/models"]
    argv, outputs = resolve("advisor recommend -m 70b -g 64 -p h200 --json --plot front.png")
    assert argv[-2:] == ["--plot", "{tmp}/front.png"] and outputs == ["{tmp}/front.png"]
    assert resolve("advisor dataset validate FILE")[0][-1] == "datasets/published.parquet"
    with pytest.raises(ValueError, match="placeholder"):
        resolve("advisor dataset show <your-file>")
