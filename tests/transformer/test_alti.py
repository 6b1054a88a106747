"""``transformer.interpret.contributions`` (ALTI+) against a brute-force oracle on tiny models of every layout.

The oracle walks the model with its own modules: each attention block's per-token terms one token at a time
(a copy of the attention whose value projection keeps only that token's row, so the weights are the model's own
and every other token's value is zeroed), the layer norm's linear part with the real deviation of the block's
real pre-norm sum, the proximities in plain Python loops, and the rollout one output step at a time."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from transformer import Transformer
from transformer.checkpoint.families.m2m100 import config_from_m2m100
from transformer.checkpoint.families.marian import config_from_marian
from transformer.interpret import block_terms, contributions
from transformer.network.masks import decoder_self_mask, padding_mask
from transformer.network.model import TransformerConfig

torch.set_num_threads(1)

HF = dict(vocab_size=40, d_model=16, encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
          decoder_layers=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=1,
          eos_token_id=2, decoder_start_token_id=2)


def layout(name: str) -> TransformerConfig:
    """A tiny config of each layout: the paper's post-norm and pre-norm, Marian's (post-norm, SiLU, halves table,
    logits bias, untied), M2M100's (pre-norm with final norms, fairseq table with offset, scaled embeddings)."""
    if name == "marian":
        return config_from_marian({**HF, "share_encoder_decoder_embeddings": False, "pad_token_id": 0,
                                   "decoder_start_token_id": 0})
    if name == "m2m100":
        return config_from_m2m100({**HF, "activation_function": "relu", "scale_embedding": True})
    return TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=4, n_encoder_layers=2,
                             n_decoder_layers=3, d_ff=32, max_len=64, norm_first=name == "prenorm", pad_id=0,
                             bos_id=2, eos_id=3)


LAYOUTS = ("postnorm", "prenorm", "marian", "m2m100")


def model_of(name: str, seed: int = 0) -> Transformer:
    """Random weights, every bias and norm parameter away from its initial value (so each term is exercised)."""
    torch.manual_seed(seed)
    model = Transformer(layout(name))
    with torch.no_grad():
        for p_name, p in model.named_parameters():
            if "norm" in p_name and p_name.endswith("weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn_like(p))
    return model.eval()


def batch(config: TransformerConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sentences, the second padded on both sides."""
    pad = config.pad_id
    src = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 3, pad, pad, pad]])
    tgt = torch.tensor([[config.bos_id, 12, 13, 14, 15], [config.bos_id, 16, 17, pad, pad]])
    return src, tgt


class KeepOne(nn.Module):
    """A value projection that keeps one token's row and zeroes every other's."""

    def __init__(self, proj: nn.Linear, j: int) -> None:
        super().__init__()
        self.proj, self.j = proj, j

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.proj(x)
        keep = torch.zeros(x.size(1), 1, dtype=v.dtype)
        keep[self.j] = 1
        return v * keep


def one_token_terms(attn, query, key_value, mask) -> list[torch.Tensor]:
    """The attention's output with every value but token j's zeroed and no output bias, for each j: ``(B, Q, D)``."""
    terms = []
    for j in range(key_value.size(1)):
        only = copy.deepcopy(attn)
        only.v_proj = KeepOne(attn.v_proj, j)
        with torch.no_grad():
            only.out_proj.bias.zero_()
        terms.append(only(query, key_value, mask)[0])
    return terms


def oracle_block(norm_first: bool, norm: nn.LayerNorm, attn, x, key_value, mask, cross: bool):
    """One attention block by brute force: per-token terms (one list per query and key), the real output."""
    inp = norm(x) if norm_first else x
    kv = key_value if cross else inp
    full = attn(inp, kv, mask)[0]
    real = x + full if norm_first else norm(x + full)
    pieces = one_token_terms(attn, inp, kv, mask)  # K tensors (B, Q, D)
    b, q, _ = x.shape
    terms = [[[pieces[j][n, i] + (x[n, i] if (not cross and i == j) else 0) for j in range(len(pieces))]
              for i in range(q)] for n in range(b)]
    if cross:
        for n in range(b):
            for i in range(q):
                terms[n][i].append(x[n, i].clone())
    if not norm_first:
        z = x + full
        std = (z.var(-1, unbiased=False) + norm.eps).sqrt()
        terms = [[[norm.weight * (t - t.mean()) / std[n, i] for t in row] for i, row in enumerate(rows)]
                 for n, rows in enumerate(terms)]
    return terms, real


def proximities(terms, y) -> torch.Tensor:
    """ALTI's normalised proximities, in loops."""
    b, q = len(terms), len(terms[0])
    out = torch.zeros(b, q, len(terms[0][0]))
    for n in range(b):
        for i in range(q):
            yi = y[n, i]
            c = [max(0.0, float(yi.abs().sum() - (yi - t).abs().sum())) for t in terms[n][i]]
            out[n, i] = torch.tensor(c) / sum(c)
    return out


@torch.no_grad()
def oracle(model: Transformer, src: torch.Tensor, tgt: torch.Tensor):
    """Per-layer contributions and the rollout, by brute force."""
    nf = model.config.norm_first
    src_mask, self_mask = padding_mask(src, model.config.pad_id), decoder_self_mask(tgt, model.config.pad_id)
    x = model.embed(src, model.src_embed)
    enc_layers = []
    for layer in model.encoder_layers:
        terms, real = oracle_block(nf, layer.norm1, layer.self_attn, x, None, src_mask, cross=False)
        enc_layers.append(proximities(terms, real))
        x = layer(x, src_mask)[0]
    memory = model.encoder_norm(x) if model.encoder_norm is not None else x
    b, s, t = src.size(0), src.size(1), tgt.size(1)
    enc = torch.eye(s).repeat(b, 1, 1)
    for c in enc_layers:
        enc = torch.stack([c[n] @ enc[n] for n in range(b)])
    y = model.embed(tgt, model.tgt_embed)
    source, target = torch.zeros(b, t, s), torch.eye(t).repeat(b, 1, 1)
    per_layer = []
    for layer in model.decoder_layers:
        terms, after_self = oracle_block(nf, layer.norm1, layer.self_attn, y, None, self_mask, cross=False)
        c_self = proximities(terms, after_self)
        stream = after_self if not nf else y + layer.self_attn(layer.norm1(y), layer.norm1(y), self_mask)[0]
        terms, _ = oracle_block(nf, layer.norm2, layer.cross_attn, stream, memory, src_mask, cross=True)
        real = layer.norm2(stream + layer.cross_attn(stream, memory, src_mask)[0]) if not nf else \
            stream + layer.cross_attn(layer.norm2(stream), memory, src_mask)[0]
        c_cross = proximities(terms, real)
        new_s, new_t = torch.zeros_like(source), torch.zeros_like(target)
        for n in range(b):
            for i in range(t):  # one output step at a time: what its self-attention mixed, then the cross block
                mixed_s = sum(c_self[n, i, j] * source[n, j] for j in range(t))
                mixed_t = sum(c_self[n, i, j] * target[n, j] for j in range(t))
                res = c_cross[n, i, s]
                new_s[n, i] = sum(c_cross[n, i, j] * enc[n, j] for j in range(s)) + res * mixed_s
                new_t[n, i] = res * mixed_t
        source, target = new_s, new_t
        per_layer.append((c_self, c_cross))
        y = layer(y, memory, self_mask, src_mask)[0]
    return enc_layers, enc, per_layer, source, target


@pytest.mark.parametrize("name", LAYOUTS)
def test_contributions_equal_the_brute_force_oracle(name):
    model = model_of(name)
    src, tgt = batch(model.config)
    got = contributions(model, src, tgt)
    enc_layers, enc, per_layer, source, target = oracle(model, src, tgt)
    for mine, theirs in zip(got.encoder_layers, enc_layers, strict=True):
        torch.testing.assert_close(mine, theirs, atol=2e-5, rtol=1e-4)
    for i, (c_self, c_cross) in enumerate(per_layer):
        torch.testing.assert_close(got.decoder_layers[i], c_self, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(got.cross_layers[i], c_cross[..., :-1], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(got.cross_residual[i], c_cross[..., -1], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got.encoder, enc, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got.source, source, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got.target, target, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(got.source_share, source.sum(-1), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", LAYOUTS)
@torch.no_grad()
def test_the_terms_sum_back_to_each_blocks_real_output(name):
    model = model_of(name, seed=1)
    src, tgt = batch(model.config)
    out = model(src, tgt, return_attention=True, return_internals=True)
    nf = model.config.norm_first
    for i, layer in enumerate(model.encoder_layers):
        inputs = out.attention_inputs["encoder"][i]
        x = inputs.residual
        real = x + layer.self_attn(layer.norm1(x), layer.norm1(x), inputs.mask)[0] if nf else \
            layer.norm1(x + layer.self_attn(x, x, inputs.mask)[0])
        terms, y = block_terms(layer.self_attn, out.encoder_attentions[i], inputs.key_value, x,
                               None if nf else layer.norm1, cross=False)
        torch.testing.assert_close(y, real, atol=1e-5, rtol=0)
        bias = y - terms.sum(2)  # the part no token gets: the output bias (through the norm) and the norm's bias
        b_o = layer.self_attn.out_proj.bias
        torch.testing.assert_close(bias, b_o.expand_as(bias) if nf else bias, atol=1e-5, rtol=0)
    for i, layer in enumerate(model.decoder_layers):
        inputs = out.attention_inputs["cross"][i]
        x, memory = inputs.residual, inputs.key_value
        real = x + layer.cross_attn(layer.norm2(x), memory, inputs.mask)[0] if nf else \
            layer.norm2(x + layer.cross_attn(x, memory, inputs.mask)[0])
        _, y = block_terms(layer.cross_attn, out.cross_attentions[i], memory, x, None if nf else layer.norm2,
                           cross=True)
        torch.testing.assert_close(y, real, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", LAYOUTS)
def test_rows_are_distributions_and_never_look_ahead(name):
    model = model_of(name, seed=2)
    src, tgt = batch(model.config)
    got = contributions(model, src, tgt)
    total = got.source.sum(-1) + got.target.sum(-1)
    torch.testing.assert_close(total, torch.ones_like(total))
    torch.testing.assert_close(got.encoder.sum(-1), torch.ones_like(got.encoder.sum(-1)))
    for m in (got.encoder, got.source, got.target, *got.encoder_layers, *got.decoder_layers, *got.cross_layers):
        assert (m >= 0).all()
    assert (got.target.triu(1) == 0).all()
    for c in got.decoder_layers:
        assert (c.triu(1) == 0).all()
    # padding contributes nothing to the real pieces, and a padded sentence gets what it gets alone
    assert (got.source[1, :3, 3:] == 0).all() and (got.encoder[1, :3, 3:] == 0).all()
    alone = contributions(model, src[1:, :3], tgt[1:, :3])
    torch.testing.assert_close(got.source[1:, :3, :3], alone.source, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got.target[1:, :3, :3], alone.target, atol=1e-5, rtol=1e-4)


def test_chunking_the_queries_changes_nothing():
    model = model_of("postnorm", seed=3)
    src, tgt = batch(model.config)
    whole, chunked = contributions(model, src, tgt), contributions(model, src, tgt, max_bytes=1)
    for a, b in ((whole.source, chunked.source), (whole.target, chunked.target), (whole.encoder, chunked.encoder)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def without_output(model, attn: str):
    """``model`` with every decoder layer's ``attn`` output projection (weight and bias) set to zero."""
    with torch.no_grad():
        for layer in model.decoder_layers:
            getattr(layer, attn).out_proj.weight.zero_()
            getattr(layer, attn).out_proj.bias.zero_()
    return model


@pytest.mark.parametrize("name", LAYOUTS)
def test_no_cross_attention_output_means_no_source(name):
    model = without_output(model_of(name, seed=4), "cross_attn")
    src, tgt = batch(model.config)
    got = contributions(model, src, tgt)
    assert (got.source_share == 0).all() and (got.source == 0).all()
    torch.testing.assert_close(got.target.sum(-1), torch.ones_like(got.source_share))


@pytest.mark.parametrize("name", LAYOUTS)
def test_no_decoder_self_attention_output_keeps_the_target_part_on_the_own_position(name):
    model = without_output(model_of(name, seed=5), "self_attn")
    src, tgt = batch(model.config)
    got = contributions(model, src, tgt)
    diagonal = got.target.diagonal(dim1=-2, dim2=-1)  # (B, T)
    assert (got.target - torch.diag_embed(diagonal) == 0).all()
    torch.testing.assert_close(diagonal, 1 - got.source_share, atol=1e-6, rtol=0)
    assert (got.source_share > 0).all()  # the source still gets its part


def test_a_model_in_training_mode_is_refused():
    model = model_of("postnorm").train()
    src, tgt = batch(model.config)
    with pytest.raises(ValueError, match="eval mode"):
        contributions(model, src, tgt)
