"""Every `advisor ...` command the documentation site shows is run, its Python examples are
executed, and the site builds with `mkdocs build --strict`, so the docs cannot go stale.

The commands are read from docs/**/*.md with the README test's machinery
(`tests/test_readme_commands.py`: fenced shell blocks and inline code, placeholders,
NOT_RUNNABLE, outputs into a temporary directory, the checkout guarded against writes); a
command the README also shows runs there only. Each page's ```python blocks run together, in
order, as one script from the repository root. The validation pages must name the command and a
commit that exists, since they are generated (docs/generate_validation.py), never typed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from test_readme_commands import (
    DOCS,
    ROOT,
    Command,
    _advisor,
    _fences,
    argvs,
    cases,
    commands_in,
    readme_commands,
    run_command,
)

TIMEOUT_S = 900


def docs_commands() -> list[Command]:
    return commands_in(DOCS)


CASES = cases(docs_commands(), already=argvs(readme_commands()))


@pytest.mark.slow  # about 40 commands: recommend searches, a CPU campaign and a training
@pytest.mark.parametrize(("command", "not_runnable"), CASES)
def test_docs_command(command: Command, not_runnable: str | None, tmp_path, request):
    run_command(command, not_runnable, tmp_path, request)


def python_examples() -> list[tuple[str, str]]:
    """(page, its ```python blocks joined in order) for each page that has any."""
    out = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        blocks = ["\n".join(body) for _, lang, body in _fences(lines) if lang == "python"]
        if blocks:
            out.append((str(path.relative_to(ROOT)), "\n\n".join(blocks)))
    return out


@pytest.mark.slow  # loads the Predictor and runs a search: about 10 s per page on 2 cores
@pytest.mark.parametrize(("page", "code"), python_examples(), ids=lambda x: x[:40])
def test_docs_python_example(page: str, code: str, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{page}: its Python example failed:\n{done.stderr[-2000:]}"
    assert done.stdout.strip(), f"{page}: its Python example printed nothing"


def _missing_docs_tools() -> str | None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        try:
            if importlib.util.find_spec(module) is None:
                return module
        except ModuleNotFoundError:  # a parent package is missing
            return module
    return None


def test_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: every page in the nav exists and is in it, every link and
    anchor resolves, every `:::` API reference resolves to a documented object."""
    missing = _missing_docs_tools()
    if missing:
        pytest.skip(f"{missing} is not installed: pip install -e '.[docs]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    problems = [x for x in done.stderr.splitlines() if x.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(
        problems or done.stderr.splitlines()[-20:])
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "Predictor" in api and "predict_table" in api  # mkdocstrings rendered the docstrings
    assumptions = tmp_path / "site" / "models" / "assumptions" / "index.html"
    assert "placeholder" in assumptions.read_text(encoding="utf-8")
    assert "<!-- placeholders -->" not in assumptions.read_text(encoding="utf-8")


# ---- what the pages must hold ------------------------------------------------------------------

def test_docs_commands_are_found():
    texts = {c.text for c in docs_commands()}
    assert len(texts) >= 30
    assert "advisor recommend -m 70b -g 64 -p h200 --layout 'tp4 pp4 vp5 cp2'" in texts
    assert "advisor predict --input runs.csv --json" in texts
    assert "advisor evaluate --help" in texts
    assert not any(t.startswith(("pip", "python", "mkdocs")) or "&&" in t for t in texts)


def test_every_page_is_in_the_nav_and_every_command_page_exists():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for path in DOCS:
        page = str(path.relative_to(ROOT / "docs"))
        assert page in nav, f"docs/{page} is not in mkdocs.yml's nav"
    commands = subprocess.run([_advisor(), "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "COLUMNS": "100"}).stdout
    listed = re.findall(r"^\s{2}(\w[\w-]*)\s{2,}", commands.split("Commands:")[-1], re.M)
    guide = "\n".join(p.read_text(encoding="utf-8") for p in DOCS if "guide" in p.parts)
    assert listed, f"no commands in `advisor --help`:\n{commands}"
    for name in listed:
        assert re.search(rf"advisor {name}\b", guide), f"the user guide never shows advisor {name}"


def test_validation_pages_name_their_command_and_commit():
    pages = [p for p in DOCS if p.parent.name == "validation" and p.name != "index.md"]
    assert len(pages) >= 8
    for page in pages:
        text = page.read_text(encoding="utf-8")
        command = re.search(r"^\| command \| `(python benchmarks/[^`]+)`", text, re.M)
        commit = re.search(r"^\| commit \| `([0-9a-f]{12})`", text, re.M)
        assert command and commit, f"{page.name}: no command or commit row (regenerate it)"
        script = ROOT / command.group(1).split()[1]
        assert script.exists(), f"{page.name}: {script.name} does not exist"
        assert "```text" in text, f"{page.name}: no output block"
        if (ROOT / ".git").exists():  # a checkout (an sdist has no history to look in)
            known = subprocess.run(["git", "cat-file", "-e", f"{commit.group(1)}^{{commit}}"],
                                   cwd=ROOT, capture_output=True)
            assert known.returncode == 0, \
                f"{page.name}: commit {commit.group(1)} is not in this repository"
