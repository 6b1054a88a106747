"""Beam search's recorded tree: the same search, every expanded hypothesis, the answer a leaf of it."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

import transformer
from transformer import Transformer, beam_search, length_penalty
from transformer.network.model import padding_mask

torch.set_num_threads(1)


def tiny(seed: int = 0) -> Transformer:
    """This file's tiny model (``conftest.tiny_model``)."""
    return tiny_model(seed, src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2, n_encoder_layers=1,
                      n_decoder_layers=1, d_ff=32, dropout=0.0, max_len=32)


SRC = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3], [4, 3, 0, 0, 0]])


def test_recording_changes_nothing_and_the_answer_is_a_leaf():
    for seed in range(4):
        model = tiny(seed)
        plain = beam_search(model, SRC, beam_size=3, max_len_b=6)
        rec = beam_search(model, SRC, beam_size=3, max_len_b=6, record_tree=True)
        assert torch.equal(plain.tokens, rec.tokens) and torch.equal(plain.scores, rec.scores)
        for i, tree in enumerate(rec.trees):
            best = tree.nodes[tree.best]
            assert best.status.startswith("finished") and abs(best.score - float(rec.scores[i])) < 1e-5
            assert tree.path(tree.best) == [t for t in rec.tokens[i].tolist() if t != 0]
            assert not any(n.parent == tree.best for n in tree.nodes)  # a leaf


def test_every_step_expands_exactly_the_kept_beams_with_their_top_candidates():
    """Brute force: at each step, the tree's nodes are the 2K best (beam, token) extensions of the nodes kept at
    the step before, by cumulative log-probability computed here without any cache."""
    model = tiny(1)
    k = 2
    src = SRC[:1]
    tree = beam_search(model, src, beam_size=k, max_len_b=5, record_tree=True).trees[0]
    memory = model.encode(src).last_hidden_state
    by_step: dict[int, list] = {}
    for node in tree.nodes:
        by_step.setdefault(node.step, []).append(node)
    for step in sorted(by_step)[1:]:
        parents = [n for n in by_step[step - 1] if n.status == "kept"]
        assert 1 <= len(parents) <= k
        candidates = []
        for parent in parents:
            prefix = [model.config.bos_id] + tree.path(parent.id)
            with torch.no_grad():
                logits = model.decode(torch.tensor([prefix]), memory, padding_mask(src, 0)).logits[0, -1]
            logp = logits.log_softmax(-1)
            logp[model.config.pad_id] = logp[model.config.bos_id] = float("-inf")
            for token in range(logp.numel()):
                candidates.append((parent.logprob + float(logp[token]), parent.id, token))
        best = sorted(candidates, reverse=True)[: 2 * k]
        got = sorted(((n.logprob, n.parent, n.token) for n in by_step[step]), reverse=True)
        assert [(p, t) for _, p, t in got] == [(p, t) for _, p, t in best]
        for (lp_got, _, _), (lp_best, _, _) in zip(got, best):
            assert abs(lp_got - lp_best) < 1e-4
        kept = [n for n in by_step[step] if n.status == "kept"]
        assert len(kept) <= k and all(n.token != model.config.eos_id for n in kept)
        for n in by_step[step]:
            if n.status == "finished":
                assert n.token == model.config.eos_id
                assert abs(n.score - n.logprob / float(length_penalty(torch.tensor(step), 0.6))) < 1e-5


def test_translator_returns_the_tree(tiny_checkpoint):
    tr = transformer.load(tiny_checkpoint, device="cpu")
    result = tr.translate("A man rides a bike.", beam_size=3, return_tree=True)
    assert result.tree is not None and result.tree.nodes[result.tree.best].score == result.score
    assert tr.translate("A man rides a bike.", beam_size=3).tree is None
    assert tr.translate("A man rides a bike.", beam_size=1, return_tree=True).tree is None  # greedy: no tree


def test_a_tree_under_other_rules_is_refused_everywhere_alike(tiny_checkpoint):
    """A tree is recorded by the "gnmt" rules only: asking for one under transformers' rules raises the same error
    through ``beam_search``, ``search`` and the translator (it was silently switched to "gnmt" in ``search``)."""
    from transformer.decoding import DecodeSettings
    from transformer.decoding.search import search

    tr = transformer.load(tiny_checkpoint, device="cpu")
    src = torch.tensor([tr.encode_source("A man rides a bike.")[0]])  # (1, S)
    settings = DecodeSettings(beam_size=3, alpha=1.0, scoring="transformers")
    for call in (lambda: beam_search(tr.model, src, 3, 1.0, scoring="transformers", record_tree=True),
                 lambda: search(tr.model, src, settings, record_tree=True),
                 lambda: tr.translate("A man rides a bike.", settings, return_tree=True)):
        with pytest.raises(ValueError, match="gnmt"):
            call()
    assert tr.translate("A man rides a bike.", settings.but(scoring="gnmt"), return_tree=True).tree is not None
