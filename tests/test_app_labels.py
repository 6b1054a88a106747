"""What the page says about a translation and its pieces (AppTest, tiny checkpoint): a cut output, one numbering of
the pieces, the notices about the input, the sidebar's words."""

from __future__ import annotations

import pytest

pytest.importorskip("streamlit")

from conftest import assert_clean, new_app  # noqa: E402

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
