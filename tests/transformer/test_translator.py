"""Translator: text in, translation and attention weights out, consistent with the model and the decoders."""

from __future__ import annotations

import copy

import pytest
import torch

import transformer
from transformer import TranslationResult, Translator, beam_search, greedy_decode
from transformer.decoding import max_output_length

TEXTS = ["A man rides a bike.", "Two dogs play in the park with a red ball.", "A girl.",
         "People are walking on the beach and a child runs on the street."]


@pytest.fixture(scope="module")
def translator(tiny_checkpoint) -> Translator:
    return transformer.load(tiny_checkpoint, device="cpu")


def check_attention_shapes(result: TranslationResult, cfg) -> None:
    s, t, h = len(result.source_tokens), len(result.target_tokens), cfg.n_heads
    assert len(result.encoder_attentions) == cfg.n_encoder_layers
    assert len(result.decoder_attentions) == len(result.cross_attentions) == cfg.n_decoder_layers
    for w in result.encoder_attentions:
        assert w.shape == (h, s, s)
    for w in result.decoder_attentions:
        assert w.shape == (h, t, t)
        assert (w[:, torch.ones(t, t, dtype=torch.bool).triu(1)] == 0).all()
    for w in result.cross_attentions:
        assert w.shape == (h, t, s)
    for w in result.encoder_attentions + result.decoder_attentions + result.cross_attentions:
        assert w.device.type == "cpu"
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5, rtol=0)


def assert_same_attentions(result: TranslationResult, out, tol: float) -> None:
    """A translation's attentions are those of ``out`` (a ``Seq2SeqOutput`` of one pair), layer by layer."""
    for got, expected in [(result.encoder_attentions, out.encoder_attentions),
                          (result.decoder_attentions, out.decoder_attentions),
                          (result.cross_attentions, out.cross_attentions)]:
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e[0], atol=tol, rtol=tol)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_returns_consistent_result(translator, beam_size):
    tok, cfg = translator.tokenizer, translator.config
    result = translator.translate(TEXTS[0], beam_size=beam_size)
    assert isinstance(result, TranslationResult)
    assert isinstance(result.text, str) and isinstance(result.score, float)
    assert result.score <= 0
    assert not result.truncated
    assert result.source_ids == tok.encode(TEXTS[0]) + [cfg.eos_id]
    assert result.source_tokens == tok.pieces(result.source_ids)
    body = result.target_ids[:-1] if result.target_ids[-1] == cfg.eos_id else result.target_ids
    assert cfg.eos_id not in body and cfg.pad_id not in result.target_ids
    assert result.target_tokens == tok.pieces(result.target_ids)
    assert result.decoder_input_tokens == tok.pieces([cfg.bos_id, *result.target_ids[:-1]])
    assert len(result.decoder_input_tokens) == len(result.target_tokens)
    assert result.text == tok.decode(result.target_ids)
    assert all(isinstance(p, str) for p in result.source_tokens + result.target_tokens)
    check_attention_shapes(result, cfg)


def test_attentions_equal_a_teacher_forced_forward_pass(translator):
    cfg = translator.config
    result = translator.translate(TEXTS[1], beam_size=2)
    src = torch.tensor([result.source_ids])
    tgt = torch.tensor([[cfg.bos_id, *result.target_ids[:-1]]])
    with torch.no_grad():
        out = translator.model(src, tgt, return_attention=True)
    assert_same_attentions(result, out, 1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_greedy_attentions_from_its_steps_equal_the_pass_over_the_output(translator, masked):
    """Greedy search returns the attentions of its own steps (no second pass): in a padded batch, with sentences
    ending early and others cut at their length limit, with heads switched off or not, each sentence's attentions
    are the teacher-forced pass over its output (``Translator.attentions``), a decoder position's later keys 0."""
    cfg = translator.config
    head_mask = None
    if masked:
        head_mask = {k: torch.ones(n, cfg.n_heads) for k, n in (("encoder", cfg.n_encoder_layers),
                                                                 ("decoder", cfg.n_decoder_layers),
                                                                 ("cross", cfg.n_decoder_layers))}
        for k in head_mask:
            head_mask[k][0, 0] = 0
    for limit in (10, 2):  # 2: every output is cut at its length limit
        results = translator.translate_batch(TEXTS, beam_size=1, max_len_b=limit, return_attention=True,
                                             head_mask=head_mask)
        for r in results:
            want = translator.attentions(r.source_ids, r.target_ids[:-1], head_mask, logits=False)
            assert_same_attentions(r, want, 1e-5)
            check_attention_shapes(r, cfg)
        assert any(r.hit_max_len for r in results)


def test_attentions_without_logits_are_the_same_attentions(translator):
    result = translator.translate(TEXTS[2], beam_size=1, return_attention=False)
    full = translator.attentions(result.source_ids, result.target_ids[:-1])
    bare = translator.attentions(result.source_ids, result.target_ids[:-1], logits=False)
    assert full.logits.shape[:2] == (1, len(result.target_ids))
    assert bare.logits.shape == (0, translator.config.tgt_vocab_size)  # no position projected
    for kind in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(full, kind), getattr(bare, kind), strict=True):
            assert torch.equal(a, b)


def test_greedy_output_is_the_argmax_of_the_teacher_forced_pass(translator):
    """The decoder query t that the attentions show is the step that chose target token t."""
    cfg = translator.config
    for text in TEXTS[:3]:
        result = translator.translate(text, beam_size=1)
        src = torch.tensor([result.source_ids])
        tgt = torch.tensor([[cfg.bos_id, *result.target_ids[:-1]]])
        with torch.no_grad():
            logits = translator.model(src, tgt).logits[0]
        chosen = logits.argmax(-1).tolist()
        generated = [t for t in result.target_ids if t != cfg.eos_id]
        assert chosen[: len(generated)] == generated
        limit = max_output_length(translator.model, len(result.source_ids), 1.5, 10)
        if len(generated) < limit:  # it stopped because it chose EOS
            assert result.target_ids[-1] == chosen[-1] == cfg.eos_id


def test_translator_uses_the_decoders(translator):
    ids, _ = translator.encode_source(TEXTS[1])
    src = torch.tensor([ids])
    greedy = greedy_decode(translator.model, src)
    beam = beam_search(translator.model, src, beam_size=3)
    for beam_size, hyp in [(1, greedy), (3, beam)]:
        result = translator.translate(TEXTS[1], beam_size=beam_size, return_attention=False)
        row = hyp.tokens[0].tolist()
        out = row[: row.index(translator.config.eos_id)] if translator.config.eos_id in row else row
        assert [t for t in result.target_ids if t != translator.config.eos_id] == out
        assert abs(result.score - hyp.scores[0].item()) < 1e-5
        assert result.encoder_attentions == result.decoder_attentions == result.cross_attentions == ()


def eos_first_translator(translator) -> Translator:
    """A copy of the model whose decoder always puts EOS first: its output ends at once."""
    model = copy.deepcopy(translator.model)
    with torch.no_grad():
        eos = model.config.eos_id
        model.generator.weight[eos] *= 10  # tied: the EOS row of every embedding
        last = model.decoder_layers[-1].norm3  # post-norm: the decoder's last LayerNorm
        last.weight.zero_()
        last.bias.copy_(model.generator.weight[eos])  # every decoder state points at EOS
    return Translator(model, translator.tokenizer)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_target_ends_in_eos_only_when_the_model_chose_it(translator, beam_size):
    """A translation cut by the length limit does not claim an EOS the model never chose."""
    cfg = translator.config
    cut = translator.translate(TEXTS[0], beam_size=beam_size, max_len_a=0.0, max_len_b=3)
    assert len(cut.target_ids) == 3 and cfg.eos_id not in cut.target_ids  # untrained model: never stops
    assert cut.hit_max_len  # and the result says the output stopped at the maximum length
    assert cut.target_tokens == translator.tokenizer.pieces(cut.target_ids)
    assert cut.decoder_input_tokens == translator.tokenizer.pieces([cfg.bos_id, *cut.target_ids[:2]])
    check_attention_shapes(cut, cfg)
    longer = translator.translate(TEXTS[0], beam_size=1, max_len_a=0.0, max_len_b=5)
    if beam_size == 1:  # greedy: the cut output is a prefix of a longer one
        assert cut.target_ids == longer.target_ids[:3]

    stops = eos_first_translator(translator).translate(TEXTS[0], beam_size=beam_size)
    assert stops.target_ids == [cfg.eos_id] and stops.text == ""
    assert not stops.hit_max_len
    batch = translator.translate_batch(TEXTS, beam_size=beam_size, max_len_a=0.0, max_len_b=3)
    assert [r.hit_max_len for r in batch] == [cfg.eos_id not in r.target_ids for r in batch] == [True] * len(TEXTS)
    assert stops.target_tokens == ["</s>"] and stops.decoder_input_tokens == ["<s>"]
    check_attention_shapes(stops, cfg)


def test_long_text_is_truncated(translator):
    cfg = translator.config
    text = " ".join(["a man rides a red bike in the park"] * 20)
    assert len(translator.tokenizer.encode(text)) > cfg.max_len
    result = translator.translate(text, beam_size=1, max_len_b=2)
    assert result.truncated
    assert len(result.source_ids) == len(result.source_tokens) == cfg.max_len
    assert result.source_ids[-1] == cfg.eos_id
    assert len(result.target_ids) <= cfg.max_len
    check_attention_shapes(result, cfg)
    # exactly at the limit: not truncated
    ids = translator.tokenizer.encode(text)[: translator.max_source_tokens]
    exact = translator.tokenizer.decode(ids)
    if translator.tokenizer.encode(exact) == ids:
        assert not translator.translate(exact, beam_size=1, max_len_b=2).truncated


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_batch_equals_one_by_one(translator, beam_size):
    batch = translator.translate_batch(TEXTS, beam_size=beam_size, return_attention=True)
    assert len(batch) == len(TEXTS)
    for text, got in zip(TEXTS, batch):
        alone = translator.translate(text, beam_size=beam_size, return_attention=True)
        assert got.text == alone.text
        assert got.target_ids == alone.target_ids and got.source_ids == alone.source_ids
        assert got.target_tokens == alone.target_tokens and got.truncated == alone.truncated
        assert abs(got.score - alone.score) < 1e-4
        for a, b in zip(got.encoder_attentions + got.decoder_attentions + got.cross_attentions,
                        alone.encoder_attentions + alone.decoder_attentions + alone.cross_attentions):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_translate_batch_edge_cases(translator):
    assert translator.translate_batch([]) == []
    results = translator.translate_batch(["", "🙂 中文 שלום <script>alert(1)</script>", "e\u0301"], beam_size=2)
    assert len(results) == 3
    for r in results:
        assert isinstance(r.text, str) and r.source_ids[-1] == translator.config.eos_id
        assert r.encoder_attentions == ()  # translate_batch returns no attentions unless asked
    check_attention_shapes(translator.translate("", beam_size=1), translator.config)


def test_translation_is_deterministic(translator):
    a = translator.translate(TEXTS[3], beam_size=2)
    b = translator.translate(TEXTS[3], beam_size=2)
    assert a.text == b.text and a.score == b.score
    for x, y in zip(a.cross_attentions, b.cross_attentions):
        assert torch.equal(x, y)


def test_head_mask_reaches_the_attentions(translator):
    cfg = translator.config
    n = cfg.n_encoder_layers
    layers = {"encoder": n, "decoder": cfg.n_decoder_layers, "cross": cfg.n_decoder_layers}
    ones = {k: torch.ones(layers[k], cfg.n_heads) for k in layers}
    plain = translator.translate(TEXTS[0], beam_size=1)
    same = translator.translate(TEXTS[0], beam_size=1, head_mask=ones)
    assert same.target_ids == plain.target_ids
    off = {"encoder": torch.ones(n, cfg.n_heads)}
    off["encoder"][0] = 0  # every head of the first encoder layer off
    masked = translator.translate(TEXTS[0], beam_size=1, head_mask=off)
    assert not torch.allclose(masked.encoder_attentions[1], plain.encoder_attentions[1])


def test_settings_object_and_keywords_decode_alike(translator):
    """One ``DecodeSettings`` or its fields as keywords: the same translations; keywords override the object; the
    checkpoint's own alpha and scoring fill in what the settings leave None."""
    settings = transformer.DecodeSettings(beam_size=3, alpha=1.0, max_len_a=0.0, max_len_b=7)
    by_object = [r.target_ids for r in translator.translate_batch(TEXTS, settings)]
    by_keyword = [r.target_ids for r in translator.translate_batch(TEXTS, beam_size=3, alpha=1.0, max_len_a=0.0,
                                                                    max_len_b=7)]
    assert by_object == by_keyword
    hyp = beam_search(translator.model, translator._pad([translator.encode_source(t)[0] for t in TEXTS]), 3, 1.0,
                      0.0, 7)
    assert max(len(ids) for ids in by_object) <= 7 and hyp.tokens.size(1) <= 7
    greedy = transformer.DecodeSettings(beam_size=1, max_len_b=7)
    assert translator.translate(TEXTS[1], settings, beam_size=1, max_len_a=1.5).target_ids == \
        translator.translate(TEXTS[1], greedy).target_ids
    chosen = translator.settings()
    assert chosen.alpha == translator.default_alpha and chosen.scoring == translator.scoring
    assert translator.settings(settings).alpha == 1.0
    with pytest.raises(TypeError, match="beam"):
        transformer.DecodeSettings().but(beams=3)
    with pytest.raises(ValueError, match="scoring"):
        translator.translate(TEXTS[0], scoring="nope")
    with pytest.raises(TypeError, match="keyword"):
        translator.translate(TEXTS[0], 4)


@pytest.mark.parametrize("name,value", [("beam_size", 0), ("beam_size", 2.5), ("beam_size", True), ("alpha", "1"),
                                        ("alpha", float("nan")), ("max_len_a", -1.0), ("max_len_b", 1.5),
                                        ("scoring", "nope"), ("tgt_lang", 3)])
def test_settings_are_checked_once_whichever_way_they_come(translator, name, value):
    """A wrong value gets the same message from the constructor, ``but``, and every method's keywords."""
    with pytest.raises(ValueError, match=name) as made:
        transformer.DecodeSettings(**{name: value})
    for attempt in (lambda: transformer.DecodeSettings().but(**{name: value}),
                    lambda: translator.translate(TEXTS[0], **{name: value}),
                    lambda: translator.translate_batch(TEXTS, **{name: value}),
                    lambda: translator.translate_batch([], **{name: value}),
                    lambda: translator.generate([translator.encode_source(TEXTS[0])[0]], **{name: value})):
        with pytest.raises(ValueError) as err:
            attempt()
        assert str(err.value) == str(made.value)
    for method in (translator.translate, translator.translate_batch):
        with pytest.raises(TypeError, match="not a decoding setting: beams"):
            method(TEXTS[:1] if method == translator.translate_batch else TEXTS[0], beams=3)


def test_the_default_alpha_is_decided_in_one_place(translator, tiny_checkpoint):
    """``alpha=None`` means the checkpoint's ``decoding.alpha``, else DEFAULT_ALPHA, wherever settings are filled: the
    translator, a bare ``search`` (no checkpoint) and the app's catalog all ask ``chosen_alpha``."""
    from transformer.decoding import DEFAULT_ALPHA, DecodeSettings, chosen_alpha, search

    assert transformer.translator.chosen_alpha is chosen_alpha
    assert DecodeSettings().filled() == DecodeSettings(alpha=DEFAULT_ALPHA, scoring="gnmt")
    assert DecodeSettings().filled({"decoding": {"alpha": 1.7}, "beam_scoring": "transformers"}) == \
        DecodeSettings(alpha=1.7, scoring="transformers")
    assert DecodeSettings(alpha=0.0).filled({"decoding": {"alpha": 1.7}}).alpha == 0.0
    src = translator._pad([translator.encode_source(t)[0] for t in TEXTS])
    bare = search(translator.model, src, DecodeSettings(beam_size=3, max_len_b=6))
    explicit = beam_search(translator.model, src, 3, DEFAULT_ALPHA, 1.5, 6)
    assert torch.equal(bare.tokens, explicit.tokens) and torch.equal(bare.scores, explicit.scores)
    tuned = Translator(translator.model, translator.tokenizer, {"decoding": {"alpha": 2.5}})
    assert tuned.default_alpha == 2.5 == tuned.translate(TEXTS[0], beam_size=2).settings.alpha
    assert tuned.translate(TEXTS[0], beam_size=2, alpha=0.5).settings.alpha == 0.5
