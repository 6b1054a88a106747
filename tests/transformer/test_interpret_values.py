"""Interpretation computes from returned values: no hooks anywhere, the same numbers as a hand-written loop over the
layers, and the same results while other visitors run the same model object in another thread."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import tiny_model

from transformer import beam_search, greedy_decode
from transformer.interpret import KINDS, attribute, head_computation, logit_lens, value_norms
from transformer.network.model import Transformer, decoder_self_mask, padding_mask

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
SRC = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0]])
TGT = torch.tensor([[2, 12, 13, 14, 15], [2, 16, 17, 0, 0]])
LABELS = torch.tensor([[12, 13, 14, 15, 3], [16, 17, 3, 0, 0]])


def tiny(norm_first: bool, seed: int = 0) -> Transformer:
    return tiny_model(seed, src_vocab_size=30, tgt_vocab_size=30, d_model=16, d_ff=32, dropout=0.1,
                      norm_first=norm_first)


def test_no_hooks_in_the_model_or_the_app():
    """No ``register_*hook`` on a model anywhere in ``transformer/`` or ``app/``: a hook records every visitor's
    forward pass that runs while it is on."""
    pattern = re.compile(r"register_\w*hook")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("transformer", "app")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == []


# ------------------------------------------------------------------------------------------------ the oracle


@torch.no_grad()
def by_hand(model: Transformer, src: torch.Tensor, tgt: torch.Tensor) -> dict:
    """Every attention sub-layer's inputs and every layer's output, by a loop over the layers written out here
    (what the forward hooks used to record)."""
    nf = model.config.norm_first
    src_mask, self_mask = padding_mask(src, model.config.pad_id), decoder_self_mask(tgt, model.config.pad_id)

    def sublayer(x, norm, f):
        h = norm(x) if nf else x
        y = x + f(h)
        return (y if nf else norm(y)), h

    inputs = {k: [] for k in KINDS}
    outputs = {"encoder": [], "decoder": []}
    x = model.embed(src, model.src_embed)
    for layer in model.encoder_layers:
        x, h = sublayer(x, layer.norm1, lambda h, a=layer.self_attn: a(h, h, src_mask)[0])
        inputs["encoder"].append((h, h, src_mask))
        x, _ = sublayer(x, layer.norm2, layer.ffn)
        outputs["encoder"].append(x)
    memory = model.encoder_norm(x) if nf else x
    y = model.embed(tgt, model.tgt_embed)
    for layer in model.decoder_layers:
        y, h = sublayer(y, layer.norm1, lambda h, a=layer.self_attn: a(h, h, self_mask)[0])
        inputs["decoder"].append((h, h, self_mask))
        y, h = sublayer(y, layer.norm2, lambda h, a=layer.cross_attn: a(h, memory, src_mask)[0])
        inputs["cross"].append((h, memory, src_mask))
        y, _ = sublayer(y, layer.norm3, layer.ffn)
        outputs["decoder"].append(y)
    return {"inputs": inputs, "outputs": outputs}


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_returned_internals_equal_a_hand_written_loop(norm_first):
    model = tiny(norm_first)
    oracle = by_hand(model, SRC, TGT)
    with torch.no_grad():
        out = model(SRC, TGT, return_attention=True, return_internals=True)
        plain = model(SRC, TGT, return_attention=True)
    assert torch.equal(out.logits, plain.logits)  # asking for them changes nothing
    for kind in KINDS:
        assert len(out.attention_inputs[kind]) == len(oracle["inputs"][kind])
        for got, (query, key_value, mask) in zip(out.attention_inputs[kind], oracle["inputs"][kind]):
            close(got.query, query)
            close(got.key_value, key_value)
            assert torch.equal(got.mask, mask)
    for got, want in zip(out.encoder_layer_outputs, oracle["outputs"]["encoder"], strict=True):
        close(got, want)
    for got, want in zip(out.decoder_layer_outputs, oracle["outputs"]["decoder"], strict=True):
        close(got, want)
    assert plain.attention_inputs == {} and plain.decoder_layer_outputs == ()  # only on request


@pytest.mark.parametrize("norm_first", [False, True])
def test_interpretation_equals_the_hand_written_oracle(norm_first):
    """``head_computation``, ``value_norms`` and ``logit_lens`` give what the hook-based versions gave: the same
    formulas applied to the hand-written loop's inputs and outputs."""
    model = tiny(norm_first, seed=1)
    oracle = by_hand(model, SRC, TGT)
    with torch.no_grad():
        own = model(SRC, TGT, return_attention=True)
    weights = {"encoder": own.encoder_attentions, "decoder": own.decoder_attentions, "cross": own.cross_attentions}
    norms = value_norms(model, SRC, TGT)
    for kind in KINDS:
        for i, (query, key_value, _) in enumerate(oracle["inputs"][kind]):
            module = (model.encoder_layers[i].self_attn if kind == "encoder" else
                      model.decoder_layers[i].self_attn if kind == "decoder" else model.decoder_layers[i].cross_attn)
            d = module.d_head
            with torch.no_grad():
                q_all, k_all, v_all = module.q_proj(query), module.k_proj(key_value), module.v_proj(key_value)
            for head in range(module.n_heads):
                cols = slice(head * d, (head + 1) * d)
                w_o = module.out_proj.weight[:, cols].detach()  # (D, d)
                moved = (v_all[..., cols] @ w_o.T).norm(dim=-1)  # (B, K): ||v_j W_O^h||
                close(getattr(norms, f"{kind}_attentions")[i][:, head], weights[kind][i][:, head] * moved[:, None, :])
            hc = head_computation(model, SRC, TGT, kind, i, 1, 2, batch=1)
            close(hc.x_query, query[1, 2])
            close(hc.q, q_all[1, 2, d:2 * d])
            close(hc.k, k_all[1, :, d:2 * d])
            close(hc.v, v_all[1, :, d:2 * d])
            assert torch.equal(hc.weights, weights[kind][i][1, 1, 2])
    lens = logit_lens(model, SRC, TGT, k=4)
    assert len(lens) == len(oracle["outputs"]["decoder"])
    for (probs, ids), x in zip(lens, oracle["outputs"]["decoder"]):
        with torch.no_grad():
            h = model.decoder_norm(x) if norm_first else x
            p, i = model.generator(h).softmax(-1).topk(4, dim=-1)
        close(probs, p)
        assert torch.equal(ids, i)


# ------------------------------------------------------------------------------------------------ two visitors


def interpretations(model: Transformer) -> dict:
    """Each interpretation function once, on this file's sentences."""
    return {
        "head_computation": [head_computation(model, SRC, TGT, kind, 1, 2, 1, batch=b).__dict__
                             for kind in KINDS for b in (0, 1)],
        "value_norms": value_norms(model, SRC, TGT).__dict__,
        "logit_lens": logit_lens(model, SRC, TGT, k=3),
        "input_x_gradient": attribute(model, SRC, TGT, LABELS, method="input_x_gradient"),
        "integrated_gradients": attribute(model, SRC, TGT, LABELS, method="integrated_gradients", steps=4),
    }


def equal(a, b) -> bool:
    """Exactly the same values (nested dicts, lists and tuples of tensors and numbers)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.slow  # among the fast loop's slowest (issue 57 §19: it stays under a minute)
def test_interpretation_is_unaffected_by_another_visitor():
    """Each interpretation function, computed alone, then again and again while a second thread runs other forward
    passes (same-length sentences too), greedy and beam search on the same model object: always the same result."""
    model = tiny(False, seed=2)
    alone = interpretations(model)
    other_src = torch.tensor([[7, 7, 9, 5, 4, 3], [6, 5, 4, 12, 3, 0]])  # same lengths as SRC, other words
    other_tgt = torch.tensor([[2, 20, 21, 22, 23], [2, 24, 25, 26, 0]])
    longer = torch.tensor([[5, 9, 13, 8, 6, 7, 11, 3]])
    off = {k: torch.ones(2, 4) for k in KINDS}
    off["cross"][0, 1] = 0.0
    stop, errors, runs = threading.Event(), [], [0]

    def other_visitor() -> None:
        try:
            while not stop.is_set():
                with torch.no_grad():
                    model(other_src, other_tgt, return_attention=True)
                    model(other_src, other_tgt, head_mask=off)
                    model(other_src, other_tgt, return_internals=True)
                greedy_decode(model, longer, max_len_b=4)
                beam_search(model, other_src, 3, max_len_b=4, head_mask=off)
                runs[0] += 1
        except Exception as err:  # reported by the main thread
            errors.append(err)

    thread = threading.Thread(target=other_visitor, daemon=True)
    thread.start()
    rounds, mismatches = 0, []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline or rounds < 2:
            again = interpretations(model)
            mismatches += [name for name in alone if not equal(alone[name], again[name])]
            rounds += 1
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert runs[0] >= 2, "the other visitor never got to run"  # the two did overlap
    assert mismatches == [], f"{len(mismatches)} results differed over {rounds} rounds: {sorted(set(mismatches))}"
    assert not model.training


def test_attribute_and_analyse_heads_refuse_a_training_model_and_leave_it_so(tr):
    """Switching a shared model to eval mode and back would change it under every other visitor: a model in
    training mode is refused instead, and left as it was."""
    from transformer.interpret.heads import analyse_heads

    model = tiny(False).train()
    with pytest.raises(ValueError, match="eval mode"):
        attribute(model, SRC, TGT, LABELS, method="input_x_gradient")
    assert model.training
    tr.model.train()
    try:
        with pytest.raises(ValueError, match="eval mode"):
            analyse_heads(tr, ["a man rides a bike ."], ["ein mann fährt fahrrad ."])
        assert tr.model.training
    finally:
        tr.model.eval()
