"""An attention without its weights on a CPU takes PyTorch's fused kernel or the written-out arithmetic, whichever
measured faster for its class and query bucket (``routes.attention_route``, ``attention.written_out_here``); either
gives the fused kernel's numbers and the same translations."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

from transformer import beam_search, greedy_decode
from transformer.network import attention as attention_module
from transformer.network import routes
from transformer.network.weights import decoding_layout

BOS, EOS, PAD = 2, 3, 0


@pytest.fixture
def races(monkeypatch):
    """Nothing measured yet, and a stand-in for the race: ``timings`` (a list the test fills) gives each bucket's
    ``(fused seconds, written seconds)`` on both clocks, after both calls ran once (their outputs kept in
    ``outputs``: they must work, and agree); ``raced`` counts them. The products are not measured here
    (``ATTN_GEMM=mkl``: MKL's, no race)."""
    monkeypatch.setattr(routes, "_MEASURED_ATTENTION", {})
    monkeypatch.setenv("ATTN_GEMM", "mkl")
    state = {"timings": [], "raced": 0, "outputs": []}

    def race(fused, written):
        state["outputs"].append((fused(), written()[0]))
        state["raced"] += 1
        got = state["timings"].pop(0)
        return routes.Race(got, got)

    monkeypatch.setattr(routes, "_race", race)
    return state


def queries(n: int, heads: int = 2, d_head: int = 8) -> torch.Tensor:
    """Queries ``(3, H, n, d)`` laid out as the model's: (3, n, H, d) transposed."""
    return torch.randn(3, n, heads, d_head).transpose(1, 2)


def test_each_query_bucket_takes_the_route_its_timings_chose(races):
    """Written out where it took at most 0.95 of the fused kernel's time (1 query); the fused kernel within that
    margin (2-16) and where it was faster (more); measured once per class, under no gradients and no dropout only;
    the timed calls ran at each bucket's shape and agree."""
    races["timings"] += [(1.0, 0.5), (1.0, 0.99), (1.0, 2.0)]
    with torch.no_grad():
        assert attention_module.written_out_here(queries(1))
        assert not attention_module.written_out_here(queries(4))
        assert not attention_module.written_out_here(queries(40))
        assert attention_module.written_out_here(queries(1))
        assert not attention_module.written_out_here(queries(1), dropout=True)  # dropout: the fused kernel's
    assert races["raced"] == 3  # one class: measured once
    assert not attention_module.written_out_here(queries(1))  # with gradients: the fused kernel
    (measured,) = routes.measured_attention()
    assert measured.chosen == ("written", "fused", "fused")
    assert (measured.heads, measured.d_head, measured.dtype) == (2, 8, "float32")
    assert measured.line().count("-> written") == 1 and measured.line().count("-> fused") == 2
    rows = [out.shape for out, _ in races["outputs"]]
    assert [shape[2] for shape in rows] == list(routes.QUERY_ROWS)  # (N, H, Tq, d) at each bucket's queries
    assert all(shape[0] * shape[1] == routes.TIMED_HEAD_ROWS for shape in rows)
    for fused, written in races["outputs"]:
        torch.testing.assert_close(fused, written, atol=1e-5, rtol=1e-5)
    races["timings"] += [(1.0, 0.1)] * 3
    with torch.no_grad():
        assert attention_module.written_out_here(queries(4, heads=4))  # another class: measured on its own
    assert races["raced"] == 6 and len(routes.measured_attention()) == 2


def test_the_written_out_attention_is_the_formula():
    """The written-out route against softmax(Q K^T / sqrt(d)) V computed in float64 by hand, with a padding mask."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False
    out, _ = attention_module.scaled_dot_product_attention(q, k, v, mask)
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(8)
    scores = scores.masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(out.double(), scores.softmax(-1) @ v.double(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("route", ["written", "fused"])
@pytest.mark.parametrize("layout", [dict(), dict(norm_first=True, n_heads=3, d_model=24)])
def test_either_attention_route_gives_the_fused_kernels_numbers_and_translations(races, monkeypatch, route, layout):
    """Every bucket measured for ``route`` (at load: ``decoding_layout``): the model's logits, greedy and beam
    search's tokens and scores equal the fused kernel's everywhere; the route is the one taken (the written-out
    function called in the searches, or never); the model's repr names it."""
    faster = (1.0, 0.1) if route == "written" else (1.0, 1.0)
    races["timings"] += [faster] * 3
    model = decoding_layout(tiny_model(5, **{**dict(src_vocab_size=14, tgt_vocab_size=14, max_len=24), **layout}))
    assert races["raced"] == 3  # measured at load, once for the model's one attention class
    assert f"attention={route}|{route}|{route}" in repr(model.decoder_layers[0].cross_attn)
    fused = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(3)
    src = torch.randint(4, 14, (4, 7), generator=gen)
    src[:, -1], src[1, 4:] = EOS, PAD
    src[1, 3] = EOS
    tgt = torch.randint(4, 14, (4, 5), generator=gen)
    tgt[:, 0] = BOS

    written = []
    formula = attention_module.scaled_dot_product_attention
    monkeypatch.setattr(attention_module, "scaled_dot_product_attention",
                        lambda *a, **kw: written.append(1) or formula(*a, **kw))
    with torch.no_grad():
        got = model(src, tgt).logits
        searches = [greedy_decode(model, src), beam_search(model, src, 3, 0.6)]
    taken = len(written)
    monkeypatch.setattr(attention_module, "written_out_here", lambda q, dropout=False: False)
    with torch.no_grad():
        torch.testing.assert_close(got, fused(src, tgt).logits, atol=1e-5, rtol=1e-5)
        for ours, oracle in zip(searches, [greedy_decode(fused, src), beam_search(fused, src, 3, 0.6)]):
            assert torch.equal(ours.tokens, oracle.tokens)
            torch.testing.assert_close(ours.scores, oracle.scores, atol=1e-4, rtol=1e-5)
    assert (taken > 0) == (route == "written")


def test_the_measurement_on_this_cpu_times_both_routes_and_keeps_one():
    """Unstubbed: the class is timed on this CPU at each bucket, both routes' times are real, and each bucket keeps
    one of the two."""
    saved = dict(routes._MEASURED_ATTENTION)
    routes._MEASURED_ATTENTION.clear()
    try:
        with torch.no_grad():
            attention_module.written_out_here(queries(1, heads=2, d_head=4))
        (measured,) = routes.measured_attention()
    finally:
        routes._MEASURED_ATTENTION.clear()
        routes._MEASURED_ATTENTION.update(saved)
    assert len(measured.chosen) == len(routes.QUERY_ROWS) and set(measured.chosen) <= {"fused", "written"}
    assert all(s > 0 for pair in (*measured.seconds, *measured.cpu_seconds) for s in pair)
    assert measured.threads == torch.get_num_threads() and "heads of 4" in measured.line()
