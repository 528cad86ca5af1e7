"""Errors a user can trigger. The CLI maps every `AdvisorError` to one line and exit code 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AdvisorError(Exception):
    """Base class: a problem with the user's input that the message explains how to fix."""


class CatalogError(AdvisorError):
    """A catalog or override file is missing, malformed, or lacks a source for a number."""


class UnknownNameError(AdvisorError):
    """A model or platform name that the catalog does not know."""


class ConfigError(AdvisorError):
    """A parallel configuration that breaks a rule (the message names the rule and valid values)."""


def suggest(name: str, choices: Iterable[str], *, limit: int = 3) -> str:
    """Return ' Did you mean a, b?' for the closest names, or '' if none is close."""
    close = difflib.get_close_matches(name.lower(), sorted(set(choices)), n=limit, cutoff=0.5)
    return f" Did you mean {', '.join(close)}?" if close else ""


def shown(text: str, *, most: int = 80) -> str:
    """`text` as an error message shows it: quoted and escaped as `repr` does (control and
    invisible characters visible, one line), and cut to `most` characters."""
    if len(text) <= most:
        return repr(text)
    return repr(text[:most]) + f"... ({len(text):,} characters)"


def shown_value(value: object) -> str:
    """A value from a file as an error shows it: its type, and its repr cut short."""
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def first_line(error: BaseException, *, most: int = 160) -> str:
    """An exception as one short line: its message's first line, or its type where the
    message is empty (an `OSError` from a special file, a bare exception)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    text = str(error).strip()
    return text.splitlines()[0][:most] if text else type(error).__name__
