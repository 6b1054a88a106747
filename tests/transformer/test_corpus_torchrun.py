"""``python -m transformer.corpus`` under real ``torchrun`` (``python -m torch.distributed.run``) on the CPU (gloo, one
thread a rank): two processes on one machine, two "machines" on 127.0.0.1 (two torchrun calls, one c10d rendezvous),
and a rank killed mid-run then resumed; each merged table equals the one-process table row for row."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from test_corpus import ROOT, command, kill_when, read_table, rows_in

from transformer.corpus import main

pytestmark = pytest.mark.slow
LINES = [f"A man {'and a dog ' * (i % 4)}rides a red bike number {i}." for i in range(24)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(launcher: list[str], args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "transformer.corpus",
                             *args, "--threads", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)


def finish(proc: subprocess.Popen) -> str:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:]
    return err


def args(checkpoint: Path, tmp_path: Path, out: str, batch: int = 2) -> list[str]:
    return command(checkpoint, tmp_path, "--batch-size", str(batch), sources=LINES, references=None, out=out)


def one_process(checkpoint: Path, tmp_path: Path, batch: int = 2) -> list[dict]:
    """The one-process table (no torchrun) of ``LINES``."""
    assert main(args(checkpoint, tmp_path, "single.parquet", batch)) == 0
    return read_table(tmp_path / "single.parquet")


@pytest.fixture()
def single(tiny_checkpoint, tmp_path) -> list[dict]:
    return one_process(tiny_checkpoint, tmp_path)


def test_two_processes_on_one_machine_equal_one(tiny_checkpoint, tmp_path, single):
    err = finish(torchrun(["--standalone", "--nproc-per-node", "2"], args(tiny_checkpoint, tmp_path, "two.parquet")))
    assert "2 process(es)" in err
    assert read_table(tmp_path / "two.parquet") == single
    assert not (tmp_path / "two.parquet.parts").exists()


def test_two_machines_on_one_rendezvous_equal_one(tiny_checkpoint, tmp_path, single):
    port = free_port()
    nodes = [torchrun(["--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank), "--rdzv-backend", "c10d",
                       "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "corpus-test", "--local-addr",
                       "127.0.0.1"], args(tiny_checkpoint, tmp_path, "nodes.parquet")) for rank in (0, 1)]
    errs = [finish(node) for node in nodes]
    assert any("2 process(es)" in err for err in errs)
    assert read_table(tmp_path / "nodes.parquet") == single


def test_a_killed_rank_resumes_and_the_merge_equals_one(tiny_checkpoint, tmp_path):
    launcher = ["--standalone", "--nproc-per-node", "2"]
    first = torchrun(launcher, args(tiny_checkpoint, tmp_path, "k.parquet", batch=1))
    part = tmp_path / "k.parquet.parts" / "rank1.jsonl"
    while not part.exists():
        assert first.poll() is None, first.communicate()[1][-4000:]
        time.sleep(0.01)
    workers = [p for p in psutil.Process(first.pid).children(recursive=True)
               if p.environ().get("RANK") == "1" and "transformer.corpus" in " ".join(p.cmdline())]
    assert len(workers) == 1
    kill_when(first, part, 3, pid=workers[0].pid)  # torchrun then stops rank 0 too and fails
    assert first.returncode != 0 and not (tmp_path / "k.parquet").exists()
    written = rows_in(part)
    assert 3 <= written < len(LINES) // 2
    err = finish(torchrun(launcher, args(tiny_checkpoint, tmp_path, "k.parquet", batch=1)))
    assert f"rank 1: {written} of {len(LINES) // 2} sentences already written" in err
    assert read_table(tmp_path / "k.parquet") == one_process(tiny_checkpoint, tmp_path, batch=1)


@pytest.mark.parametrize("value", ["two", "²", "-1", "1e3", "9" * 40])
def test_a_torchrun_variable_that_is_no_whole_number_is_one_line_naming_it(monkeypatch, value):
    """WORLD_SIZE / LOCAL_RANK are read as ASCII digits (torchrun writes them); anything else is refused in one line
    that names the variable, before any process group is joined; unset: one process."""
    from transformer.checkpoint.files import join_processes, torchrun_count

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert join_processes(torch.device("cpu")) == (0, 1, torch.device("cpu"))
    monkeypatch.setenv("WORLD_SIZE", value)
    with pytest.raises(ValueError, match="^WORLD_SIZE=") as err:
        join_processes(torch.device("cpu"))
    assert "\n" not in str(err.value) and len(str(err.value)) < 120
    monkeypatch.setenv("LOCAL_RANK", " 3 ")
    assert torchrun_count("LOCAL_RANK", 0) == 3


def test_more_processes_on_a_machine_than_gpus_is_one_line_before_any_group(monkeypatch):
    """Every process of a machine with fewer GPUs than torchrun's processes on it says so in one line, naming both
    counts and the two ways out, before it touches a GPU or joins a group (nccl cannot share a GPU between two)."""
    from transformer.checkpoint import files
    from transformer.checkpoint.files import CheckpointError, join_processes

    touched = []
    monkeypatch.setattr(files.torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(files.torch.cuda, "set_device", lambda device: touched.append(device))
    monkeypatch.setattr(files.dist, "init_process_group", lambda *a, **k: touched.append("group"))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        with pytest.raises(CheckpointError) as err:
            join_processes(torch.device("cuda"))
        assert str(err.value) == ("torchrun started 2 processes on this machine, which has 1 GPU(s): one process a "
                                  "GPU (--nproc-per-node 1), or --device cpu")
    assert touched == []
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one process a GPU: its GPU, then the group
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(files.dist, "get_rank", lambda: 1)
    monkeypatch.setattr(files.dist, "get_world_size", lambda: 2)
    assert join_processes(torch.device("cuda")) == (1, 2, torch.device("cuda", 0))
    assert touched == [torch.device("cuda", 0), "group"]
    # on the CPU nothing is asked of CUDA: gloo, whatever the machine has
    touched.clear()
    monkeypatch.setattr(files.torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert join_processes(torch.device("cpu")) == (1, 2, torch.device("cpu"))
    assert touched == ["group"]
