"""The model itself: shapes, masks, attention weights, head masks, configs, and nn.Transformer as an oracle."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import tiny_model
from torch import nn

from transformer import (
    Transformer,
    TransformerConfig,
    causal_mask,
    decoder_self_mask,
    padding_mask,
    positional_encoding,
    scaled_dot_product_attention,
)

PAD, BOS, EOS = 0, 2, 3

CONFIGS = {
    "1-head-1-layer": dict(d_model=16, n_heads=1, n_encoder_layers=1, n_decoder_layers=1, d_ff=32),
    "4-heads-2-1-layers": dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_ff=64),
    "pre-norm-untied": dict(d_model=24, n_heads=3, n_encoder_layers=1, n_decoder_layers=2, d_ff=48,
                            norm_first=True, share_embeddings=False, src_vocab_size=19, tgt_vocab_size=23),
}


def make_model(seed: int = 0, **overrides) -> Transformer:
    """This file's tiny model (``conftest.tiny_model``)."""
    return tiny_model(seed, **overrides)


def randomise(model: Transformer, seed: int = 1) -> Transformer:
    """Non-zero biases and non-trivial LayerNorm parameters, so that every weight mapping is exercised."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
    return model


def make_batch(cfg: TransformerConfig, src_lens=(7, 4, 2), tgt_lens=(6, 3, 5), seed: int = 0):
    """Right-padded source (ending in EOS) and target (starting with BOS) batches of the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.full((len(src_lens), max(src_lens)), PAD)
    tgt = torch.full((len(tgt_lens), max(tgt_lens)), PAD)
    for i, n in enumerate(src_lens):
        src[i, :n] = torch.randint(4, cfg.src_vocab_size, (n,), generator=gen)
        src[i, n - 1] = EOS
    for i, n in enumerate(tgt_lens):
        tgt[i, :n] = torch.randint(4, cfg.tgt_vocab_size, (n,), generator=gen)
        tgt[i, 0] = BOS
    return src, tgt


def all_attentions(out):
    return [*out.encoder_attentions, *out.decoder_attentions, *out.cross_attentions]


# ----------------------------------------------------------------------------------------------
# shapes and the defining properties of the attention weights


@pytest.mark.parametrize("name", CONFIGS)
def test_attention_shapes_and_rows_sum_to_one(name):
    model = make_model(**CONFIGS[name])
    cfg = model.config
    src, tgt = make_batch(cfg)
    (b, s), t, h = src.shape, tgt.size(1), cfg.n_heads
    out = model(src, tgt, return_attention=True)
    assert out.logits.shape == (b, t, cfg.tgt_vocab_size)
    assert out.encoder_last_hidden_state.shape == (b, s, cfg.d_model)
    assert out.decoder_last_hidden_state.shape == (b, t, cfg.d_model)
    assert len(out.encoder_attentions) == cfg.n_encoder_layers
    assert len(out.decoder_attentions) == cfg.n_decoder_layers
    assert len(out.cross_attentions) == cfg.n_decoder_layers
    for w in out.encoder_attentions:
        assert w.shape == (b, h, s, s)
    for w in out.decoder_attentions:
        assert w.shape == (b, h, t, t)
    for w in out.cross_attentions:
        assert w.shape == (b, h, t, s)
    for w in all_attentions(out):
        assert torch.isfinite(w).all()
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)


def test_no_attentions_unless_asked():
    model = make_model()
    src, tgt = make_batch(model.config)
    out = model(src, tgt)
    assert out.encoder_attentions == () and out.decoder_attentions == () and out.cross_attentions == ()
    enc = model.encode(src)
    assert enc.attentions == ()


@pytest.mark.parametrize("name", CONFIGS)
def test_masked_positions_get_exactly_zero_weight(name):
    model = make_model(**CONFIGS[name])
    src, tgt = make_batch(model.config)
    out = model(src, tgt, return_attention=True)
    src_pad = (src == PAD)[:, None, None, :]  # (B, 1, 1, S)
    tgt_pad = (tgt == PAD)[:, None, None, :]  # (B, 1, 1, T)
    assert src_pad.any() and tgt_pad.any()
    t = tgt.size(1)
    above = torch.ones(t, t, dtype=torch.bool).triu(1)
    for w in out.decoder_attentions:
        assert (w[..., above] == 0).all()  # exactly zero above the diagonal
        assert (w.masked_select(tgt_pad.expand_as(w)) == 0).all()
        assert (w[..., ~above] > 0).any()
    for w in out.encoder_attentions:
        assert (w.masked_select(src_pad.expand_as(w)) == 0).all()
        assert (w.masked_select(~src_pad.expand_as(w)) > 0).all()  # softmax over real keys is never exactly 0
    for w in out.cross_attentions:
        assert (w.masked_select(src_pad.expand_as(w)) == 0).all()


def test_scaled_dot_product_attention_function():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    mask = torch.rand(2, 1, 4, 5) > 0.4
    mask[..., 0] = True  # every query sees at least one key
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == (2, 3, 4, 8) and w.shape == (2, 3, 4, 5)
    assert (w.masked_select(~mask.expand_as(w)) == 0).all()
    # the definition, softmax(QK^T / sqrt(d)) V, written independently
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(8)
    expected_w = torch.where(mask, scores.exp(), torch.zeros(())) / torch.where(mask, scores.exp(), 0).sum(-1, True)
    torch.testing.assert_close(w, expected_w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, expected_w @ v, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                               atol=1e-5, rtol=1e-5)


def test_mask_helpers():
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    pm = padding_mask(tokens, 0)
    assert pm.shape == (2, 1, 1, 3) and pm.dtype == torch.bool
    assert pm[:, 0, 0].tolist() == [[True, True, False], [True, False, False]]
    cm = causal_mask(3)
    assert cm.shape == (1, 1, 3, 3) and cm.dtype == torch.bool
    assert cm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    dm = decoder_self_mask(tokens, 0)
    assert dm.shape == (2, 1, 3, 3)
    assert torch.equal(dm, pm & cm)


@pytest.mark.parametrize("return_attention", [False, True])
@pytest.mark.parametrize("name", CONFIGS)
def test_padded_batch_equals_each_sentence_alone(name, return_attention):
    model = make_model(**CONFIGS[name])
    src_lens, tgt_lens = (7, 4, 2), (6, 3, 5)
    src, tgt = make_batch(model.config, src_lens, tgt_lens)
    batched = model(src, tgt, return_attention=return_attention)
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        alone = model(src[i:i + 1, :s], tgt[i:i + 1, :t], return_attention=return_attention)
        torch.testing.assert_close(batched.logits[i:i + 1, :t], alone.logits, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(batched.encoder_last_hidden_state[i:i + 1, :s], alone.encoder_last_hidden_state,
                                   atol=1e-5, rtol=1e-5)
        for wb, wa in zip(batched.encoder_attentions, alone.encoder_attentions):
            torch.testing.assert_close(wb[i:i + 1, :, :s, :s], wa, atol=1e-5, rtol=1e-5)
        for wb, wa in zip(batched.decoder_attentions, alone.decoder_attentions):
            torch.testing.assert_close(wb[i:i + 1, :, :t, :t], wa, atol=1e-5, rtol=1e-5)
        for wb, wa in zip(batched.cross_attentions, alone.cross_attentions):
            torch.testing.assert_close(wb[i:i + 1, :, :t, :s], wa, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("return_attention", [False, True])
@pytest.mark.parametrize("name", CONFIGS)
def test_later_target_token_does_not_change_earlier_outputs(name, return_attention):
    model = make_model(**CONFIGS[name])
    src, tgt = make_batch(model.config, (6, 6), (7, 7))
    before = model(src, tgt, return_attention=return_attention)
    k = 4
    changed = tgt.clone()
    changed[:, k] = 4 + (changed[:, k] - 4 + 1) % (model.config.tgt_vocab_size - 4)  # another real token
    changed[:, k + 2] = 4 + (changed[:, k + 2] - 4 + 3) % (model.config.tgt_vocab_size - 4)
    after = model(src, changed, return_attention=return_attention)
    torch.testing.assert_close(after.logits[:, :k], before.logits[:, :k], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(after.decoder_last_hidden_state[:, :k], before.decoder_last_hidden_state[:, :k],
                               atol=1e-6, rtol=1e-6)
    assert not torch.allclose(after.logits[:, k:], before.logits[:, k:], atol=1e-4)  # the change did something
    for wb, wa in zip(before.decoder_attentions + before.cross_attentions,
                      after.decoder_attentions + after.cross_attentions):
        torch.testing.assert_close(wa[:, :, :k], wb[:, :, :k], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", CONFIGS)
def test_explicit_and_fast_attention_paths_agree(name):
    model = randomise(make_model(**CONFIGS[name]))
    src, tgt = make_batch(model.config)
    explicit = model(src, tgt, return_attention=True)
    fast = model(src, tgt, return_attention=False)
    torch.testing.assert_close(explicit.logits, fast.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit.encoder_last_hidden_state, fast.encoder_last_hidden_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("return_attention", [False, True])
def test_explicit_masks_are_honoured(return_attention):
    model = make_model()
    src, tgt = make_batch(model.config, (6, 6), (5, 5))
    default = model(src, tgt, return_attention=return_attention)
    # the default masks, passed explicitly, change nothing
    same = model(src, tgt, src_mask=padding_mask(src, PAD), tgt_mask=decoder_self_mask(tgt, PAD),
                 return_attention=return_attention)
    torch.testing.assert_close(same.logits, default.logits, atol=0, rtol=0)

    # hide source position 1 from everything that reads the source
    src_mask = padding_mask(src, PAD).clone()
    src_mask[..., 1] = False
    hidden = model(src, tgt, src_mask=src_mask, return_attention=True)
    for w in hidden.encoder_attentions + hidden.cross_attentions:
        assert (w[..., 1] == 0).all()
    assert not torch.allclose(hidden.logits, default.logits, atol=1e-4)
    # changing the hidden source token then changes nothing (position 1 is seen only through attention)
    src2 = src.clone()
    src2[:, 1] = 4 + (src2[:, 1] - 4 + 1) % (model.config.src_vocab_size - 4)
    hidden2 = model(src2, tgt, src_mask=src_mask, return_attention=return_attention)
    torch.testing.assert_close(hidden2.logits, hidden.logits, atol=1e-5, rtol=1e-5)
    fast_hidden = model(src, tgt, src_mask=src_mask, return_attention=False)
    torch.testing.assert_close(fast_hidden.logits, hidden.logits, atol=1e-5, rtol=1e-5)

    # a full (non-causal) target mask lets early positions see later tokens
    full = torch.ones(1, 1, tgt.size(1), tgt.size(1), dtype=torch.bool)
    bidir = model(src, tgt, tgt_mask=full, return_attention=True)
    above = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)
    for w in bidir.decoder_attentions:
        assert (w[..., above] > 0).all()
    assert not torch.allclose(bidir.logits[:, 0], default.logits[:, 0], atol=1e-4)
    fast_bidir = model(src, tgt, tgt_mask=full, return_attention=False)
    torch.testing.assert_close(fast_bidir.logits, bidir.logits, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# head masks


def head_off_by_weights(model: Transformer, attn: nn.Module, head: int) -> None:
    """Switch a head off the other way: zero the columns of out_proj that read it."""
    d = model.config.d_head
    with torch.no_grad():
        attn.out_proj.weight[:, head * d:(head + 1) * d] = 0


@pytest.mark.parametrize("kind", ["encoder", "decoder", "cross"])
def test_head_mask_switches_a_head_off(kind):
    model = randomise(make_model())
    cfg = model.config
    src, tgt = make_batch(cfg)
    layers = cfg.n_encoder_layers if kind == "encoder" else cfg.n_decoder_layers
    plain = model(src, tgt).logits

    ones = {kind: torch.ones(layers, cfg.n_heads)}
    for return_attention in (False, True):
        torch.testing.assert_close(model(src, tgt, head_mask=ones, return_attention=return_attention).logits, plain,
                                   atol=1e-5, rtol=1e-5)

    mask = torch.ones(layers, cfg.n_heads)
    mask[1, 2] = 0.0
    masked = model(src, tgt, head_mask={kind: mask}).logits
    masked_explicit = model(src, tgt, head_mask={kind: mask}, return_attention=True).logits
    assert not torch.allclose(masked, plain, atol=1e-4)
    torch.testing.assert_close(masked_explicit, masked, atol=1e-5, rtol=1e-5)

    module = {"encoder": lambda: model.encoder_layers[1].self_attn,
              "decoder": lambda: model.decoder_layers[1].self_attn,
              "cross": lambda: model.decoder_layers[1].cross_attn}[kind]()
    head_off_by_weights(model, module, 2)
    torch.testing.assert_close(model(src, tgt).logits, masked, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# positional encoding, embeddings, configs


@pytest.mark.parametrize("max_len,d_model", [(50, 16), (7, 6), (9, 7)])
def test_positional_table_matches_the_paper(max_len, d_model):
    table = positional_encoding(max_len, d_model)
    assert table.shape == (max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)
            expected = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(table[pos, i].item() - expected) < 1e-6, (pos, i)


def test_embedding_is_scaled_token_embedding_plus_positions():
    model = make_model(max_len=12)
    d = model.config.d_model
    torch.testing.assert_close(model.pe, positional_encoding(12, d))
    tokens = torch.tensor([[5, 6, 7, 8]])
    x = model.embed(tokens, model.src_embed)
    torch.testing.assert_close(x, model.src_embed(tokens) * math.sqrt(d) + positional_encoding(12, d)[:4])
    shifted = model.embed(tokens[:, 2:], model.tgt_embed, offset=2)
    torch.testing.assert_close(shifted, model.tgt_embed(tokens[:, 2:]) * math.sqrt(d) + positional_encoding(12, d)[2:4])
    assert (model.src_embed.weight[PAD] == 0).all()
    with pytest.raises(ValueError, match="max_len"):
        model.embed(torch.full((1, 13), 5), model.src_embed)


def test_paper_sizes():
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.d_model, base.n_heads, base.n_encoder_layers, base.n_decoder_layers, base.d_ff, base.dropout) == (
        512, 8, 6, 6, 2048, 0.1)
    assert (big.d_model, big.n_heads, big.n_encoder_layers, big.n_decoder_layers, big.d_ff, big.dropout) == (
        1024, 16, 6, 6, 4096, 0.3)
    assert base.d_head == big.d_head == 64
    assert not base.norm_first and base.share_embeddings  # post-norm, tied embeddings, as in the paper
    custom = TransformerConfig.base(src_vocab_size=100, tgt_vocab_size=100, dropout=0.2)
    assert custom.d_model == 512 and custom.dropout == 0.2 and custom.src_vocab_size == 100


def expected_parameters(cfg: TransformerConfig) -> int:
    """The parameter count the paper's architecture implies (Q, K, V, output projections with biases, ...)."""
    d, f = cfg.d_model, cfg.d_ff
    attn = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    norm = 2 * d
    layers = cfg.n_encoder_layers * (attn + ffn + 2 * norm) + cfg.n_decoder_layers * (2 * attn + ffn + 3 * norm)
    if cfg.share_embeddings:
        embeddings = cfg.src_vocab_size * d
    else:
        embeddings = cfg.src_vocab_size * d + 2 * cfg.tgt_vocab_size * d
    return embeddings + layers + (2 * norm if cfg.norm_first else 0)


@pytest.mark.parametrize("name", CONFIGS)
def test_parameter_count(name):
    model = make_model(**CONFIGS[name])
    assert model.num_parameters() == expected_parameters(model.config)


def test_paper_base_parameter_count():
    """With the paper's 37000-token shared vocabulary the base model has ~65M parameters (Table 3)."""
    assert 60e6 < expected_parameters(TransformerConfig.base(src_vocab_size=37000, tgt_vocab_size=37000)) < 66e6
    assert 200e6 < expected_parameters(TransformerConfig.big(src_vocab_size=37000, tgt_vocab_size=37000)) < 215e6


def test_invalid_configs_raise():
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="share_embeddings"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=True)
    TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=False)


def test_config_round_trips_through_json(tmp_path):
    cfg = TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=24, n_heads=3, n_encoder_layers=1,
                            n_decoder_layers=2, d_ff=40, dropout=0.25, max_len=17, norm_first=True,
                            share_embeddings=False, attention_dropout=0.05, layer_norm_eps=1e-6)
    cfg.save(tmp_path / "config.json")
    assert json.loads((tmp_path / "config.json").read_text())["d_ff"] == 40
    assert TransformerConfig.load(tmp_path / "config.json") == cfg
    assert TransformerConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown"):
        TransformerConfig.from_dict({**cfg.to_dict(), "n_layers": 3})


def test_tied_embeddings_share_storage():
    model = make_model(share_embeddings=True)
    w = model.src_embed.weight
    assert model.tgt_embed.weight is w and model.generator.weight is w
    assert model.tgt_embed.weight.data_ptr() == w.data_ptr() == model.generator.weight.data_ptr()
    with torch.no_grad():
        w[7].fill_(0.5)
    assert (model.tgt_embed.weight[7] == 0.5).all() and (model.generator.weight[7] == 0.5).all()
    # a gradient through any of the three uses lands in the one tensor
    src, tgt = make_batch(model.config)
    model(src, tgt).logits.sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0

    untied = make_model(share_embeddings=False)
    ptrs = {untied.src_embed.weight.data_ptr(), untied.tgt_embed.weight.data_ptr(), untied.generator.weight.data_ptr()}
    assert len(ptrs) == 3
    with torch.no_grad():
        untied.src_embed.weight[7].fill_(0.5)
    assert not (untied.tgt_embed.weight[7] == 0.5).all() and not (untied.generator.weight[7] == 0.5).all()
    v, d = untied.config.tgt_vocab_size, untied.config.d_model
    assert untied.num_parameters() - model.num_parameters() == 2 * v * d


def test_dropout_only_in_training_mode():
    model = make_model(dropout=0.5)
    src, tgt = make_batch(model.config)
    model.eval()
    torch.testing.assert_close(model(src, tgt).logits, model(src, tgt).logits, atol=0, rtol=0)
    model.train()
    torch.manual_seed(0)
    a = model(src, tgt).logits
    torch.manual_seed(1)
    b = model(src, tgt).logits
    assert not torch.allclose(a, b)


def test_logits_mask_gives_the_full_logits_rows():
    """``logits_mask`` (training skips padding positions) returns exactly the rows of the full logits it selects."""
    model = randomise(make_model())
    src, tgt = make_batch(model.config)
    keep = tgt != PAD  # (B, T)
    full = model(src, tgt).logits  # (B, T, V)
    part = model(src, tgt, logits_mask=keep).logits  # (n, V)
    assert part.shape == (int(keep.sum()), model.config.tgt_vocab_size)
    torch.testing.assert_close(part, full[keep], atol=1e-6, rtol=1e-6)


def test_cpu_dropout_drops_p_and_rescales_the_rest():
    """The CPU training dropout: the dropped fraction is p (within 5 standard errors over 10^6 units), kept units
    are scaled by 1 / (1 - p) so the mean is kept, the gradient is the same mask, and evaluation is the identity."""
    from transformer.network.dropout import Dropout

    p, n = 0.3, 1_000_000
    drop = Dropout(p).train()
    x = (torch.rand(1000, 1000) + 0.5).requires_grad_()
    torch.manual_seed(0)
    y = drop(x)
    ratio = (y / x).detach()
    dropped = (ratio == 0).float().mean().item()
    assert abs(dropped - p) < 5 * math.sqrt(p * (1 - p) / n)
    kept = ratio[ratio != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - p)))
    assert abs(y.mean().item() / x.mean().item() - 1) < 0.01
    y.sum().backward()
    torch.testing.assert_close(x.grad, ratio)
    torch.manual_seed(1)
    assert not torch.equal(drop(x), y)  # a new mask each call
    odd = torch.randn(3, 5, 7)  # a size that is not a multiple of 4
    assert drop(odd).shape == odd.shape
    drop.eval()
    assert drop(x) is x


def test_attention_dropout_in_cpu_training_is_the_explicit_arithmetic():
    """Training on a CPU with attention dropout: the output is (dropout(softmax(QK^T / sqrt d)) V) W_o, with
    the dropout mask recomputed by hand from the same seed."""
    from transformer.network.attention import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.4).train()
    x = torch.randn(3, 5, 16)
    mask = torch.ones(3, 1, 5, 5, dtype=torch.bool).tril()
    torch.manual_seed(7)
    out, w = mha(x, x, mask)
    assert w is None
    q, k, v = mha.split_heads(mha.q_proj(x)), *mha.project_kv(x)  # (B, H, L, d) each
    weights = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf")).softmax(-1)
    torch.manual_seed(7)
    keep = mha.dropout(torch.ones_like(weights))  # the same mask: 0 or 1 / (1 - p)
    assert (keep == 0).any() and (keep > 1).any()
    expected = mha.out_proj(((weights * keep) @ v).transpose(1, 2).reshape(3, 5, 16))  # (B, H, L, d) -> (B, L, D)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# torch.nn.Transformer as the oracle


def copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_common(ours, theirs, norms) -> None:
    with torch.no_grad():
        theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
        theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
        for name in norms:
            getattr(theirs, name).load_state_dict(getattr(ours, name).state_dict())


def torch_reference(model: Transformer) -> tuple[nn.TransformerEncoder, nn.TransformerDecoder]:
    cfg = model.config
    kw = dict(d_model=cfg.d_model, nhead=cfg.n_heads, dim_feedforward=cfg.d_ff, dropout=0.0, activation="relu",
              layer_norm_eps=cfg.layer_norm_eps, batch_first=True, norm_first=cfg.norm_first)
    enc_norm = dec_norm = None
    if cfg.norm_first:
        enc_norm, dec_norm = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        enc_norm.load_state_dict(model.encoder_norm.state_dict())
        dec_norm.load_state_dict(model.decoder_norm.state_dict())
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), cfg.n_encoder_layers, norm=enc_norm,
                                    enable_nested_tensor=False)
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), cfg.n_decoder_layers, norm=dec_norm)
    for ours, theirs in zip(model.encoder_layers, encoder.layers, strict=True):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_common(ours, theirs, ["norm1", "norm2"])
    for ours, theirs in zip(model.decoder_layers, decoder.layers, strict=True):
        copy_attention(ours.self_attn, theirs.self_attn)
        copy_attention(ours.cross_attn, theirs.multihead_attn)
        copy_common(ours, theirs, ["norm1", "norm2", "norm3"])
    return encoder.eval(), decoder.eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_torch_nn_transformer(norm_first):
    model = randomise(make_model(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=48,
                                 dropout=0.1, norm_first=norm_first))  # dropout > 0 but eval mode: no dropout
    encoder, decoder = torch_reference(model)
    src, tgt = make_batch(model.config)
    src_pad, tgt_pad = src == PAD, tgt == PAD  # nn: True = masked, the opposite of ours
    t = tgt.size(1)
    future = torch.ones(t, t, dtype=torch.bool).triu(1)

    with torch.no_grad():
        x = model.embed(src, model.src_embed)
        y = model.embed(tgt, model.tgt_embed)
        theirs_enc = encoder(x, src_key_padding_mask=src_pad)
        ours_enc = model.encode(src).last_hidden_state
        torch.testing.assert_close(ours_enc, theirs_enc, atol=1e-5, rtol=1e-5)

        theirs_dec = decoder(y, theirs_enc, tgt_mask=future, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad)
        for return_attention in (False, True):
            ours_dec = model.decode(tgt, ours_enc, padding_mask(src, PAD), return_attention=return_attention)
            torch.testing.assert_close(ours_dec.last_hidden_state, theirs_dec, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(ours_dec.logits, model.generator(theirs_dec), atol=1e-5, rtol=1e-5)
        full = model(src, tgt, return_attention=True)
        torch.testing.assert_close(full.decoder_last_hidden_state, theirs_dec, atol=1e-5, rtol=1e-5)


def test_attention_weights_match_torch_multihead_attention():
    """Per-head weights of one layer against nn.MultiheadAttention's (average_attn_weights=False)."""
    model = randomise(make_model())
    encoder, _ = torch_reference(model)
    src, tgt = make_batch(model.config)
    with torch.no_grad():
        x = model.embed(src, model.src_embed)
        out = model.encode(src, return_attention=True)
        _, theirs = encoder.layers[0].self_attn(x, x, x, key_padding_mask=src == PAD, need_weights=True,
                                                average_attn_weights=False)
    torch.testing.assert_close(out.attentions[0], theirs, atol=1e-5, rtol=1e-5)


def test_one_attention_with_and_without_a_cache():
    """A decoder layer fed one position at a time through its cache gives the numbers (and, asked, the weights) of
    the whole target at once: the same attention, residual and norm code; the fused Q|K|V matrix projects as the
    three separate ones do."""
    from transformer.network.kv_cache import LayerCache

    model = tiny_model(seed=3)
    layer, sa = model.decoder_layers[1], model.decoder_layers[1].self_attn
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    weight, bias = sa.fused_qkv()
    torch.testing.assert_close(torch.nn.functional.linear(x, weight, bias),
                               torch.cat([sa.q_proj(x), sa.k_proj(x), sa.v_proj(x)], dim=-1))
    from transformer.network.weights import column_major_weights

    assert weight.is_contiguous()  # laid out as the projections: row-major here, column-major after the layout
    column_major_weights(model)
    assert not sa.fused_qkv()[0].is_contiguous() and torch.equal(sa.fused_qkv()[0], weight)
    full, self_w, cross_w = layer(x, memory, causal_mask(5), None, need_weights=True)
    cache = LayerCache(max_len=32)
    for t in range(5):
        out, sw, cw = layer(x[:, t:t + 1], memory, None, None, need_weights=True, cache=cache)
        torch.testing.assert_close(out[:, 0], full[:, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(sw[:, :, 0], self_w[:, :, t, : t + 1], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(cw[:, :, 0], cross_w[:, :, t], atol=1e-6, rtol=1e-5)
    assert cache.length == 5


def test_encode_and_decode_take_embeddings():
    """Token embeddings given instead of looked up: the same pass (what attribution differentiates through)."""
    for scale in (True, False):
        model = tiny_model(seed=4, scale_embedding=scale)
        src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
        enc = model.encode(src)
        by_rows = model.encode(src, src_embeds=model.src_embed.weight[src])
        torch.testing.assert_close(by_rows.last_hidden_state, enc.last_hidden_state)
        dec = model.decode(tgt, enc.last_hidden_state)
        by_rows = model.decode(tgt, enc.last_hidden_state, tgt_embeds=model.tgt_embed.weight[tgt])
        torch.testing.assert_close(by_rows.logits, dec.logits)
