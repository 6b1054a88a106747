"""The README is a user's guide: the two commands on its first screen, under 300 lines, its pictures present and
small, and every ``ATTN_*`` setting the code reads documented in its settings table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_first_screen_shows_the_set_up_and_the_two_commands():
    lines = README.splitlines()
    first_screen = "\n".join(lines[:50])
    blocks = re.findall(r"```bash\n(.*?)```", first_screen, flags=re.S)
    assert len(blocks) == 3, blocks  # set-up, the app, the tests
    assert "pip install" in blocks[0]
    assert blocks[1].strip() == "streamlit run app/main.py"
    assert blocks[2].strip() == "python -m pytest -q"


def test_readme_is_short_and_starts_with_the_guide():
    lines = README.splitlines()
    assert len(lines) < 300
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## Set up and run", "## The app's views"]
    for diary in ("reported blocked", "looks at test", "floor"):
        assert diary not in README


def test_pictures_exist_and_are_small():
    pictures = re.findall(r'<img src="([^"]+)"', README)
    assert len(pictures) >= 2
    for rel in pictures:
        path = ROOT / rel
        assert path.is_file() and path.suffix == ".png", rel
        assert path.stat().st_size < 250_000, rel


def test_every_setting_the_code_reads_is_documented():
    used: set[str] = set()
    for folder in ("app", "transformer", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"\bATTN_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
    table = {m for m in re.findall(r"^\| `(ATTN_[A-Z_]+)` \|", README, flags=re.M)}
    assert used, "no ATTN_ settings found"
    assert used <= table, f"undocumented settings: {sorted(used - table)}"


def _python_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 3 and any("for_bertviz()" in b for b in blocks)
    return blocks


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_the_readmes_python_samples_run(monkeypatch):
    """The package section's samples, in order, on the shipped default checkpoint (all but the BertViz one)."""
    torch.set_num_threads(1)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    for block in _python_blocks():
        if "bertviz" not in block:
            exec(compile(block, "README.md", "exec"), scope)


def test_the_readmes_bertviz_sample_runs(monkeypatch):
    """The documented way to hand a translation to BertViz, run when bertviz is installed (not a dependency)."""
    pytest.importorskip("bertviz")
    torch.set_num_threads(1)
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    for block in _python_blocks():
        if "transformer.load(" in block or "bertviz" in block:
            exec(compile(block, "README.md", "exec"), scope)  # model_view outside a notebook: displays nothing
