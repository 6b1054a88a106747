"""The page's path, each step once: a sentence is tokenized once on its way to the heatmap (its work estimate, its
translation and its analysis read the same pieces), a longer text's sentences once each, the view is settled once a
run, and a longer text's plan (``app.limits.work.plan_text``) is what the page spends."""

from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, translate  # noqa: E402

from app.analysis import cached, inference  # noqa: E402
from app.analysis.inference import DecodeSettings  # noqa: E402
from app.limits import ledger, work  # noqa: E402
from transformer import Translator  # noqa: E402


class CountingTokenizer:
    """A tokenizer that counts the texts it is asked to encode (everything else: the tokenizer's own)."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer, self.encoded = tokenizer, Counter()

    def encode(self, text: str) -> list[int]:
        self.encoded[text] += 1
        return self.tokenizer.encode(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self.tokenizer, name)


@pytest.fixture()
def counting(app_env, tr, monkeypatch) -> CountingTokenizer:
    """The page's model, its tokenizer counting (the same network, metadata and folder as the tiny checkpoint)."""
    tokenizer = CountingTokenizer(tr.tokenizer)
    counted = Translator(tr.model, tokenizer, tr.metadata, tr.path)
    monkeypatch.setattr(cached, "load", lambda model: counted)
    cached.RESULTS.clear()
    return tokenizer


def test_a_sentence_is_tokenized_once_on_its_way_to_the_heatmap(counting, tr):
    text = "A man rides a red bike in the park."
    at = translate(new_app(), text)
    assert_clean(at)
    assert counting.encoded[text] == 1
    assert "  ".join(tr.tokenizer.pieces(tr.encode_source(text)[0])) in [t.value for t in at.text]  # its pieces
    counting.encoded.clear()
    at.run()  # again, the analysis from the cache: its plan still reads the pieces once
    assert_clean(at)
    assert counting.encoded[text] == 1


def test_a_longer_texts_sentences_are_tokenized_once_each(counting):
    sentences = ["A man rides a bike.", "Two dogs run in the park.", "A girl plays with a ball."]
    at = translate(new_app(), " ".join(sentences))
    assert_clean(at)
    assert all(counting.encoded[s] == 1 for s in sentences), counting.encoded
    listed = "\n".join(x.value for x in at.text if x.value.startswith("1. "))
    assert listed.count("→") == 3  # every translation shown, the first sentence explored


def test_the_view_is_settled_once_a_run(app_env, monkeypatch):
    from app.page import selector

    calls = []
    resolve = selector.resolve
    monkeypatch.setattr(selector, "resolve", lambda *a: calls.append(1) or resolve(*a))
    at = new_app({"text": "A dog runs.", "view": "masks"})
    assert_clean(at)
    assert len(calls) == 1 and at.segmented_control(key="view").value == "masks"


def test_the_analysis_reads_the_pieces_it_is_given(tr):
    """``analyse`` with the caller's pieces gives what it gives when it tokenizes the text itself."""
    text = "A woman walks on the beach with her dog."
    settings = DecodeSettings(beam_size=2)
    own = inference.analyse(tr, text, settings)
    given = inference.analyse(tr, text, settings, pieces=inference.sentence(tr, text).pieces)
    assert (given.source_ids, given.target_ids, given.translation) == (own.source_ids, own.target_ids,
                                                                         own.translation)
    assert given.source_pieces == own.source_pieces == len(tr.tokenizer.encode(text))


def test_a_longer_texts_plan(tr, monkeypatch):
    """The picked sentence's analysis keeps at most half of the ceiling; the rest is cut in groups, none over it;
    the beam is capped so that no sentence alone is over it; each cost is that sentence's plain translation."""
    texts = [f"a man rides a red bike number {i} in the park ." for i in range(12)] + ["a dog ."]
    pieces = [len(tr.tokenizer.encode(t)) for t in texts]
    settings = DecodeSettings(beam_size=8)
    long = work.translation_work(tr, work.positions(tr, max(pieces)), settings)
    ceiling = long * 1.2
    plan = work.plan_text(tr, pieces, 0, settings, ceiling)
    rest = ceiling - min(long, ceiling / 2)
    assert [i for g in plan.groups for i in g] == list(range(len(texts)))
    assert plan.costs == [work.plain_work(tr, work.source_length(tr, t), plan.settings) for t in texts]
    assert all(sum(plan.costs[i] for i in g) <= rest or len(g) == 1 for g in plan.groups)
    assert len(plan.groups) > 1 and max(plan.costs) <= rest
    if plan.settings.beam_size < settings.beam_size:
        assert plan.notices and "capped" in plan.notices[0]
    with ledger.request():  # outside a test's ceiling: one group, every sentence
        monkeypatch.setenv("ATTN_MAX_WORK", "0")
        assert work.plan_text(tr, pieces, 3, settings).groups == [list(range(len(texts)))]
