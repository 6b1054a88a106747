"""What a start of ``python -m transformer.corpus`` finds and does (issue 54 §4): the run's fingerprint, a resume
that never mixes two models, a finish that never loses rows, parts of another run kept, and one line (exit 1) for
an ``--out`` that cannot be written, a bad ``--alpha``, an empty source. A run is stopped in-process by making its
n-th batch (or its manifest) raise, as a kill would stop it there."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from test_corpus import REFERENCES, SOURCES, command

import transformer
from transformer.corpus import main
from transformer.interpret import corpus
from transformer.interpret.table import read_table, table_rows, write_table


class Stop(Exception):
    """A run stopped here (as by a kill)."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stop_at_batch(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The run's batch number ``n`` (0-based) raises ``Stop``: ``n`` batches written, then the run ends."""
    real, calls = corpus.batch_rows, []

    def counted(*args, **kwargs):
        if len(calls) == n:
            raise Stop
        calls.append(n)
        return real(*args, **kwargs)

    monkeypatch.setattr(corpus, "batch_rows", counted)


def no_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Computing any batch fails the test: the rows must come from the parts."""
    monkeypatch.setattr(corpus, "batch_rows", lambda *a, **k: pytest.fail("a batch was computed again"))


def oracle(checkpoint: Path) -> list[dict]:
    tr = transformer.load(checkpoint, device="cpu")
    return table_rows(tr, SOURCES, REFERENCES, tr.settings(beam_size=2), batch_size=3)


@pytest.fixture()
def twins(tiny_checkpoint: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Two checkpoints of the same folder name, files and sizes; the second's weights changed."""
    a, b = tmp_path / "a" / tiny_checkpoint.name, tmp_path / "b" / tiny_checkpoint.name
    shutil.copytree(tiny_checkpoint, a)
    shutil.copytree(tiny_checkpoint, b)
    weights = load_file(b / "model.safetensors")
    weights = {name: tensor * 1.5 if tensor.is_floating_point() else tensor for name, tensor in weights.items()}
    save_file(weights, b / "model.safetensors")
    return a, b


def test_the_manifest_records_the_input_files_the_model_files_and_the_table(tiny_checkpoint, tmp_path):
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    manifest = json.loads((tmp_path / "t.manifest.json").read_text(encoding="utf-8"))
    for key, name in (("source", "src.txt"), ("reference", "ref.txt")):
        path = tmp_path / name
        assert manifest["input"]["files"][key] == {"name": name, "sha256": sha256(path), "bytes": path.stat().st_size}
    out = tmp_path / "t.parquet"
    assert manifest["table"] == {"name": "t.parquet", "sha256": sha256(out), "bytes": out.stat().st_size}
    files = {f["name"]: f["sha256"] for f in manifest["model"]["files"]}
    assert files["model.safetensors"] == sha256(tiny_checkpoint / "model.safetensors")
    assert {"config.json", "tokenizer.model"} <= set(files)
    assert len(manifest["fingerprint"]) == 64 and manifest["rows"] == len(SOURCES)
    assert main(command(tiny_checkpoint, tmp_path, references=None, out="n.jsonl")) == 0
    assert json.loads((tmp_path / "n.manifest.json").read_text(encoding="utf-8"))["input"]["files"]["reference"] is None


def test_a_resume_with_changed_weights_is_refused_and_keeps_the_parts(twins, tmp_path, monkeypatch, capsys):
    a, b = twins
    with monkeypatch.context() as m:
        stop_at_batch(m, 1)
        with pytest.raises(Stop):
            main(command(a, tmp_path))
    part = tmp_path / "t.parquet.parts" / "rank0.jsonl"
    before = part.read_bytes()
    capsys.readouterr()
    assert main(command(b, tmp_path)) == 1  # same folder name and sizes, other weights
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another run" in err and "--overwrite" in err
    assert part.read_bytes() == before and not (tmp_path / "t.parquet").exists()
    header = json.loads(before.splitlines()[0])  # the part names its run: the fingerprint, then what it is
    assert len(before.splitlines()) == 1 + 3 and len(header["fingerprint"]) == 64
    assert main(command(b, tmp_path, "--overwrite")) == 0  # B's rows only
    assert read_table(tmp_path / "t.parquet") == oracle(b) != oracle(a)
    assert not part.exists()
    assert main(command(a, tmp_path)) == 1  # a finished table of B is not A's "already complete"
    assert "written by another run" in capsys.readouterr().err


def test_a_stop_between_table_and_manifest_loses_no_row(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    with monkeypatch.context() as m:
        m.setattr(corpus, "write_manifest", lambda *a, **k: (_ for _ in ()).throw(Stop()))
        with pytest.raises(Stop):
            main(command(tiny_checkpoint, tmp_path))
    assert (tmp_path / "t.parquet").exists() and not (tmp_path / "t.manifest.json").exists()
    capsys.readouterr()
    with monkeypatch.context() as m:
        no_batch(m)
        assert main(command(tiny_checkpoint, tmp_path)) == 0
    assert f"{len(SOURCES)} of {len(SOURCES)} sentences already written" in capsys.readouterr().err
    assert read_table(tmp_path / "t.parquet") == oracle(tiny_checkpoint)
    manifest = json.loads((tmp_path / "t.manifest.json").read_text(encoding="utf-8"))
    assert manifest["table"]["sha256"] == sha256(tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet.parts").exists()


def test_a_manifest_beside_another_table_is_not_complete_and_the_parts_are_used(tiny_checkpoint, tmp_path,
                                                                                 monkeypatch, capsys):
    """The issue's order (manifest first, then the table): a stop between them leaves this run's manifest beside
    an older table. The rerun must not call it complete, and must take its rows from the parts."""
    out = tmp_path / "t.parquet"
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    manifest = (tmp_path / "t.manifest.json").read_bytes()
    with monkeypatch.context() as m:
        m.setattr(corpus, "write_table", lambda *a, **k: (_ for _ in ()).throw(Stop()))
        with pytest.raises(Stop):
            main(command(tiny_checkpoint, tmp_path, "--overwrite"))
    write_table(out, read_table(out)[:1])  # an older table, under this run's manifest
    (tmp_path / "t.manifest.json").write_bytes(manifest)
    capsys.readouterr()
    with monkeypatch.context() as m:
        no_batch(m)
        assert main(command(tiny_checkpoint, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "already complete" not in err and f"{len(SOURCES)} of {len(SOURCES)} sentences already written" in err
    assert read_table(out) == oracle(tiny_checkpoint)


def test_a_correct_manifest_beside_a_one_row_table_is_not_complete(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "t.parquet"
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    write_table(out, read_table(out)[:1])
    capsys.readouterr()
    assert main(command(tiny_checkpoint, tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not match its manifest" in err and "--overwrite" in err
    assert len(read_table(out)) == 1
    assert main(command(tiny_checkpoint, tmp_path, "--overwrite")) == 0
    assert read_table(out) == oracle(tiny_checkpoint)


def test_the_parts_of_another_run_are_kept(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """Run X finished; run Y (another beam) started over it and stopped; X started again: nothing to do, and Y's
    parts are still there; X with another --out is refused while Y's parts are there, unless --overwrite."""
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    with monkeypatch.context() as m:
        stop_at_batch(m, 1)
        with pytest.raises(Stop):
            main(command(tiny_checkpoint, tmp_path, "--beam", "1", "--overwrite"))
    part = tmp_path / "t.parquet.parts" / "rank0.jsonl"
    before = part.read_bytes()
    capsys.readouterr()
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "already complete" in err and "another run, left as they are" in err and part.read_bytes() == before
    (tmp_path / "t.parquet").unlink()
    assert main(command(tiny_checkpoint, tmp_path)) == 1  # X's table gone: X would start beside Y's parts
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds rows of another run" in err and "--overwrite" in err
    assert part.read_bytes() == before
    with monkeypatch.context() as m:  # Y resumed: its own rows kept
        stop_at_batch(m, 0)
        with pytest.raises(Stop):
            main(command(tiny_checkpoint, tmp_path, "--beam", "1"))
    assert part.read_bytes() == before
    assert main(command(tiny_checkpoint, tmp_path, "--overwrite")) == 0
    assert read_table(tmp_path / "t.parquet") == oracle(tiny_checkpoint) and not part.exists()


def test_malformed_part_lines_are_dropped_and_computed_again(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    with monkeypatch.context() as m:
        stop_at_batch(m, 1)
        with pytest.raises(Stop):
            main(command(tiny_checkpoint, tmp_path))
    part = tmp_path / "t.parquet.parts" / "rank0.jsonl"
    good = [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines()[1:]]
    kept = good[0]
    no_flag = {k: v for k, v in kept.items() if k != "flag"}
    torn = json.dumps({**kept, "translation": "Über"}, ensure_ascii=False).encode()
    cut = torn.index("Ü".encode()) + 1  # inside the two bytes of Ü
    bad = [b"[1,2]", b"null", b"{}", json.dumps(no_flag).encode(), json.dumps({**kept, "flag": "yes"}).encode(),
           json.dumps({**kept, "id": True}).encode(), json.dumps({**kept, "score": "high"}).encode(),
           json.dumps({**kept, "id": 10 ** 6}).encode(), torn[:cut]]
    with open(part, "ab") as f:  # each after the good row it would replace, were it taken
        f.write(b"\n".join(bad) + b"\n" + torn[:cut])  # and a last line torn inside the character
    capsys.readouterr()
    assert main(command(tiny_checkpoint, tmp_path)) == 0
    assert f"3 of {len(SOURCES)} sentences already written" in capsys.readouterr().err
    assert read_table(tmp_path / "t.parquet") == oracle(tiny_checkpoint)


@contextlib.contextmanager
def read_only_folder(path: Path):
    """A folder no file can be made in: a read-only tmpfs mount (root), else a folder without write permission."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs",
                                                        str(path)], capture_output=True).returncode:
        pytest.skip("root writes any folder, and no read-only mount could be made")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.mark.parametrize("case", ["under a file", "read-only", "under /proc", "a directory, --overwrite",
                                  "alpha nan", "alpha inf", "empty source"])
def test_bad_out_alpha_and_empty_source_are_one_line(case, tiny_checkpoint, tmp_path, monkeypatch, capsys):
    args = command(tiny_checkpoint, tmp_path, references=None)
    with contextlib.ExitStack() as stack:
        out = None
        if case == "under a file":
            (tmp_path / "file").write_text("x")
            out, expected = tmp_path / "file" / "t.parquet", "is a file, not a directory"
        elif case == "read-only":
            out, expected = stack.enter_context(read_only_folder(tmp_path / "ro")) / "sub" / "t.parquet", "cannot write"
        elif case == "under /proc":
            out, expected = Path("/proc/corpus-test/t.parquet"), "cannot write"
        elif case == "a directory, --overwrite":
            (tmp_path / "t.parquet").mkdir()
            (tmp_path / "t.parquet" / "keep").write_text("x")
            args, expected = [*args, "--overwrite"], "is a directory"
        elif case.startswith("alpha"):
            args, expected = [*args, "--alpha", case.split()[1]], "--alpha must be a finite number"
        else:
            (tmp_path / "src.txt").write_bytes(b"")
            expected = "is empty"
        if out is not None:
            args = [*args, "--out", str(out)]
        if case != "empty source":  # refused before the model is loaded
            monkeypatch.setattr(corpus, "load", lambda *a, **k: pytest.fail("the model was loaded"))
        assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "t.parquet.parts").exists()
    if case == "a directory, --overwrite":
        assert (tmp_path / "t.parquet" / "keep").read_text() == "x"
