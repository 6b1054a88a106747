"""The layout of the code: docs/code.md names every module; ``transformer/``'s imports form no loop, none of them
made inside a function to hide one, and go only down its floors; its packages are libraries and its commands sit at
the top (read from the source with ``ast``, nothing imported)."""

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


TRANSFORMER_FLOORS = (("transformer.environment", "transformer.network"),
                      ("transformer.checkpoint", "transformer.decoding"),
                      "transformer.translator", "transformer.evaluation",
                      ("transformer.training", "transformer.interpret", "transformer.exchange"), "transformer.cli",
                      "commands")  # bottom up; the top: the commands and "transformer" (its __init__, the public names)
PACKAGES = ("network", "checkpoint", "decoding", "evaluation", "training", "interpret", "exchange")
COMMANDS = ("average", "convert", "corpus", "ctranslate2_export", "data", "detect", "evaluate", "heads", "publish",
            "train")  # python -m transformer.X: transformer/X.py


def transformer_floor(module: str) -> int:
    if module == "transformer" or module.removeprefix("transformer.") in COMMANDS:
        return len(TRANSFORMER_FLOORS) - 1
    for i, floor in enumerate(TRANSFORMER_FLOORS):
        for name in (floor,) if isinstance(floor, str) else floor:
            if module == name or module.startswith(name + "."):
                return i
    raise AssertionError(f"{module} is on no floor of docs/code.md's transformer/")


PEERS = TRANSFORMER_FLOORS[4]  # the packages that use the translator: none imports another


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_transformer_imports_only_its_own_floor_and_below_and_no_peer_package():
    """A package imports none of a higher floor (``interpret/`` and ``training/`` read and score their splits from
    ``evaluation/`` below them), and none of the packages beside it on its floor (``interpret/`` nothing of
    ``training/``)."""
    paths = sorted(PACKAGE.rglob("*.py"))
    assert {p.parent.name for p in PACKAGE.glob("*/__init__.py")} == set(PACKAGES)  # a new package gets a floor
    for path in paths:
        name = module_name(path)
        for target, _ in project_imports(path):
            assert transformer_floor(target) <= transformer_floor(name), f"{name} imports {target}, a floor above it"
            if package_of(name) in PEERS and package_of(target) in PEERS:
                assert package_of(target) == package_of(name), f"{name} imports {target}, a package beside it"
    interpret = [t for p in sorted((PACKAGE / "interpret").rglob("*.py")) for t, _ in project_imports(p)]
    assert interpret and not [t for t in interpret if t.startswith("transformer.training")]


def calls(tree: ast.AST) -> list[str]:
    """The dotted names called in ``tree`` (``print``, ``sys.exit``, ``argparse.ArgumentParser``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                found.append(".".join([func.id, *reversed(parts)]))
    return found


def imported(tree: ast.AST) -> list[str]:
    """The modules ``tree`` imports, by their absolute or relative name as written (``argparse``, ``..cli``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    return names


def test_the_packages_are_libraries():
    """No module of a package of ``transformer/`` parses arguments, prints (a progress bar aside), exits the process
    or imports the commands' helpers (``transformer/cli.py``): it takes values and returns values, and a long run
    says where it is through the ``tell`` its command gives it; the command above it talks."""
    paths = [p for package in PACKAGES for p in sorted((PACKAGE / package).rglob("*.py"))]
    assert len(paths) > 40
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        modules = imported(tree)
        assert not [m for m in modules if m.split(".")[0] == "argparse"], f"{where} imports argparse"
        said = [c for c in calls(tree) if c in ("print", "tqdm.write", "sys.exit", "exit", "quit", "os._exit")]
        assert not said, f"{where} calls {said}"
        raised = [n for n in ast.walk(tree) if isinstance(n, ast.Raise) and n.exc is not None
                  and "SystemExit" in ast.unparse(n.exc)]
        assert not raised, f"{where} raises SystemExit"
        assert not [t for t, _ in project_imports(path) if t == "transformer.cli" or transformer_floor(t) ==
                    len(TRANSFORMER_FLOORS) - 1], f"{where} imports a command or their helpers"


def test_each_command_is_a_module_at_the_top_that_parses_its_own_arguments():
    """``python -m transformer.X`` is ``transformer/X.py``: it defines ``main``, builds its own ``ArgumentParser``
    and runs ``main`` as a script; no module hands on another's names with ``import *``."""
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "cli", "environment", "translator"}
    assert top == set(COMMANDS), f"a module at the top of transformer/ that is no command: {top ^ set(COMMANDS)}"
    for command in COMMANDS:
        tree = ast.parse((PACKAGE / f"{command}.py").read_text(encoding="utf-8"))
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "main" in functions, f"transformer/{command}.py defines no main"
        assert {"argparse.ArgumentParser", "ArgumentParser"} & set(calls(tree)), (
            f"transformer/{command}.py parses no arguments of its own")
        script = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
        assert script and "main()" in ast.unparse(script[0]), f"transformer/{command}.py does not run main"
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                    ], f"{path.relative_to(ROOT)} imports *"
