"""What the page says about a translation and its pieces (AppTest, tiny checkpoint): a cut output, one numbering of
the pieces, the notices about the input, the sidebar's words."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app, plain, svg_chart, translate  # noqa: E402

CUT = "A man in a blue shirt is riding a bike down the street."


def test_an_output_cut_at_the_maximum_length_says_so(app_env, tr):
    at = new_app({"text": CUT, "a": "0.5", "b": "0"})  # a, b: the maximum output length a * source + b
    assert_clean(at)
    ref = tr.translate(CUT, max_len_a=0.5, max_len_b=0)
    assert ref.hit_max_len  # the oracle: the translator says this output was cut
    notices = [w.value for w in at.warning if "maximum length" in w.value]
    assert len(notices) == 1 and f"after {len(ref.target_tokens)} pieces" in notices[0]
    line = next(c.value for c in at.caption if c.value.startswith("Translation"))
    assert "cut at the maximum length" in line and "not comparable" in line  # the score is not a whole sentence's


def test_one_numbering_for_the_output_and_the_decoder_input(app_env, tr):
    """Output step t's piece and decoder input t (the same piece) carry the same number on the axes, and "Read a
    row" names its keys with their numbers."""
    text = "a man rides a bike on the street with a dog"
    at = translate(new_app({"att": "decoder"}), text)
    assert_clean(at)
    ref = tr.translate(text)
    spec = svg_chart(at, "Decoder self-attention")
    assert len(set(ref.target_tokens)) < len(ref.target_tokens)  # repeated pieces: their labels carry numbers
    for t in range(1, len(ref.target_tokens)):  # decoder input t is what output step t produced
        assert ref.decoder_input_tokens[t] == ref.target_tokens[t - 1]
        assert spec["x"][t] == spec["y"][t - 1]
    at.selectbox(key="heatmap_chart_row").set_value(2)
    at.run()
    line = plain(next(c.value for c in at.caption if c.value.startswith("Query")))
    assert line.startswith(f"Query 3 ({ref.target_tokens[2]})")
    for piece, number in re.findall(r"(\S+) \((\d+)\) \d\.\d{3}", line.split("takes the most from:")[1]):
        assert ref.decoder_input_tokens[int(number)] == piece
