"""What ``.ci/image_check`` reads from the ``Dockerfile`` and ``.dockerignore``: the files the image gets, how they
are installed (its ``RUN pip install`` lines with the ``ENV`` before them), the data set it fetches, how it starts
(``CMD``) and how Docker asks whether it is up (``HEALTHCHECK``). No network, no venv: plain reading."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path

CPU_INDEX = "download.pytorch.org"


class CheckFailed(Exception):
    """One line saying what did not hold (every part of the image check says so with this)."""


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):  # a comment inside a continued instruction
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        word, _, rest = current.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def _words(args: str) -> list[str]:
    """An instruction's arguments: the JSON (exec) form or shell words."""
    return json.loads(args) if args.startswith("[") else shlex.split(args)


def workdir(steps: list[tuple[str, str]]) -> str:
    """The image's last WORKDIR (the app's folder)."""
    dirs = [args for name, args in steps if name == "WORKDIR"]
    return dirs[-1] if dirs else "/"


def env_before(steps: list[tuple[str, str]], index: int | None = None) -> dict[str, str]:
    """The ``ENV`` values set before instruction ``index`` (all of them when None)."""
    env: dict[str, str] = {}
    for name, args in steps[:index]:
        if name != "ENV":
            continue
        words = shlex.split(args)
        if words and "=" not in words[0]:  # the legacy form: ENV KEY value with spaces
            env[words[0]] = args.split(None, 1)[1] if len(words) > 1 else ""
        else:
            env.update(w.split("=", 1) for w in words)
    return env


def copies(steps: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    """(sources, destination relative to WORKDIR) of every ``COPY``/``ADD`` from the build context."""
    base, out = "/", []
    for name, args in steps:
        if name == "WORKDIR":
            base = args
        if name not in ("COPY", "ADD"):
            continue
        words = [w for w in _words(args) if not w.startswith("--chown") and not w.startswith("--chmod")]
        if any(w.startswith("--") for w in words):
            raise CheckFailed(f"{name} {args}: options other than --chown/--chmod are not followed by this check")
        *sources, dest = words
        dest_abs = dest if dest.startswith("/") else f"{base.rstrip('/')}/{dest}"
        rel = os.path.relpath(os.path.normpath(dest_abs), workdir(steps))
        if rel.startswith(".."):
            raise CheckFailed(f"{name} {args}: copies outside WORKDIR {workdir(steps)}")
        out.append((sources, rel + ("/" if dest.endswith("/") or len(sources) > 1 else "")))
    return out


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern (Go's filepath.Match plus ``**``) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i + 1:end]
            out, i = out + "[" + ("^" + body[1:] if body.startswith("^") else body) + "]", end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignore_rules(root: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, regex) for each line of ``.dockerignore``, in order (the last match decides)."""
    path = root / ".dockerignore"
    rules = []
    for line in (path.read_text(encoding="utf-8").splitlines() if path.is_file() else []):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``rel`` (a path in the build context) out: a rule matching it or a folder above it."""
    parts = rel.split("/")
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for negate, regex in rules:
        if any(regex.fullmatch(c) for c in candidates):
            result = not negate
    return result


def stage(root: Path, dest: Path) -> list[str]:
    """Copy what the Dockerfile copies (less ``.dockerignore``) from ``root`` into ``dest`` (the WORKDIR);
    returns the staged files relative to ``dest``."""
    steps = instructions((root / "Dockerfile").read_text(encoding="utf-8"))
    rules = ignore_rules(root)
    staged: list[str] = []
    for sources, target in copies(steps):
        for source in sources:
            matches = sorted(root.glob(source.rstrip("/"))) if any(c in source for c in "*?[") else [root / source]
            if not any(m.exists() for m in matches):
                raise CheckFailed(f"COPY source {source} is not in the build context")
            for match in matches:
                files = [match] if match.is_file() else sorted(p for p in match.rglob("*") if p.is_file())
                for f in files:
                    rel_context = f.relative_to(root).as_posix()
                    if ignored(rel_context, rules):
                        continue
                    inner = f.name if match.is_file() else f.relative_to(match).as_posix()
                    if match.is_file() and not target.endswith("/"):
                        out_rel = target  # COPY file name
                    else:
                        out_rel = os.path.normpath(f"{target}/{inner}")
                    (dest / out_rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, dest / out_rel)
                    staged.append(out_rel)
    return sorted(set(staged))


def pip_commands(steps: list[tuple[str, str]]) -> list[tuple[list[str], dict[str, str]]]:
    """The ``pip install`` commands of the ``RUN`` lines, each with the ENV set before it; the PyTorch CPU index
    option is dropped (this machine installs its local wheel of the same version)."""
    out = []
    for index, (name, args) in enumerate(steps):
        if name != "RUN":
            continue
        for command in args.split("&&"):
            words = shlex.split(command)
            if words[:2] != ["pip", "install"] and words[:4] != ["python", "-m", "pip", "install"]:
                continue
            kept, skip = [], False
            for j, w in enumerate(words):
                if skip:
                    skip = False
                    continue
                if w in ("--index-url", "-i", "--extra-index-url") and CPU_INDEX in words[j + 1]:
                    skip = True
                    continue
                if w.startswith(("--index-url=", "--extra-index-url=")) and CPU_INDEX in w:
                    continue
                kept.append(w)
            out.append((kept, env_before(steps, index)))
    return out


def other_runs(steps: list[tuple[str, str]]) -> list[str]:
    """``RUN`` commands this check does not run (anything but pip installs)."""
    out = []
    for name, args in steps:
        if name == "RUN":
            out += [c.strip() for c in args.split("&&")
                    if c.strip() and not re.match(r"(pip|python -m pip) install\b", c.strip())]
    return out


def _values(words: list[str], flag: str) -> list[str]:
    """The words after ``flag`` up to the next option."""
    rest = words[words.index(flag) + 1:] if flag in words else []
    return rest[:next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))]


def data_fetch(steps: list[tuple[str, str]]) -> tuple[str, str, list[str]] | None:
    """The ``RUN`` that fetches the data set (``python -m transformer.data --download DEST --splits ... --langs
    ...``): (the command, DEST, the files it writes there: ``{split}.{lang}``)."""
    for command in other_runs(steps):
        words = shlex.split(command)
        if "transformer.data" not in words or "--download" not in words:
            continue
        splits, langs = _values(words, "--splits"), _values(words, "--langs")
        files = [f"{split}.{lang}" for split in splits for lang in langs]
        return command, words[words.index("--download") + 1], files
    return None

def cmd(steps: list[tuple[str, str]]) -> list[str]:
    """The image's ``CMD`` as a list of words."""
    found = [args for name, args in steps if name == "CMD"]
    if not found:
        raise CheckFailed("the Dockerfile has no CMD")
    return _words(found[-1])


def healthcheck(steps: list[tuple[str, str]]) -> str | None:
    """The command of the ``HEALTHCHECK`` line (shell form), if there is one."""
    found = [args for name, args in steps if name == "HEALTHCHECK"]
    if not found or found[-1].strip().upper() == "NONE":
        return None
    command = re.split(r"\bCMD\b", found[-1], maxsplit=1)[1].strip()
    return shlex.join(_words(command)) if command.startswith("[") else command


def on_port(words: list[str], port: int) -> list[str]:
    """``CMD`` with the server on ``port`` and 127.0.0.1 only; everything else as written."""
    wanted = {"--server.port": str(port), "--server.address": "127.0.0.1"}
    out = [f"{w.split('=', 1)[0]}={wanted[w.split('=', 1)[0]]}" if w.split("=", 1)[0] in wanted else w for w in words]
    return out + [f"{k}={v}" for k, v in wanted.items() if not any(w.startswith(k + "=") for w in words)]


def read_constraints(path: Path) -> dict[str, str]:
    """name (normalised) -> pinned version."""
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return pins
