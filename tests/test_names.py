"""Names that say one thing and code that is used: a module-level name of the project means one thing (the attention
kinds are ``KINDS``; detection's pair kinds are ``PAIR_KINDS``), every public function and class of ``app/`` and
``transformer/`` is used or named somewhere else (the code, the benches, the tests, the docs), and no docstring or
comment names an issue or states a measured speed (numbers that go out of date). Read from the source with
``ast``, nothing imported."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "transformer")


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


@functools.cache
def parsed(path: Path) -> tuple[str, ast.Module]:
    """A module's text and its tree, read once for every test here."""
    text = path.read_text(encoding="utf-8")
    return text, ast.parse(text)


def assigned(path: Path) -> set[str]:
    """The names a module assigns at its top level (imports are not assignments)."""
    names = set()
    for node in parsed(path)[1].body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_kinds_is_the_attention_kinds_only():
    defining = [p.relative_to(ROOT).as_posix() for p in sources(*PACKAGES) if "KINDS" in assigned(p)]
    assert defining == ["transformer/network/kinds.py"], defining
    assert "PAIR_KINDS" in assigned(ROOT / "transformer" / "interpret" / "constructed.py")  # detection's pair kinds


# the names every module of a kind defines by design, each meaning the same thing in each: a view's address
# parameters (app/views), a description's caption and probe (app/parts), a model family's record (families/)
PROTOCOL = {"PARAMS": "app/views/", "INTRO": "app/parts/", "PROBE": "app/parts/",
            "FAMILY": "transformer/checkpoint/families/"}


def test_each_module_level_constant_is_defined_once():
    """A module-level UPPER_CASE name of app/ or transformer/ is assigned in one module: a constant that means the
    same elsewhere is imported from there, one that means something else has a name of its own (``SIGNAL_HELP``
    beside ``signals.SIGNALS``, ``SIDEBAR_DEFAULTS`` beside ``decoding.DEFAULTS``)."""
    homes: dict[str, list[str]] = {}
    for path in sources(*PACKAGES):
        for name in assigned(path):
            if name.isupper() and len(name) > 1:
                homes.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    twice = {name: where for name, where in homes.items() if len(where) > 1
             and not (name in PROTOCOL and all(w.startswith(PROTOCOL[name]) for w in where))}
    assert not twice, twice
    assert len(homes["PARAMS"]) > 10 and len(homes["INTRO"]) > 5  # the protocol names are there, where they belong


def test_every_public_function_and_class_is_used_or_named_elsewhere():
    read = [*sources(*PACKAGES, "bench", "tests", "docs"), ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    words = Counter(w for p in read for w in re.findall(r"\w+", p.read_text(encoding="utf-8")))
    unused = []
    for path in sources(*PACKAGES):
        for node in parsed(path)[1].body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_") \
                    and words[node.name] <= 1:  # its own definition alone
                unused.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not unused, f"defined and never used or named: {unused}"


ISSUE = re.compile(r"\b(?:issue|PR|pull request)s? ?#?\d+", re.IGNORECASE)
# a measured speed: a ratio ("1.05-1.08x faster", "2x"), a time ("8.9 ms", "40 µs", "0.2 s of CPU"), a percentage
SPEED = re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?x(?=[ ,;:)]|$)|\d x (?:faster|slower)"
                   r"|\b\d+(?:\.\d+)? ?(?:ms|µs)\b|\d ?s of CPU|\d% (?:less|more|faster|slower)", re.IGNORECASE)


@functools.cache
def words_of(path: Path) -> list[str]:
    """A module's docstrings and comments."""
    text, tree = parsed(path)
    docs = [n.body[0].value.value for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
            and isinstance(n.body[0].value.value, str)]
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    return docs + comments


def test_no_docstring_or_comment_names_an_issue():
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in sources(*PACKAGES) for words in words_of(path)
             for m in ISSUE.finditer(words)]
    assert not found, found


def test_no_docstring_or_comment_states_a_speed():
    """A measured speed goes out of date in the code: the figures live in docs/benchmarks.md (or the doc that
    measured them) with their machine and command, and the code says why, pointing there."""
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in sources(*PACKAGES) for words in words_of(path)
             for m in SPEED.finditer(words)]
    assert not found, found
    for figure in ("1.05-1.08x faster", "2x faster than 4096", "8.9 ms of CPU", "40 µs", "0.2 s of CPU", "3% less",
                   "a 2-3x slower product", "2.3 ms a unit"):  # what it finds, and what it leaves
        assert SPEED.search(figure), figure
    for other in ("32 x 20,000 lines", "a 4 x 6 grid", "trace.x is None", "transformers 4.5x-5.x", "(L, H, Q, K)",
                  "waits 0.12 s", "measured faster than MKL"):
        assert not SPEED.search(other), other
