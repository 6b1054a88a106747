"""``python -m transformer.train``: end to end, resume after ``kill -9``, NaN guard, DDP with 2 CPU processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import transformer
from transformer import train

ROOT = Path(__file__).resolve().parents[1]


def small_args(data: Path, run_dir: Path, steps: int = 24, *extra: str) -> list[str]:
    return ["--data-dir", str(data), "--run-dir", str(run_dir), "--vocab-size", "80", "--d-model", "32",
            "--n-heads", "4", "--n-encoder-layers", "1", "--n-decoder-layers", "1", "--d-ff", "64",
            "--dropout", "0.1", "--batch-tokens", "300", "--epochs", "100", "--max-steps", str(steps),
            "--warmup", "10", "--eval-every", "8", "--bleu-sentences", "10", "--save-every", "2",
            "--snapshots", "0.25,0.5", "--average", "2", "--threads", "1", "--no-progress", *extra]


def run_module(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "transformer.train", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)


def test_train_end_to_end_exports_a_checkpoint(tiny_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    (out / "snapshots").mkdir(parents=True)  # an earlier export's snapshot in the same place must not survive
    (out / "snapshots" / "step0009999.safetensors").write_bytes(b"another run")
    assert train.main(small_args(tiny_corpus, tmp_path / "run", 24, "--out", str(out))) == 0
    run = tmp_path / "run"
    history = json.loads((run / "metrics.json").read_text())
    assert [h["step"] for h in history] == [8, 16, 24]
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    assert (run / "train.log").read_text().count("val BLEU") >= 3
    assert "--max-steps 24" in (run / "command.txt").read_text()
    assert len(list((run / "snapshots").glob("*.safetensors"))) == 2
    names = sorted(p.name for p in (run / "snapshots").iterdir())
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == names
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["training_command"].startswith("python -m transformer.train")
    final = meta["final_validation"]
    if final["averaged_checkpoints"]:  # the average of the last 2 validations, unless the last alone was better
        assert final["averaged_checkpoints"] == ["step0000016.safetensors", "step0000024.safetensors"]
    else:
        assert final["val_bleu"] > final["average_val_bleu"]
    assert "average of 2" in (run / "train.log").read_text()
    translator = transformer.load(out, device="cpu")
    result = translator.translate("A man rides a bike.", beam_size=2)
    assert isinstance(result.text, str) and len(result.cross_attentions) == 1
    snap = load_file(str(sorted((out / "snapshots").glob("*.safetensors"))[0]))
    assert all(t.dtype == torch.float16 for t in snap.values())
    missing, unexpected = translator.model.load_state_dict({k: v.float() for k, v in snap.items()}, strict=False)
    assert not unexpected


def test_kill_9_then_resume_gives_the_same_model(tiny_corpus: Path, tmp_path: Path) -> None:
    steps = 30
    straight = tmp_path / "straight"
    assert train.main(small_args(tiny_corpus, straight, steps, "--out", str(straight / "export"))) == 0

    resumed = tmp_path / "resumed"
    args = small_args(tiny_corpus, resumed, steps, "--out", str(resumed / "export"))
    proc = run_module(args)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if (resumed / "state.pt").is_file() and "step 8 " in _read(resumed / "train.log"):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be killed: " + proc.stdout.read()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (resumed / "export").exists()
    proc = run_module(args)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "resumed from" in _read(resumed / "train.log")
    a = load_file(str(straight / "export" / "model.safetensors"))
    b = load_file(str(resumed / "export" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # running the finished command again changes nothing and exits cleanly
    proc = run_module(args)
    proc.communicate(timeout=300)
    assert proc.returncode == 0


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def test_non_finite_loss_stops_without_writing(tiny_corpus: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    real = train.F.cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(train.F, "cross_entropy", poisoned)
    run = tmp_path / "run"
    assert train.main(small_args(tiny_corpus, run, 20, "--save-every", "100", "--eval-every", "100")) == 1
    assert "loss became nan at step 5" in capsys.readouterr().err
    assert not (run / "state.pt").exists()
    assert not list((run / "averaging").glob("*.safetensors"))


def test_resume_refuses_another_config(tiny_corpus: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    assert train.main(small_args(tiny_corpus, run, 4)) == 0
    args = small_args(tiny_corpus, run, 8)
    args[args.index("--d-ff") + 1] = "32"
    assert train.main(args) == 1
    assert "another model config" in capsys.readouterr().err


def test_missing_data_dir_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert train.main(small_args(tmp_path / "nowhere", tmp_path / "run", 4)) == 1
    assert "data directory not found" in capsys.readouterr().err


@pytest.mark.slow
def test_ddp_two_cpu_processes_keep_identical_replicas(tiny_corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "transformer.train", *small_args(tiny_corpus, run, 12, "--device", "cpu")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r0 = load_file(str(run / "replica0.safetensors"))
    r1 = load_file(str(run / "replica1.safetensors"))
    assert r0.keys() == r1.keys()
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k
    # and the replicas did train: weights moved away from the initialisation of the same seed
    torch.manual_seed(1)
    init = transformer.Transformer(transformer.TransformerConfig.load(run / "config.json")).state_dict()
    assert any(not torch.equal(init[k], r0[k]) for k in r0)
