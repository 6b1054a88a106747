"""The page's state and address (app/page/state.py) and the frame's rough edges, through AppTest (tiny checkpoint)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("streamlit")

from conftest import assert_clean, chart, navigate, new_app, plain, set_view, shown_texts, svg_chart, translate  # noqa: E402

import transformer  # noqa: E402
from app.analysis import inference  # noqa: E402
from app.views import VIEWS  # noqa: E402

torch.set_num_threads(1)


@pytest.mark.parametrize("view", list(VIEWS))
def test_every_registered_view_renders_from_a_link(app_env, view):
    at = new_app({"text": "A dog runs in the park.", "view": view})
    assert_clean(at)
    assert at.segmented_control(key="view").value == view
    assert at.query_params["view"] == view


def test_back_returns_to_the_previous_sentence_and_forward_again(app_env, tr):
    first, second = "A man rides a bike.", "Two dogs play in the snow."
    at = translate(new_app(), first)
    url_first = dict(at.query_params)
    at = translate(at, second)
    url_second = dict(at.query_params)
    assert url_first["text"] == first and url_second["text"] == second
    # the browser's Back: the page reruns with the older address, which the app must adopt, not overwrite
    at = navigate(at, url_first)
    assert_clean(at)
    assert tr.translate(first).text in shown_texts(at)
    assert at.query_params["text"] == first and at.text_area(key="source_text").value == first
    # Forward
    at = navigate(at, url_second)
    assert tr.translate(second).text in shown_texts(at)
    assert at.query_params["text"] == second
    # Back across a view change returns to the view too
    at = set_view(at, "lines")
    at = navigate(at, url_second)
    assert at.segmented_control(key="view").value == "heatmap"


def test_a_link_opened_is_not_rewritten_until_the_visitor_changes_something(app_env):
    link = {"text": "A dog runs in the park.", "view": "masks"}  # no decoding settings: the page fills them in
    at = new_app(link)
    assert_clean(at)
    # rewriting the address would add an entry to the browser's history: Back would land on the link again
    assert dict(at.query_params) == link
    at.slider(key="pad_src").set_value(5).run()
    changed = dict(at.query_params)
    assert changed["ps"] == "5" and changed["beam"] == str(at.session_state["beam_size"])  # now it says it all
    at = navigate(at, link)  # Back: the link again, as it was
    assert at.slider(key="pad_src").value == 2 and dict(at.query_params) == link
    hostile = new_app({"text": "A dog runs.", "view": "masks", "ps": "99"})  # a value the page did not take
    assert dict(hostile.query_params).get("ps") is None and "beam" in dict(hostile.query_params)


def test_a_shared_link_carries_the_views_choices_and_only_its_own(app_env, tr):
    text = "A woman with a red ball walks on the beach."
    at = translate(new_app(), text)
    at.segmented_control(key="scale").set_value("stretched")
    at = set_view(at, "all_heads")
    at.pills(key="grid_pick").set_value("L2 · H3")
    at.run()
    heads_link = dict(at.query_params)
    at = set_view(at, "step_through")
    at.slider(key="step").set_value(3)
    at.run()
    step_link = dict(at.query_params)
    at = set_view(at, "ablation")
    at.multiselect(key="ablate").set_value(["Cross · L1 · H2", "Encoder · L2 · H1"])
    at.run()
    ablation_link = dict(at.query_params)
    at = set_view(at, "lines")
    at.multiselect(key="lines_heads").set_value([1, 3])
    at.selectbox(key="lines_focus").set_value(2)
    at.slider(key="lines_threshold").set_value(0.1)
    at.run()
    assert_clean(at)
    link = dict(at.query_params)
    assert heads_link["scale"] == "stretch" and heads_link["pick"] == "2.3" and step_link["step"] == "3"
    assert link["lh"] == "1,3" and link["lf"] == "2" and link["lt"] == "0.1"
    assert set(ablation_link["off"].split(",")) == {"cross.1.2", "encoder.2.1"}
    assert not {"off", "pick", "step", "scale"} & set(link)  # another view's choices leave the address with it
    # a new visitor opening a link sees the same choices
    other = new_app(link)
    assert_clean(other)
    assert other.multiselect(key="lines_heads").value == [1, 3]
    assert other.selectbox(key="lines_focus").value == 2
    assert other.slider(key="lines_threshold").value == pytest.approx(0.1)
    other = new_app(heads_link)
    assert other.pills(key="grid_pick").value == "L2 · H3"
    assert chart(other, "layer 2 · head 3")
    assert new_app(step_link).slider(key="step").value == 3
    other = new_app(ablation_link)
    assert set(other.multiselect(key="ablate").value) == {"Cross · L1 · H2", "Encoder · L2 · H1"}
    assert any(m.label == "Score" for m in other.metric)  # the comparison opens at once


def test_export_link_opens_the_view_the_user_came_from(app_env):
    at = translate(new_app(), "A girl climbs a tree.")
    at = set_view(at, "masks")
    at = set_view(at, "export")
    assert_clean(at)
    link = [c.value for c in at.code if "text=" in c.value]
    assert link and "view=masks" in link[0] and "view=export" not in link[0]


def test_hostile_links_fall_back_to_defaults_and_say_what_was_ignored(app_env, tr):
    at = new_app({"text": "A dog.", "beam": "99999999999999999999", "layer": "-4", "alpha": "nan", "view": "<x>",
                  "head": "1e9", "step": "NaN", "pick": "9.9.9", "off": "cross.0.1", "lt": "inf", "zzz": "1"})
    assert_clean(at)
    notice = " ".join([i.value for i in at.info] + shown_texts(at))
    for name in ("beam", "layer", "alpha", "view", "head", "step", "pick", "off", "lt", "zzz"):
        assert name in plain(notice)
    assert at.segmented_control(key="view").value == "heatmap"
    assert tr.translate("A dog.").text in shown_texts(at)
    huge = new_app({"text": "a " * 60_000, "s": "-1"})
    assert_clean(huge)
    assert len(huge.text_area(key="source_text").value) <= inference.MAX_INPUT_CHARS


def test_a_link_puts_no_markdown_and_no_link_into_the_page(app_env):
    """Issue #37, 1: a parameter name is a sentence with an address (phishing through the page's own notice), a
    Markdown link, a huge name, and many names: the notice shows them as plain text, cut short, with a count."""
    bait = "⚠ Your session has expired. Sign in again at https://evil.example/login"
    query = {"text": "A dog.", bait: "1", "[sign in](https://evil.example/a)": "x", "www.evil.example": "1",
             "n" * 5000: "1", **{f"p{i}": "1" for i in range(20)}}
    at = new_app(query)
    assert_clean(at)
    marked = [e.value for kind in ("info", "warning", "markdown", "caption", "error", "success") for e in at.get(kind)]
    marked += [e.value for kind in ("info", "warning", "markdown", "caption") for e in at.sidebar.get(kind)]
    assert not any("evil" in plain(m) or "nnnnnnnn" in m for m in marked), marked  # nothing of it as Markdown
    assert any("24 part(s) of the link were not understood" in i.value for i in at.info)
    listing = next(t for t in shown_texts(at) if "⚠ Your session" in t)  # as text, never rendered
    lines = listing.splitlines()
    assert "evil" not in lines[0] and lines[0].startswith(bait[:32])  # the bait is cut before its address
    assert len(lines) == 13 and lines[-1] == "… and 12 more not shown"
    assert all(len(line) <= 80 for line in lines), lines
    assert any(line.startswith("n" * 32 + "… (+4,968 characters)") for line in lines)


def test_escaped_text_holds_no_bare_address_markdown_would_link():
    """md_escape's text is never a link: GitHub-flavoured Markdown (Streamlit's) links bare addresses found in the
    text after escapes are resolved, so a backslash is not enough (seen in Chromium: ``?model=www.evil.example``
    made a live link in the load error). The oracle: the patterns of mdast-util-gfm-autolink-literal, run on the
    text a visitor reads."""
    import re

    from app.page.controls import md_escape

    url = re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.IGNORECASE)
    email = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")
    for text in ("Sign in at https://evil.example/login", "www.evil.example", "WWW.Evil.example", "mail x@evil.example",
                 "ftp://a.b and http://c.d"):
        shown = plain(md_escape(text))
        assert not url.search(shown) and not email.search(shown), shown
        assert shown.replace("\u2060", "") == text  # reads (and copies, but for an invisible joiner) as written
    assert md_escape("checkpoints/a.b (c)") == "checkpoints/a\\.b \\(c\\)"  # everything else as before


def test_link_numbers_are_ascii_digits_only():
    """Issue #37, 5: ``layer=٣`` (Arabic-Indic three), ``1_0`` or a fullwidth digit are not numbers in a link."""
    from app.page import controls, heatmaps, params
    from app.views import all_heads

    for parse in (params.int_in(0, 100), params.float_in(0, 100)):
        assert parse("3") == 3 and parse(" 3 ") == 3
        for text in ("٣", "３", "1_0", "²", "nan", "inf", "-inf", "1e999", ""):
            assert parse(text) is None, (parse, text)
    assert params.float_in(0, 5)("2.5") == 2.5 and params.float_in(0, 5)("5e-1") == 0.5
    assert params.int_list(1, 9)("1,٣") is None and params.int_list(1, 9)("3,1") == [1, 3]
    assert controls.parse_head_ref("cross.١.١") is None and controls.parse_head_ref("cross.1.1") == ("cross", 0, 0)
    assert controls.parse_head_label("Cross · L٣ · H1") is None
    assert all_heads._pick("٢.٣") is None and all_heads._pick("2.3") == "L2 · H3"
    assert heatmaps._parse_span("١-٩") is None and heatmaps._parse_span("1-9") == (1, 9)


def test_control_characters_removed_from_a_link_are_named(app_env, tr):
    """Issue #37, 5: control characters in the link's text are removed with a notice (they were dropped silently),
    and a Unicode digit in a number is ignored with the rest of what was not understood."""
    at = new_app({"text": "A dog\x00 runs\x1b[31m.", "view": "inside_a_head", "layer": "٣"})
    assert_clean(at)
    assert at.text_area(key="source_text").value == "A dog runs[31m."
    assert any("Removed 2 control character(s)" in i.value for i in at.info), [i.value for i in at.info]
    assert any(line == "layer" for t in shown_texts(at) for line in t.splitlines())


def test_sidebar_scores_have_full_distinct_names(tiny_checkpoint, tmp_path, monkeypatch, tr):
    ckpt = tmp_path / "scored"
    meta = {"language_pair": "en-de", "final_validation": {"val_bleu": 40.1, "val_loss": 1.6},
            "val_beam5": {"bleu": 38.78, "chrf": 61.68}, "test_2016_flickr": {"bleu": 38.56, "chrf": 62.23,
                                                                              "bleu_lc_tok": 38.94}}
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, meta)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = new_app()
    assert_clean(at)
    table = next(plain(m.value) for m in at.sidebar.markdown if m.value.startswith("| score"))
    rows = [line.strip("| ").split(" | ") for line in table.splitlines()[2:]]
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)) >= 5  # distinct
    assert not at.sidebar.metric  # no cut-off metric labels
    assert dict(rows)["test (Flickr 2016): BLEU, lowercased and tokenized"] == "38.94"
    assert dict(rows)["validation, end of training: BLEU"] == "40.10" and dict(rows)["validation: chrF"] == "61.68"
    assert not [n for n in names if "_" in n or " lc " in n or "tok" in n.split()]  # plain words, no file keys


def test_paragraph_is_split_and_each_sentence_translated(app_env, tr):
    text = "A man rides a bike. Two dogs play in the snow! A girl climbs a tree."
    at = translate(new_app(), text)
    assert_clean(at)
    sentences = inference.split_sentences(text)
    assert len(sentences) == 3
    listing = "\n".join(shown_texts(at))
    for sentence in sentences:
        assert sentence in listing and tr.translate(sentence).text in listing
    # the first sentence is explored; picking another re-draws the views for it
    spec = svg_chart(at, "Cross-attention")
    assert len(spec["x"]) == len(tr.translate(sentences[0]).source_tokens)
    at.selectbox(key="sentence").set_value(2)
    at.run()
    assert_clean(at)
    spec = svg_chart(at, "Cross-attention")
    assert len(spec["x"]) == len(tr.translate(sentences[1]).source_tokens)
    assert at.query_params["s"] == "2"


def test_input_in_another_language_gets_a_notice(app_env, tiny_checkpoint, tmp_path, monkeypatch, tr):
    ckpt = tmp_path / "en-de"
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, {"language_pair": "en-de", "domain": "image captions"})
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = translate(new_app(), "Ein Mann fährt mit dem Fahrrad die Straße entlang.")
    assert_clean(at)
    assert any("looks like German" in i.value for i in at.info)
    helped = plain(at.button(key="translate").help or "")  # what the model can do: the Translate button's help
    assert "English → German" in helped and "image captions" in helped
    at = translate(at, "A man rides his bike down the street in the city.")
    assert not any("looks like" in i.value for i in at.info)
    at = translate(at, "A man rides his bike down the street in the city. Ein Hund läuft über die grüne Wiese.")
    assert any("Sentence(s) 2 (German)" in i.value for i in at.info)


def test_mistyped_local_path_says_no_such_directory(app_env, monkeypatch):
    import huggingface_hub

    def no_network(*args, **kwargs):
        raise AssertionError("a path must never be looked up on the Hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    at = new_app()
    at.sidebar.text_input(key="checkpoint").set_value("checkpoints/does-not-exist")
    at.run()
    assert not at.exception
    assert "No such directory" in plain(at.error[0].value) and "does-not-exist" in plain(at.error[0].value)


def test_pieces_box_starts_collapsed_and_the_view_selector_comes_before_the_translation(app_env):
    at = new_app()
    assert_clean(at)
    pieces = [e for e in at.expander if "Subword pieces" in e.label]
    assert pieces and not pieces[0].proto.expanded
    order = []

    def walk(node) -> None:  # the page's elements top to bottom
        order.append((node.type, getattr(node, "key", None), str(getattr(node, "value", ""))))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    selector = next(i for i, (t, key, _) in enumerate(order) if key == "view")
    translation = next(i for i, (t, _, value) in enumerate(order) if value.startswith("Translation · score"))
    assert selector < translation


def test_lines_focus_follows_the_attention_type(app_env, tr):
    text = "A man rides a red bike."
    at = translate(new_app({"view": "lines"}), text)
    ref = tr.translate(text)
    at.selectbox(key="lines_focus").set_value(1)
    at.run()
    focus = at.selectbox(key="lines_focus")
    assert focus.value == 1 and f"1: {ref.target_tokens[0]}" in focus.options  # cross: the output pieces, from 1
    at.segmented_control(key="att").set_value("encoder")
    at.run()
    assert_clean(at)
    focus = at.selectbox(key="lines_focus")
    assert focus.value == "all"  # the old index is not carried over to the other type's tokens
    assert list(focus.options[1:]) == [f"{i}: {t}" for i, t in enumerate(ref.source_tokens, 1)]
    assert "one source piece (query)" in focus.label


def test_a_links_sentence_number_the_text_has_not_is_named(app_env):
    """``s=`` is recorded with every value a link set (one registry for the frame's parameters and the views'), so the
    sentence picker that drops a number beyond the text's sentences says so, as the views' controls do."""
    text = "A man rides a bike. Two dogs play in the snow! A girl climbs a tree."
    at = new_app({"text": text, "s": "3"})
    assert_clean(at)
    assert at.selectbox(key="sentence").value == 3 and not any("s= value" in i.value for i in at.info)
    at = new_app({"text": text, "s": "5"})
    assert_clean(at)
    assert at.selectbox(key="sentence").value == 1 and "s" not in at.query_params
    assert any("The link's s= value was ignored" in i.value for i in at.info), [i.value for i in at.info]
