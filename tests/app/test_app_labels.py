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


def test_the_sidebar_says_how_the_shipped_weights_were_made(tiny_checkpoint, tmp_path, monkeypatch, tr):
    """Every command run, the last one shown (a run resumed with a raised --max-steps), the averaging and the decoding
    chosen on val; the same final weights as Training evolution names them."""
    import transformer
    from app.models import card

    base = "python -m transformer.train --run-dir runs/pn --max-steps {} --epochs {}"
    meta = {"language_pair": "en-de", "steps": 14340, "training_command": base.format(8000, 80),
            "commands_run": [base.format(8000, 80), base.format(16000, 200), base.format(14340, 200)],
            "final_validation": {"averaged_checkpoints": [f"step{s:07d}.safetensors" for s in (13936, 14070, 14340)]},
            "decoding": {"beam": 5, "alpha": 1.4, "chosen_on": "val"}}
    ckpt = tmp_path / "made"
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, meta)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = new_app()
    assert_clean(at)
    texts = [t.value for t in at.sidebar.text]
    assert base.format(14340, 200) in texts and base.format(8000, 80) not in texts
    captions = " ".join(plain(c.value) for c in at.sidebar.caption)
    assert "3 runs" in captions and "up to step 14340" in captions
    assert "the mean of 3 checkpoints, steps 13936 to 14340" in texts
    assert "beam 5, length penalty α 1.4, chosen on the validation set" in texts
    assert card.final_label(meta) == "final (mean of steps 13936–14340)"  # Training evolution's panel name
    assert card.final_label({"steps": 500}) == "final (step 500)"


def test_the_unk_notice_names_the_characters_and_blames_no_emoji_for_markup(app_env, tr):
    from app.analysis.inference import unknown_characters

    for text in ("A dog <b>runs</b> & {plays}", "A dog 🐕 runs ☃"):
        at = translate(new_app(), text)
        assert_clean(at)
        unknown = [c for c in dict.fromkeys(text) if not c.isspace() and tr.tokenizer.unk_id in tr.tokenizer.encode(c)]
        assert unknown and unknown_characters(tr.tokenizer, text) == unknown  # the oracle: each character alone
        notice = next(plain(i.value) for i in at.info if "<unk>" in plain(i.value))
        for c in unknown:
            assert f"“\u2068{c}\u2069”" in notice  # each isolated (FSI ... PDI): bidi text keeps its order
        if "<" in text:  # markup is not blamed on emoji; its characters are named
            assert "emoji" not in notice and "“\u2068<\u2069” (less-than sign)" in notice
        else:
            assert "“\u2068🐕\u2069” (dog)" in notice


def test_a_sentence_in_another_script_gets_a_language_notice(tiny_checkpoint, tmp_path, monkeypatch, tr):
    import transformer

    ckpt = tmp_path / "en-de"
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, {"language_pair": "en-de"})
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    at = new_app({"text": "一个穿着蓝色衬衫的男人在街上骑自行车。"})
    assert_clean(at)
    assert any("looks like Chinese" in i.value and "from English" in i.value for i in at.info)
    at = new_app({"text": "A man in a blue shirt is riding a bike."})
    assert not [i for i in at.info if "looks like" in i.value]


def test_heads_json_carries_the_sentences_it_cites(tiny_checkpoint, tiny_corpus, tmp_path, monkeypatch):
    """``python -m transformer.heads`` writes the cited test sentences into heads.json; the view shows them with no
    data set on the machine."""
    import json
    import shutil

    import transformer
    from transformer.decoding import DecodeSettings
    from transformer.interpret.heads import run

    ckpt = tmp_path / "tiny"
    shutil.copytree(tiny_checkpoint, ckpt)
    tr = transformer.load(ckpt, device="cpu")
    sources = (tiny_corpus / "test.en").read_text().splitlines()[:8]
    refs = (tiny_corpus / "test.de").read_text().splitlines()[:8]
    data = run(tr, sources, refs, "de", DecodeSettings(beam_size=2), batch_size=8)
    cited = {i for rows in data["most_confident"].values() for row in rows for top in row for i in top}
    assert data["cited_sentences"] == {str(i): sources[i] for i in sorted(cited)}
    data.update(split="test_nowhere", checkpoint=str(ckpt))
    (ckpt / "heads.json").write_text(json.dumps(data))
    monkeypatch.setenv("ATTN_CHECKPOINT", str(ckpt))
    monkeypatch.delenv("ATTN_DATA_DIR", raising=False)
    at = new_app({"text": "A dog runs in the park.", "view": "heads_across_the_test_set", "row": "cross.1.2"})
    assert_clean(at)
    listing = "\n".join(t.value for t in at.text)
    for i in data["most_confident"]["cross"][0][1]:
        assert f"line {i}: {sources[i]}" in listing  # lines counted from 0, as the corpus table's id
    assert "not on this machine" not in listing


def test_the_examples_picker_lets_go_once_the_visitor_types(app_env):
    from app.page import state

    at = new_app()
    example = state.EXAMPLES[2]
    at.selectbox(key="example").set_value(example)
    at.run()
    assert at.text_area(key="source_text").value == example and at.selectbox(key="example").value == example
    at = translate(at, "A dog runs on the beach.")
    assert_clean(at)
    assert at.selectbox(key="example").value is None
    at.selectbox(key="example").set_value(example)  # and picking it again still works
    at.run()
    assert at.text_area(key="source_text").value == example and at.selectbox(key="example").value == example


def test_the_app_title_appears_once(app_env):
    at = new_app()
    assert_clean(at)
    everything = [m.value for m in at.markdown] + [h.value for h in at.header] + [h.value for h in at.subheader] + \
        [h.value for h in at.title] + [c.value for c in at.caption]
    assert sum("Attention explorer" in text for text in everything) == 1
