"""The GPU path: the same model on CUDA and on CPU. Every test skips cleanly without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import tiny_model

import transformer
from transformer import Transformer

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")]


def tiny(norm_first: bool) -> Transformer:
    """This file's tiny model (``conftest.tiny_model``)."""
    return tiny_model(0, src_vocab_size=50, tgt_vocab_size=50, max_len=64, norm_first=norm_first)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cuda_forward_equals_cpu(norm_first):
    model = tiny(norm_first)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt = torch.tensor([[2, 11, 12, 13], [2, 14, 0, 0]])
    cpu = model(src, tgt, return_attention=True)
    gpu = model.to("cuda")(src.cuda(), tgt.cuda(), return_attention=True)
    torch.testing.assert_close(gpu.logits.cpu(), cpu.logits, atol=1e-4, rtol=1e-4)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(gpu, name), getattr(cpu, name)):
            torch.testing.assert_close(a.cpu(), b, atol=1e-4, rtol=1e-4)


def test_cuda_translations_equal_cpu(tiny_checkpoint):
    cpu = transformer.load(tiny_checkpoint, device="cpu")
    gpu = transformer.load(tiny_checkpoint, device="cuda")
    texts = ["A man rides a bike.", "Two dogs play in the park with a red ball."]
    for beam in (1, 4):
        assert [r.target_ids for r in gpu.translate_batch(texts, beam_size=beam)] == \
            [r.target_ids for r in cpu.translate_batch(texts, beam_size=beam)]


def test_checkpoint_trained_on_cuda_loads_on_cpu(tiny_corpus, tmp_path):
    out = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "transformer.train", "--data-dir", str(tiny_corpus),
           "--run-dir", str(tmp_path / "run"), "--out", str(out), "--vocab-size", "80", "--d-model", "32",
           "--n-heads", "4", "--n-encoder-layers", "1", "--n-decoder-layers", "1", "--d-ff", "64",
           "--batch-tokens", "512", "--epochs", "1", "--device", "cuda", "--no-progress", "--snapshots", ""]
    subprocess.run(cmd, check=True, capture_output=True)
    tr = transformer.load(out, device="cpu")
    assert tr.device.type == "cpu" and isinstance(tr.translate("A dog runs.").text, str)
    assert json.loads((out / "metadata.json").read_text())["device"].startswith("cuda")


def test_a_run_saved_on_cuda_resumes_its_gpu_generator(tmp_path):
    """Dropout's masks on a GPU come from its own generator: ``state.pt`` keeps it, so a resumed run draws what the
    run would have drawn next (the CPU's generator alone would leave the masks to the new process's seed)."""
    from transformer.training.train import Progress, resume, save_state

    model = tiny(False).to("cuda")
    optimizer, scaler = torch.optim.Adam(model.parameters()), torch.amp.GradScaler("cuda", enabled=False)
    torch.cuda.manual_seed(3)
    torch.rand(5, device="cuda")
    save_state(tmp_path / "state.pt", model, optimizer, scaler, Progress(step=7))
    expected = torch.rand(5, device="cuda")  # what the run draws next
    torch.rand(100, device="cuda")  # it goes on (or is killed and started again: torch.cuda.manual_seed(0))
    assert resume(tmp_path / "state.pt", model, optimizer, scaler).step == 7
    assert torch.equal(torch.rand(5, device="cuda"), expected)


def test_app_translates_on_cuda(tiny_checkpoint, monkeypatch):
    from conftest import APP
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("ATTN_CHECKPOINT", str(tiny_checkpoint))
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.sidebar.selectbox(key="device").set_value("cuda")
    at.run()
    assert not at.exception and not at.error
    assert any("on cuda" in c.value for c in at.caption)


def test_bench_cuda_section_runs():
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json"], capture_output=True, text=True,
                          timeout=900)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "cuda" in result and result["cuda"]
