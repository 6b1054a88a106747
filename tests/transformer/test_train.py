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
from conftest import tiny_model
from safetensors.torch import load_file

import transformer
from transformer import train
from transformer.training.step import lr_at, training_loss

ROOT = Path(__file__).resolve().parents[2]


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
    steps = 30  # on the CPU, where resuming is bit-exact (a GPU's generator: tests/transformer/test_cuda.py)
    straight = tmp_path / "straight"
    assert train.main(small_args(tiny_corpus, straight, steps, "--out", str(straight / "export"), "--device",
                                 "cpu")) == 0

    resumed = tmp_path / "resumed"
    args = small_args(tiny_corpus, resumed, steps, "--out", str(resumed / "export"), "--device", "cpu")
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
    import transformer.training.step

    real = transformer.training.step.smoothed_cross_entropy
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        calls["n"] += 1
        loss = real(*args, **kwargs)
        return loss * float("nan") if calls["n"] == 5 else loss

    monkeypatch.setattr(transformer.training.step, "smoothed_cross_entropy", poisoned)
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


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_one_line(tiny_corpus: Path, tmp_path: Path, capsys) -> None:
    assert train.main(small_args(tiny_corpus, tmp_path / "run", 4, "--device", "cuda")) == 1
    err = capsys.readouterr().err
    assert err == "error: CUDA was chosen but no GPU is available here; pick 'cpu' or 'auto'\n"


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


def _tiny_model(dropout: float) -> transformer.Transformer:
    """A one-layer tiny model in training mode (``conftest.tiny_model``)."""
    return tiny_model(0, src_vocab_size=30, tgt_vocab_size=30, d_model=16, n_heads=2, n_encoder_layers=1,
                      n_decoder_layers=1, d_ff=32, dropout=dropout).train()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 30, (3, 7), generator=g)
    tgt = torch.randint(3, 30, (3, 6), generator=g)
    tgt[:, 0] = 1  # BOS
    src[2, 5:] = 0  # padding (pad_id 0) in a source and a target
    tgt[1, 4:] = 0
    return src, tgt


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_smoothed_cross_entropy_equals_torchs(eps: float) -> None:
    """The hand-written loss and gradient equal ``F.cross_entropy`` with label smoothing, row by row."""
    import torch.nn.functional as F

    from transformer.training.step import smoothed_cross_entropy

    g = torch.Generator().manual_seed(3)
    logits = (3 * torch.randn(40, 57, generator=g, dtype=torch.float64)).requires_grad_()
    gold = torch.randint(0, 57, (40,), generator=g)
    weights = torch.rand(40, generator=g, dtype=torch.float64)  # a different upstream gradient for each row
    ours = smoothed_cross_entropy(logits, gold, eps)
    (ours * weights).sum().backward()
    grad, logits.grad = logits.grad.clone(), None
    theirs = F.cross_entropy(logits, gold, label_smoothing=eps, reduction="none")
    (theirs * weights).sum().backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(grad, logits.grad)
    assert torch.autograd.gradcheck(lambda z: smoothed_cross_entropy(z, gold[:5] % 7, eps), (logits[:5, :7].detach()
                                    .clone().requires_grad_(),))


def test_training_loss_equals_cross_entropy_over_the_padded_batch() -> None:
    """The training loss scores only real target tokens (``logits_mask``) with the hand-written loss: the same
    value and parameter gradients as ``F.cross_entropy(..., ignore_index=pad)`` over the full padded logits."""
    import torch.nn.functional as F

    model, (src, tgt) = _tiny_model(0.0), _batch()
    assert (tgt[:, 1:] == 0).any()
    loss, ce = training_loss(model, src, tgt, pad_id=0, label_smoothing=0.1)
    loss.backward()
    fast = {n: q.grad.clone() for n, q in model.named_parameters()}
    model.zero_grad()
    logits = model(src, tgt[:, :-1]).logits  # (B, T, V)
    reference = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=0,
                                label_smoothing=0.1)
    reference.backward()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6) and ce is loss
    for n, q in model.named_parameters():
        torch.testing.assert_close(fast[n], q.grad, rtol=1e-5, atol=1e-7, msg=n)


def test_keep_freed_memory_on_glibc() -> None:
    """On glibc (this project's Linux machines) the malloc settings are taken; elsewhere nothing happens."""
    import platform

    from transformer.training.step import keep_freed_memory

    result = keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert result is True
    else:
        assert result is False


def test_r_drop_loss_against_a_hand_written_loop() -> None:
    """R-Drop: the KL part, recomputed token by token from the same two passes (same dropout masks by seed)."""
    model, (src, tgt) = _tiny_model(0.3), _batch()
    torch.manual_seed(5)
    loss, ce = training_loss(model, src, tgt, pad_id=0, label_smoothing=0.1, r_drop=2.0)
    torch.manual_seed(5)
    logits = model(torch.cat([src, src]), torch.cat([tgt[:, :-1], tgt[:, :-1]])).logits.detach()  # (2B, T, V)
    b = src.size(0)
    kls, ces = [], []
    for i in range(b):
        for t in range(tgt.size(1) - 1):
            gold = int(tgt[i, t + 1])
            if gold == 0:
                continue
            p, q = logits[i, t].softmax(-1), logits[b + i, t].softmax(-1)
            kls.append(0.5 * float((p * (p / q).log()).sum() + (q * (q / p).log()).sum()))
            for row in (logits[i, t], logits[b + i, t]):
                logp = row.log_softmax(-1)
                ces.append(float(-(0.9 * logp[gold] + 0.1 * logp.mean())))
    expected_ce = sum(ces) / len(ces)
    assert ce.item() == pytest.approx(expected_ce, rel=1e-5)
    assert sum(kls) > 0
    assert loss.item() == pytest.approx(expected_ce + 2.0 * sum(kls) / len(kls), rel=1e-5)
    loss.backward()  # both passes get gradients
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_r_drop_gradients_match_torchs_own_losses() -> None:
    """The R-Drop loss shares one log-softmax between its terms; its gradients equal those of the same loss
    written with ``F.cross_entropy`` (label smoothing, ignore_index) and ``F.kl_div``, with padding in the batch."""
    import torch.nn.functional as F

    model, (src, tgt) = _tiny_model(0.3), _batch()
    assert (tgt[:, 1:] == 0).any()  # the batch is padded
    torch.manual_seed(7)
    loss, _ = training_loss(model, src, tgt, pad_id=0, label_smoothing=0.1, r_drop=1.5)
    loss.backward()
    fast = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    torch.manual_seed(7)
    gold = tgt[:, 1:].repeat(2, 1)
    logits = model(src.repeat(2, 1), tgt[:, :-1].repeat(2, 1)).logits  # (2B, T, V)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=0, label_smoothing=0.1)
    lp, lq = logits.log_softmax(-1).chunk(2)
    kl = 0.5 * (F.kl_div(lq, lp, reduction="none", log_target=True)
                + F.kl_div(lp, lq, reduction="none", log_target=True)).sum(-1)  # (B, T)
    reference = ce + 1.5 * kl[tgt[:, 1:] != 0].mean()
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    reference.backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(fast[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)


def test_r_drop_without_dropout_is_plain_cross_entropy() -> None:
    """Without dropout both passes agree: no KL, and the loss is the single pass's cross-entropy."""
    model, (src, tgt) = _tiny_model(0.0), _batch()
    plain, _ = training_loss(model, src, tgt, pad_id=0, label_smoothing=0.1)
    doubled, ce = training_loss(model, src, tgt, pad_id=0, label_smoothing=0.1, r_drop=5.0)
    assert doubled.item() == pytest.approx(plain.item(), abs=1e-5) and ce.item() == pytest.approx(plain.item(),
                                                                                                  abs=1e-5)


def test_train_with_r_drop_runs_and_records_it(tiny_corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train.main(small_args(tiny_corpus, run, 8, "--r-drop", "1.0")) == 0
    assert json.loads((run / "args.json").read_text())["r_drop"] == 1.0
    history = json.loads((run / "metrics.json").read_text())
    assert history and all(h["train_loss"] > 0 for h in history)


def test_cooldown_anneals_a_finished_run_continued_to_more_steps(tiny_corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train.main(small_args(tiny_corpus, run, 16)) == 0
    first = json.loads((run / "metrics.json").read_text())
    assert train.main(small_args(tiny_corpus, run, 24, "--cooldown", "8")) == 0
    history = json.loads((run / "metrics.json").read_text())
    assert history[:2] == first  # the 16 steps before are kept as they were

    def paper(step: int) -> float:  # d_model 32, warm-up 10, scale 1, written out by hand
        return 32 ** -0.5 * min(step ** -0.5, step * 10 ** -1.5)

    assert first[-1]["lr"] == pytest.approx(paper(16))
    assert history[-1]["step"] == 24 and history[-1]["lr"] == pytest.approx(paper(24) / 8)  # last of 8 cool-down steps
    state = torch.load(run / "state.pt", map_location="cpu", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(paper(24) / 8)
    assert [lr_at(s, 32, 10, 1.0, 24, 8) / paper(s) for s in (16, 17, 20, 24)] == pytest.approx(
        [1.0, 1.0, 5 / 8, 1 / 8])
