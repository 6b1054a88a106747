"""``transformer.network.linear``: a bfloat16 model on a CPU without oneDNN's bfloat16 product (AVX2 and older)
computes its linear layers in float32, block by block, and rounds back: the same numbers as the native product,
checked here against a float64 oracle and against the native path (which this machine may have: the branch is
forced by replacing ``bf16_matmul_native``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from transformer import Transformer, TransformerConfig
from transformer.decoding.search import greedy_decode
from transformer.network import linear as linear_module
from transformer.network.linear import in_float32, linear

BF16_ULP = 2.0 ** -7  # bfloat16 keeps 8 significant bits: one unit in the last place, relative, at worst


@pytest.fixture
def no_native(monkeypatch):
    """This process behaves as on a CPU without oneDNN's bfloat16 product."""
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: False)


@pytest.mark.parametrize("column_major", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("grad", [False, True])
def test_the_float32_branch_is_the_product_rounded_once(no_native, monkeypatch, column_major, with_bias, grad):
    monkeypatch.setattr(linear_module, "CHUNK_BYTES", 4 * 24 * 7)  # blocks of 7 output features: 37 = 5 x 7 + 2
    torch.manual_seed(0)
    weight = torch.randn(37, 24).to(torch.bfloat16)
    if column_major:  # the layout weights.column_major_weights gives a small model
        weight = weight.t().contiguous().t()
    bias = torch.randn(37).to(torch.bfloat16) if with_bias else None
    x = torch.randn(2, 3, 24).to(torch.bfloat16)
    assert in_float32(weight) and not in_float32(weight.float())
    with torch.set_grad_enabled(grad):
        got = linear(x, weight, bias)
    oracle = F.linear(x.double(), weight.double(), None if bias is None else bias.double())  # (2, 3, 37)
    assert got.dtype == torch.bfloat16 and got.shape == (2, 3, 37)
    torch.testing.assert_close(got.double(), oracle, rtol=BF16_ULP, atol=1e-6)


def test_a_float32_weight_or_a_native_cpu_takes_the_plain_product(monkeypatch):
    torch.manual_seed(0)
    weight, x = torch.randn(5, 4), torch.randn(3, 4)
    assert torch.equal(linear(x, weight), F.linear(x, weight))
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: True)
    assert not in_float32(weight.to(torch.bfloat16))


def test_where_bfloat16_is_converted_in_software_many_rows_run_in_float32(monkeypatch):
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: True)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)  # AVX-512 without its bfloat16 instructions
    torch.manual_seed(0)
    weight = torch.randn(9, 16).to(torch.bfloat16)
    few = linear_module.FLOAT32_MIN_ROWS - 1
    assert not in_float32(weight) and not in_float32(weight, few) and in_float32(weight, few + 1)
    for rows in (few, few + 1):
        x = torch.randn(rows, 16).to(torch.bfloat16)
        got = linear(x, weight)
        if rows == few:
            assert torch.equal(got, F.linear(x, weight))  # oneDNN's own product
        torch.testing.assert_close(got.double(), F.linear(x.double(), weight.double()), rtol=BF16_ULP, atol=1e-6)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: True)
    assert not in_float32(weight, 10_000)


def _tiny_bf16() -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, n_encoder_layers=2,
                            n_decoder_layers=2, d_ff=64, max_len=64)
    full = Transformer(cfg).eval()
    half = Transformer(cfg).eval()
    half.load_state_dict(full.state_dict())
    return full, half.to(torch.bfloat16)


def test_a_bfloat16_model_computed_in_float32_matches_the_native_product_and_float32():
    full, half = _tiny_bf16()
    src, tgt = torch.tensor([[5, 6, 7, 8, 9, 2]]), torch.tensor([[1, 12, 13, 14]])
    with torch.no_grad():
        native = [half(src, tgt, return_attention=r).logits.float() for r in (False, True)]
        oracle = full(src, tgt).logits
    monkeypatch = pytest.MonkeyPatch()
    try:
        monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: False)
        assert in_float32(half.generator.weight)
        with torch.no_grad():
            out = half(src, tgt, return_attention=True)
            fast = half(src, tgt).logits.float()  # F.scaled_dot_product_attention's path
        hyp = greedy_decode(half, src, max_len_a=0.0, max_len_b=8)
        recomputed = greedy_decode(half, src, max_len_a=0.0, max_len_b=8, use_cache=False)
    finally:
        monkeypatch.undo()
    assert out.logits.dtype == torch.bfloat16
    assert all(a.dtype == torch.float32 for a in out.cross_attentions)
    for logits in (out.logits.float(), fast):
        torch.testing.assert_close(logits, native[1], atol=0.05, rtol=0.02)  # as transformers' bfloat16 does
        torch.testing.assert_close(logits, oracle, atol=0.08, rtol=0.05)
    torch.testing.assert_close(native[0], native[1], atol=0.05, rtol=0.02)
    # the cached decoding step (its own output projection call) agrees with the full recomputation
    assert hyp.tokens.tolist() == recomputed.tokens.tolist()
    torch.testing.assert_close(hyp.scores, recomputed.scores, atol=0.05, rtol=0.02)


@pytest.mark.slow  # a fresh interpreter: the check is made once per process
def test_onednn_capped_below_its_bfloat16_instructions_counts_as_without_them():
    code = ("import torch; from transformer.network.linear import bf16_matmul_native as n; "
            "print(n(), bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))")
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    native, supported = plain.stdout.split()
    assert native == supported  # uncapped: what PyTorch says of this CPU
    capped = subprocess.run([sys.executable, "-c", code], env={**env, "ONEDNN_MAX_CPU_ISA": "AVX2"},
                            capture_output=True, text=True, check=True)
    assert capped.stdout.split()[0] == "False"
    code = "from transformer.network.linear import bf16_matmul_fast as f; print(f())"
    emulated = subprocess.run([sys.executable, "-c", code], env={**env, "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
                              capture_output=True, text=True, check=True)
    assert emulated.stdout.split()[0] == "False"
