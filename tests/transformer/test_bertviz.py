"""Handing a translation to BertViz: ``TranslationResult.for_bertviz()`` gives attentions and tokens of matching
lengths (checked always; BertViz's own ``model_view`` and ``head_view`` are called when bertviz is installed, it
is not a dependency)."""

from __future__ import annotations

import pytest
import torch

import transformer

torch.set_num_threads(1)

SENTENCES = ["A man rides a red bike.", "Two dogs play in the park with a ball.", "girl"]


@pytest.fixture(scope="module")
def results(tiny_checkpoint):
    tr = transformer.load(tiny_checkpoint, device="cpu")
    found = [tr.translate(s, beam_size=b) for s in SENTENCES for b in (1, 3)]
    found.append(tr.translate(SENTENCES[1], beam_size=1, max_len_a=0.0, max_len_b=2))  # cut at the length limit
    assert any(r.truncated or r.target_ids[-1] != tr.config.eos_id for r in found)
    return tr, found


def test_for_bertviz_lengths_match(results):
    tr, found = results
    for r in found:
        args = r.for_bertviz()
        s, t = len(args["encoder_tokens"]), len(args["decoder_tokens"])
        assert args["encoder_tokens"] == r.source_tokens
        assert t == len(r.target_ids) and args["decoder_tokens"][0] == "<s>"  # BOS + the output but its last piece
        n_layers = tr.config.n_encoder_layers
        assert len(args["encoder_attention"]) == n_layers == len(args["cross_attention"])
        for a in args["encoder_attention"]:
            assert a.shape == (1, tr.config.n_heads, s, s)
        for a in args["decoder_attention"]:
            assert a.shape == (1, tr.config.n_heads, t, t)
        for a in args["cross_attention"]:
            assert a.shape == (1, tr.config.n_heads, t, s)
        # the same numbers as the translation's own (H, q, k) attentions, only with BertViz's batch axis
        torch.testing.assert_close(args["cross_attention"][-1][0], r.cross_attentions[-1])


def test_the_raw_teacher_forced_pass_has_one_more_decoder_position(results):
    """Why a method: ``Translator.attentions(source_ids, target_ids)`` feeds BOS + every output piece, one
    position more than ``decoder_input_tokens``; BertViz refuses that pair."""
    tr, found = results
    r = found[0]
    out = tr.attentions(r.source_ids, r.target_ids)
    assert out.decoder_attentions[0].shape[-1] == len(r.decoder_input_tokens) + 1
    same = tr.attentions(r.source_ids, r.target_ids[:-1])
    torch.testing.assert_close(same.decoder_attentions[0][0], r.decoder_attentions[0])


def test_for_bertviz_needs_attentions(results):
    tr, _ = results
    bare = tr.translate(SENTENCES[0], return_attention=False)
    with pytest.raises(ValueError, match="return_attention"):
        bare.for_bertviz()


def test_bertviz_model_view_takes_it(results):
    bertviz = pytest.importorskip("bertviz")
    _, found = results
    for r in found:
        html = bertviz.model_view(**r.for_bertviz(), html_action="return")
        assert "bertviz" in html.data
        bertviz.head_view(**r.for_bertviz(), html_action="return")
    # the pair the issue reported: raw attentions over BOS + all target ids against decoder_input_tokens
    tr, _ = results
    r = found[0]
    out = tr.attentions(r.source_ids, r.target_ids)
    with pytest.raises(ValueError, match="positions"):
        bertviz.model_view(encoder_attention=out.encoder_attentions, decoder_attention=out.decoder_attentions,
                           cross_attention=out.cross_attentions, encoder_tokens=r.source_tokens,
                           decoder_tokens=r.decoder_input_tokens, html_action="return")
