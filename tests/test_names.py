"""Names that say one thing and code that is used: a module-level name of the project means one thing (the attention
kinds are ``KINDS``; detection's pair kinds are ``PAIR_KINDS``), every public function and class of ``app/`` and
``transformer/`` is used or named somewhere else (the code, the benches, the tests, the docs), and no docstring or
comment names an issue (a number that goes out of date). Read from the source with ``ast``, nothing imported."""

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


def test_no_docstring_or_comment_names_an_issue():
    found = []
    for path in sources(*PACKAGES):
        text, tree = parsed(path)
        docs = [n.body[0].value.value for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
                and isinstance(n.body[0].value.value, str)]
        comments = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                    if t.type == tokenize.COMMENT]
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for words in docs + comments for m in ISSUE.finditer(words)]
    assert not found, found
