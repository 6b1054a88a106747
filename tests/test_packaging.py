"""What ``pip install .`` puts on the path: ``transformer`` and ``app`` (with the page's script), never a generic
top-level ``bench``; the wheel is built here from a copy of the sources, with no network."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_holds_transformer_and_app_and_no_bench(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("transformer", "app", "bench"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, timeout=300)
    wheel = next(out.glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"transformer", "app"}
    assert {"app/report.js", "app/views/__init__.py", "app/parts/__init__.py",
            "transformer/checkpoint/families/__init__.py"} <= set(names)


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_bench_still_runs_from_the_repository_root():
    out = subprocess.run([sys.executable, "-c", "import bench, bench.common; print(bench.__file__)"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=True)
    assert Path(out.stdout.strip()).resolve().parent == (ROOT / "bench").resolve()
