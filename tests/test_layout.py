"""The layout of the code: docs/code.md names every module, and ``transformer/``'s imports form no loop, none of them
made inside a function to hide one (read from the source with ``ast``, nothing imported)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transformer"


def modules(folder: str) -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / folder).rglob("*.py"))


def named_in_code_md() -> set[str]:
    """Paths docs/code.md names: whole (`transformer/x.py`), or a file name after a path in the same table row
    (`transformer/network/outputs.py`, `projection.py`; `app/views/`: `heatmap.py`, ...)."""
    named = set()
    for row in (ROOT / "docs" / "code.md").read_text(encoding="utf-8").splitlines():
        if not row.startswith("|"):
            continue
        tokens = re.findall(r"`([^`]+)`", row)
        bases = [t if t.endswith("/") else t.rsplit("/", 1)[0] + "/" for t in tokens if "/" in t]
        named.update(tokens)
        named.update(base + t for base in bases for t in tokens if "/" not in t)
    return named


def test_docs_code_md_names_every_module():
    missing = [m for m in modules("transformer") + modules("app") if m not in named_in_code_md()]
    assert not missing, f"docs/code.md does not name {missing}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path, root: Path = PACKAGE) -> list[tuple[str, bool]]:
    """The modules of ``root``'s package that ``path`` imports, each with whether the import is made inside a
    function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    known = {module_name(p) for p in root.rglob("*.py")}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - (node.level - 1)])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found += [(t, id(node) in inside) for t in dict.fromkeys(targets) if t in known and t != name]
    return found


def test_transformer_imports_at_the_top_and_in_no_loop():
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        imports = project_imports(path)
        hidden = [t for t, in_function in imports if in_function]
        assert not hidden, f"{path.relative_to(ROOT)} imports {hidden} inside a function"
        graph[module_name(path)] = {t for t, _ in imports}
    assert graph["transformer.network.model"] and graph["transformer.checkpoint.families"]  # the reader reads

    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, f"import loop: {' -> '.join([*path, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


APP_FLOORS = ("app.drawing", "app.models", "app.limits", "app.analysis", ("app.parts", "app.registry"),
              ("app.page", "app.notebook", "app.report"), "app.views", ("app.main", "app.serve"))
# bottom up; "app" (its __init__) imports nothing of the app


def app_floor(module: str) -> int:
    for i, floor in enumerate(APP_FLOORS):
        for name in (floor,) if isinstance(floor, str) else floor:
            if module == name or module.startswith(name + "."):
                return i
    raise AssertionError(f"{module} is on no floor of docs/code.md's app/")


def test_app_imports_only_its_own_floor_and_below():
    app = ROOT / "app"
    known = {module_name(p) for p in app.rglob("*.py")}
    assert {"app.drawing.figures", "app.models.catalog", "app.limits.ledger", "app.analysis.cached", "app.page.state",
            "app.parts.masks"} <= known
    for path in sorted(app.rglob("*.py")):
        name = module_name(path)
        if name == "app":
            continue
        for target, _ in project_imports(path, app):  # inside a function too
            if target != "app":
                assert app_floor(target) <= app_floor(name), f"{name} imports {target}, a floor above it"


def test_the_network_imports_nothing_else_of_the_project():
    paths = sorted((PACKAGE / "network").glob("*.py"))
    assert len(paths) > 5
    for path in paths:
        outside = [t for t, _ in project_imports(path) if not t.startswith("transformer.network")]
        assert not outside, f"{path.relative_to(ROOT)} imports {outside}"
