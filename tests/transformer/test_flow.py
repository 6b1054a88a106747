"""``transformer.interpret.flow`` (the information-flow graph) against a brute-force oracle on tiny models of every
layout (the paper's post-norm and pre-norm, Marian's, M2M100's: ``test_alti``'s models).

The oracle walks the model with its own modules, one term at a time: for each head and key, a copy of the attention
whose value projection keeps only that key's row and that head's columns (so the weights are the model's own and
every other value is zero) and whose output bias is zero; the residual; the feed-forward module's output; each term
through the block's LayerNorm's linear part with the real deviation of the real pre-norm sum; the proximities in
plain Python loops."""

from __future__ import annotations

import copy

import pytest
import torch
from test_alti import LAYOUTS, batch, model_of
from torch import nn

from transformer.interpret import flow, head_logits, head_output, head_terms
from transformer.interpret.alti import attention_terms
from transformer.interpret.flow import Node
from transformer.network.masks import decoder_self_mask, padding_mask

torch.set_num_threads(1)


class KeepOne(nn.Module):
    """A value projection that keeps one key's row and one head's columns, and zeroes the rest."""

    def __init__(self, proj: nn.Linear, j: int, head: int, d_head: int) -> None:
        super().__init__()
        self.proj, self.j, self.head, self.d_head = proj, j, head, d_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.proj(x)  # (B, K, D)
        keep = torch.zeros(x.size(1), v.size(-1), dtype=v.dtype)
        keep[self.j, self.head * self.d_head:(self.head + 1) * self.d_head] = 1
        return v * keep


def one_term(attn, query, key_value, mask, head: int, j: int) -> torch.Tensor:
    only = copy.deepcopy(attn)
    only.v_proj = KeepOne(attn.v_proj, j, head, attn.d_head)
    with torch.no_grad():
        only.out_proj.bias.zero_()
    return only(query, key_value, mask)[0]  # (B, Q, D)


def through(norm, terms, z, post: bool, bias):
    """Each term ``(B, Q, D)`` through the post-norm's linear part given the real sum ``z``'s deviation, and what
    no term carries (the block's output bias, through the norm, and the norm's bias)."""
    bias = torch.zeros_like(z) if bias is None else bias.expand_as(z)
    if not post:
        return terms, bias
    std = (z.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    return ([norm.weight * (t - t.mean(-1, keepdim=True)) / std for t in terms],
            norm.weight * (bias - bias.mean(-1, keepdim=True)) / std + norm.bias)


def proximities(terms, y) -> torch.Tensor:
    """ALTI's proximities normalised over the terms, in loops: ``(B, Q, n_terms)``."""
    b, q, _ = y.shape
    out = torch.zeros(b, q, len(terms))
    for n in range(b):
        for i in range(q):
            yi = y[n, i]
            c = [max(0.0, float(yi.abs().sum() - (yi - t[n, i]).abs().sum())) for t in terms]
            out[n, i] = torch.tensor(c) / sum(c)
    return out


def oracle_attention(nf, norm, attn, x, memory, mask):
    """One attention block by brute force: ``(heads (B, H, Q, K), residual (B, Q), real output, terms, y)``."""
    inp = norm(x) if nf else x
    kv = inp if memory is None else memory
    z = x + attn(inp, kv, mask)[0]
    real = z if nf else norm(z)
    h_n, k_n = attn.n_heads, kv.size(1)
    raw = [one_term(attn, inp, kv, mask, h, j) for h in range(h_n) for j in range(k_n)] + [x]
    terms, rest = through(norm, raw, z, not nf, attn.out_proj.bias)
    c = proximities(terms, real)
    b, q = x.shape[:2]
    return c[..., :-1].reshape(b, q, h_n, k_n).transpose(1, 2), c[..., -1], real, (terms, rest)


def oracle_ffn(nf, norm, ffn, x):
    h = ffn(norm(x) if nf else x)
    z = x + h
    real = z if nf else norm(z)
    terms, rest = through(norm, [h, x], z, not nf, None)
    return proximities(terms, real)[..., 0], real, (terms, rest)


@torch.no_grad()
def oracle(model, src, tgt):
    nf = model.config.norm_first
    src_mask, self_mask = padding_mask(src, model.config.pad_id), decoder_self_mask(tgt, model.config.pad_id)
    heads, residual, ffn, sums = {"encoder": [], "decoder": [], "cross": []}, {"encoder": [], "decoder": [],
                                                                             "cross": []}, {"encoder": [],
                                                                                            "decoder": []}, []
    x = model.embed(src, model.src_embed)
    for layer in model.encoder_layers:
        hd, res, x_mid, terms = oracle_attention(nf, layer.norm1, layer.self_attn, x, None, src_mask)
        heads["encoder"].append(hd)
        residual["encoder"].append(res)
        sums.append((*terms, x_mid))
        f, x_out, terms = oracle_ffn(nf, layer.norm2, layer.ffn, x_mid)
        ffn["encoder"].append(f)
        sums.append((*terms, x_out))
        torch.testing.assert_close(x_out, layer(x, src_mask)[0], atol=1e-5, rtol=0)  # the walk is the model's
        x = x_out
    memory = model.encoder_norm(x) if model.encoder_norm is not None else x
    y = model.embed(tgt, model.tgt_embed)
    for layer in model.decoder_layers:
        hd, res, y_self, terms = oracle_attention(nf, layer.norm1, layer.self_attn, y, None, self_mask)
        sums.append((*terms, y_self))
        heads["decoder"].append(hd)
        residual["decoder"].append(res)
        hd, res, y_cross, terms = oracle_attention(nf, layer.norm2, layer.cross_attn, y_self, memory, src_mask)
        sums.append((*terms, y_cross))
        heads["cross"].append(hd)
        residual["cross"].append(res)
        f, y_out, terms = oracle_ffn(nf, layer.norm3, layer.ffn, y_cross)
        sums.append((*terms, y_out))
        ffn["decoder"].append(f)
        torch.testing.assert_close(y_out, layer(y, memory, self_mask, src_mask)[0], atol=1e-5, rtol=0)
        y = y_out
    return heads, residual, ffn, sums


@pytest.mark.parametrize("name", LAYOUTS)
def test_importances_equal_the_brute_force_ones(name):
    model = model_of(name)
    src, tgt = batch(model.config)
    got = flow(model, src, tgt)
    heads, residual, ffn, _ = oracle(model, src, tgt)
    for kind in heads:
        assert len(got.heads[kind]) == len(heads[kind])
        for mine, theirs in zip(got.heads[kind], heads[kind], strict=True):
            assert mine.shape == theirs.shape  # (B, n_heads, Q, K)
            torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=1e-4)
        for mine, theirs in zip(got.residual[kind], residual[kind], strict=True):
            torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=1e-4)
    for side in ffn:
        for mine, theirs in zip(got.ffn[side], ffn[side], strict=True):
            assert mine.shape == theirs.shape  # (B, Q)
            torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", LAYOUTS)
@torch.no_grad()
def test_the_terms_add_up_to_each_blocks_output(name):
    model = model_of(name, seed=1)
    src, tgt = batch(model.config)
    _, _, _, sums = oracle(model, src, tgt)
    assert len(sums) == 2 * model.config.n_encoder_layers + 3 * model.config.n_decoder_layers
    for terms, rest, real in sums:  # one term at a time, they and the biases no term carries make the output
        torch.testing.assert_close(sum(terms) + rest, real, atol=1e-5, rtol=0)
    # the per-head terms sum over the heads to the per-key terms ``contributions`` uses, and with the output bias
    # to the attention sub-layer's output
    out = model(src, tgt, return_attention=True, return_internals=True)
    for kind, weights in out.attentions().items():
        for i, w in enumerate(weights):
            inputs = out.attention_inputs[kind][i]
            module = {"encoder": lambda i: model.encoder_layers[i].self_attn,
                      "decoder": lambda i: model.decoder_layers[i].self_attn,
                      "cross": lambda i: model.decoder_layers[i].cross_attn}[kind](i)
            per_head = head_terms(module, w, inputs.key_value)  # (B, Q, H, K, D)
            torch.testing.assert_close(per_head.sum(2), attention_terms(module, w, inputs.key_value))
            real = module(inputs.query, inputs.key_value, inputs.mask)[0]
            torch.testing.assert_close(per_head.sum((2, 3)) + module.out_proj.bias, real, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", LAYOUTS)
def test_rows_sum_to_one_and_the_decoder_never_looks_ahead(name):
    model = model_of(name, seed=2)
    src, tgt = batch(model.config)
    got = flow(model, src, tgt)
    for kind in got.heads:
        for h, r in zip(got.heads[kind], got.residual[kind], strict=True):
            total = h.sum((1, 3)) + r
            torch.testing.assert_close(total, torch.ones_like(total))
            assert (h >= 0).all() and (r >= 0).all()
    for h in got.heads["decoder"]:
        assert (h.triu(1) == 0).all()
    for h in (*got.heads["encoder"], *got.heads["cross"]):
        assert (h[1, :, :, 3:] == 0).all()  # the second sentence's padded source pieces give nothing
    for f in (*got.ffn["encoder"], *got.ffn["decoder"]):
        assert ((f >= 0) & (f <= 1)).all()


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_head_with_its_w_o_slice_zeroed_gets_nothing(name):
    model = model_of(name, seed=3)
    d = model.config.d_model // model.config.n_heads
    with torch.no_grad():
        model.decoder_layers[1].cross_attn.out_proj.weight[:, 2 * d:3 * d] = 0
        model.encoder_layers[0].self_attn.out_proj.weight[:, :d] = 0
    src, tgt = batch(model.config)
    got = flow(model, src, tgt)
    assert (got.heads["cross"][1][:, 2] == 0).all() and (got.heads["encoder"][0][:, 0] == 0).all()
    assert (got.heads["cross"][1][:, 1] > 0).any() and (got.heads["encoder"][0][:, 1] > 0).any()
    graph = got.graph(2, 0.0)
    assert ("cross", 1, 2) not in graph.heads() and ("encoder", 0, 0) not in graph.heads()


def test_the_graph_shrinks_as_the_threshold_grows_and_sums_to_one():
    model = model_of("postnorm", seed=4)
    src, tgt = batch(model.config)
    got = flow(model, src, tgt)
    t = tgt.size(1)
    root = Node("decoder", model.config.n_decoder_layers - 1, "ffn", t - 1)
    everything = got.graph(t - 1, 0.0)
    assert root in everything.nodes
    # at threshold 0 every node reached gets all of its (positive) terms: they sum to 1
    for node in everything.nodes:
        if node.block != "embed":
            assert abs(sum(e.weight for e in everything.edges if e.target == node) - 1) < 1e-5
    # the first step reaches no later decoder position (causal); every source piece is reachable
    first = got.graph(0, 0.0)
    assert all(n.position == 0 for n in first.nodes if n.side == "decoder")
    assert {n.position for n in first.nodes if n.side == "encoder"} == set(range(src.size(1)))
    previous = everything
    for threshold in (0.01, 0.05, 0.1, 0.2, 0.5, 1.01):
        g = got.graph(t - 1, threshold)
        assert set(g.nodes) <= set(previous.nodes) and set(g.edges) <= set(previous.edges)
        assert all(e.weight >= threshold for e in g.edges)
        previous = g
    assert len(got.graph(t - 1, 0.1).edges) < len(everything.edges)
    assert got.graph(t - 1, 1.01).nodes == [root] and got.graph(t - 1, 1.01).edges == []


@pytest.mark.parametrize("name", ("postnorm", "prenorm"))
def test_the_model_is_untouched(name):
    model = model_of(name, seed=5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    src, tgt = batch(model.config)
    got = flow(model, src, tgt)
    row, vector = head_output(model, src, tgt, "cross", 0, 1, 2)
    head_logits(model, vector)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert not model.training
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
    assert got.heads["cross"][0].shape[1] == model.config.n_heads


def test_a_head_output_sums_to_the_attention_output_and_is_read_through_the_output_embedding():
    model = model_of("prenorm", seed=6)
    src, tgt = batch(model.config)
    out = model(src, tgt, return_attention=True, return_internals=True)
    inputs = out.attention_inputs["cross"][1]
    real = model.decoder_layers[1].cross_attn(inputs.query, inputs.key_value, inputs.mask)[0][0, 3]
    rows, vectors = zip(*(head_output(model, src, tgt, "cross", 1, h, 3) for h in range(model.config.n_heads)))
    torch.testing.assert_close(sum(vectors) + model.decoder_layers[1].cross_attn.out_proj.bias, real, atol=1e-5,
                               rtol=0)
    torch.testing.assert_close(rows[0], out.cross_attentions[1][0, 0, 3])
    logits = head_logits(model, vectors[0])
    centred = vectors[0] - vectors[0].mean()
    expected = model.generator.weight @ (centred * model.decoder_norm.weight)
    torch.testing.assert_close(logits, expected)


def test_a_model_in_training_mode_is_refused():
    model = model_of("postnorm").train()
    src, tgt = batch(model.config)
    with pytest.raises(ValueError, match="eval mode"):
        flow(model, src, tgt)


def test_chunking_the_queries_changes_nothing():
    model = model_of("m2m100", seed=7)
    src, tgt = batch(model.config)
    whole, chunked = flow(model, src, tgt), flow(model, src, tgt, max_bytes=1)
    for kind in whole.heads:
        for a, b in zip(whole.heads[kind], chunked.heads[kind], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
def test_the_faithfulness_bench_keeps_the_graphs_heads_and_as_many_random_ones(tr):
    from bench.flow import faithfulness

    got = faithfulness(tr, ["A man rides a bike.", "Two dogs play."], (0.0, 0.1, 1.5), seed=0)
    none, some, every = got["1.5"], got["0.1"], got["0.0"]
    assert none["steps"] == some["steps"] == every["steps"] > 0
    # no edge reaches 1.5: no head kept either way, so both keep the same (headless) prediction as often
    assert none["heads_kept"] == 0 and none["graph_unchanged"] == none["random_unchanged"]
    assert 0 < some["heads_kept"] < every["heads_kept"] <= 1
    for row in got.values():
        assert 0 <= row["graph_unchanged"] <= 1 and 0 <= row["random_unchanged"] <= 1
