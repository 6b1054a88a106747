"""The model picker and the Compare models view (AppTest), on tiny checkpoints in a temporary checkpoints/."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("streamlit")

from conftest import arr, assert_clean, chart, navigate, new_app, plain, set_view, shown_texts, svg_chart, translate  # noqa: E402

import transformer  # noqa: E402
from app.analysis import cached  # noqa: E402
from app.models import catalog  # noqa: E402
from transformer import Transformer, TransformerConfig, save_checkpoint  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture()
def repo(tmp_path, tiny_tokenizer, monkeypatch):
    """A repository root whose checkpoints/ holds a post-norm and a pre-norm model and two broken ones."""
    v = tiny_tokenizer.vocab_size
    for name, norm_first, seed in (("post", False, 1), ("pre", True, 2)):
        torch.manual_seed(seed)
        config = TransformerConfig(src_vocab_size=v, tgt_vocab_size=v, d_model=32, n_heads=4, n_encoder_layers=2,
                                   n_decoder_layers=2, d_ff=64, max_len=64, norm_first=norm_first)
        save_checkpoint(tmp_path / "checkpoints" / name, Transformer(config).eval(), tiny_tokenizer,
                        {"language_pair": "en-de", "test_2016_flickr": {"bleu": 12.5 if norm_first else 13.25}})
    truncated = tmp_path / "checkpoints" / "truncated"
    save_checkpoint(truncated, Transformer(config).eval(), tiny_tokenizer, {})
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    mismatch = tmp_path / "checkpoints" / "mismatch"
    save_checkpoint(mismatch, Transformer(config).eval(), tiny_tokenizer, {})
    cfg = json.loads((mismatch / "config.json").read_text())
    (mismatch / "config.json").write_text(json.dumps({**cfg, "n_encoder_layers": 3}))
    monkeypatch.setattr(catalog, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("ATTN_CHECKPOINT", "checkpoints/post")
    cached.get_checkpoint_list.clear()
    yield tmp_path
    cached.get_checkpoint_list.clear()


def test_checkpoint_check_names_what_is_broken(repo):
    from transformer.checkpoint import check_checkpoint_dir

    assert check_checkpoint_dir(repo / "checkpoints" / "post").norm_first is False
    with pytest.raises(transformer.CheckpointError, match="truncated"):
        check_checkpoint_dir(repo / "checkpoints" / "truncated")
    with pytest.raises(transformer.CheckpointError, match="does not match"):
        check_checkpoint_dir(repo / "checkpoints" / "mismatch")
    # the quick check agrees with a real load
    for name in ("truncated", "mismatch"):
        with pytest.raises(transformer.CheckpointError):
            transformer.load(repo / "checkpoints" / name)


def test_picker_lists_every_checkpoint_and_names_the_broken_ones(repo):
    at = new_app()
    assert_clean(at)
    picker = at.sidebar.selectbox(key="model_choice")
    assert picker.value == "checkpoints/post"
    assert list(picker.options[:2]) == ["post", "pre"]  # short names: the sidebar cuts long ones
    assert any("post · en-de · post-norm · test BLEU 13.2" in plain(c.value) for c in at.sidebar.caption)
    assert not any("truncated" in o or "mismatch" in o for o in picker.options)
    notes = " ".join(plain(c.value) for c in at.sidebar.caption)
    assert "checkpoints/truncated is unavailable" in notes and "checkpoints/mismatch is unavailable" in notes
    # picking the other model loads it; the link carries it
    tr_pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    picker.set_value("checkpoints/pre")
    at.run()
    assert_clean(at)
    assert at.sidebar.text_input(key="checkpoint").value == "checkpoints/pre"
    assert tr_pre.translate(at.text_area(key="source_text").value).text in shown_texts(at)
    assert at.query_params["model"] == "checkpoints/pre"
    other = new_app(dict(at.query_params))
    assert_clean(other)
    assert other.sidebar.selectbox(key="model_choice").value == "checkpoints/pre"


def test_each_model_decodes_with_its_own_length_penalty(repo):
    """A model whose card names the length penalty chosen on val (``decoding.alpha``) opens with it; picking a
    model sets its own; a link's alpha wins over the model's. 3.5 (above the slider's old top, 2.0) is what the
    post-norm models chose on val."""
    meta_path = repo / "checkpoints" / "post" / "metadata.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "decoding": {"beam": 5, "alpha": 3.5, "chosen_on": "val"}}))
    at = new_app()
    assert_clean(at)
    assert at.sidebar.slider(key="alpha").value == pytest.approx(3.5)
    assert dict(at.query_params) == {}  # a first visit's address stays bare (Back leaves at once)
    at.sidebar.selectbox(key="model_choice").set_value("checkpoints/pre")
    at.run()
    assert at.sidebar.slider(key="alpha").value == pytest.approx(0.6)  # the pre-norm card names none
    # and the translation on screen is decoded again at once, with that alpha (no button to press)
    pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    example = at.text_area(key="source_text").value
    score = pre.translate(example, beam_size=4, alpha=0.6).score
    assert any(f"score {score:.3f}" in c.value for c in at.caption)
    assert at.query_params["alpha"] == "0.6" and at.query_params["model"] == "checkpoints/pre"
    assert "α 0.6, default 0.6 (not tuned)" in at.sidebar.slider(key="alpha").help
    at.sidebar.selectbox(key="model_choice").set_value("checkpoints/post")
    at.run()
    assert at.sidebar.slider(key="alpha").value == pytest.approx(3.5)
    linked = new_app({"text": "Two dogs play.", "alpha": "0.9"})
    assert_clean(linked)
    assert linked.sidebar.slider(key="alpha").value == pytest.approx(0.9)
    for link in ({"text": "Two dogs play."}, {"text": "Two dogs play.", "alpha": "99"}):  # none, or out of range
        linked = new_app(link)
        assert_clean(linked)
        assert linked.sidebar.slider(key="alpha").value == pytest.approx(3.5)
        # decoded with the model's own: a link without one is kept as it was, one the page did not take is rewritten
        shown = dict(linked.query_params)
        assert shown.get("alpha", "3.5") == "3.5" and ("alpha" in shown) == ("alpha" in link)


def test_compare_view_shows_each_models_own_numbers(repo):
    text = "A man rides a red bike."
    at = translate(new_app({"view": "compare_models"}), text)
    assert_clean(at)
    assert at.selectbox(key="compare_with").value == "checkpoints/pre"  # the other layout by default
    post = transformer.load(repo / "checkpoints" / "post", device="cpu")
    pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    ref_post, ref_pre = post.translate(text), pre.translate(text)
    texts = shown_texts(at)
    assert ref_post.text in texts and ref_pre.text in texts
    assert any("Cross-attention · layer 2 · mean over heads" in m.value for m in at.markdown)  # above both maps
    a = arr(chart(at, "post (post-norm)")["data"][0]["z"])
    b = arr(chart(at, "pre (pre-norm)")["data"][0]["z"])
    np.testing.assert_allclose(a, ref_post.cross_attentions[-1].mean(0).numpy(), atol=1e-5)
    np.testing.assert_allclose(b, ref_pre.cross_attentions[-1].mean(0).numpy(), atol=1e-5)
    summaries = [d.value for d in at.dataframe]
    assert len(summaries) == 2
    w = ref_pre.encoder_attentions[0].numpy()  # (H, S, S)
    entropy = -(w * np.log(np.where(w > 0, w, 1))).sum(-1).mean()
    row = summaries[1][(summaries[1]["type"] == "Encoder") & (summaries[1]["layer"] == 1)].iloc[0]
    assert row["entropy"] == pytest.approx(entropy, rel=1e-4)
    at.selectbox(key="head").set_value("2")
    at.segmented_control(key="att").set_value("encoder")
    at.run()
    assert any("Encoder self-attention · layer 2 · head 2" in m.value for m in at.markdown)
    b = arr(chart(at, "pre (pre-norm)")["data"][0]["z"])
    np.testing.assert_allclose(b, ref_pre.encoder_attentions[1][1].numpy(), atol=1e-5)
    # the address carries the second model and the map's choices: a copied link reopens the same comparison
    link = dict(at.query_params)
    assert link["with"] == "checkpoints/pre" and "wa" not in link
    reopened = new_app(link)
    assert_clean(reopened)
    assert reopened.selectbox(key="compare_with").value == "checkpoints/pre"
    assert any("Encoder self-attention · layer 2 · head 2" in m.value for m in reopened.markdown)
    np.testing.assert_allclose(arr(chart(reopened, "pre (pre-norm)")["data"][0]["z"]),
                               ref_pre.encoder_attentions[1][1].numpy(), atol=1e-5)
    set_view(at, "heatmap")  # the same type, layer and head as in Compare
    assert_clean(at)
    np.testing.assert_allclose(svg_chart(at, "layer 2 · head 2")["z"], ref_post.encoder_attentions[1][1].numpy(),
                               atol=5.1e-4)


def test_public_mode_offers_only_the_allow_list(repo, monkeypatch):
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    monkeypatch.setenv("ATTN_MODELS", "checkpoints/post,checkpoints/pre")
    at = new_app()
    assert_clean(at)
    picker = at.sidebar.selectbox(key="model_choice")
    assert [o.split(" · ")[0] for o in picker.options] == ["post", "pre"]
    assert not at.sidebar.text_input  # no free-form field
    # a link naming another model opens the default, and says so
    for other in (str(repo / "checkpoints" / "truncated"), "someone/huge-model", "/etc"):
        link = new_app({"model": other, "text": "A dog runs."})
        assert_clean(link)
        assert link.sidebar.selectbox(key="model_choice").value == "checkpoints/post"
        assert any("not offered on this server" in t.value for t in link.text)  # the ignored parts, as text
    ok = new_app({"model": "checkpoints/pre"})
    assert ok.sidebar.selectbox(key="model_choice").value == "checkpoints/pre"
    # without ATTN_PUBLIC the app stays free
    monkeypatch.delenv("ATTN_PUBLIC")
    free = new_app({"model": "checkpoints/pre"})
    assert free.sidebar.text_input(key="checkpoint").value == "checkpoints/pre"


def hostile_links(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Generated query strings: huge and negative numbers, NaN, unknown views, 100,000-character text, control
    characters, unicode, models outside the allow-list, junk keys."""
    import random

    rng = random.Random(seed)
    numbers = ["-1", "0", "1e309", "NaN", "nan", "inf", "-inf", "99999999999999999999999", "3.5", "", " ", "0x10",
               "1,2", "٣", "½", "-0", "7"]
    texts = ["A dog.", "x" * 100_000, "\x00\x01\x1b[31m", "😀" * 50, "<script>alert(1)</script>", "",
             "Ein Hund läuft.", "a\u202eb", "%00", "\n\n\n", "%ED%A0%80", "\ufffd"]
    keys = ["beam", "alpha", "a", "b", "layer", "head", "step", "lf", "lt", "s", "pick", "off", "lh", "scale", "att",
            "view", "model", "zzz", "text", "with", "wa"]
    values = {"view": ["heatmap", "<x>", "export", "../../etc", "all_heads", "compare_models"],
              "with": ["checkpoints/pre", "/etc/passwd", "someone/huge", "x" * 1000, "\x00", "checkpoints/truncated"],
              "wa": ["own", "same", "sidebar", "<b>", ""], "att": ["cross", "encoder", "x", ""],
              "model": ["/etc/passwd", "someone/huge", "checkpoints/pre", "../../..", "checkpoints/truncated"],
              "off": ["cross.1.1", "cross.0.0", "x.1.1", "encoder.99.99", ",,,", "cross.1.1," * 300],
              "pick": ["1.1", "99.99", "a.b", "1.1.1"], "lh": ["1,2", "0", "999", "a", ""],
              "scale": ["stretch", "abs", "weird"], "text": texts}
    links = []
    for _ in range(n):
        link = {}
        for key in rng.sample(keys, rng.randint(1, 6)):
            link[key] = rng.choice(values.get(key, numbers))
        links.append(link)
    return links


def test_hostile_links_never_break_the_page(repo, monkeypatch):
    monkeypatch.setenv("ATTN_PUBLIC", "1")
    links = hostile_links(300)
    assert len({json.dumps(link, sort_keys=True) for link in links}) > 250
    at = new_app()
    for link in links:
        navigate(at, link)  # as an edited address (or Back to it) in one session; a new visitor's is tested apart
        assert not at.exception, (link, [e.value for e in at.exception])
        assert not at.error, (link, [e.value for e in at.error])
        assert at.sidebar.selectbox(key="model_choice").value in ("checkpoints/post", "checkpoints/pre")
        text = at.text_area(key="source_text").value
        assert len(text) <= 5000 and "\x00" not in text and "\x1b" not in text
        junk = [k for k in link if k == "zzz"]
        if junk:
            assert any("zzz" in t.value.splitlines() for t in at.text)


def test_compare_view_compares_at_one_alpha_and_labels_per_model_alphas(repo):
    """By default both models decode at the sidebar's alpha (comparable scores). Asked for each model's own, the
    partner uses the 1.7 its card names (chosen on val), the other the untuned default, and a warning says the
    scores are not comparable."""
    meta_path = repo / "checkpoints" / "pre" / "metadata.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta_path.write_text(json.dumps({**meta, "decoding": {"beam": 5, "alpha": 1.7, "chosen_on": "val"}}))
    text = "A man rides a red bike."
    at = translate(new_app({"view": "compare_models", "beam": "3", "alpha": "0.4"}), text)
    assert_clean(at)
    pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")
    captions = " ".join(plain(c.value) for c in at.caption)
    assert captions.count("beam 3, α 0.4") == 2 and "α 1.7" not in captions
    assert f"score {pre.translate(text, beam_size=3, alpha=0.4).score:.3f}" in captions
    assert not [w for w in at.warning if "not comparable" in w.value] and "wa" not in at.query_params
    assert "one α for both" in at.radio(key="compare_alpha").options[0]
    at.radio(key="compare_alpha").set_value("own")
    at.run()
    assert_clean(at)
    own = " ".join(plain(c.value) for c in at.caption if "Each its own" in c.value)
    assert "α 1.7, chosen on the validation set" in own and "α 0.6, default 0.6 (not tuned)" in own
    captions = " ".join(plain(c.value) for c in at.caption)
    assert "beam 3, α 1.7" in captions and "beam 3, α 0.6" in captions
    assert f"score {pre.translate(text, beam_size=3, alpha=1.7).score:.3f}" in captions
    assert any("not comparable" in w.value for w in at.warning)
    assert at.query_params["wa"] == "own"
    assert new_app(dict(at.query_params)).radio(key="compare_alpha").value == "own"


def test_compare_waits_for_a_heavy_slot_once_and_shares_one_ceiling(repo, monkeypatch, counted_slot):
    """Compare models at each model's own alpha runs three analyses (the page's, this model's at its own alpha, the
    partner's): one request, so it takes the heavy slot once, and the three together stay within ATTN_MAX_WORK."""
    from app.limits import ledger, work

    text = "A man rides a red bike past the old church."
    tr = transformer.load(repo / "checkpoints" / "post", device="cpu")
    settings = cached.DecodeSettings(beam_size=6, alpha=0.6, max_len_a=2.0, max_len_b=20)
    one = work.translation_work(tr, work.source_length(tr, text), settings)
    monkeypatch.setenv("ATTN_MAX_WORK", str(2 * one))  # one at full beam fits, three do not
    monkeypatch.setattr(ledger, "LIGHT_WORK", 0.0)  # every job heavy, as long inputs are
    at = new_app({"view": "compare_models", "beam": "6", "alpha": "0.4", "a": "2", "b": "20", "wa": "own"})
    cached.RESULTS.clear()
    first = counted_slot.taken
    at = translate(at, text)
    assert_clean(at)
    assert counted_slot.taken - first == 1
    ran = [k for k in cached.RESULTS._items if k[0] == "analysis"]
    assert len(ran) == 3
    pre = transformer.load(repo / "checkpoints" / "pre", device="cpu")  # the partner (the same tokenizer)
    total = sum(work.translation_work(pre if k[1].endswith("pre") else tr, work.source_length(tr, text), k[4])
                for k in ran)
    assert {k[1] for k in ran} == {"checkpoints/post", "checkpoints/pre"}
    assert total <= 2 * one * (1 + 1e-9)
    assert len([i for i in at.info if "ATTN_MAX_WORK" in plain(i.value)]) == 1


def test_compare_keeps_each_its_own_alpha_when_the_partner_changes(repo):
    """``wa=own`` stays chosen (and in the address) while the visitor picks another partner and back: the radio's
    options do not change with the partner (a widget whose options change is a new widget to the browser, which
    then shows none selected and resets it on the next change)."""
    at = translate(new_app({"view": "compare_models", "wa": "own"}), "A man rides a red bike.")
    assert_clean(at)
    assert at.radio(key="compare_alpha").value == "own"
    options = list(at.radio(key="compare_alpha").options)
    for partner in ("checkpoints/post", "checkpoints/pre"):
        at.selectbox(key="compare_with").set_value(partner)
        at.run()
        assert_clean(at)
        assert at.radio(key="compare_alpha").value == "own" and at.query_params["wa"] == "own", partner
        assert list(at.radio(key="compare_alpha").options) == options
    assert options[1] == "each its own α"
    notes = " ".join(plain(c.value) for c in at.caption)
    assert "pre: α 0.6, default 0.6 (not tuned)" in notes and "post: α" in notes  # each model's own α, named


def test_compare_shows_the_flag_of_each_model_with_a_rule(repo):
    """Issue 66: every place that shows a translation of a model with a rule shows its flag. The partner has a
    ``flag.json`` (a rule that holds for every output: its mean log-probability above -1000): its column says "may
    be a hallucination", with the rule in words; the page's own model has none, so its column says nothing of it."""
    rule = {"any": [{"column": "seq_logprob", "op": ">", "value": -1000}]}
    (repo / "checkpoints" / "pre" / "flag.json").write_text(json.dumps(rule))
    cached.get_translator.clear()  # a model another test loaded under the same name lives in another folder
    cached.RESULTS.clear()
    at = translate(new_app({"view": "compare_models"}), "A man rides a red bike.")
    assert_clean(at)
    assert at.selectbox(key="compare_with").value == "checkpoints/pre"
    [warned] = [plain(w.value) for w in at.warning if "may be a hallucination" in w.value]
    assert "the mean log-probability per output piece is above -1000.00" in warned
    assert not [c for c in at.caption if "Not flagged" in c.value]  # the post-norm model has no rule: no notice
    (repo / "checkpoints" / "post" / "flag.json").write_text(json.dumps({"any": [{"column": "repetition", "op": ">=",
                                                                                   "value": 50}]}))
    at = translate(new_app({"view": "compare_models"}), "A man rides a red bike.")
    assert_clean(at)
    assert len([w for w in at.warning if "may be a hallucination" in w.value]) == 1
    assert len([c for c in at.caption if "Not flagged as a possible hallucination" in c.value]) == 1


def test_the_shipped_checkpoints_are_found_from_any_working_directory(monkeypatch, tmp_path):
    """`streamlit run /path/to/app/main.py` started elsewhere still finds the tree's checkpoints/: the root is the
    folder above app/, not app/ itself (then only the working directory's checkpoints/ would count)."""
    monkeypatch.chdir(tmp_path)
    root = catalog._repo_root()
    assert (root / "checkpoints").is_dir() and (root / "app" / "models" / "catalog.py").is_file()
