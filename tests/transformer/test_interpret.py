"""``transformer.interpret`` against independent computations on tiny random models."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny_model

from transformer import Transformer
from transformer.interpret import (
    KINDS,
    attention_attribution_agreement,
    attribute,
    forward_from_embeddings,
    head_computation,
    logit_lens,
    value_norms,
)

torch.set_num_threads(1)


def tiny(norm_first: bool, seed: int = 0) -> Transformer:
    """This file's tiny model (``conftest.tiny_model``)."""
    return tiny_model(seed, src_vocab_size=30, tgt_vocab_size=30, d_model=16, d_ff=32, dropout=0.1,
                      norm_first=norm_first)


SRC = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0]])
TGT = torch.tensor([[2, 12, 13, 14, 15], [2, 16, 17, 0, 0]])
LABELS = torch.tensor([[12, 13, 14, 15, 3], [16, 17, 3, 0, 0]])


@pytest.mark.parametrize("norm_first", [False, True])
def test_head_computation_is_the_models_own_attention(norm_first):
    model = tiny(norm_first)
    out = model(SRC, TGT, return_attention=True)
    own = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    for kind in KINDS:
        for batch, query in ((0, 2), (1, 1)):
            hc = head_computation(model, SRC, TGT, kind, 1, 2, query, batch=batch)
            assert torch.equal(hc.weights, own[kind][1][batch, 2, query])  # exactly the model's row
            # by hand, from the weight matrices
            module = (model.encoder_layers[1].self_attn if kind == "encoder" else
                      model.decoder_layers[1].self_attn if kind == "decoder" else model.decoder_layers[1].cross_attn)
            d = module.d_head
            rows = slice(2 * d, 3 * d)
            q = (module.q_proj.weight[rows] @ hc.x_query + module.q_proj.bias[rows]).detach()
            torch.testing.assert_close(hc.q, q)
            for j in range(hc.k.size(0)):
                assert hc.scores[j].item() == pytest.approx(float(q @ hc.k[j]), abs=1e-5)
            torch.testing.assert_close(hc.scaled, hc.scores / math.sqrt(d))
            masked = hc.scaled.masked_fill(~hc.mask, float("-inf"))
            torch.testing.assert_close(hc.weights, torch.softmax(masked, -1))
            assert (hc.weights[~hc.mask] == 0).all()
            torch.testing.assert_close(hc.output, sum(hc.weights[j] * hc.v[j] for j in range(len(hc.v))))
            if kind == "decoder":
                assert not hc.mask[query + 1:].any()  # never a later position


def test_projected_heads_add_up_to_the_attention_output():
    model = tiny(False)
    module = model.decoder_layers[0].cross_attn
    query = 1
    parts = [head_computation(model, SRC, TGT, "cross", 0, h, query).projected for h in range(4)]
    with torch.no_grad():
        inputs = model(SRC, TGT, return_internals=True).attention_inputs["cross"][0]  # the sub-layer's own inputs
        full, _ = module(inputs.query, inputs.key_value, inputs.mask)  # (B, T, D): what it hands to the residual
    torch.testing.assert_close(sum(parts) + module.out_proj.bias, full[0, query], atol=1e-5, rtol=1e-5)


def test_value_norms_match_a_hand_written_loop():
    model = tiny(True)
    norms = value_norms(model, SRC, TGT)
    out = model(SRC, TGT, return_attention=True)
    hc = head_computation(model, SRC, TGT, "cross", 1, 3, 2, batch=0)
    module = model.decoder_layers[1].cross_attn
    d = module.d_head
    w_o = module.out_proj.weight[:, 3 * d:4 * d]
    for j in range(SRC.size(1)):
        expected = (hc.weights[j] * (w_o @ hc.v[j])).norm()
        assert norms.cross_attentions[1][0, 3, 2, j].item() == pytest.approx(expected.item(), abs=1e-5)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(norms, name), getattr(out, name)):
            assert a.shape == b.shape and ((a == 0) == (b == 0)).all()  # zero exactly where the weight is


@pytest.mark.parametrize("norm_first", [False, True])
def test_logit_lens_last_layer_is_the_models_own_top_k(norm_first):
    model = tiny(norm_first)
    lens = logit_lens(model, SRC, TGT, k=5)
    assert len(lens) == 2
    probs = model(SRC, TGT).logits.softmax(-1)
    top_p, top_i = probs.topk(5, dim=-1)
    torch.testing.assert_close(lens[-1][0], top_p)
    assert torch.equal(lens[-1][1], top_i)


@pytest.mark.parametrize("max_bytes", [1, 10**9])  # one layer at a time; every layer in one product
def test_logit_lens_every_layer_is_its_output_through_the_norm_and_projection(max_bytes):
    model = tiny(True, seed=3)
    lens = logit_lens(model, SRC, TGT, k=4, max_bytes=max_bytes)
    layers = model(SRC, TGT, return_internals=True).decoder_layer_outputs
    assert len(lens) == len(layers) == 2
    for (top_p, top_i), x in zip(lens, layers):  # the oracle: one layer by hand
        probs = model.generator(model.decoder_norm(x)).softmax(-1)
        want_p, want_i = probs.topk(4, dim=-1)
        torch.testing.assert_close(top_p, want_p, atol=1e-6, rtol=1e-5)
        assert torch.equal(top_i, want_i)


def test_forward_from_embeddings_is_the_model():
    model = tiny(False)
    logp = forward_from_embeddings(model, SRC, TGT, model.src_embed(SRC), model.tgt_embed(TGT))
    torch.testing.assert_close(logp, model(SRC, TGT).logits.log_softmax(-1), atol=1e-5, rtol=1e-5)
    # one output position per row: the same numbers as the full output at those positions
    for norm_first in (False, True):
        model = tiny(norm_first)
        full = model(SRC, TGT).logits.log_softmax(-1)  # (B, T, V)
        at = torch.tensor([TGT.size(1) - 1, 0])[: SRC.size(0)]
        some = forward_from_embeddings(model, SRC, TGT, model.src_embed(SRC), model.tgt_embed(TGT), positions=at)
        torch.testing.assert_close(some, full[torch.arange(SRC.size(0)), at], atol=1e-5, rtol=1e-5)


def test_input_x_gradient_equals_autograd_and_finite_differences():
    model = tiny(True).double()
    src, tgt, labels = SRC[:1, :5], TGT[:1, :4], LABELS[:1, :4]
    source, target = attribute(model, src, tgt, labels, method="input_x_gradient")
    t = 2
    e_src = model.src_embed(src).detach().requires_grad_(True)
    e_tgt = model.tgt_embed(tgt).detach().requires_grad_(True)
    value = forward_from_embeddings(model, src, tgt, e_src, e_tgt)[0, t, labels[0, t]]
    g_src, g_tgt = torch.autograd.grad(value, (e_src, e_tgt))
    torch.testing.assert_close(source[0, t], (g_src * e_src).sum(-1)[0])
    torch.testing.assert_close(target[0, t], (g_tgt * e_tgt).sum(-1)[0])
    eps, j, dim = 1e-5, 1, 3  # one gradient entry by finite differences

    def f(delta: float) -> float:
        bumped = e_src.detach().clone()
        bumped[0, j, dim] += delta
        with torch.no_grad():
            return float(forward_from_embeddings(model, src, tgt, bumped, e_tgt.detach())[0, t, labels[0, t]])

    assert g_src[0, j, dim].item() == pytest.approx((f(eps) - f(-eps)) / (2 * eps), rel=1e-4, abs=1e-7)
    assert (target[0, t, t + 1:] == 0).all()  # later decoder inputs cannot matter (causal mask)


def test_integrated_gradients_are_complete():
    model = tiny(False)
    source, target = attribute(model, SRC, TGT, LABELS, steps=32)
    assert source.shape == (2, 5, 6) and target.shape == (2, 5, 5)
    for b in range(2):
        with torch.no_grad():
            full = forward_from_embeddings(model, SRC[b:b + 1], TGT[b:b + 1], model.src_embed(SRC[b:b + 1]),
                                           model.tgt_embed(TGT[b:b + 1]))[0]
            base = forward_from_embeddings(model, SRC[b:b + 1], TGT[b:b + 1],
                                           torch.zeros(1, 6, 16), torch.zeros(1, 5, 16))[0]
        for t in range(5):
            gap = float(full[t, LABELS[b, t]] - base[t, LABELS[b, t]])
            total = float(source[b, t].sum() + target[b, t].sum())
            assert total == pytest.approx(gap, abs=0.02 * max(1.0, abs(gap)))  # integration error at 32 steps
    assert (source[1, :, 3:] == 0).all()  # padding gets nothing


@pytest.mark.parametrize("norm_first,workers", [(False, 1), (True, 1), (False, 2)])
def test_attribution_equals_captums_for_every_output_step(norm_first, workers):
    """captum's IntegratedGradients and InputXGradient, one output step at a time (a forward pass each), are the
    oracle for the one forward pass :func:`attribute` shares between the steps (its backward passes in one thread
    or dealt out to two)."""
    from captum.attr import InputXGradient, IntegratedGradients

    model = tiny(norm_first).double()
    source, target = attribute(model, SRC, TGT, LABELS, steps=16, max_batch_bytes=1,  # one point a pass
                               workers=workers)
    ixg = attribute(model, SRC, TGT, LABELS, method="input_x_gradient", workers=workers)
    for b in range(2):
        e_src, e_tgt = model.src_embed(SRC[b:b + 1]).detach(), model.tgt_embed(TGT[b:b + 1]).detach()
        for t in range(TGT.size(1)):
            def f(x_src, x_tgt, t=t, b=b):
                n = x_src.size(0)
                logp = forward_from_embeddings(model, SRC[b:b + 1].expand(n, -1), TGT[b:b + 1].expand(n, -1),
                                               x_src, x_tgt)  # (n, T, V)
                return logp[:, t, LABELS[b, t]]

            ig = IntegratedGradients(f).attribute((e_src, e_tgt), baselines=(e_src * 0, e_tgt * 0), n_steps=16,
                                                  method="gausslegendre")
            xg = InputXGradient(f).attribute((e_src.clone().requires_grad_(), e_tgt.clone().requires_grad_()))
            for ours, theirs in (((source, target), ig), (ixg, xg)):
                pad_s, pad_t = SRC[b] == 0, TGT[b] == 0
                torch.testing.assert_close(ours[0][b, t], theirs[0].sum(-1)[0].masked_fill(pad_s, 0))
                torch.testing.assert_close(ours[1][b, t], theirs[1].sum(-1)[0].masked_fill(pad_t, 0))


@pytest.mark.parametrize("method,steps,per_item", [("integrated_gradients", 32, 4), ("integrated_gradients", 20, 3),
                                                    ("input_x_gradient", 32, 1)])
def test_attribution_progress_counts_every_pass(method, steps, per_item, monkeypatch):
    import transformer.interpret.methods as interpret

    model = tiny(False)
    calls, forward = [], []
    real = interpret.forward_from_embeddings

    def counted(*args, **kwargs):
        forward.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(interpret, "forward_from_embeddings", counted)
    eight_points = 8 * interpret.attribution_row_bytes(model, SRC.size(1), TGT.size(1))
    attribute(model, SRC, TGT, LABELS, method=method, steps=steps, progress=lambda d, t: calls.append((d, t)),
              max_batch_bytes=eight_points)  # memory for 8 interpolation points per pass, every step's backward
    total = 2 * per_item  # two batch items
    assert calls == [(i, total) for i in range(1, total + 1)]
    assert len(forward) == total  # one call per pass through the model: the progress counts what ran


@pytest.mark.parametrize("method,steps,points", [("integrated_gradients", 20, 8), ("integrated_gradients", 8, 1),
                                                  ("input_x_gradient", 32, 8)])
def test_attribution_passes_are_the_rows_that_run(method, steps, points, monkeypatch):
    """``attribution_passes`` (what the app's work estimate counts) against the rows counted as they run: the
    rows of every forward pass and of every backward pass (``torch.autograd.grad``), over a span of output steps."""
    import transformer.interpret.methods as interpret
    from transformer.interpret import attribution_passes

    model = tiny(False)
    forward, backward = [], []
    real_forward, real_grad = interpret.forward_from_embeddings, torch.autograd.grad

    def counted_forward(model, src, *args, **kwargs):
        forward.append(src.size(0))
        return real_forward(model, src, *args, **kwargs)

    def counted_grad(outputs, inputs, *args, **kwargs):
        backward.append(inputs[0].size(0))
        return real_grad(outputs, inputs, *args, **kwargs)

    monkeypatch.setattr(interpret, "forward_from_embeddings", counted_forward)
    monkeypatch.setattr(torch.autograd, "grad", counted_grad)
    budget = points * interpret.attribution_row_bytes(model, SRC.size(1), TGT.size(1))
    attribute(model, SRC[:1], TGT[:1], LABELS[:1], method=method, steps=steps, max_batch_bytes=budget,
              output_span=(1, 4))
    assert (sum(forward), sum(backward)) == attribution_passes(method, steps, 3)


@pytest.mark.parametrize("workers", [2, 3, 9])
def test_attribution_workers_share_the_steps_and_change_no_number(workers, monkeypatch):
    """Every output step's backward pass runs once, in one of ``workers`` threads (as many as there are steps at
    most), the steps' numbers as one thread computes them; workers below 1 are refused."""
    import threading

    model = tiny(False)
    one = attribute(model, SRC, TGT, LABELS, steps=8)
    seen, real = [], torch.autograd.grad

    def counted(outputs, inputs, *args, **kwargs):
        seen.append(threading.get_ident())
        return real(outputs, inputs, *args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    many = attribute(model, SRC, TGT, LABELS, steps=8, workers=workers)
    steps = TGT.size(1)
    assert len(seen) == SRC.size(0) * steps  # a backward pass per sentence and step (8 points in one pass)
    # each sentence's pass (its own pool, joined before the next: its passes are consecutive here) dealt out to at
    # most ``workers`` threads, more than one in all (a pool may hand a second share to a thread that is done), none
    # the caller's; a new pool's threads may have new ids, so the ids are counted a pass at a time
    passes = [seen[i:i + steps] for i in range(0, len(seen), steps)]
    assert all(len(set(p)) <= min(workers, steps) for p in passes), passes
    assert len(set(seen)) >= 2 and threading.get_ident() not in seen
    for a, b in zip(one, many):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="workers"):
        attribute(model, SRC, TGT, LABELS, workers=0)


def test_agreement_is_one_for_a_head_that_ranks_like_the_attribution():
    attribution = torch.tensor([[0.1, 0.5, 0.2], [0.3, 0.0, 0.9]])
    same = attribution.softmax(-1)[None]  # (H=1, T, S): the same order
    reverse = (-attribution).softmax(-1)[None]
    agreement = attention_attribution_agreement([torch.cat([same, reverse])], attribution)
    assert agreement.shape == (1, 2)
    assert agreement[0, 0].item() == pytest.approx(1.0) and agreement[0, 1].item() == pytest.approx(-1.0)
