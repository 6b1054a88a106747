"""The frame's address parameters live in the same registry as the views' (app/page/params.py): a link goes URL -> state
-> URL through the registry alone. No page is opened: the session state is Streamlit's own outside a script run."""

from __future__ import annotations

import pytest

st = pytest.importorskip("streamlit")

from app import views  # noqa: E402
from app.page import params, state  # noqa: E402

# The frame's URL names in the address's order: a public contract (users' links rely on them), so written out here
FRAME_ORDER = ["text", "beam", "alpha", "a", "b", "src", "tgt", "model", "s", "view"]
OTHER_MODEL = "checkpoints/another-model"


@pytest.fixture()
def session(monkeypatch: pytest.MonkeyPatch):
    """A fresh session state, outside public mode, with a default model other than ``OTHER_MODEL``."""
    monkeypatch.delenv("ATTN_PUBLIC", raising=False)
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/the-default")
    st.session_state.clear()
    yield st.session_state
    st.session_state.clear()


def round_trip(query: dict[str, str], view: str | None = None) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Adopt ``query`` as a link, then write the address of what it set; (that address, what was ignored)."""
    ignored = state.adopt_url(query)
    return state.url_params(view or st.session_state[state.VIEW]), ignored


def test_the_frame_declares_its_parameters_in_the_address_order():
    assert [p.name for p in params.frame()] == FRAME_ORDER
    assert not hasattr(state, "FRAME_NAMES") and not hasattr(state, "FRAME_KEYS")  # one list: the registry's


@pytest.mark.parametrize("beam", ["1", "5"])
def test_every_frame_parameter_round_trips_url_state_url(session, beam):
    query = {"text": "Two dogs play in the snow.", "beam": beam, "alpha": "0.8", "a": "1.5", "b": "20", "src": "en",
             "tgt": "de", "model": OTHER_MODEL, "s": "2", "view": "lines", "lh": "1,3", "lt": "0.1"}
    out, ignored = round_trip(query)
    assert ignored == []
    assert list(out.items()) == list(query.items())  # the same values, in the same order: the frame's, then the view's
    assert session[state.CHECKPOINT] == OTHER_MODEL and session[state.SENTENCE] == 2
    assert session[state.SEARCH] == ("Greedy" if beam == "1" else "Beam search")
    assert state.submitted().settings.beam_size == int(beam)
    assert session[params.FROM_LINK]["src_lang"] == "src" and session[params.FROM_LINK]["lines_heads"] == "lh"


def test_an_address_leaves_out_what_has_nothing_to_say(session):
    """Without a text, no decoding settings; the default model and the first sentence are left out; the view is
    always there, and the Export view's link names the view it was asked for."""
    out, ignored = round_trip({"view": "masks", "model": "checkpoints/the-default", "s": "1", "beam": "3"})
    assert ignored == [] and out == {"view": "masks"}
    session[state.SOURCE_TEXT] = "A dog."
    assert list(state.url_params("heatmap")) == ["text", "beam", "alpha", "a", "b", "view"]
    assert state.url_params("heatmap")["beam"] == "3"


def test_a_new_link_resets_what_it_leaves_out_but_the_text_and_the_model(session):
    round_trip({"text": "A dog.", "beam": "1", "alpha": "1.2", "s": "3", "src": "fr", "view": "lines", "lh": "2",
                "model": OTHER_MODEL})
    out, _ = round_trip({"view": "heatmap"})
    defaults = state.DecodeSettings()
    assert out == {"text": "A dog.", "beam": str(defaults.beam_size), "alpha": "0.6", "a": f"{defaults.max_len_a:g}",
                   "b": str(defaults.max_len_b), "model": OTHER_MODEL, "view": "heatmap"}
    assert "lines_heads" not in session and state.VIEW_GROUP not in session


def test_what_a_link_gets_wrong_is_ignored_with_its_reason(session, monkeypatch):
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/the-default")
    query = {"beam": "17", "alpha": "nan", "model": OTHER_MODEL, "view": "<x>", "src": "e n", "s": "0", "lh": "1",
             "zzz": "1", "text": "A dog\u202e."}
    out, ignored = round_trip(query)
    assert ignored == [("beam", ""), ("alpha", ""), ("src", ""), ("model", "not offered on this server; the default "
                                                                           "opens instead"), ("s", ""), ("view", ""),
                       ("lh", "not used by the Heatmap view"), ("zzz", "")]
    assert out["view"] == state.DEFAULT_VIEW and out["text"] == "A dog." and "model" not in out
    assert any("bidirectional" in n for n in session[state.NOTICES])
    assert round_trip({"model": " \x00 "})[1] == [("model", "")]


def test_registering_a_frame_parameter_is_enough_for_it_to_round_trip(session, monkeypatch):
    """Nothing else names the frame's parameters: one more in the registry is read from a link, written back after
    the others (before the view's own), cleared by a link without it, and ignored when it is not understood."""
    extra = params.Param("zz", "_zz", params.int_in(0, 9), default=0)
    monkeypatch.setattr(params, "_FRAME", [*params.frame(), extra])
    out, ignored = round_trip({"text": "A dog.", "view": "lines", "lh": "2", "zz": "7"})
    assert ignored == [] and session["_zz"] == 7
    assert list(out)[-3:] == ["view", "zz", "lh"] and out["zz"] == "7"
    assert round_trip({"zz": "x"})[1] == [("zz", "")] and "_zz" not in session
    with pytest.raises(AssertionError):  # and no view may take a frame parameter's name
        params.register("Another view", (params.Param("zz", "_other", params.int_in(0, 9)),))


def test_every_registered_view_is_a_valid_view_in_a_link(session):
    for name in views.VIEWS:
        out, ignored = round_trip({"view": name})
        assert ignored == [] and out["view"] == name
