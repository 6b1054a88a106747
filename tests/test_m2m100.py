"""NLLB-200 / M2M100 checkpoints run by our Transformer, proven equal to transformers (tiny random
``M2M100ForConditionalGeneration`` models and a tiny sentencepiece model trained here; no network)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

import sentencepiece as spm  # noqa: E402

import transformer  # noqa: E402
from transformer.families import family_for, family_of_dir  # noqa: E402
from transformer.families.fairseq_codes import NLLB_CODES  # noqa: E402
from transformer.families.fairseq_tokenizer import FairseqTokenizer  # noqa: E402
from transformer.families.m2m100 import load_m2m100_model  # noqa: E402

torch.set_num_threads(1)
SENTENCES = ["A man rides a red bike.", "Two dogs play in the park!", "A girl, a boy and a dog walk home.",
             "The woman's ball is blue ... really?", "Ein Hund läuft 🐕 über die Straße."]
# (tokenizer, encoder layers, decoder layers, d_model, heads, ffn, activation, scale_embedding, tied)
CONFIGS = {
    "m2m100": ("m2m100", 2, 2, 32, 4, 64, "relu", True, True),
    "nllb": ("nllb", 3, 2, 48, 6, 96, "relu", True, True),
    "gelu-unscaled-untied": ("m2m100", 1, 2, 36, 6, 40, "gelu", False, False),
}
LANGS = {"nllb": ("eng_Latn", "deu_Latn", "fra_Latn"), "m2m100": ("en", "de", "fr")}


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory, tiny_corpus):
    """A tiny BPE sentencepiece model (as NLLB's and M2M100's ``sentencepiece.bpe.model``) and M2M100's vocab.json:
    <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces."""
    d = tmp_path_factory.mktemp("fairseq-spm")
    spm.SentencePieceTrainer.train(input=",".join(str(tiny_corpus / f) for f in ("train.en", "train.de")),
                                   model_prefix=str(d / "sp"), vocab_size=90, character_coverage=1.0,
                                   model_type="bpe", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(d / "sp.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (d / "vocab.json").write_text(json.dumps(vocab))
    return d


def hf_tokenizer(kind: str, spm_dir, out):
    """transformers' own tokenizer for a tiny model, saved into ``out`` (NLLB: tokenizer.json with the language
    codes' ids; M2M100: vocab.json + sentencepiece.bpe.model)."""
    if kind == "nllb":
        src = out.parent / f"{out.name}-spm"
        src.mkdir(exist_ok=True)
        shutil.copy(spm_dir / "sp.model", src / "sentencepiece.bpe.model")
        (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
        tok = transformers.NllbTokenizer.from_pretrained(src, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                                         extra_special_tokens=list(NLLB_CODES))
        tok.save_pretrained(out)
        shutil.copy(spm_dir / "sp.model", out / "sentencepiece.bpe.model")  # as the Hub repo ships it
        return transformers.NllbTokenizer.from_pretrained(out)
    tok = transformers.M2M100Tokenizer(vocab_file=str(spm_dir / "vocab.json"), spm_file=str(spm_dir / "sp.model"),
                                       src_lang="en", tgt_lang="de")
    tok.save_pretrained(out)
    return transformers.M2M100Tokenizer.from_pretrained(out)


def save_m2m100(tmp_path, spm_dir, name: str = "m2m100"):
    """A tiny random M2M100ForConditionalGeneration with its tokenizer, saved by transformers."""
    kind, enc, dec, d, heads, ffn, activation, scale, tied = CONFIGS[name]
    out = tmp_path / name
    tok = hf_tokenizer(kind, spm_dir, out)
    torch.manual_seed(enc * 100 + d)
    ids = max(tok.get_vocab().values()) + 1 if kind == "nllb" else \
        len(tok.encoder) + len(tok.lang_code_to_id) + tok.num_madeup_words  # M2M100: codes and made-up words after
    cfg = transformers.M2M100Config(
        vocab_size=ids + 2, d_model=d, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=64,
        activation_function=activation, scale_embedding=scale, tie_word_embeddings=tied, dropout=0.1,
        attention_dropout=0.1, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        attn_implementation="eager")
    model = transformers.M2M100ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # non-zero biases and norms, so a misplaced one shows
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(out)
    return model, tok, out


def lang_id(tok, code: str) -> int:
    return tok.convert_tokens_to_ids(code) if isinstance(tok, transformers.NllbTokenizer) else tok.get_lang_id(code)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_every_attention_equal_transformers(tmp_path, spm_dir, name):
    hf, tok, path = save_m2m100(tmp_path, spm_dir, name)
    ours = load_m2m100_model(path)
    assert ours.config.norm_first and ours.config.positional_layout == "fairseq" and ours.config.position_offset == 2
    en, de = (lang_id(tok, c) for c in LANGS[CONFIGS[name][0]][:2])
    src = torch.tensor([[en, 5, 6, 7, 8, 9, 2], [en, 10, 11, 2, 1, 1, 1]])
    tgt = torch.tensor([[2, de, 12, 13, 14], [2, de, 15, 16, 17]])  # decoding starts from </s>, then the language
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=(src != 1).long(), decoder_input_ids=tgt, output_attentions=True)
        out = ours(src, tgt, return_attention=True)
    torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
    lengths = (src != 1).sum(dim=1).tolist()
    for kind in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        theirs, mine = getattr(ref, kind), getattr(out, kind)
        assert len(theirs) == len(mine) == (CONFIGS[name][1] if kind == "encoder_attentions" else CONFIGS[name][2])
        for a, b in zip(theirs, mine):
            for row, n in enumerate(lengths):  # a padding position's own query row is no output of either model
                rows = slice(0, n) if kind == "encoder_attentions" else slice(None)
                torch.testing.assert_close(b[row, :, rows], a[row, :, rows], atol=1e-4, rtol=1e-4)


def test_the_positional_table_is_fairseqs():
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding as Theirs

    for d in (32, 36, 1024, 33):
        theirs = Theirs.get_embedding(130, d, padding_idx=1)
        torch.testing.assert_close(transformer.positional_encoding(130, d, "fairseq")[2:], theirs[2:], atol=0, rtol=0)
    cfg = transformer.TransformerConfig(d_model=32, n_heads=4, max_len=16, positional_layout="fairseq",
                                        position_offset=2, pad_id=1)
    torch.testing.assert_close(transformer.Transformer(cfg).pe, Theirs.get_embedding(18, 32, 1)[2:])


@pytest.mark.parametrize("kind", ["nllb", "m2m100"])
def test_tokenization_equals_transformers(tmp_path, spm_dir, kind):
    _, ref, path = save_m2m100(tmp_path, spm_dir, "nllb" if kind == "nllb" else "m2m100")
    tok = FairseqTokenizer.from_dir(path)
    assert isinstance(tok, transformer.tokenizer.TokenizerProtocol)
    en, de, fr = LANGS[kind]
    assert {en, de, fr} <= set(tok.languages) and (tok.default_src, tok.default_tgt) == (en, de)
    for text in [*SENTENCES, "", "spaced   out", "x" * 50]:  # (edge spaces: see FairseqTokenizer.encode)
        for src, tgt in ((en, de), (fr, en)):
            ref.src_lang, ref.tgt_lang = src, tgt
            theirs = ref(text)["input_ids"]
            assert tok.encode_source(text, src) == theirs, (text, src)
            assert tok.encode_target(text, tgt) + [tok.eos_id] == ref(text_target=text)["input_ids"], (text, tgt)
            assert tok.pieces(theirs) == ref.convert_ids_to_tokens(theirs)
            body = theirs[1:-1]
            assert tok.decode(theirs) == ref.decode(body, skip_special_tokens=True)
    assert len(tok.languages) == (len(NLLB_CODES) if kind == "nllb" else 100)
    with pytest.raises(ValueError, match="unknown language code"):
        tok.encode_source("A dog.", "xx_Nope")


def boost_eos(hf, amount: float) -> None:
    """Add ``amount`` * (direction of </s>'s output row) to the decoder's final LayerNorm bias: </s> gets likelier,
    so outputs end early, late and at the length limit."""
    with torch.no_grad():
        row = hf.lm_head.weight[2]
        hf.model.decoder.layer_norm.bias += amount * row / row.norm()


@pytest.mark.parametrize("name,eos", [("m2m100", 0.0), ("nllb", 2.0), ("gelu-unscaled-untied", 3.0)])
def test_greedy_and_beam_equal_generate_with_a_forced_language(tmp_path, spm_dir, name, eos):
    """Greedy and beam outputs and scores identical to ``generate(forced_bos_token_id=...)`` (transformers' scoring:
    log-probability / |Y| ** alpha, |Y| counting the forced code; ``early_stopping=False``, generate's default), in a
    padded batch and alone."""
    hf, tok, path = save_m2m100(tmp_path, spm_dir, name)
    boost_eos(hf, eos)
    hf.save_pretrained(path)
    tr = transformer.load(path, device="cpu")
    assert tr.scoring == "transformers" and tr.default_alpha == 1.0 and tr.config.bos_id == tr.config.eos_id == 2
    src, tgt = LANGS[CONFIGS[name][0]][0], LANGS[CONFIGS[name][0]][2]
    tok.src_lang = src
    forced = lang_id(tok, tgt)
    vocab = tok.get_vocab() if name == "nllb" else tok.encoder
    real = {i for p, i in vocab.items() if p not in NLLB_CODES and p != "<mask>"}
    ended = set()
    for beams in (1, 2, 4):
        for alpha in ((1.0,) if beams == 1 else (0.0, 1.0, 2.0)):
            ours_batch = tr.translate_batch(SENTENCES, beam_size=beams, alpha=alpha, max_len_a=0.0, max_len_b=12,
                                            src_lang=src, tgt_lang=tgt)
            for text, ours in zip(SENTENCES, ours_batch):
                ids = tok(text, return_tensors="pt")
                assert ours.source_ids == ids["input_ids"][0].tolist()
                out = hf.generate(**ids, num_beams=beams, length_penalty=alpha, early_stopping=False, do_sample=False,
                                  max_new_tokens=12, forced_bos_token_id=forced, bad_words_ids=[[1]],
                                  forced_eos_token_id=None, output_scores=True, return_dict_in_generate=True)
                theirs = [t for t in out.sequences[0].tolist()[1:] if t != 1]
                assert ours.target_ids == theirs, (beams, alpha, text)
                assert ours.target_ids[0] == forced and ours.decoder_input_tokens[:2] == ["</s>", tgt if name == "nllb"
                                                                                          else f"__{tgt}__"]
                if beams > 1:
                    assert ours.score == pytest.approx(float(out.sequences_scores[0]), abs=1e-4)
                pieces = [t for t in theirs if t in real and t > 3]  # transformers spells unused rows "<unk>"
                assert ours.text == tok.decode(pieces, skip_special_tokens=True)
                ended.add(ours.target_ids[-1] == 2 and len(ours.target_ids) < 12)
            alone = tr.translate(SENTENCES[2], beam_size=beams, alpha=alpha, max_len_a=0.0, max_len_b=12,
                                 src_lang=src, tgt_lang=tgt)
            assert alone.target_ids == ours_batch[2].target_ids
            assert len(alone.cross_attentions) == CONFIGS[name][2]  # the teacher-forced pass over [</s>, code, ...]
    if eos >= 2.0:
        assert True in ended  # some outputs really end before the limit


def test_the_gnmt_search_and_the_beam_tree_force_the_language_too(tmp_path, spm_dir):
    _, tok, path = save_m2m100(tmp_path, spm_dir, "nllb")
    tr = transformer.load(path, device="cpu")
    for lang in ("fra_Latn", "deu_Latn"):
        result = tr.translate(SENTENCES[0], beam_size=3, scoring="gnmt", return_tree=True, tgt_lang=lang)
        assert result.target_ids[0] == tok.convert_tokens_to_ids(lang)
        assert result.tree.path(result.tree.best)[0] == result.target_ids[0]
        greedy = tr.translate(SENTENCES[0], beam_size=1, tgt_lang=lang, return_attention=False)
        assert greedy.target_ids[0] == tok.convert_tokens_to_ids(lang)
    with pytest.raises(ValueError, match="unknown language code"):
        tr.translate("A dog.", tgt_lang="klingon")


def test_convert_from_hf_equals_direct_loading(tmp_path, spm_dir, capsys):
    from transformer.checkpoint import check_checkpoint_dir
    from transformer.convert import main

    for name in ("nllb", "m2m100"):
        _, _, path = save_m2m100(tmp_path, spm_dir, name)
        out = tmp_path / f"converted-{name}"
        assert main(["--from-hf", str(path), "--out", str(out)]) == 0
        assert "parameters" in capsys.readouterr().out
        assert {p.name for p in out.iterdir()} >= {"config.json", "model.safetensors", "sentencepiece.bpe.model",
                                                     "metadata.json", "tokenizer_config.json"}
        config = check_checkpoint_dir(out)
        assert (config.positional_layout, config.position_offset, config.norm_first) == ("fairseq", 2, True)
        assert family_of_dir(out).name.startswith("ours") and family_of_dir(path).name == "NLLB-200 / M2M100"
        direct, converted = transformer.load(path, device="cpu"), transformer.load(out, device="cpu")
        assert converted.languages == direct.languages and converted.scoring == "transformers"
        for text in SENTENCES[:3]:
            a = direct.translate(text, beam_size=3, tgt_lang=direct.languages[5])
            b = converted.translate(text, beam_size=3, tgt_lang=direct.languages[5])
            assert a.target_ids == b.target_ids and a.text == b.text and a.source_tokens == b.source_tokens
            for x, y in zip(a.cross_attentions, b.cross_attentions):
                torch.testing.assert_close(x, y)


def test_the_registry_picks_a_family_and_says_what_is_wrong(tmp_path, spm_dir):
    from transformer.checkpoint import check_checkpoint_dir, missing_files

    assert family_for({"model_type": "m2m_100"}).name == "NLLB-200 / M2M100"
    assert family_for({"model_type": "marian"}).name == "Marian / OPUS-MT"
    assert family_for({"d_model": 512}).name.startswith("ours")
    with pytest.raises(transformer.CheckpointError, match="'bert' is not a family"):
        family_for({"model_type": "bert"})
    _, _, path = save_m2m100(tmp_path, spm_dir, "m2m100")
    family = family_of_dir(path)
    assert family.check(path).d_model == 32 and missing_files(path) == []
    (path / "sentencepiece.bpe.model").unlink()
    assert missing_files(path) == ["sentencepiece.bpe.model"]
    with pytest.raises(transformer.CheckpointError, match="missing sentencepiece.bpe.model"):
        family.check(path)
    shutil.copy(spm_dir / "sp.model", path / "sentencepiece.bpe.model")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "d_model": 64}))
    with pytest.raises(transformer.CheckpointError, match="do not match"):
        family.check(path)
    with pytest.raises(transformer.CheckpointError, match="do not match"):
        transformer.load(path, device="cpu")
    (path / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(transformer.CheckpointError, match="not a family"):
        transformer.load(path, device="cpu")
    with pytest.raises(transformer.CheckpointError):
        check_checkpoint_dir(path)
