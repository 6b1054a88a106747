"""One incremental decoding path (``KVCache``, ``DecoderLayer.step``, ``Transformer.decode_step``) against its oracle,
the full forward (``Transformer.decode`` over the whole prefix), with and without head masks; and the searches that
run on it (greedy, beam, Marian's scoring) against brute force and teacher-forced re-scoring under head masks."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import tiny_model

from transformer import beam_search, greedy_decode, length_penalty
from transformer.decoding.beam_transformers import beam_search_transformers
from transformer.network.kv_cache import KVCache
from transformer.network.model import Transformer, padding_mask

torch.set_num_threads(1)

PAD, BOS, EOS = 0, 2, 3

CONFIGS = {
    "post-norm": dict(),
    "pre-norm-untied": dict(norm_first=True, share_embeddings=False, src_vocab_size=13, tgt_vocab_size=11,
                            n_encoder_layers=1, d_model=24, n_heads=3),
    # OPUS-MT's differences: SiLU, sin | cos positions, a logits bias, decoding from <pad>; unscaled embeddings
    "marian-like": dict(activation="swish", positional_layout="halves", final_logits_bias=True, bos_id=PAD,
                        scale_embedding=False, n_decoder_layers=3),
}


def model_for(name: str, seed: int = 0) -> Transformer:
    model = tiny_model(seed, **{**dict(src_vocab_size=12, tgt_vocab_size=12, max_len=24, dropout=0.1),
                                **CONFIGS[name]})
    if model.generator.bias is not None:
        with torch.no_grad():
            model.generator.bias.normal_(0.0, 1.0)  # a bias that matters
    return model


def source(model: Transformer, lens=(6, 3, 5), seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    src = torch.full((len(lens), max(lens)), PAD)
    for i, n in enumerate(lens):
        src[i, :n] = torch.randint(4, model.config.src_vocab_size, (n,), generator=gen)
        src[i, n - 1] = EOS
    return src


def random_head_mask(model: Transformer, seed: int) -> dict[str, torch.Tensor]:
    """Each head of each type off with probability 0.4 (never every head of a layer)."""
    gen = torch.Generator().manual_seed(seed)
    cfg = model.config
    mask = {}
    for kind, layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers),
                         ("cross", cfg.n_decoder_layers)):
        m = (torch.rand(layers, cfg.n_heads, generator=gen) > 0.4).float()
        m[:, 0] = 1.0
        mask[kind] = m
    return mask


def target(model: Transformer, rows: int, length: int, seed: int = 1) -> torch.Tensor:
    tgt = torch.randint(4, model.config.tgt_vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))
    tgt[:, 0] = model.config.bos_id
    return tgt


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("name", CONFIGS)
def test_step_equals_the_full_forward(name, masked):
    """Step by step (and with several positions at once, a forced prefix), ``decode_step`` gives the full
    forward's logits at every position, with the same head mask."""
    model = model_for(name, seed=3)
    src = source(model, seed=3)
    head_mask = random_head_mask(model, 3) if masked else None
    hm = head_mask or {}
    src_mask = padding_mask(src, PAD)
    tgt = target(model, src.size(0), 7)
    with torch.no_grad():
        memory = model.encode(src, src_mask, encoder_head_mask=hm.get("encoder")).last_hidden_state
        full = model.decode(tgt, memory, src_mask, self_head_mask=hm.get("decoder"),
                            cross_head_mask=hm.get("cross")).logits  # (B, T, V)
        plain = model.decode(tgt, memory, src_mask).logits
        if masked:
            assert not torch.allclose(full, plain, atol=1e-3)  # the mask matters
        cache = model.new_cache()
        for t in range(tgt.size(1)):
            step = model.decode_step(tgt[:, t:t + 1], memory, src_mask, cache, head_mask=head_mask)
            torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)
            assert cache.length == t + 1
        # a prefix of three positions in one call, then one at a time
        cache = model.new_cache()
        step = model.decode_step(tgt[:, :3], memory, src_mask, cache, head_mask=head_mask)
        torch.testing.assert_close(step, full[:, 2], atol=1e-5, rtol=1e-5)
        for t in range(3, tgt.size(1)):
            step = model.decode_step(tgt[:, t:t + 1], memory, src_mask, cache, head_mask=head_mask)
            torch.testing.assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)
        # every layer's cached keys and values are the full forward's own
        internals = model.decode(tgt, memory, src_mask, self_head_mask=hm.get("decoder"),
                                 cross_head_mask=hm.get("cross"), return_internals=True)
        for layer, c, inputs in zip(model.decoder_layers, cache.layers, internals.self_attention_inputs):
            k, v = layer.self_attn.project_kv(inputs.key_value)  # (B, H, T, d)
            torch.testing.assert_close(c.self_k, k, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(c.self_v, v, atol=1e-5, rtol=1e-5)


def test_an_all_ones_head_mask_changes_nothing():
    model = model_for("post-norm", seed=4)
    src = source(model, seed=4)
    src_mask = padding_mask(src, PAD)
    tgt = target(model, src.size(0), 5)
    ones = {k: torch.ones(2, model.config.n_heads) for k in ("encoder", "decoder", "cross")}
    with torch.no_grad():
        memory = model.encode(src, src_mask).last_hidden_state
        a, b = model.new_cache(), model.new_cache()
        for t in range(tgt.size(1)):
            x = model.decode_step(tgt[:, t:t + 1], memory, src_mask, a)
            y = model.decode_step(tgt[:, t:t + 1], memory, src_mask, b, head_mask=ones)
            assert torch.equal(x, y)


def test_a_cache_primed_with_the_memory_once_a_sentence_steps_as_the_full_forward_of_every_row():
    """Beam search's cache: cross-attention keys and values projected and kept once per sentence, shared by its
    beams (consecutive rows, attending together); each row steps as the full forward over that row's own copy of
    the memory, also after whole sentences leave (their groups go) and after a choice of single rows (every row
    then gets its own copy)."""
    model = model_for("marian-like", seed=5)
    src = source(model, seed=5)
    src_mask = padding_mask(src, PAD)
    beams = 3
    tgt = target(model, src.size(0) * beams, 6, seed=6)
    with torch.no_grad():
        memory = model.encode(src, src_mask).last_hidden_state  # (B, S, D)
        rows, row_mask = memory.repeat_interleave(beams, 0), src_mask.repeat_interleave(beams, 0)  # (B*K, ...)
        full = model.decode(tgt, rows, row_mask).logits  # (B*K, T, V)
        cache = model.new_cache(memory)
        cache.branch(beams)
        for layer, c in zip(model.decoder_layers, cache.layers):
            k, v = layer.cross_attn.project_kv(memory)  # once per sentence
            assert c.group == beams and c.cross_k.size(0) == src.size(0)
            torch.testing.assert_close(c.cross_k, k, atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(c.cross_v, v, atol=1e-6, rtol=1e-6)
        keep = torch.arange(src.size(0) * beams)
        for t in range(tgt.size(1)):
            if t == 2:  # the first sentence leaves: whole groups stay grouped
                keep = keep[beams:]
                cache.select(torch.arange(beams, beams + keep.numel()))
            if t == 4:  # single rows (not whole groups, out of order): each its own copy
                pick = torch.tensor([4, 0, 1])
                keep = keep[pick]
                cache.select(pick)
            step = model.decode_step(tgt[keep, t:t + 1], rows[keep], row_mask[keep], cache)
            torch.testing.assert_close(step, full[keep, t], atol=1e-5, rtol=1e-5)
            assert cache.layers[0].group == (beams if t < 4 else 1)


def test_grouped_cross_attention_returns_each_rows_own_weights():
    """A group of rows attending together to shared keys returns what each row's own attention returns: the
    output and the weights ``(N, H, Tq, S)``, with a padding mask, through the explicit path and the fused one."""
    model = model_for("marian-like", seed=7)
    attn = model.decoder_layers[0].cross_attn
    src = source(model, seed=7)
    src_mask = padding_mask(src, PAD)  # (B, 1, 1, S)
    g, d_model = 4, model.config.d_model
    gen = torch.Generator().manual_seed(8)
    query = torch.randn(src.size(0) * g, 1, d_model, generator=gen)  # (B*g, 1, D)
    with torch.no_grad():
        memory = model.encode(src, src_mask).last_hidden_state
        rows, row_mask = memory.repeat_interleave(g, 0), src_mask.repeat_interleave(g, 0)
        want, want_w = attn(query, rows, row_mask, need_weights=True)  # every row its own keys
        for need in (True, False):
            cache = model.new_cache(memory)
            cache.branch(g)
            c = cache.layers[0]
            got, got_w = attn(query, rows, row_mask, need_weights=need, cache=c)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            if need:
                torch.testing.assert_close(got_w, want_w, atol=1e-6, rtol=1e-6)
                assert (got_w.masked_select(~row_mask.expand_as(got_w)) == 0).all()


def test_step_past_max_len_is_refused():
    model = model_for("post-norm")
    src = source(model)
    with torch.no_grad():
        memory = model.encode(src).last_hidden_state
        cache = model.new_cache()
        model.decode_step(target(model, src.size(0), model.config.max_len), memory, padding_mask(src, PAD), cache)
        with pytest.raises(ValueError, match="max_len"):
            model.decode_step(target(model, src.size(0), 1), memory, padding_mask(src, PAD), cache)


def rescore(model: Transformer, src_row: torch.Tensor, out: list[int], head_mask: dict | None) -> torch.Tensor:
    """Teacher-forced log-probability of each output token under ``head_mask`` (the full forward), ``(len(out),)``."""
    src = src_row[src_row != PAD][None]
    tgt = torch.tensor([[model.config.bos_id, *out[:-1]]])
    with torch.no_grad():
        logp = model(src, tgt, head_mask=head_mask).logits[0].float().log_softmax(-1)
    return logp[torch.arange(len(out)), torch.tensor(out)]


def strip(row: list[int]) -> list[int]:
    return row[: row.index(EOS) + 1] if EOS in row else [t for t in row if t != PAD]


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_with_head_mask_is_the_argmax_of_the_full_forward(name):
    """Ablation runs the search's own step: each greedy choice is the full forward's best next token under the same
    head mask, and the score is the teacher-forced log-probability under it."""
    model = model_for(name, seed=5)
    src = source(model, seed=5)
    head_mask = random_head_mask(model, 5)
    hyp = greedy_decode(model, src, max_len_b=5, head_mask=head_mask)
    for i in range(src.size(0)):
        out = strip(hyp.tokens[i].tolist())
        row = src[i][src[i] != PAD][None]
        for t in range(len(out)):
            tgt = torch.tensor([[model.config.bos_id, *out[:t]]])
            with torch.no_grad():
                logits = model(row, tgt, head_mask=head_mask).logits[0, -1]
            logits[[PAD, model.config.bos_id]] = float("-inf")
            assert int(logits.argmax()) == out[t]
        assert hyp.scores[i].item() == pytest.approx(rescore(model, src[i], out, head_mask).sum().item(), abs=1e-4)


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
@pytest.mark.parametrize("scoring", ["gnmt", "transformers"])
def test_wide_beam_with_head_mask_finds_the_exhaustive_best(scoring):
    """With a beam wider than the search space, beam search is exhaustive: under a head mask, its answer is brute
    force's best by the full forward's scores (GNMT's penalty, or transformers' |Y| ** alpha)."""
    model = model_for("post-norm", seed=6)
    src = source(model, (5,), seed=6)
    head_mask = random_head_mask(model, 6)
    steps, alpha = 3, 0.8
    if scoring == "gnmt":
        hyp = beam_search(model, src, beam_size=200, alpha=alpha, max_len_a=0.0, max_len_b=steps, head_mask=head_mask)
    else:
        hyp = beam_search_transformers(model, src, beam_size=200, alpha=alpha, max_len_a=0.0, max_len_b=steps,
                                       head_mask=head_mask)
    words = [t for t in range(model.config.tgt_vocab_size) if t not in (PAD, BOS, EOS)]
    best, best_seq = float("-inf"), None
    seqs = [[*prefix, EOS] for n in range(steps) for prefix in itertools.product(words, repeat=n)]
    if scoring == "transformers":  # there, what reaches the length limit counts as finished too
        seqs += [list(prefix) for prefix in itertools.product(words, repeat=steps)]
    for seq in seqs:
        penalty = length_penalty(torch.tensor(len(seq)), alpha).item() if scoring == "gnmt" else len(seq) ** alpha
        score = rescore(model, src[0], seq, head_mask).sum().item() / penalty
        if score > best:
            best, best_seq = score, seq
    assert strip(hyp.tokens[0].tolist()) == best_seq
    assert hyp.scores[0].item() == pytest.approx(best, abs=1e-4)


@pytest.mark.parametrize("name", CONFIGS)
def test_beam_with_head_mask_equals_recomputation(name):
    """The cached search and the one that recomputes the whole prefix with the full forward at every step agree,
    under a head mask, with sentences leaving the batch as they finish (the tree recorded as well)."""
    model = model_for(name, seed=7)
    src = source(model, (6, 2, 5, 1), seed=7)
    head_mask = random_head_mask(model, 7)
    cached = beam_search(model, src, 3, max_len_b=6, head_mask=head_mask, record_tree=True)
    full = beam_search(model, src, 3, max_len_b=6, head_mask=head_mask, use_cache=False)
    assert cached.tokens.tolist() == full.tokens.tolist()
    torch.testing.assert_close(cached.scores, full.scores, atol=1e-5, rtol=1e-5)
    for i, tree in enumerate(cached.trees):
        assert tree.path(tree.best) == strip(cached.tokens[i].tolist())


def test_kv_cache_equals_cat_and_index_select():
    """Appending in place (buffers that double when full), reordering by ping-pong buffers and selecting rows give
    exactly what ``torch.cat`` and ``index_select`` on plain tensors give, while rows shrink as sentences leave."""
    gen = torch.Generator().manual_seed(3)
    cache = KVCache(1)
    layer = cache.layers[0]
    n = 12
    layer.cross_k = cross = torch.randn(n, 2, 5, 4, generator=gen)
    layer.cross_v = cross + 1
    ref_k = ref_v = None
    for t in range(40):
        new = 3 if t == 0 else 1  # a forced prefix first
        k, v = torch.randn(n, 2, new, 4, generator=gen), torch.randn(n, 2, new, 4, generator=gen)
        got_k, got_v = layer.append(k, v, max_len=64)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], dim=2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], dim=2)
        assert torch.equal(got_k, ref_k) and torch.equal(got_v, ref_v) and cache.length == ref_k.size(2)
        if t % 7 == 6:  # two sentences leave: their cross-attention rows go too
            n -= 2
            keep = torch.randperm(n + 2, generator=gen)[:n]
            cache.select(keep)
            ref_k, ref_v, cross = ref_k[keep], ref_v[keep], cross[keep]
            assert torch.equal(layer.cross_k, cross) and torch.equal(layer.cross_v, cross + 1)
        rows = torch.randint(0, n, (n,), generator=gen)  # beams take their parents' rows
        cache.reorder(rows)
        ref_k, ref_v = ref_k.index_select(0, rows), ref_v.index_select(0, rows)
        assert torch.equal(layer.self_k, ref_k) and torch.equal(layer.self_v, ref_v)
        assert torch.equal(layer.cross_k, cross)  # beams of one sentence share it: untouched
    assert layer.buffer.size(2) == 64  # grew 16 -> 32 -> 64
    with pytest.raises(ValueError, match="rows"):
        layer.append(torch.zeros(n + 1, 2, 1, 4), torch.zeros(n + 1, 2, 1, 4), max_len=64)
