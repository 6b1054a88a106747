"""Marian / OPUS-MT checkpoints run by our Transformer, proven equal to transformers (tiny random models, no
network)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import sentencepiece as spm  # noqa: E402
from marian_models import save_marian  # noqa: E402, F401  (test_patching and test_ctranslate2_export take it from here)

import transformer  # noqa: E402
from transformer import TransformerConfig  # noqa: E402
from transformer.checkpoint.families.marian import load_marian_model  # noqa: E402

torch.set_num_threads(1)
SENTENCES = ["A man rides a red bike.", "Two dogs play in the park!", "A girl, a boy and a dog walk home.",
             "The woman's ball is blue ... really?", "Ein Hund läuft 🐕 über die Straße."]


@pytest.fixture(scope="module")
def marian_files(tmp_path_factory, tiny_corpus):
    """A tiny sentencepiece model (source = target) and a Marian vocab.json: </s> 0, <unk> 1, pieces, <pad> last."""
    d = tmp_path_factory.mktemp("marian-spm")
    spm.SentencePieceTrainer.train(input=",".join(str(tiny_corpus / f) for f in ("train.en", "train.de")),
                                   model_prefix=str(d / "sp"), vocab_size=90, character_coverage=1.0,
                                   model_type="unigram", bos_id=-1, eos_id=-1, pad_id=-1, unk_id=0)
    sp = spm.SentencePieceProcessor(model_file=str(d / "sp.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) != "<unk>"]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab))
    return d, vocab


@pytest.mark.parametrize("activation,tied", [("swish", True), ("relu", True), ("gelu", False)])
def test_logits_and_every_attention_equal_transformers(tmp_path, marian_files, activation, tied):
    _, vocab = marian_files
    hf, path = save_marian(tmp_path, vocab, activation, tied)
    ours = load_marian_model(path)
    pad = vocab["<pad>"]
    src = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 0, pad, pad]])
    tgt = torch.tensor([[pad, 11, 12, 13], [pad, 14, 15, 16]])  # decoding starts from <pad>
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt, output_attentions=True)
        out = ours(src, tgt, return_attention=True)
    torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        theirs, mine = getattr(ref, name), getattr(out, name)
        assert len(theirs) == len(mine) == 2
        for a, b in zip(theirs, mine):
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)


def test_tokenization_and_greedy_translation_equal_transformers(tmp_path, marian_files):
    from transformers import MarianTokenizer

    _, vocab = marian_files
    hf, path = save_marian(tmp_path, vocab, files=marian_files)
    ref_tok = MarianTokenizer.from_pretrained(path)
    tr = transformer.load(path, device="cpu")
    assert isinstance(tr.tokenizer, transformer.checkpoint.tokenizer.SplitTokenizer) and tr.config.activation == "swish"
    for text in SENTENCES:
        assert tr.encode_source(text)[0] == ref_tok(text)["input_ids"]
    pad = vocab["<pad>"]
    for text in SENTENCES:
        ids = ref_tok(text, return_tensors="pt")
        # Marian forces </s> as the last token at the length limit; ours stops without one (target_ids says so)
        theirs = hf.generate(**ids, num_beams=1, do_sample=False, max_new_tokens=12, bad_words_ids=[[pad]],
                             forced_eos_token_id=None)
        ours = tr.translate(text, beam_size=1, max_len_a=0.0, max_len_b=12, return_attention=False)
        assert [pad, *ours.target_ids] == theirs[0].tolist()[: len(ours.target_ids) + 1]
        assert ours.text == ref_tok.decode(theirs[0], skip_special_tokens=True)


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
@pytest.mark.parametrize("eos_bias", [0.0, 2.5, 4.0])
def test_beam_search_equals_transformers_generate(tmp_path, marian_files, eos_bias):
    """Beam outputs and scores identical to ``generate(num_beams=K, length_penalty=alpha)``: transformers divides by
    |Y| ** alpha (ours by default: GNMT's ((5 + |Y|) / 6) ** alpha), so a Marian checkpoint runs with
    ``scoring="transformers"``. The bias on </s> mixes outputs that end early, late and at the length limit."""
    from transformers import MarianTokenizer

    _, vocab = marian_files
    hf, path = save_marian(tmp_path, vocab, files=marian_files)
    with torch.no_grad():
        hf.final_logits_bias[0, 0] += eos_bias
    hf.save_pretrained(path)
    ref_tok = MarianTokenizer.from_pretrained(path)
    tr = transformer.load(path, device="cpu")
    assert tr.scoring == "transformers"
    pad = vocab["<pad>"]
    ended = set()
    for beams in (2, 4, 5):
        for alpha in (0.0, 0.6, 1.0, 2.0):
            ours_batch = tr.translate_batch(SENTENCES, beam_size=beams, alpha=alpha, max_len_a=0.0, max_len_b=12)
            for text, ours in zip(SENTENCES, ours_batch):
                ids = ref_tok(text, return_tensors="pt")
                out = hf.generate(**ids, num_beams=beams, length_penalty=alpha, early_stopping=False,
                                  do_sample=False, max_new_tokens=12, bad_words_ids=[[pad]], forced_eos_token_id=None,
                                  output_scores=True, return_dict_in_generate=True)
                theirs = [t for t in out.sequences[0].tolist()[1:] if t != pad]
                assert ours.target_ids == theirs, (beams, alpha, text)
                assert ours.score == pytest.approx(float(out.sequences_scores[0]), abs=1e-4)
                ended.add(ours.target_ids[-1] == 0 and len(ours.target_ids) < 12)
            alone = tr.translate(SENTENCES[2], beam_size=beams, alpha=alpha, max_len_a=0.0, max_len_b=12,
                                 return_attention=False)
            assert alone.target_ids == ours_batch[2].target_ids  # a padded batch decodes as each sentence alone
    if eos_bias >= 2.5:
        assert True in ended  # some outputs really end before the limit


def test_scoring_rules_differ_only_in_the_length_penalty(tmp_path, marian_files):
    """At alpha 0 both rules rank by log-probability; their scores then agree on a sentence both end alike."""
    _, vocab = marian_files
    _, path = save_marian(tmp_path, vocab, files=marian_files)
    tr = transformer.load(path, device="cpu")
    with pytest.raises(ValueError, match="scoring"):
        tr.translate("A dog.", beam_size=2, scoring="bleu")
    ours = tr.translate(SENTENCES[0], beam_size=1, scoring="gnmt", return_attention=False)
    theirs = tr.translate(SENTENCES[0], beam_size=1, scoring="transformers", return_attention=False)
    assert ours.target_ids == theirs.target_ids  # beam size 1 is greedy under both


def test_pytorch_bin_weights_load_without_unpickling_code(tmp_path, marian_files):
    _, vocab = marian_files
    hf, path = save_marian(tmp_path, vocab)
    if not (path / "pytorch_model.bin").is_file():  # recent transformers write safetensors only: make the old format
        torch.save(hf.state_dict(), path / "pytorch_model.bin")
        (path / "model.safetensors").unlink()
    ours = load_marian_model(path)  # torch.load(weights_only=True): tensors, never code
    src = torch.tensor([[5, 6, 7, 0]])
    tgt = torch.tensor([[vocab["<pad>"], 11]])
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt).logits, hf(input_ids=src, decoder_input_ids=tgt).logits,
                                   atol=1e-4, rtol=1e-4)


def test_old_config_files_load_with_the_papers_defaults():
    old = {"src_vocab_size": 100, "tgt_vocab_size": 100, "d_model": 32, "n_heads": 4, "n_encoder_layers": 1,
           "n_decoder_layers": 1, "d_ff": 64, "dropout": 0.1, "max_len": 64, "norm_first": False,
           "share_embeddings": True, "pad_id": 0, "bos_id": 2, "eos_id": 3}
    cfg = TransformerConfig.from_dict(old)
    assert (cfg.activation, cfg.positional_layout, cfg.final_logits_bias, cfg.scale_embedding) == \
        ("relu", "interleaved", False, True)
    model = transformer.Transformer(cfg)
    assert model.generator.bias is None
    torch.testing.assert_close(model.pe, transformer.positional_encoding(64, 32))


def test_convert_writes_one_of_our_checkpoints(tmp_path, marian_files, capsys):
    from transformer.checkpoint import check_checkpoint_dir
    from transformer.convert import main

    hf, path = save_marian(tmp_path, marian_files[1], files=marian_files)
    out = tmp_path / "converted"
    assert main(["--from-hf", str(path), "--out", str(out)]) == 0
    assert "parameters" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "source.spm", "target.spm",
                                                 "vocab.json", "metadata.json"}
    assert json.loads((out / "metadata.json").read_text())["converted_from"] == str(path)
    assert check_checkpoint_dir(out).positional_layout == "halves"
    direct, converted = transformer.load(path, device="cpu"), transformer.load(out, device="cpu")
    for text in SENTENCES[:3]:
        a, b = direct.translate(text, beam_size=3), converted.translate(text, beam_size=3)
        assert a.target_ids == b.target_ids and a.text == b.text
    assert main(["--from-hf", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x")]) == 1


def test_unknown_hub_id_gives_one_clear_message(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", offline)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(transformer.CheckpointError, match="Hugging Face Hub"):
        transformer.load("Helsinki-NLP/opus-mt-xx-yy")


def test_a_marian_checkpoint_opens_in_the_app(tmp_path, marian_files, monkeypatch):
    pytest.importorskip("streamlit")
    from conftest import assert_clean, new_app, set_view, shown_texts, translate

    from app.views import VIEWS

    _, path = save_marian(tmp_path, marian_files[1], files=marian_files)
    monkeypatch.setenv("ATTN_CHECKPOINT", str(path))  # the save_pretrained directory itself, converted on load
    tr = transformer.load(path, device="cpu")
    at = translate(new_app(), "A man rides a red bike.")
    assert_clean(at)
    assert tr.translate("A man rides a red bike.").text in shown_texts(at)
    for view in VIEWS:
        at = set_view(at, view)
        assert_clean(at)
        if view == "beam_tree":  # recorded with GNMT's penalty: the view says the model's own rules differ
            assert any("transformers' beam-search rules" in c.value for c in at.caption)


def test_a_hub_model_downloads_with_its_size_and_progress_in_the_app(tmp_path, marian_files, monkeypatch):
    """A Hub id typed in the sidebar: the files' sizes are read first, only the files a load reads are fetched
    (no TensorFlow copy), a bar shows the file and megabytes, and a line says what came (fake Hub: no network)."""
    pytest.importorskip("streamlit")
    import shutil
    from types import SimpleNamespace

    import huggingface_hub
    from conftest import assert_clean, new_app, plain, shown_texts, translate

    _, path = save_marian(tmp_path, marian_files[1], files=marian_files)
    listed = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
    listed["tf_model.h5"] = 900_000_000
    fetched = []

    def model_info(self, repo_id, files_metadata=False):
        return SimpleNamespace(sha="c0ffee", siblings=[SimpleNamespace(rfilename=n, size=s) for n, s in listed.items()])

    def hf_hub_download(repo_id, filename, **kwargs):
        assert repo_id == "someone/tiny-marian"
        fetched.append(filename)
        target = tmp_path / "hub" / "snapshots" / "c0ffee" / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path / filename, target)
        return str(target)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
    def snapshot_download(repo_id, local_files_only=False, **kwargs):  # the local cache: what was fetched
        if not (local_files_only and fetched):
            raise FileNotFoundError("not in the local cache")
        return str(tmp_path / "hub" / "snapshots" / "c0ffee")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("ATTN_CHECKPOINT", "someone/tiny-marian")
    at = new_app()  # the first run downloads
    assert_clean(at)
    assert "tf_model.h5" not in fetched and "model.safetensors" in fetched
    mb = sum(size for name, size in listed.items() if name != "tf_model.h5") / 1e6
    said = [plain(c.value) for c in at.caption if "Downloaded" in c.value]
    assert said == [f"Downloaded someone/tiny-marian from the Hugging Face Hub ({mb:,.1f} MB)."]
    at = translate(at, "A man rides a red bike.")
    assert_clean(at)
    assert not [c for c in at.caption if "Downloaded" in c.value]  # said once, not on every run
    tr = transformer.load(path, device="cpu")
    assert tr.translate("A man rides a red bike.").text in shown_texts(at)
