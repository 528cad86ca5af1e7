"""Reading a file a user names, within bounds: a regular file (not a FIFO that blocks forever, nor
a device such as /dev/zero that never ends), no larger than what any real file of its kind is,
so a wrong path fails at once with one clear line instead of hanging or filling memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from advisor.core.errors import AdvisorError

MiB = 2**20
TOML_LIMIT_BYTES = 4 * MiB
"""A catalog, cluster or campaign TOML: the largest shipped one is under 20 KiB."""
JSON_LIMIT_BYTES = 16 * MiB
"""A Hugging Face config.json or an artifact's metadata: a few KiB in practice."""
TABLE_LIMIT_BYTES = 2048 * MiB
"""A CSV or Parquet table of runs (a million rows is about 200 MB)."""


def read_bounded(path: Path, *, limit_bytes: int, what: str,
                 error: type[AdvisorError] = AdvisorError) -> bytes:
    """The bytes of `path`, refusing anything but a regular file of at most `limit_bytes`.

    Raises:
        error: with the path, what it should be and the limit.
    """
    path = Path(path)
    check_regular(path, limit_bytes=limit_bytes, what=what, error=error)
    try:
        with open(path, "rb") as f:
            data = f.read(limit_bytes + 1)
    except OSError as e:
        raise error(f"{shown_path(path)}: cannot read ({e.strerror or e}).") from None
    if len(data) > limit_bytes:  # grew while we looked
        raise error(f"{shown_path(path)}: larger than {limit_bytes // MiB} MiB; a {what} is "
                    f"far smaller.")
    return data


def check_regular(path: Path, *, limit_bytes: int, what: str,
                  error: type[AdvisorError] = AdvisorError) -> None:
    """Refuse a path that is not a regular file of at most `limit_bytes` (see module)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{shown_path(path)}: no such file.") from None
    except (OSError, ValueError) as e:  # ValueError: an embedded NUL byte
        raise error(f"{str(path)[:200]!r}: cannot open ({getattr(e, 'strerror', None) or e})."
                    ) from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{shown_path(path)}: is a directory; give a {what} file.")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{shown_path(path)}: not a regular file (a device, FIFO or socket); "
                    f"give a {what} file.")
    if info.st_size > limit_bytes:
        raise error(f"{shown_path(path)}: {info.st_size / MiB:,.0f} MiB; a {what} larger than "
                    f"{limit_bytes // MiB} MiB is refused (real ones are far smaller).")


def check_output(path: Path, *, what: str, error: type[AdvisorError] = AdvisorError) -> None:
    """Refuse an output path that writing would hang on or cannot take: a FIFO (blocks until a
    reader comes), a socket, a directory. A missing file, a regular one (replaced) and a
    character device (/dev/null, /dev/stdout) are fine."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:  # a link loop, an embedded NUL byte
        raise error(f"{shown_path(path)}: cannot write ({getattr(e, 'strerror', None) or e})."
                    ) from None
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{shown_path(path)}: is a directory; give a {what} file name.")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISCHR(info.st_mode)):
        raise error(f"{shown_path(path)}: a FIFO, socket or block device; give a {what} file "
                    f"name (a FIFO would block until something reads it).")


def shown_path(path: Path | str) -> str:
    """A path as an error line shows it: as written, or quoted and escaped (`repr`) where it
    holds a newline or another character a terminal would not show as itself."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def check_output_dir(path: Path, *, what: str,
                     error: type[AdvisorError] = AdvisorError) -> None:
    """Refuse an output directory that exists as something else (a file, a FIFO, a device):
    checked before the work, not after minutes of it. A missing one is created later."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as e:
        raise error(f"{shown_path(path)}: cannot use as a directory "
                    f"({getattr(e, 'strerror', None) or e}).") from None
    if not stat.S_ISDIR(info.st_mode):
        raise error(f"{shown_path(path)}: exists and is not a directory; give a directory for "
                    f"the {what} (created if missing).")


def bundled_dir(package: str, checkout_dir: str) -> Path:
    """Where data shipped as a data-only package is: inside an installed wheel (`package`,
    e.g. advisor._models, a namespace package without __init__.py, so its location comes from
    the import system, not `resources.files`, whose MultiplexedPath is no filesystem path),
    else the checkout's `checkout_dir` beside the advisor package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / checkout_dir
