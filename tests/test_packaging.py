"""What `pip install .` ships: the wheel, installed apart from the checkout, finds its bundled
surrogate, catalog, and campaign templates (the README's quick start relies on it)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_installed_wheel_finds_its_bundled_artifacts(tmp_path):
    wheels, target, source = tmp_path / "wheels", tmp_path / "site", tmp_path / "src"
    # Built from a copy: setuptools writes build/ into the tree it builds, and a build/ in the
    # checkout while the README commands run reads as a command writing into the checkout.
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", "site", ".pytest_cache", "runs"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(source)], check=True, capture_output=True, timeout=600)
    wheel = next(wheels.glob("advisor-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, timeout=600)
    code = ("import advisor, collectors.campaign as c\n"
            "from advisor.predict.predictor import Predictor, bundled_models_dir\n"
            f"assert str(bundled_models_dir()).startswith({str(target)!r}), bundled_models_dir()\n"
            "assert Predictor.load().surrogate is not None\n"
            f"assert advisor.__file__.startswith({str(target)!r})\n"
            "assert 'h200-single' in c.templates()\n"
            "from advisor.cli.dataset_cmd import checkout_datasets, resolve_dataset\n"
            f"assert str(checkout_datasets()).startswith({str(target)!r})\n"
            "from pathlib import Path\n"
            "assert resolve_dataset(Path('datasets/published.parquet')).is_file()\n")
    # The wheel's copy first on the path; its dependencies from this environment.
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
