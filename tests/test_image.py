"""The Space image without Docker: what ``.ci/image_check`` reads from the Dockerfile and ``.dockerignore``
(what goes in, how it is installed, how it starts), and ``constraints.txt`` against the installed project.
No network, no venv, no server: the full check is ``python3 .ci/image_check`` (minutes)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def image_check():
    loader = importlib.machinery.SourceFileLoader("image_check", str(ROOT / ".ci" / "image_check"))
    spec = importlib.util.spec_from_loader("image_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def steps(image_check):
    return image_check.instructions((ROOT / "Dockerfile").read_text(encoding="utf-8"))


def test_the_image_gets_the_app_and_not_tests_bench_runs_or_training_state(image_check, tmp_path):
    """The real Dockerfile and .dockerignore over a made-up build context."""
    context, dest = tmp_path / "context", tmp_path / "image"
    dest.mkdir()
    wanted = ["pyproject.toml", "README.md", "constraints.txt", "transformer/__init__.py",
              "transformer/network/model.py", "app/main.py", "app/views/heatmap.py", ".streamlit/config.toml",
              "checkpoints/m/model.safetensors", "checkpoints/m/config.json",
              "checkpoints/m/snapshots/step1.safetensors"]
    unwanted = ["tests/test_model.py", "bench/speed.py", "runs/en-de/state.pt", "test-artifacts/browser.png",
                "transformer/__pycache__/model.cpython-311.pyc", "app/__pycache__/main.cpython-311.pyc",
                "checkpoints/m/state.pt", "checkpoints/m/averaging/step1.safetensors", ".git/HEAD",
                "training-logs/run.log", ".venv/bin/python"]
    for name in wanted + unwanted:
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text(name)
    shutil.copy(ROOT / "Dockerfile", context / "Dockerfile")
    shutil.copy(ROOT / ".dockerignore", context / ".dockerignore")
    staged = set(image_check.stage(context, dest))
    assert set(wanted) <= staged
    assert not staged & set(unwanted)
    assert (dest / "app/views/heatmap.py").read_text() == "app/views/heatmap.py"  # contents, at the same place


@pytest.mark.parametrize("rules, path, left_out", [
    ("**/__pycache__", "app/views/__pycache__/x.pyc", True),   # ** spans folders; a matched folder takes its files
    ("*.tmp", "x.tmp", True),
    ("*.tmp", "app/x.tmp", False),                            # Docker's * does not cross '/'
    ("checkpoints/**/state.pt", "checkpoints/state.pt", True),  # ** may be no folder at all
    ("checkpoints/**/averaging/", "checkpoints/a/b/averaging/s.safetensors", True),
    ("*.tmp\n!keep.tmp", "keep.tmp", False),                  # an exception after a rule: the last match decides
    ("!keep.tmp\n*.tmp", "keep.tmp", True),
    ("/runs", "runs/x/state.pt", True),                       # a leading / is the context root
    ("# comment\n\ntests/", "tests/test_x.py", True),
    ("tests/", "app/tests/x.py", False),
])
def test_dockerignore_rules_follow_docker(image_check, tmp_path, rules, path, left_out):
    (tmp_path / ".dockerignore").write_text(rules + "\n")
    assert image_check.ignored(path, image_check.ignore_rules(tmp_path)) is left_out


def test_the_image_installs_the_project_with_its_constraints_and_starts_public(image_check, steps):
    commands = [words for words, _ in image_check.pip_commands(steps)]
    torch_at = next(i for i, w in enumerate(commands) if any(a.startswith("torch==") for a in w))
    project_at = next(i for i, w in enumerate(commands) if ".[app]" in w)
    assert torch_at < project_at  # CPU torch first, so the project's install does not pull a CUDA build
    project = commands[project_at]
    assert project[project.index("-c") + 1] == "constraints.txt"
    assert not any(a.startswith("-r") for a in project)  # no second hand-written dependency list
    # the torch version installed first is the one constraints.txt pins
    torch_pin = next(a for a in commands[torch_at] if a.startswith("torch==")).split("==", 1)[1]
    assert image_check.read_constraints(ROOT / "constraints.txt")["torch"] == torch_pin
    assert image_check.env_before(steps)["ATTN_PUBLIC"] == "1"
    words = image_check.cmd(steps)
    assert words[:3] == ["streamlit", "run", "app/serve.py"]  # app/main.py's page, warmed before its health check
    moved = image_check.on_port(words, 4321)
    assert "--server.port=4321" in moved and "--server.address=127.0.0.1" in moved
    assert [w for w in moved if not w.startswith("--server.")] == [w for w in words if not w.startswith("--server.")]
    probe = image_check.healthcheck(steps)
    assert probe is not None and "/_stcore/health" in probe and image_check.IMAGE_PORT in probe


def test_the_image_fetches_the_test_split_where_the_app_reads_it(image_check, steps):
    """The shipped tables hold no Multi30k line; the image downloads the test split (its two languages) to the
    folder ``ATTN_DATA_DIR`` names, relative to the app's folder, where "Whole test set" joins them back."""
    import posixpath
    import shlex

    fetch = next(shlex.split(run) for run in image_check.other_runs(steps) if "transformer.data" in run)
    assert fetch[:3] == ["python", "-m", "transformer.data"]
    dest = fetch[fetch.index("--download") + 1]
    splits = fetch[fetch.index("--splits") + 1:]
    assert "test_2016_flickr" in splits and "train" not in splits
    assert posixpath.join(image_check.workdir(steps), dest) == image_check.env_before(steps)["ATTN_DATA_DIR"]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("extra", ["app", "dev"])
def test_constraints_pin_every_runtime_dependency(image_check, extra):
    """Every distribution ``pip install .[app]`` (the image) and ``pip install -e .[dev]`` (.ci/run, the README's
    set-up) brings in (the installed metadata's requirements, followed) has a pin in constraints.txt, and the pins
    satisfy the project's own version ranges."""
    requirements = pytest.importorskip("packaging.requirements")
    try:
        project = metadata.distribution("attention-explorer")
    except metadata.PackageNotFoundError:
        pytest.skip("attention-explorer is not installed (pip install -e .)")
    pins = image_check.read_constraints(ROOT / "constraints.txt")
    direct = [requirements.Requirement(r) for r in project.requires or []]
    direct = [r for r in direct if r.marker is None or r.marker.evaluate({"extra": extra})
              or r.marker.evaluate({"extra": ""})]
    own = [r for r in direct if _canonical(r.name) == "attention-explorer"]  # dev = [app, bench] + tools
    direct = [r for r in direct if _canonical(r.name) != "attention-explorer"]
    direct += [requirements.Requirement(r) for r in project.requires or [] for o in own
               if (m := requirements.Requirement(r).marker) is not None and any(m.evaluate({"extra": e})
                                                                                for e in o.extras)]
    for req in direct:
        assert _canonical(req.name) in pins, f"{req.name} is not pinned"
        assert req.specifier.contains(pins[_canonical(req.name)], prereleases=True), (req, pins[_canonical(req.name)])
    seen, todo = set(), [(r.name, set(r.extras)) for r in direct]
    while todo:
        name, extras = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is required but not installed here")
        for text in dist.requires or []:
            req = requirements.Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                todo.append((req.name, set(req.extras)))
    missing = sorted(seen - set(pins))
    assert not missing, f"not pinned in constraints.txt: {missing}"


def test_ci_and_the_readme_setup_build_the_pinned_environment():
    """.ci/run installs into a new virtual environment with constraints.txt (what the image pins), not into the
    machine's Python, and runs the linter and the suite there."""
    script = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m venv" in script
    install = next(line for line in script.splitlines() if '-e ".[dev]"' in line)
    assert install.startswith(".venv/bin/python -m pip install") and "-c constraints.txt" in install
    assert ".venv/bin/python -m pytest" in script and ".venv/bin/python -m ruff" in script
