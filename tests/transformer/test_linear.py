"""``transformer.network.linear``: each product's route chosen by measurement, once per product class and row bucket
(float32: MKL's ``F.linear`` or oneDNN's prepacked product; bfloat16 on a CPU without its instructions: the native
product or float32 from float32 copies, block by block, rounded back), ``ATTN_GEMM`` forcing the float32 library.
The routes give the same numbers (checked against a float64 oracle and the plain path); the choice follows the
timings (given here by a stand-in for the race, since this machine's own are what they are) and is made once,
whichever threads ask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from transformer import Transformer, TransformerConfig
from transformer.decoding.search import beam_search, greedy_decode
from transformer.network import linear as linear_module
from transformer.network import routes as routes_module
from transformer.network.linear import (
    activation_dtype,
    gemm_setting,
    in_float32,
    linear,
    native_product,
    pack,
)
from transformer.network.routes import measured_routes

BF16_ULP = 2.0 ** -7  # bfloat16 keeps 8 significant bits: one unit in the last place, relative, at worst


def without_bf16_instructions(monkeypatch: pytest.MonkeyPatch, float32: tuple[bool, ...] = (True,) * 3,
                              native: bool = False) -> None:
    """This process behaves as on a CPU without bfloat16 instructions (``native``: oneDNN converts in software;
    else no bfloat16 product at all), whose measurement chose float32 for the buckets ``float32`` says."""
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: native)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)
    monkeypatch.setattr(linear_module, "bfloat16_routes", lambda weight: float32)


@pytest.fixture
def no_native(monkeypatch):
    without_bf16_instructions(monkeypatch)


@pytest.fixture
def fresh(monkeypatch):
    """Nothing measured yet in this process, ``ATTN_GEMM`` unset, and a stand-in for the race: ``races`` (a list
    the test fills) gives each timing in turn, ``(plain route's seconds, the other's)`` on both clocks or a ``Race``,
    after running both calls once (they must work); ``raced`` counts them."""
    monkeypatch.setattr(routes_module, "_MEASURED", {})
    monkeypatch.delenv("ATTN_GEMM", raising=False)
    state = {"races": [], "raced": 0}

    def race(plain, other):
        plain(), other()
        state["raced"] += 1
        got = state["races"].pop(0)
        return got if isinstance(got, routes_module.Race) else routes_module.Race(got, got)  # both clocks alike

    monkeypatch.setattr(routes_module, "_race", race)
    return state


@pytest.mark.parametrize("column_major", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("rows_dtype", [torch.bfloat16, torch.float32])
def test_the_float32_branch_is_the_product_rounded_once(no_native, monkeypatch, column_major, with_bias, grad,
                                                        rows_dtype):
    """bfloat16 rows: the float32 product rounded back once; float32 rows (the activations of a bfloat16 model on
    such a CPU): the float32 product of the bfloat16 weight, not rounded."""
    monkeypatch.setattr(linear_module, "CONVERT_BLOCK_BYTES", 4 * 24 * 7)  # blocks of 7 output features: 37 = 5 x 7 + 2
    torch.manual_seed(0)
    weight = torch.randn(37, 24).to(torch.bfloat16)
    if column_major:  # the layout weights.column_major_weights gives a small model
        weight = weight.t().contiguous().t()
    bias = torch.randn(37).to(torch.bfloat16) if with_bias else None
    x = torch.randn(2, 3, 24).to(rows_dtype)
    assert in_float32(weight) and not in_float32(weight.float())
    with torch.set_grad_enabled(grad):
        got = linear(x, weight, bias)
    oracle = F.linear(x.double(), weight.double(), None if bias is None else bias.double())  # (2, 3, 37)
    assert got.dtype == rows_dtype and got.shape == (2, 3, 37)
    tolerance = BF16_ULP if rows_dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(got.double(), oracle, rtol=tolerance, atol=1e-6)


@pytest.mark.parametrize("with_bias", [False, True])
def test_the_float32_blocks_take_the_library_measured_for_them(no_native, fresh, monkeypatch, with_bias):
    """bfloat16's float32 route multiplies each converted block through MKL or oneDNN as measured for the block's
    class and the rows' bucket (``linear.block_onednn``): here oneDNN for 1 row and for many, MKL for 2-16, measured
    once; ``ATTN_GEMM`` forces either; every way gives the float64 product of the bfloat16 weight."""
    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's linear is not in this torch build")
    monkeypatch.setattr(linear_module, "CONVERT_BLOCK_BYTES", 4 * 24 * 7)  # blocks of 7 output features: 37 = 5 x 7 + 2
    torch.manual_seed(0)
    weight = torch.randn(37, 24).to(torch.bfloat16)
    bias = torch.randn(37).to(torch.bfloat16) if with_bias else None
    calls = []
    product = linear_module._onednn_product
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: calls.append(a[0].size(0)) or product(*a))
    fresh["races"] += [(1.0, 0.5), (1.0, 2.0), (1.0, 0.5)]  # (MKL, oneDNN) at 1, 4 and 64 rows
    with torch.no_grad():
        linear(torch.randn(2, 24), weight, bias)  # the first product measures the block's class
    assert fresh["raced"] == 3
    for setting, rows, through_onednn in [("auto", 1, True), ("auto", 4, False), ("auto", 64, True), ("mkl", 64, False),
                                          ("onednn", 4, True)]:
        monkeypatch.setenv("ATTN_GEMM", setting)
        calls.clear()
        x = torch.randn(rows, 24)
        with torch.no_grad():
            got = linear(x, weight, bias)
        oracle = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
        torch.testing.assert_close(got.double(), oracle, rtol=1e-5, atol=1e-5)
        assert (calls == [rows] * 6) if through_onednn else not calls, (setting, rows)  # 6 blocks, each through it
    assert fresh["raced"] == 3  # the block's class measured once, for its three buckets


def test_the_native_route_of_float32_rows_rounds_them_at_its_edges(no_native):
    """A bfloat16 weight's native product of float32 rows: the rows rounded to bfloat16, the product returned in
    float32 (as ``F.linear`` in bfloat16 gives it)."""
    torch.manual_seed(0)
    weight, bias, x = torch.randn(9, 16).to(torch.bfloat16), torch.randn(9).to(torch.bfloat16), torch.randn(4, 16)
    got = native_product(x, weight, bias)
    assert got.dtype == torch.float32
    oracle = F.linear(x.to(torch.bfloat16).double(), weight.double(), bias.double())  # the rounded rows, exactly
    torch.testing.assert_close(got.double(), oracle, rtol=2 * BF16_ULP, atol=1e-6)
    assert torch.equal(native_product(x, weight.float(), bias.float()), F.linear(x, weight.float(), bias.float()))


def test_a_float32_weight_or_a_native_cpu_takes_the_plain_product(monkeypatch):
    torch.manual_seed(0)
    weight, x = torch.randn(5, 4), torch.randn(3, 4)
    assert torch.equal(linear(x, weight), F.linear(x, weight))
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: True)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)  # not computed (and cached) from the stand-in
    assert not in_float32(weight.to(torch.bfloat16))


def test_attn_gemm_is_auto_mkl_or_onednn_and_anything_else_one_line_naming_it(monkeypatch):
    from transformer.network.weights import decoding_layout

    for raw, value in (("", "auto"), ("AUTO", "auto"), (" mkl ", "mkl"), ("oneDNN", "onednn")):
        monkeypatch.setenv("ATTN_GEMM", raw)
        assert gemm_setting() == value
    monkeypatch.delenv("ATTN_GEMM")
    assert gemm_setting() == "auto"
    monkeypatch.setenv("ATTN_GEMM", "fastest")
    refused = r"^ATTN_GEMM='fastest' is not understood: give auto or mkl or onednn, or leave it unset for auto$"
    with pytest.raises(ValueError, match=refused):
        gemm_setting()
    with pytest.raises(ValueError, match="ATTN_GEMM"):  # a load refuses it before measuring anything
        decoding_layout(_tiny_bf16()[0])
    from transformer import CheckpointError, load

    with pytest.raises(CheckpointError, match=refused):
        load("no/such/checkpoint")  # before anything is read: the commands' one-line error


def test_the_other_route_is_kept_only_where_both_clocks_say_it_is_faster(fresh):
    """A busy machine's wall clock counts the waits for a core, a multi-threaded call's CPU time its spinning: the
    other route is taken only where both clocks agree (else the plain product, which needs no copy)."""
    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")
    Race = routes_module.Race
    fresh["races"] += [Race((2.0, 1.0), (2.0, 1.0)),  # both: oneDNN
                       Race((2.0, 1.0), (1.0, 2.0)),  # the wall clock only (it waited for a core): MKL
                       Race((1.0, 2.0), (2.0, 1.0))]  # the CPU clock only: MKL
    packed = pack(torch.randn(24, 16).t().contiguous().t(), torch.randn(24))
    assert packed.onednn == (True, False, False)
    (measured,) = measured_routes()
    assert measured.seconds[1] == (2.0, 1.0) and measured.cpu_seconds[1] == (1.0, 2.0)
    assert "CPU" in measured.line()


def test_a_race_times_both_calls_by_both_clocks():
    """The real race: each call's least seconds on the wall clock and on the CPU clock, the slower call slower."""
    a = torch.randn(256, 256)
    race = routes_module._race(lambda: a @ a, lambda: [a @ a for _ in range(4)])
    assert all(0 < p < o for p, o in (race.wall, race.cpu)), race


def test_the_faster_library_is_kept_for_each_row_bucket_once_per_class(fresh, monkeypatch):
    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")
    torch.manual_seed(0)
    weight, bias = torch.randn(24, 16).t().contiguous().t(), torch.randn(24)  # column-major, as a loaded model's
    # oneDNN faster for one row, slower for a few, faster for many but by less than the margin
    fresh["races"] += [(2.0, 1.0), (1.0, 2.0), (1.0, 1.0 - (1 - routes_module.ONEDNN_MARGIN) / 2)]
    packed = pack(weight, bias)
    assert packed.onednn == (True, False, False) and packed.route() == "onednn|mkl|mkl" and fresh["raced"] == 3
    (measured,) = measured_routes()
    assert measured.chosen == ("onednn", "mkl", "mkl") and measured.column_major and measured.bias
    assert "24" in measured.line() and "onednn" in measured.line()
    # the same class again (another layer's weight): the measurement kept, not taken again
    other = pack(torch.randn(24, 16).t().contiguous().t(), torch.randn(24))
    assert other.onednn == packed.onednn and fresh["raced"] == 3
    # each bucket takes its route, with the plain product's numbers
    calls = []
    product = linear_module._onednn_product
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: calls.append(a[0].size(0)) or product(*a))
    with torch.no_grad():
        for rows in (1, 3, 40):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(linear(x, weight, bias, packed), F.linear(x, weight, bias), atol=1e-5,
                                       rtol=1e-5)
    assert calls == [1]
    # MKL faster everywhere: no copy kept, and a later weight of that class is not packed or timed again
    fresh["races"] += [(1.0, 2.0)] * 3
    assert pack(torch.randn(8, 16), None) is None and fresh["raced"] == 6
    assert pack(torch.randn(8, 16), None) is None and fresh["raced"] == 6
    # forced: every bucket, or none, without timing anything
    monkeypatch.setenv("ATTN_GEMM", "onednn")
    assert pack(torch.randn(5, 16)).onednn == (True, True, True)
    monkeypatch.setenv("ATTN_GEMM", "mkl")
    assert pack(weight, bias) is None and fresh["raced"] == 6
    # never a copy for bfloat16 without its instructions, or for float64
    monkeypatch.setenv("ATTN_GEMM", "onednn")
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)
    assert pack(weight.to(torch.bfloat16)) is None and pack(weight.double()) is None


def test_with_bfloat16_instructions_a_bfloat16_weight_gets_the_copy_that_measured_faster(fresh, monkeypatch):
    """On a CPU with bfloat16 instructions ``F.linear`` reorders a bfloat16 weight for them at every call; a
    prepacked copy is kept for the buckets where its product measured faster, and gives the same numbers."""
    if not linear_module._onednn_linear() or not linear_module.bf16_matmul_fast():
        pytest.skip("needs oneDNN's packed linear and a CPU with bfloat16 instructions")
    torch.manual_seed(0)
    weight, bias = torch.randn(24, 16).to(torch.bfloat16), torch.randn(24).to(torch.bfloat16)
    fresh["races"] += [(1.0, 2.0), (2.0, 1.0), (2.0, 1.0)]  # plain faster for one row, the copy for more
    packed = pack(weight, bias)
    assert packed.onednn == (False, True, True) and packed.route() == "plain|onednn|onednn"
    (measured,) = measured_routes()
    assert measured.routes == ("plain", "onednn") and measured.dtype == "bfloat16"
    calls = []
    product = linear_module._onednn_product
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: calls.append(a[0].size(0)) or product(*a))
    with torch.no_grad():
        for rows in (1, 3, 40):
            x = torch.randn(rows, 16).to(torch.bfloat16)
            expected = x.float() @ weight.float().t() + bias.float()  # float32 accumulation, one rounding
            torch.testing.assert_close(linear(x, weight, bias, packed).float(), expected, atol=0.05, rtol=0.02)
    assert calls == [3, 40]
    monkeypatch.setenv("ATTN_GEMM", "mkl")  # no copies
    assert pack(weight, bias) is None


def test_a_class_is_measured_once_whichever_threads_ask_at_once(fresh, monkeypatch):
    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")

    def slow_race(plain, other):  # long enough for every thread to arrive while the first measures
        time.sleep(0.02)
        fresh["raced"] += 1
        return routes_module.Race((2.0, 1.0), (2.0, 1.0))

    monkeypatch.setattr(routes_module, "_race", slow_race)
    weights = [torch.randn(12, 8) for _ in range(6)]
    got: list = [None] * len(weights)

    def run(i: int) -> None:
        got[i] = pack(weights[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(weights))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fresh["raced"] == len(routes_module.BUCKET_ROWS)  # one measurement: a race per bucket
    assert all(p is not None and p.onednn == (True, True, True) for p in got)
    assert len(measured_routes()) == 1


def test_without_bfloat16_instructions_each_bucket_takes_the_faster_product(fresh, monkeypatch):
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: False)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)
    torch.manual_seed(0)
    weight = torch.randn(9, 16).to(torch.bfloat16)
    fresh["races"] += [(1.0, 0.8), (1.0, 1.5), (1.0, 3.0)]  # (float32, native): native only for one row
    assert not in_float32(weight, 1) and in_float32(weight, 4) and in_float32(weight, 40)
    assert fresh["raced"] == 3 and in_float32(weight, 2) and fresh["raced"] == 3  # measured once
    assert in_float32(weight) and not in_float32(weight.float(), 4)  # attention's (no rows): float32 here
    for rows in (1, 4):
        x = torch.randn(rows, 16).to(torch.bfloat16)
        got = linear(x, weight)
        if rows == 1:
            assert torch.equal(got, F.linear(x, weight))  # the native product itself
        torch.testing.assert_close(got.double(), F.linear(x.double(), weight.double()), rtol=BF16_ULP, atol=1e-6)
    (measured,) = measured_routes()
    assert measured.routes == ("float32", "native") and measured.chosen == ("native", "float32", "float32")
    # a native product far slower at one row is not timed at more (one call at a batch's rows can take seconds)
    fresh["races"] += [(1.0, routes_module.GIVE_UP * 1.5)]
    assert in_float32(torch.randn(7, 16).to(torch.bfloat16), 1) and fresh["raced"] == 4
    slow = next(m for m in measured_routes() if m.out_features == 7)
    assert slow.chosen == ("float32",) * 3 and all(x != x for pair in slow.seconds[1:] for x in pair)  # nan
    # with bfloat16 instructions: the native product, nothing timed
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: True)
    assert not in_float32(torch.randn(5, 16).to(torch.bfloat16), 64) and fresh["raced"] == 4


def test_the_model_repr_shows_each_measured_route(fresh, monkeypatch):
    from transformer.network.weights import decoding_layout, packed_bytes

    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")
    full, half = _tiny_bf16()
    fresh["races"] += [(2.0, 1.0), (1.0, 2.0), (1.0, 2.0)] * 8  # oneDNN for one row, every class
    decoding_layout(full)
    assert "gemm=onednn|mkl|mkl" in repr(full.generator) and "gemm=onednn|mkl|mkl" in repr(full.encoder_layers[0])
    assert packed_bytes(full) == sum(m.packed.nbytes for m in full.modules() if getattr(m, "packed", None))
    assert packed_bytes(full) >= 4 * sum(m.weight.numel() for m in full.modules() if getattr(m, "packed", None))
    # a model too large to copy (memory-mapped weights): no prepacked copies, its routes still measured
    from transformer.network import weights

    monkeypatch.setattr(weights, "COLUMN_MAJOR_MAX_BYTES", 0)
    monkeypatch.setenv("ATTN_GEMM", "onednn")
    big = weights.decoding_layout(_tiny_bf16()[0])
    assert packed_bytes(big) == 0 and "gemm=" not in repr(big)
    monkeypatch.setattr(linear_module, "bf16_matmul_native", lambda: False)
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: False)
    fresh["races"] += [(1.0, 0.5), (1.0, 3.0)] * 8  # bfloat16: native for one row, float32 from a few on
    weights.decoding_layout(half)
    assert "bfloat16=native|float32|float32" in repr(half.generator)


def _twins(cfg: TransformerConfig) -> tuple[Transformer, Transformer]:
    """Two models of ``cfg`` with the same random weights (seed 0), in eval mode."""
    torch.manual_seed(0)
    one, other = Transformer(cfg).eval(), Transformer(cfg).eval()
    other.load_state_dict(one.state_dict())
    return one, other


def _tiny_bf16() -> tuple[Transformer, Transformer]:
    full, half = _twins(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4,
                                          n_encoder_layers=2, n_decoder_layers=2, d_ff=64, max_len=64))
    return full, half.to(torch.bfloat16)


def test_a_bfloat16_model_computed_in_float32_matches_the_native_product_and_float32():
    full, half = _tiny_bf16()
    src, tgt = torch.tensor([[5, 6, 7, 8, 9, 2]]), torch.tensor([[1, 12, 13, 14]])
    with torch.no_grad():
        native = [half(src, tgt, return_attention=r).logits.float() for r in (False, True)]
        oracle = full(src, tgt).logits
    monkeypatch = pytest.MonkeyPatch()
    try:
        without_bf16_instructions(monkeypatch)
        assert in_float32(half.generator.weight)
        with torch.no_grad():
            out = half(src, tgt, return_attention=True)
            fast = half(src, tgt).logits.float()  # F.scaled_dot_product_attention's path
        hyp = greedy_decode(half, src, max_len_a=0.0, max_len_b=8)
        recomputed = greedy_decode(half, src, max_len_a=0.0, max_len_b=8, use_cache=False)
    finally:
        monkeypatch.undo()
    assert out.logits.dtype == torch.float32  # the activations in float32, the weights bfloat16
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    assert all(a.dtype == torch.float32 for a in out.cross_attentions)
    for logits in (out.logits.float(), fast):
        torch.testing.assert_close(logits, native[1], atol=0.05, rtol=0.02)  # as transformers' bfloat16 does
        torch.testing.assert_close(logits, oracle, atol=0.08, rtol=0.05)
    torch.testing.assert_close(native[0], native[1], atol=0.05, rtol=0.02)
    # the cached decoding step (its own output projection call) agrees with the full recomputation
    assert hyp.tokens.tolist() == recomputed.tokens.tolist()
    torch.testing.assert_close(hyp.scores, recomputed.scores, atol=0.05, rtol=0.02)


@pytest.mark.parametrize("float32", [(False, False, False), (True, True, True), (False, True, True)],
                         ids=["native", "float32", "measured-like"])
def test_without_bfloat16_instructions_a_bfloat16_model_runs_float32_activations_with_the_same_tokens(
        monkeypatch, float32):
    """On a CPU without bfloat16 instructions (forced here) a bfloat16 model keeps its weights in bfloat16 and
    computes in float32 between its products, whichever route each bucket takes: the float32 model's tokens, greedy
    and beam, its logits within bfloat16's rounding; on a CPU with those instructions nothing of this applies."""
    full, half = _tiny_bf16()
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [11, 12, 13, 2, 0, 0]])
    tgt = torch.tensor([[1, 12, 13, 14], [1, 20, 21, 22]])
    with torch.no_grad():
        oracle = full(src, tgt).logits
    expected = [greedy_decode(full, src, max_len_a=0.0, max_len_b=10).tokens,
                beam_search(full, src, 3, max_len_a=0.0, max_len_b=10).tokens]
    monkeypatch.setattr(linear_module, "bf16_matmul_fast", lambda: True)  # with bfloat16 instructions: as it was
    assert activation_dtype(half.generator.weight) == torch.bfloat16 and not in_float32(half.generator.weight, 64)
    with torch.no_grad():
        assert half(src, tgt).logits.dtype == torch.bfloat16
    without_bf16_instructions(monkeypatch, float32)
    assert activation_dtype(half.generator.weight) == torch.float32
    assert activation_dtype(full.generator.weight) == torch.float32
    with torch.no_grad():
        out = half(src, tgt, return_internals=True)
    assert out.logits.dtype == torch.float32 and out.encoder_last_hidden_state.dtype == torch.float32
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    torch.testing.assert_close(out.logits, oracle, atol=0.08, rtol=0.05)
    got = [greedy_decode(half, src, max_len_a=0.0, max_len_b=10).tokens,
           beam_search(half, src, 3, max_len_a=0.0, max_len_b=10).tokens]
    assert [t.tolist() for t in got] == [t.tolist() for t in expected]


def test_every_interpretation_of_a_bfloat16_model_runs_on_its_float32_activations(monkeypatch):
    """The interpretations read the model's returned activations and its weights: float32 activations beside
    bfloat16 weights (a CPU without bfloat16 instructions, forced) give the float32 model's numbers within
    bfloat16's rounding."""
    from transformer.interpret import alti, methods
    from transformer.interpret.flow import head_output

    full, half = _tiny_bf16()
    src, tgt = torch.tensor([[5, 6, 7, 8, 9, 2]]), torch.tensor([[1, 12, 13, 14]])
    without_bf16_instructions(monkeypatch, (False, True, True))
    for run in (lambda m: methods.value_norms(m, src, tgt).cross_attentions,
                lambda m: alti.contributions(m, src, tgt).source, lambda m: methods.logit_lens(m, src, tgt)[0][0],
                lambda m: head_output(m, src, tgt, "cross", 1, 0, 2)[1]):
        want, got = run(full), run(half)
        for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (want, got))):
            assert b.dtype == torch.float32
            torch.testing.assert_close(b, a, atol=0.05, rtol=0.05)


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


EMULATED_AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
AVX2_CHECK = """
import json, os, torch
torch.set_num_threads(1)
from transformer import Transformer, TransformerConfig, beam_search, greedy_decode
from transformer.network import linear, routes
from transformer.network.weights import decoding_layout
torch.manual_seed(0)
cfg = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, n_heads=4, n_encoder_layers=2,
                        n_decoder_layers=2, d_ff=64, max_len=64)
plain = Transformer(cfg).eval()
src = torch.randint(4, 40, (3, 7)); src[:, -1] = 3
out = {"native": linear.bf16_matmul_native(), "fast": linear.bf16_matmul_fast()}
def run(m):
    with torch.no_grad():
        return [greedy_decode(m, src, max_len_a=0.0, max_len_b=8).tokens.tolist(),
                beam_search(m, src, 3, 0.6, max_len_a=0.0, max_len_b=8).tokens.tolist()]
out["plain"] = run(plain)
for route in ("mkl", "onednn", "auto"):
    os.environ["ATTN_GEMM"] = route
    fast = Transformer(cfg).eval(); fast.load_state_dict(plain.state_dict()); decoding_layout(fast)
    out[route] = run(fast)
    out[route + "_packed"] = sum(m.packed is not None for m in fast.modules() if isinstance(m, linear.Linear))
half = Transformer(cfg).eval(); half.load_state_dict(plain.state_dict())
half = decoding_layout(half.to(torch.bfloat16))
out["half_row_major"] = half.generator.weight.is_contiguous()
out["half_routes"] = sorted({m.routes for m in routes.measured_routes() if m.dtype == "bfloat16"})
src1 = src[:1]
with torch.no_grad():
    tgt = torch.tensor([[2, 5, 6, 7]])
    out["half_close"] = bool(torch.allclose(half(src1, tgt).logits.float(), plain(src1, tgt).logits, atol=0.08,
                                            rtol=0.05))
print(json.dumps(out))
"""


@pytest.mark.slow  # a fresh interpreter with both libraries capped
def test_on_an_emulated_avx2_cpu_every_route_gives_the_same_translations():
    """With oneDNN, MKL and PyTorch's kernels capped at AVX2 (as on an AMD EPYC before Zen 4): each forced float32
    route and the measured one give the plain model's tokens; a bfloat16 model keeps its weights row-major (its
    native product's layout), measures float32 against the native product, and stays within bfloat16's rounding."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("DNNL_MAX_CPU_ISA", "ATTN_GEMM")}, **EMULATED_AVX2}
    proc = subprocess.run([sys.executable, "-c", AVX2_CHECK], env=env, capture_output=True, text=True, check=True)
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["native"] is False and out["fast"] is False
    for route in ("mkl", "onednn", "auto"):
        assert out[route] == out["plain"], route
    assert out["mkl_packed"] == 0 and out["onednn_packed"] == 2 * 4 + 2 * 8 + 2 * 2 + 2 * 2 + 1
    assert out["half_row_major"] and out["half_routes"] == [["float32", "native"]] and out["half_close"]


@pytest.mark.parametrize("chosen, searches", [
    # oneDNN for many rows only: one sentence's searches (1 row, then its 4 beams) never make the copy; a batch's
    # first step (20 rows) makes it
    (("mkl", "mkl", "onednn"), [(1, 1, 0, ()), (4, 1, 0, ()), (1, 20, 1, (20,))]),
    # oneDNN for a few rows: a beam search's first step (a row a sentence) runs without it, the second makes it
    (("mkl", "onednn", "mkl"), [(1, 1, 0, ()), (4, 1, 1, (4,))]),
])
def test_a_search_makes_its_fused_qkv_copy_at_the_first_product_that_takes_it(fresh, monkeypatch, chosen, searches):
    import dataclasses

    from transformer.network import attention as attention_module
    from transformer.network.weights import decoding_layout

    if not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")
    cfg = TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=4, n_encoder_layers=1,
                            n_decoder_layers=2, d_ff=32, max_len=32)
    model, plain = _twins(cfg)
    monkeypatch.setattr(routes_module, "_race", lambda a, b: (a(), b(), routes_module.Race((1.0, 2.0), (1.0, 2.0)))[2])
    decoding_layout(model)  # every class measured: MKL faster everywhere
    fused = model.decoder_layers[0].self_attn.fused_qkv()[0]
    key = routes_module._key(fused, True)
    routes_module._MEASURED[key] = dataclasses.replace(routes_module._MEASURED[key], chosen=chosen)
    copies, products = [], []
    packer, product = attention_module.pack, linear_module._onednn_product
    monkeypatch.setattr(attention_module, "pack", lambda w, b: copies.append(w.shape) or packer(w, b))
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: products.append(a[0].size(0)) or product(*a))
    for beam, sentences, made, rows in searches:
        copies.clear(), products.clear()
        src = torch.randint(4, 40, (sentences, 7))
        search = greedy_decode if beam == 1 else lambda m, s, k=beam: beam_search(m, s, k, max_len_b=6)
        got = search(model, src)
        assert copies == [fused.shape] * made * cfg.n_decoder_layers  # a copy a layer, at most, in a search
        assert set(products) == set(rows)  # oneDNN's products: the fused Q|K|V's, at the rows of its buckets
        assert torch.equal(got.tokens, search(plain, src).tokens)  # the plain model's search: same tokens
