"""Greedy and beam search: cache against recomputation, beam 1 against greedy, an exhaustive-search oracle."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from conftest import tiny_model

from transformer import Transformer, TransformerConfig, beam_search, greedy_decode, length_penalty
from transformer.decoding import max_output_length

PAD, UNK, BOS, EOS = 0, 1, 2, 3

MODELS = {
    "post-norm-tied": dict(),
    "pre-norm-untied": dict(norm_first=True, share_embeddings=False, src_vocab_size=13, tgt_vocab_size=9,
                            n_encoder_layers=1, d_model=24, n_heads=3),
}


def make_model(seed: int = 0, **overrides) -> Transformer:
    """This file's tiny model (``conftest.tiny_model``)."""
    return tiny_model(seed, **{**dict(src_vocab_size=12, tgt_vocab_size=12, dropout=0.1, max_len=24), **overrides})


def make_src(cfg: TransformerConfig, lens=(6, 3, 5, 1), seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    src = torch.full((len(lens), max(lens)), PAD)
    for i, n in enumerate(lens):
        src[i, :n] = torch.randint(4, cfg.src_vocab_size, (n,), generator=gen)
        src[i, n - 1] = EOS
    return src


def strip(row: list[int]) -> list[int]:
    """Output ids up to and including the first EOS (what follows is padding); a row that hit its
    own length limit has no EOS and is padded after it."""
    if EOS in row:
        return row[: row.index(EOS) + 1]
    return row[: row.index(PAD)] if PAD in row else row


def rescore(model: Transformer, src_row: torch.Tensor, out: list[int]) -> torch.Tensor:
    """Teacher-forced log-probability of each output token, ``(len(out),)``."""
    src = src_row[src_row != PAD][None]
    tgt = torch.tensor([[BOS, *out[:-1]]])
    with torch.no_grad():
        logp = model(src, tgt).logits[0].log_softmax(-1)
    return logp[torch.arange(len(out)), torch.tensor(out)]


def pad_loving(model: Transformer) -> Transformer:
    """Make PAD, then BOS, the most probable next token everywhere (untied output projection)."""
    assert not model.config.share_embeddings
    with torch.no_grad():
        norm = model.decoder_norm if model.config.norm_first else model.decoder_layers[-1].norm3
        norm.bias.fill_(3.0)
        model.generator.weight[PAD] = 1.0
        model.generator.weight[BOS] = 0.9
    return model


# ----------------------------------------------------------------------------------------------


def test_length_penalty():
    lengths = torch.tensor([1, 4, 10])
    torch.testing.assert_close(length_penalty(lengths, 0.6), ((5 + lengths.float()) / 6) ** 0.6)
    assert (length_penalty(lengths, 0.0) == 1).all()
    assert length_penalty(torch.tensor(1), 1.0).item() == 1.0


def test_output_length_is_bounded_by_max_len():
    model = make_model(max_len=10)
    assert max_output_length(model, 5, 1.5, 10) == 9
    assert max_output_length(model, 2, 1.0, 3) == 5
    src = make_src(model.config, (4,))
    for hyp in (greedy_decode(model, src, max_len_b=100), beam_search(model, src, 2, max_len_b=100)):
        assert hyp.tokens.size(1) <= 9


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_greedy_cache_equals_recomputation(name, seed):
    model = make_model(seed, **MODELS[name])
    src = make_src(model.config, seed=seed)
    cached = greedy_decode(model, src, max_len_b=6)
    full = greedy_decode(model, src, max_len_b=6, use_cache=False)
    assert cached.tokens.tolist() == full.tokens.tolist()
    torch.testing.assert_close(cached.scores, full.scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", MODELS)
def test_beam_cache_equals_recomputation(name, seed, alpha):
    model = make_model(seed, **MODELS[name])
    src = make_src(model.config, seed=seed)
    cached = beam_search(model, src, beam_size=3, alpha=alpha, max_len_b=6)
    full = beam_search(model, src, beam_size=3, alpha=alpha, max_len_b=6, use_cache=False)
    assert cached.tokens.tolist() == full.tokens.tolist()
    torch.testing.assert_close(cached.scores, full.scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", MODELS)
def test_beam_size_one_is_greedy(name, seed):
    model = make_model(seed, **MODELS[name])
    src = make_src(model.config, seed=seed)
    greedy = greedy_decode(model, src, max_len_b=6)
    beam = beam_search(model, src, beam_size=1, alpha=0.0, max_len_b=6)
    assert [strip(r) for r in beam.tokens.tolist()] == [strip(r) for r in greedy.tokens.tolist()]
    torch.testing.assert_close(beam.scores, greedy.scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", MODELS)
def test_scores_are_teacher_forced_log_probabilities(name):
    model = make_model(3, **MODELS[name])
    src = make_src(model.config, seed=3)
    greedy = greedy_decode(model, src, max_len_b=6)
    beam = beam_search(model, src, beam_size=3, alpha=0.6, max_len_b=6)
    for i in range(src.size(0)):
        out = strip(greedy.tokens[i].tolist())
        assert abs(rescore(model, src[i], out).sum().item() - greedy.scores[i].item()) < 1e-4
        out = strip(beam.tokens[i].tolist())
        if out[-1] == EOS:  # finished hypotheses are normalised by the GNMT penalty of their length
            expected = rescore(model, src[i], out).sum() / length_penalty(torch.tensor(len(out)), 0.6)
            assert abs(expected.item() - beam.scores[i].item()) < 1e-4


@pytest.mark.parametrize("name", MODELS)
def test_batched_decoding_equals_one_by_one(name):
    """A sentence's output, its length budget (a * source length + b) included, does not depend on its batch."""
    model = make_model(4, **MODELS[name])
    src = make_src(model.config, seed=4)
    greedy = greedy_decode(model, src, max_len_a=1.5, max_len_b=1)
    beam = beam_search(model, src, beam_size=3, max_len_a=1.5, max_len_b=1)
    for i in range(src.size(0)):
        row = src[i:i + 1, : int((src[i] != PAD).sum())]
        g = greedy_decode(model, row, max_len_a=1.5, max_len_b=1)
        bm = beam_search(model, row, beam_size=3, max_len_a=1.5, max_len_b=1)
        assert strip(g.tokens[0].tolist()) == strip(greedy.tokens[i].tolist())
        assert strip(bm.tokens[0].tolist()) == strip(beam.tokens[i].tolist())
        assert abs(g.scores[0].item() - greedy.scores[i].item()) < 1e-4
        assert abs(bm.scores[0].item() - beam.scores[i].item()) < 1e-4
        assert len(strip(g.tokens[0].tolist())) <= int(1.5 * row.size(1) + 1)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    """With a beam wider than the whole search space, beam search is exhaustive search: compare with brute force."""
    model = make_model(5, src_vocab_size=7, tgt_vocab_size=7)
    src = make_src(model.config, (5,), seed=5)
    steps = 3
    assert max_output_length(model, src.size(1), 0.0, steps) == steps
    beam = beam_search(model, src, beam_size=96, alpha=alpha, max_len_a=0.0, max_len_b=steps)

    words = [t for t in range(model.config.tgt_vocab_size) if t not in (PAD, BOS, EOS)]
    best, best_seq = float("-inf"), None
    for n in range(steps):
        for prefix in itertools.product(words, repeat=n):
            seq = [*prefix, EOS]
            score = rescore(model, src[0], seq).sum().item() / ((5 + len(seq)) / 6) ** alpha
            if score > best:
                best, best_seq = score, seq
    assert strip(beam.tokens[0].tolist()) == best_seq
    assert abs(beam.scores[0].item() - best) < 1e-4


@pytest.mark.parametrize("beam_size", [1, 3])
def test_decoding_never_emits_pad_or_bos(beam_size):
    """PAD and BOS are never outputs, even from a model that rates them highest."""
    model = pad_loving(make_model(6, **MODELS["pre-norm-untied"]))
    src = make_src(model.config, seed=6)
    with torch.no_grad():
        probs = model(src, torch.full((src.size(0), 1), BOS)).logits.softmax(-1)
    assert (probs.argmax(-1) == PAD).all()  # the setup works: PAD is the favourite
    for use_cache in (True, False):
        if beam_size == 1:
            hyp = greedy_decode(model, src, max_len_b=4, use_cache=use_cache)
        else:
            hyp = beam_search(model, src, beam_size, max_len_b=4, use_cache=use_cache)
        for row in hyp.tokens.tolist():
            out = strip(row)
            assert PAD not in out and BOS not in out, row
            assert len(out) > 0
        assert torch.isfinite(hyp.scores).all()


def test_pad_loving_model_cache_equals_recomputation():
    model = pad_loving(make_model(7, **MODELS["pre-norm-untied"]))
    with torch.no_grad():  # PAD no longer the favourite by a mile, so the choice among the others matters
        model.generator.weight[PAD] = 0.3
    src = make_src(model.config, seed=7)
    for beam_size in (1, 3):
        kw = dict(max_len_b=5)
        if beam_size == 1:
            a, b = greedy_decode(model, src, **kw), greedy_decode(model, src, use_cache=False, **kw)
        else:
            a, b = beam_search(model, src, 3, **kw), beam_search(model, src, 3, use_cache=False, **kw)
        assert a.tokens.tolist() == b.tokens.tolist()
        torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=1e-5)


def test_head_mask_in_decoding():
    model = make_model(8)
    cfg = model.config
    src = make_src(cfg, seed=8)
    ones = {k: torch.ones(2, cfg.n_heads) for k in ("encoder", "decoder", "cross")}
    plain = greedy_decode(model, src, max_len_b=5)
    same = greedy_decode(model, src, max_len_b=5, head_mask=ones)
    assert plain.tokens.tolist() == same.tokens.tolist()
    off = {k: torch.ones(2, cfg.n_heads) for k in ("encoder", "decoder", "cross")}
    for v in off.values():
        v[:, :2] = 0
    cached = greedy_decode(model, src, max_len_b=5, head_mask=off)
    full = greedy_decode(model, src, max_len_b=5, head_mask=off, use_cache=False)
    assert cached.tokens.tolist() == full.tokens.tolist()
    torch.testing.assert_close(cached.scores, full.scores, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(cached.scores, plain.scores)
    beam_cached = beam_search(model, src, 2, max_len_b=5, head_mask=off)
    beam_full = beam_search(model, src, 2, max_len_b=5, head_mask=off, use_cache=False)
    assert beam_cached.tokens.tolist() == beam_full.tokens.tolist()


def test_hypotheses_layout():
    model = make_model(9)
    src = make_src(model.config, seed=9)
    for hyp in (greedy_decode(model, src, max_len_b=4), beam_search(model, src, 3, max_len_b=4)):
        assert hyp.tokens.dtype == torch.long and hyp.tokens.size(0) == src.size(0)
        assert hyp.scores.shape == (src.size(0),)
        assert (hyp.scores <= 0).all()
        for row in hyp.tokens.tolist():
            if EOS in row:  # only padding after the first EOS
                assert all(t == PAD for t in row[row.index(EOS) + 1:])


@pytest.mark.parametrize("name", MODELS)
def test_column_major_layout_and_step_buffers_change_nothing(name, tmp_path):
    """The decoding fast paths (``column_major_weights``: every matrix stored column-major; ``decode_step`` writing
    into a reused ``out``; searches keeping their logits in two reused buffers) agree with the plain model."""
    from transformer import save_checkpoint
    from transformer.checkpoint.tokenizer import Tokenizer
    from transformer.network.weights import column_major_weights

    plain = make_model(11, **MODELS[name])
    fast = column_major_weights(copy.deepcopy(plain))
    if fast.config.share_embeddings:
        assert fast.generator.weight is fast.src_embed.weight  # ties kept
    assert not fast.generator.weight.is_contiguous() and fast.generator.weight.t().is_contiguous()
    for (k, a), (_, b) in zip(plain.state_dict().items(), fast.state_dict().items()):
        assert torch.equal(a, b), k  # the same values
    src = make_src(plain.config, seed=11)
    tgt = torch.randint(4, plain.config.tgt_vocab_size, (src.size(0), 5), generator=torch.Generator().manual_seed(1))
    tgt[:, 0] = BOS
    with torch.no_grad():
        a, b = plain(src, tgt, return_attention=True), fast(src, tgt, return_attention=True)
        torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
        for x, y in zip(a.cross_attentions, b.cross_attentions):
            torch.testing.assert_close(y, x, atol=1e-5, rtol=1e-5)
        memory = fast.encode(src).last_hidden_state
        src_mask = (src != PAD)[:, None, None, :]
        out = torch.full((src.size(0), fast.config.tgt_vocab_size), float("nan"))
        c1, c2 = fast.new_cache(), fast.new_cache()
        for t in range(tgt.size(1)):
            into = fast.decode_step(tgt[:, t:t + 1], memory, src_mask, c1, out=out)
            assert into.data_ptr() == out.data_ptr()
            torch.testing.assert_close(into, fast.decode_step(tgt[:, t:t + 1], memory, src_mask, c2))
    for search in (lambda m: greedy_decode(m, src), lambda m: beam_search(m, src, 3, 0.6)):
        p, f = search(plain), search(fast)
        assert torch.equal(p.tokens, f.tokens)
        torch.testing.assert_close(p.scores, f.scores, atol=1e-4, rtol=1e-5)
    # written contiguous, read back equal, the layout kept in memory
    tok = Tokenizer.__new__(Tokenizer)
    tok.save = lambda path: None
    save_checkpoint(tmp_path / "ckpt", fast, tok)
    assert not fast.generator.weight.is_contiguous()
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    for k, v in saved.items():
        assert torch.equal(v, plain.state_dict()[k]), k


@pytest.mark.parametrize("route", ["onednn", "mkl"])
@pytest.mark.parametrize("name", MODELS)
def test_either_gemm_route_agrees_with_the_plain_path_and_steps_aside(monkeypatch, name, route):
    """``ATTN_GEMM`` forces each float32 product's library (``linear.pack``): oneDNN's prepacked copies for every
    linear layer (and each search's fused Q|K|V), or none; either gives the plain model's numbers and the same
    translations. A copy is not used with gradients, after the weight changes in place, or in a copy."""
    from transformer.network import linear as linear_module
    from transformer.network.weights import decoding_layout, packed_bytes

    monkeypatch.setenv("ATTN_GEMM", route)
    if route == "onednn" and not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")
    plain = make_model(12, **MODELS[name])
    fast = decoding_layout(copy.deepcopy(plain))
    linears = [m for m in fast.modules() if isinstance(m, linear_module.Linear)]
    if route == "mkl":
        assert all(m.packed is None for m in linears) and packed_bytes(fast) == 0
        assert "gemm=" not in repr(fast)
    else:
        assert all(m.packed is not None and all(m.packed.onednn) for m in linears)
        assert packed_bytes(fast) >= sum(m.weight.numel() * 4 for m in linears)
        assert "gemm=onednn|onednn|onednn" in repr(fast.generator)
    src = make_src(plain.config, seed=12)
    tgt = torch.randint(4, plain.config.tgt_vocab_size, (src.size(0), 5), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = BOS
    calls = []
    product = linear_module._onednn_product
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: calls.append(1) or product(*a))
    x = torch.randn(3, 7, plain.config.d_model)
    with torch.no_grad():
        for rows in (x[0, :1], x[0], x):  # each row bucket
            torch.testing.assert_close(fast.generator(rows), torch.nn.functional.linear(rows, plain.generator.weight,
                                                                                        plain.generator.bias),
                                       atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(fast(src, tgt).logits, plain(src, tgt).logits, atol=1e-5, rtol=1e-5)
    for search in (lambda m: greedy_decode(m, src), lambda m: beam_search(m, src, 3, 0.6)):
        p, f = search(plain), search(fast)
        assert torch.equal(p.tokens, f.tokens)
        torch.testing.assert_close(p.scores, f.scores, atol=1e-4, rtol=1e-5)
    assert bool(calls) == (route == "onednn")  # the forced route is the one taken
    calls.clear()
    # with gradients: the plain path, and gradients reach the weight
    fast.generator(x).sum().backward()
    assert fast.generator.weight.grad is not None and not calls
    # a copy decodes on the plain path, with the same numbers
    clone = copy.deepcopy(fast)
    assert all(m.packed is None for m in clone.modules() if isinstance(m, linear_module.Linear))
    # an in-place change of the weight (an optimizer step, load_state_dict) makes the packed copy stale
    with torch.no_grad():
        fast.generator.weight.mul_(2.0)
        torch.testing.assert_close(fast.generator(x), torch.nn.functional.linear(x, fast.generator.weight,
                                                                                 fast.generator.bias))
    assert not calls


def test_one_output_length_formula_for_ints_and_batches():
    from transformer.decoding import output_limits

    model = Transformer(TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=2,
                                          n_encoder_layers=1, n_decoder_layers=1, d_ff=32, max_len=30))
    src = torch.tensor([[5, 6, 7, 3, 0, 0], [5, 6, 7, 8, 9, 3], [3, 0, 0, 0, 0, 0]])
    limits = output_limits(model, src, 1.5, 4)
    for row, limit in zip(src, limits):
        n = int((row != 0).sum())
        assert int(limit) == max_output_length(model, n, 1.5, 4) == min(max(int(1.5 * n + 4), 1), 29)
    assert max_output_length(model, 100, 1.0, 0) == 29  # never past max_len - 1


@pytest.mark.parametrize("pads,group,route", [(False, 64, "onednn"), (True, 64, "mkl"), (False, 2, "mkl"),
                                              (True, 2, "onednn")])
def test_a_search_reading_the_logits_by_blocks_equals_the_whole_log_softmax(monkeypatch, pads, group, route):
    """Over a vocabulary of several blocks, a search of several rows takes each step's best pieces a block at a time
    (``step.best_pieces``): the same outputs and scores as the whole ``(N, V)`` log-softmax (the plain model
    over a vocabulary of one block), greedy and both beam rules; padding and BOS still never come out, even where
    they are the most probable. ``group`` 2: the blocks searched the last time (20 pieces) are ranked in groups of 2
    (``step._topk_by_groups``); 64, never. ``route`` (``ATTN_GEMM``): with oneDNN each block has a prepacked copy of
    its own, used while the blocks are the size they were packed at."""
    from transformer.decoding import step as search_module
    from transformer.network import linear as linear_module
    from transformer.network import projection
    from transformer.network.weights import decoding_layout

    monkeypatch.setenv("ATTN_GEMM", route)
    if route == "onednn" and not linear_module._onednn_linear():
        pytest.skip("oneDNN's packed linear is not in this torch build")

    monkeypatch.setattr(search_module, "TOPK_GROUP", group)

    monkeypatch.setattr(projection, "VOCAB_BLOCK", 7)  # 40 pieces: 5 blocks of 7 and one of 5
    monkeypatch.setattr(search_module, "BLOCKS_MIN_BYTES", 4 * 2 * 40)  # from two rows on
    plain = make_model(5, tgt_vocab_size=40, share_embeddings=False)
    if pads:
        plain = pad_loving(plain)
    fast = decoding_layout(copy.deepcopy(plain))  # column-major: the layout a loaded model decodes in
    assert len(list(fast.generator.blocks(torch.zeros(2, plain.config.d_model)))) == 6
    assert search_module.by_blocks(fast, fast.new_cache(), None, None, 1, 4)
    assert not search_module.by_blocks(fast, fast.new_cache(), None, None, 1, 1)  # one row: under the size
    monkeypatch.setattr(projection, "VOCAB_BLOCK", 40)
    assert not search_module.by_blocks(fast, fast.new_cache(), None, None, 1, 4)  # one block
    monkeypatch.setattr(projection, "VOCAB_BLOCK", 7)
    assert not search_module.by_blocks(fast, fast.new_cache(), None, torch.ones(4, 1), 1, 4)  # a forced step
    assert not search_module.by_blocks(fast, fast.new_cache(), {"decoder": torch.ones(2, 4)}, None, 1, 4)
    x = torch.randn(5, plain.config.d_model)
    calls = []
    product = linear_module._onednn_product
    monkeypatch.setattr(linear_module, "_onednn_product", lambda *a: calls.append(1) or product(*a))
    with torch.no_grad():
        joined = torch.cat([logits for _, logits in fast.generator.blocks(x)], dim=-1)
        torch.testing.assert_close(joined, torch.nn.functional.linear(x, plain.generator.weight, plain.generator.bias),
                                   atol=1e-5, rtol=1e-5)
        assert len(calls) == (6 if route == "onednn" else 0)  # each block through its own copy
        assert (fast.generator.packed_blocks is None) == (route == "mkl")
        gen = projection.OutputProjection(plain.config.d_model, 40)
        gen.weight.copy_(plain.generator.weight)
        for bias in (None, torch.zeros(40), torch.arange(40.0)):  # zeros are left out
            gen.bias = None if bias is None else torch.nn.Parameter(bias)
            joined = torch.cat([logits for _, logits in gen.blocks(x)], dim=-1)
            torch.testing.assert_close(joined, torch.nn.functional.linear(x, plain.generator.weight, bias),
                                       atol=1e-5, rtol=1e-5)
    src = make_src(plain.config, seed=5)
    for run in (lambda m: greedy_decode(m, src), lambda m: beam_search(m, src, 3, 0.6),
                lambda m: beam_search(m, src, 3, 1.0, scoring="transformers")):
        monkeypatch.setattr(projection, "VOCAB_BLOCK", 40)  # one block: the whole log-softmax
        p = run(plain)
        monkeypatch.setattr(projection, "VOCAB_BLOCK", 20 if group == 2 else 7)
        f = run(fast)
        assert torch.equal(p.tokens, f.tokens)
        torch.testing.assert_close(p.scores, f.scores, atol=1e-5, rtol=1e-5)
        assert not ({BOS} & set(f.tokens.flatten().tolist()))
        if pads:  # PAD only after an ending
            assert all(PAD not in strip(row) for row in f.tokens.tolist())


def test_the_k_best_by_groups_are_the_k_best():
    """``step._topk_by_groups``: the k best of each row, ranked only in the groups with the best maxima, are
    ``torch.topk``'s, also where pieces set to -inf after the maxima were taken were their groups' best."""
    from transformer.decoding import step

    gen = torch.Generator().manual_seed(0)
    g = step.TOPK_GROUP
    for trial in range(40):
        n, groups, k = 5, 12, 1 + trial % 8
        logits = torch.randn(n, groups * g, generator=gen) * (1 + trial % 3)
        if trial % 2:
            logits[:, : g * 3] += 4  # the best crowd into a few groups
        group_max = logits.view(n, groups, g).amax(-1)
        banned = logits.view(n, groups, g).argmax(-1)[0, :2] + torch.tensor([0, g])  # two groups' best, row 0
        logits[:, banned] = float("-inf")
        v, i = step._topk_by_groups(logits, group_max, k, k + 2)
        want_v, want_i = logits.topk(k, dim=-1)
        assert torch.equal(v, want_v) and torch.equal(i, want_i)


@pytest.mark.parametrize("width", [40 * 64, 10_000, 64 * 3])
def test_top_k_is_topk_wide_or_not(width):
    """``step.top_k`` (a beam's whole candidate row: groups on a CPU where the width allows) gives ``torch.topk``'s
    values and, values being distinct, its indices: rows with -inf pieces, rows of one crowd, a sliced (strided)
    input; widths not a multiple of the group, or of too few groups, are ``topk`` itself."""
    from transformer.decoding import step

    gen = torch.Generator().manual_seed(1)
    for trial in range(30):
        k = 1 + trial % 9
        x = torch.randn(6, width, generator=gen).log_softmax(-1)
        x[:, torch.randint(0, width, (width // 50,), generator=gen)] = float("-inf")  # never pieces, finished beams
        if trial % 3 == 0:
            x[1, width // 2: width // 2 + 70] += 9.0  # the best crowd into one or two groups
        v, i = step.top_k(x, k)
        want_v, want_i = x.topk(k, dim=-1)
        assert torch.equal(v, want_v) and torch.equal(i, want_i)
    wide = torch.randn(4, 2 * width, generator=gen)[:, ::2]  # not contiguous: topk itself
    assert torch.equal(step.top_k(wide, 5)[1], wide.topk(5, dim=-1).indices)


@pytest.mark.parametrize("k", [2, 3])
def test_a_beam_search_ranking_its_candidates_by_groups_equals_the_one_ranking_all(monkeypatch, k):
    """A vocabulary whose K beams' candidate row is a multiple of the group (256 pieces: K x 256) goes through
    ``step.top_k``'s groups; the same search with ``torch.topk`` over every candidate gives the same outputs and
    scores."""
    import importlib

    from transformer.decoding import step

    search = importlib.import_module("transformer.decoding.search")  # the module (the package names a function so)
    model = make_model(5, tgt_vocab_size=256, share_embeddings=False).eval()
    src = make_src(model.config, seed=5)
    calls: list[int] = []

    def counted(x: torch.Tensor, n: int):
        calls.append(x.size(-1))
        return step.top_k(x, n)

    monkeypatch.setattr(search, "top_k", counted)
    grouped = beam_search(model, src, beam_size=k, max_len_b=10)
    assert k * 256 in calls  # the groups' path ran
    monkeypatch.setattr(search, "top_k", lambda x, n: x.topk(n, dim=-1))
    plain = beam_search(model, src, beam_size=k, max_len_b=10)
    assert torch.equal(grouped.tokens, plain.tokens) and torch.allclose(grouped.scores, plain.scores, atol=0, rtol=0)


@pytest.mark.parametrize("scoring", ["gnmt", "transformers"])
def test_beam_search_runs_its_first_step_once_a_sentence(monkeypatch, scoring):
    """A sentence's K beams start the same, so the first step runs one row a sentence and the cache branches into
    the K rows after it; with a forced first token (the other beams fill the 2K candidates) every row runs. Either
    way, the same outputs and scores as the search without a cache (every row, every step, the full forward)."""
    model = make_model(9, tgt_vocab_size=40, share_embeddings=False)
    src = make_src(model.config, seed=9)
    b, k = src.size(0), 3
    rows: list[int] = []
    step = Transformer.decode_step

    def spy(self, tokens, *args, **kwargs):
        rows.append(tokens.size(0))
        return step(self, tokens, *args, **kwargs)

    for forced in (None, torch.full((b, 1), 7)):
        rows.clear()
        monkeypatch.setattr(Transformer, "decode_step", spy)
        cached = beam_search(model, src, k, 0.6, max_len_b=6, forced=forced, scoring=scoring)
        monkeypatch.setattr(Transformer, "decode_step", step)
        full = beam_search(model, src, k, 0.6, max_len_b=6, forced=forced, scoring=scoring, use_cache=False)
        assert rows[0] == (b if forced is None else b * k) and rows[1] <= b * k
        assert torch.equal(cached.tokens, full.tokens)
        torch.testing.assert_close(cached.scores, full.scores, atol=1e-5, rtol=1e-5)


def test_a_cache_branches_each_row_into_k():
    """``KVCache.branch(k)``: each row's cached keys and values become k consecutive rows; the cross-attention's
    stay one a sentence, shared by its k rows (``group``)."""
    from transformer.network.kv_cache import KVCache

    gen = torch.Generator().manual_seed(1)
    cache = KVCache(2)
    for layer in cache.layers:
        layer.cross_k = torch.randn(3, 2, 5, 4, generator=gen)
        layer.append(torch.randn(3, 2, 1, 4, generator=gen), torch.randn(3, 2, 1, 4, generator=gen))
    before = [(layer.self_k.clone(), layer.self_v.clone(), layer.cross_k) for layer in cache.layers]
    cache.branch(4)
    for layer, (k, v, cross) in zip(cache.layers, before):
        assert torch.equal(layer.self_k, k.repeat_interleave(4, 0))
        assert torch.equal(layer.self_v, v.repeat_interleave(4, 0))
        assert layer.cross_k is cross and layer.group == 4
