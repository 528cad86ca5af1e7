"""Every refusal is one `error:` line, whatever the user typed: a newline or a control
character in a path or a name is shown escaped, never breaks the line."""

import subprocess
import sys

import pytest

from advisor.cli.common import one_line


@pytest.mark.parametrize("args", [
    ["predict", "-m", "llama3-8b", "-g", "8", "-p", "h100", "--models", "{tmp}/new\nline"],
    ["predict", "-m", "{tmp}/a\rb\x1b[2J", "-g", "8", "-p", "h100"],
    ["dataset", "validate", "{tmp}/tab\there\nnext"],
])
def test_a_control_character_never_breaks_the_error_line(tmp_path, args):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "\x1b" not in done.stderr and "\r" not in done.stderr


def test_one_line_escapes_only_what_a_terminal_would_not_show():
    assert one_line("plain 'text' × 3 °C") == "plain 'text' × 3 °C"
    assert one_line("a\nb\tc\x00") == "a\\nb\\tc\\x00"


LONG = "a" * 300  # longer than any file name the file system takes (255 bytes on Linux)


@pytest.mark.parametrize("args, says", [
    (["catalog", "show", LONG], "no platform or model named 'aaaa"),
    (["catalog", "show", LONG + ".json"], "File name too long"),
    (["predict", "-m", LONG + ".json", "-p", "h100", "-g", "8"], "File name too long"),
    (["memory", "-m", f"{LONG}/config.json", "-p", "h100", "-g", "8"], "File name too long"),
    (["dataset", "show", LONG + ".parquet"], "File name too long"),
    (["collect", "--campaign", LONG, "--dry-run"], "File name too long"),
])
def test_a_name_too_long_for_a_file_is_refused_on_one_line(args, says):
    """The file system refuses the name (ENAMETOOLONG); advisor says so on one line, the name cut
    short, instead of a traceback."""
    done = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr and "(3" in done.stderr and LONG not in done.stderr
