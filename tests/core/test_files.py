"""Every file a user can name is read within bounds: a device, a FIFO, a directory, a huge or
non-UTF-8 or absurdly nested file gets one `error:` line and exit 2, at once (through the real
`advisor` entry point, in a subprocess, with a time limit)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from advisor.core.errors import AdvisorError
from advisor.core.files import MiB, read_bounded

ADVISOR = [sys.executable, "-m", "advisor"]


def _advisor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ADVISOR, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _one_error_line(r: subprocess.CompletedProcess, needle: str) -> None:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "config.json"
    os.mkfifo(path)
    return path


def test_read_bounded_refuses_devices_fifos_directories_and_huge_files(tmp_path, fifo):
    for path, needle in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                         (tmp_path, "is a directory"), (tmp_path / "nope", "no such file")):
        with pytest.raises(AdvisorError, match=needle):
            read_bounded(path, limit_bytes=MiB, what="TOML")
    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(3 * MiB)   # sparse: the size is what counts
    with pytest.raises(AdvisorError, match="3 MiB; a TOML larger than 1 MiB is refused"):
        read_bounded(big, limit_bytes=MiB, what="TOML")
    with pytest.raises(AdvisorError, match="cannot open"):
        read_bounded("bad\0name", limit_bytes=MiB, what="TOML")


@pytest.mark.parametrize("name,args", [
    ("config.json", ["recommend", "-m", "{}", "-g", "8", "-p", "h100"]),
    ("runs.csv", ["predict", "--input", "{}"]),
    ("cluster.toml", ["catalog", "show", "{}"]),
    ("campaign.toml", ["collect", "--campaign", "{}", "--dry-run"]),
])
def test_dev_zero_under_any_name_gets_one_error_line(tmp_path, name, args):
    path = tmp_path / name
    path.symlink_to("/dev/zero")
    _one_error_line(_advisor(*[a.format(path) for a in args]), "not a regular file")


def test_a_fifo_as_config_json_does_not_block(fifo):
    _one_error_line(_advisor("recommend", "-m", str(fifo), "-g", "8", "-p", "h100"),
                    "not a regular file")


@pytest.mark.parametrize("content,needle", [
    (b"\xff\xfe{\"num_hidden_layers\": 2}", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
])
def test_bad_config_json_bytes_get_one_error_line(tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    _one_error_line(_advisor("recommend", "-m", str(path), "-g", "8", "-p", "h100"), needle)


def test_bad_cluster_toml_bytes_get_one_error_line(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_bytes(b"base = \"h100\"\nname = \"\xff\"\n")
    _one_error_line(_advisor("catalog", "show", str(path)), "not UTF-8")


def test_an_output_that_would_hang_or_cannot_take_a_file_is_refused(tmp_path):
    import os

    from advisor.core.files import check_output

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(AdvisorError, match="FIFO, socket or block device"):
        check_output(fifo, what="CSV")
    with pytest.raises(AdvisorError, match="is a directory"):
        check_output(tmp_path, what="CSV")
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(AdvisorError, match="cannot write"):
        check_output(loop, what="CSV")
    existing = tmp_path / "old.csv"
    existing.write_text("x")
    for fine in (tmp_path / "new.csv", existing, type(tmp_path)("/dev/null")):
        check_output(fine, what="CSV")


def test_a_path_with_a_newline_stays_on_one_error_line(tmp_path):
    with pytest.raises(AdvisorError) as refused:
        read_bounded(tmp_path / "new\nline", limit_bytes=10, what="CSV")
    assert "\n" not in str(refused.value) and "new\\nline" in str(refused.value)


@pytest.mark.parametrize("args", [
    ["predict", "--input", "{reference}", "--output", "{fifo}"],
    ["recommend", "-m", "llama3-8b", "-g", "8", "-p", "h100", "--plot", "{fifo}"],
    ["train", "-o", "{file}"],
])
def test_an_output_option_refuses_what_would_hang_before_the_work(tmp_path, args):
    """A FIFO as --output/--plot blocked for ever; a file as train's -o failed after the
    training. Each is refused at once."""
    fifo, file = tmp_path / "fifo", tmp_path / "file"
    os.mkfifo(fifo)
    file.write_text("x")
    reference = tmp_path / "runs.csv"
    reference.write_text("model,gpu,num_gpus,seq_len,gbs,tp,pp\nllama3-8b,h100,8,4096,128,2,1\n")
    args = [a.format(fifo=fifo, file=file, reference=reference) for a in args]
    done = _advisor(*args, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert str(fifo) in done.stderr or str(file) in done.stderr
