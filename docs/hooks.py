"""MkDocs hook: pages that list what the code holds, generated at build time so they cannot go
stale. `<!-- placeholders -->` in a page becomes a table of every catalog value whose source
says `placeholder:` (advisor/catalog/**/*.toml, read with tomllib; nothing is imported)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "advisor" / "catalog"
MARKER = "<!-- placeholders -->"


def _walk(node, path: tuple[str, ...]):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))
    elif isinstance(node, str) and node.strip().lower().startswith("placeholder"):
        yield path, node.strip()


def placeholders() -> list[tuple[str, str, str]]:
    """(file, key, why) for every value whose source is a placeholder, in file order."""
    rows = []
    for toml in sorted(CATALOG.rglob("*.toml")):
        data = tomllib.loads(toml.read_text(encoding="utf-8"))
        for path, text in _walk(data, ()):
            # The source sits under a `sources` table beside the value it describes.
            key = ".".join(p for p in path if p not in ("sources", "fixed_sources"))
            rows.append((str(toml.relative_to(ROOT)), key, text))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def placeholder_table() -> str:
    rows = placeholders()
    lines = [f"{len(rows)} values, generated from the catalog when this site was built.", "",
             "| file | value | why this number, until measured |", "|---|---|---|"]
    lines += [f"| `{f}` | `{k}` | {_cell(t)} |" for f, k, t in rows]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, placeholder_table())
    return markdown
