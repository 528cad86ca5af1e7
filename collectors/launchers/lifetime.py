"""A run's processes live no longer than the collector that started them.

torchrun puts itself and each worker in a session of its own (so a timeout can kill them as a
group), which also puts them out of reach of a `kill -9` of the collector: they would train on,
holding GPU memory next to a `--resume` rerun of the same run. Two guards:

- `die_with_parent`: the kernel sends SIGKILL to a process when its parent dies (Linux
  `PR_SET_PDEATHSIG`, prctl(2)). The launcher sets it for torchrun (or a framework's script),
  and every worker sets it for itself, so the chain collector → torchrun → workers unwinds.
- `kill_leftovers`: before a run starts in its work directory, any process still running from
  that directory (its command line names the directory's spec or script) is killed — what a
  guard could not catch (a framework's own workers, another OS).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""linux/prctl.h."""


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` to this process when its parent exits (Linux); False where
    the platform cannot. Safe in a `preexec_fn` (async-signal-safe calls only)."""
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True


def processes_mentioning(text: str) -> list[int]:
    """Live processes, other than this one and its ancestors, whose command line contains
    `text` (Linux /proc; empty elsewhere)."""
    found, mine = [], _ancestors()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(proc.name))
    return found


def kill_leftovers(workdir: Path, *, tries: int = 3) -> list[int]:
    """SIGKILL every process still running from `workdir` (a killed collector's torchrun and
    workers; a dying parent's children can appear while it is being killed, hence the tries);
    the pids it killed."""
    killed: list[int] = []
    for _ in range(tries):
        found = [p for p in processes_mentioning(str(Path(workdir).resolve())) if p not in killed]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _ancestors() -> set[int]:
    """This process and its ancestors (their command lines may name the work directory)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return out
