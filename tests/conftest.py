import importlib.util
import os
import re
from pathlib import Path

import pytest
from slurm_cluster import slurm  # noqa: F401  (fixture: a one-node Slurm cluster on localhost)

from advisor.data.reference import reference_path

FIXTURES = Path(__file__).parent / "fixtures"

# Two pytest-xdist workers on two cores each running OpenMP (XGBoost, torch) oversubscribe
# the cores, and OpenMP's spin-waiting then slows both: one surrogate training took 6.2 s
# with two at once against 0.85 s alone, and 1.0-1.2 s with passive waiting (which alone
# costs 3x: 2.4-3.8 s). So workers wait passively; a serial run keeps OpenMP's default. It
# must be set before a library starts OpenMP (this file is imported before any test module).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# ---- markers ---------------------------------------------------------------------------------
# Registered in pyproject.toml. `pytest -n auto --dist loadgroup -m "not slow"` is the fast loop;
# the README's command (CI) runs everything. Tests get the resource markers from the fixtures
# they use, and tests of a missing extra are skipped with the install line (CI has every extra,
# so there it fails).
FIXTURE_MARKS = {"postgres_url": "postgres", "slurm": "slurm", "on_slurm": "slurm",
                 "local": "torch", "mcore": "frameworks", "titan": "frameworks",
                 "nemo_run_parse": "frameworks", "nemo_recipe": "frameworks"}
#: marker -> (a module the tests import, the extra that installs it)
EXTRAS = {"torch": ("torch", "collect"), "frameworks": ("megatron.core", "frameworks"),
          "postgres": ("psycopg2", "postgres"), "plot": ("matplotlib", "plot")}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these markers
def pytest_collection_modifyitems(config, items):
    missing = {marker: (extra, why) for marker, (module, extra) in EXTRAS.items()
               if (why := _not_importable(module)) is not None}
    for item in items:
        for fixture in item.fixturenames:
            if fixture in FIXTURE_MARKS:
                item.add_marker(FIXTURE_MARKS[fixture])
        if any(item.get_closest_marker(m) for m in ("slurm", "postgres", "torch")):
            item.add_marker("slow")  # each starts a service or torchrun: out of the fast loop
        # Under `pytest -n ... --dist loadgroup` (the README's commands) a group runs on one
        # worker: the tests of one service (started once), a module's frameworks tests (NeMo
        # and Megatron imported by one worker), and a module's slow tests that share a
        # module-scoped fixture (a refit, the 165-recipe check, torchrun campaigns: computed
        # once). Other tests go wherever a worker is free.
        service = next((m for m in ("slurm", "postgres") if item.get_closest_marker(m)), None)
        if service or item.get_closest_marker("frameworks") or (
                item.get_closest_marker("slow") and _uses_module_fixture(item)):
            item.add_marker(pytest.mark.xdist_group(service or item.nodeid.split("::")[0]))
        for marker, (extra, detail) in missing.items():
            if item.get_closest_marker(marker) is None:
                continue
            why = f"needs the {extra} extra: pip install -e '.[{extra}]'{detail}"
            if os.environ.get("CI"):
                raise pytest.UsageError(f"{item.nodeid} {why} (CI installs every extra)")
            item.add_marker(pytest.mark.skip(reason=why))


MISSING_FILE = re.compile(r"not found|no such file|does not exist|missing data", re.I)
"""A skip reason that says a file or data is missing: never in CI, where the repository has
everything its tests read (the reference data is in datasets/reference)."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if MISSING_FILE.search(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped for missing data, which CI must not: {reason}"


def _not_importable(module: str) -> str | None:
    """None when `module` can be found, else a detail for the skip reason ("" when it is simply
    not installed). `find_spec` of a dotted name imports its parents first, so it raises
    ModuleNotFoundError when a parent is missing (megatron for megatron.core) and whatever a
    parent's import raises when that breaks; both mean the extra is unusable, not a crash."""
    try:
        return None if importlib.util.find_spec(module) is not None else ""
    except Exception as e:  # a parent's import may raise anything
        if isinstance(e, ModuleNotFoundError) and e.name and f"{module}.".startswith(f"{e.name}."):
            return ""  # the module itself or a parent is not installed
        return f" (importing {module} failed: {type(e).__name__}: {e})"


def _uses_module_fixture(item: pytest.Item) -> bool:
    # pytest keeps an item's fixture definitions on `_fixtureinfo` (no public accessor).
    return any(defs[-1].scope in ("module", "package", "class")
               for defs in item._fixtureinfo.name2fixturedefs.values() if defs)


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch):
    """Tables are as wide as a pipe gets (`cli.common.PIPED_WIDTH`) whatever the shell exports:
    pytest-xdist's workers, for one, set COLUMNS=80 and LINES=24."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


# The measured reference data is part of the repository (datasets/reference): no test skips
# for want of it.
@pytest.fixture(scope="session")
def reference_csv() -> Path:
    return reference_path("published_runs.csv")


@pytest.fixture(scope="session")
def vtrain_dir() -> Path:
    return reference_path("vtrain")


@pytest.fixture(scope="session")
def power_dir() -> Path:
    return reference_path("power")


@pytest.fixture(scope="session")
def mlperf_csv() -> Path:
    return reference_path("mlperf", "mlperf_runs.csv")


@pytest.fixture(scope="session")
def megatron_ci_csv() -> Path:
    return reference_path("megatron_ci", "runs.csv")


@pytest.fixture(scope="session")
def ref(reference_csv, mlperf_csv):
    """The reference runs: published and MLPerf, as the bundled calibration and surrogate
    learn them (read-only: shared by every test module that uses it)."""
    from advisor.learn.fit import load_reference

    return load_reference(reference_csv, mlperf_csv)


@pytest.fixture(scope="session")
def feats(ref):
    """The surrogate's features of `ref` under the bundled calibration."""
    from advisor.learn.features import reference_features
    from advisor.perf.calibration import load_calibration

    return reference_features(ref, load_calibration())


def _pg_bin(name: str) -> str | None:
    import glob
    import shutil

    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL server for this test session (a throwaway cluster on a free port),
    or ADVISOR_TEST_POSTGRES_URL when set. As root the server runs as the postgres user:
    initdb refuses root."""
    import shutil
    import socket
    import subprocess

    if os.environ.get("ADVISOR_TEST_POSTGRES_URL"):
        yield os.environ["ADVISOR_TEST_POSTGRES_URL"]
        return
    initdb = _pg_bin("initdb")
    if not initdb:
        message = "PostgreSQL server binaries not found (Debian: apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    import tempfile

    # Not under pytest's tmp dir: that is private to root, and the server may run as postgres.
    root = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
    bindir = Path(initdb).resolve().parent  # pg_ctl and createdb of the same release
    pg_ctl, createdb = str(bindir / "pg_ctl"), str(bindir / "createdb")
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a postgres user to run the server as")
        shutil.chown(root, user="postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = root / "data"
    subprocess.run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust",
                    "-E", "UTF8"], check=True, capture_output=True)
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"],
                   check=True, capture_output=True)
    try:
        subprocess.run([*prefix, createdb, "-h", "127.0.0.1",
                        "-p", str(port), "-U", "postgres", "advisor_test"],
                       check=True, capture_output=True)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/advisor_test"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
