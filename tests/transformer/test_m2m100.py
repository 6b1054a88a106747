"""NLLB-200 / M2M100 checkpoints run by our Transformer, proven equal to transformers (tiny random
``M2M100ForConditionalGeneration`` models and a tiny sentencepiece model trained here; no network)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from m2m100_models import CONFIGS, LANGS, lang_id, save_m2m100, train_spm  # noqa: E402

import transformer  # noqa: E402
from transformer.checkpoint.families import family_for, family_of_dir  # noqa: E402
from transformer.checkpoint.families.fairseq_codes import NLLB_CODES  # noqa: E402
from transformer.checkpoint.families.fairseq_tokenizer import FairseqTokenizer  # noqa: E402
from transformer.checkpoint.families.m2m100 import load_m2m100_model  # noqa: E402

torch.set_num_threads(1)
SENTENCES = ["A man rides a red bike.", "Two dogs play in the park!", "A girl, a boy and a dog walk home.",
             "The woman's ball is blue ... really?", "Ein Hund läuft 🐕 über die Straße."]


@pytest.fixture(scope="module")
def spm_dir(tmp_path_factory, tiny_corpus):
    return train_spm(tmp_path_factory.mktemp("fairseq-spm"), tiny_corpus)


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
    assert isinstance(tok, transformer.checkpoint.tokenizer.TokenizerProtocol)
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


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
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


@pytest.mark.slow  # among the slowest of the fast loop (its CPU budget: 60 s)
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


def test_the_logit_lens_ranks_without_sorting_the_vocabulary(tmp_path, spm_dir):
    """At a 256k vocabulary the lens cannot sort every piece of every layer and step: the chosen piece's probability
    and rank, counted against the vocabulary, equal the full sort's."""
    from transformer.interpret import logit_lens, logit_lens_chosen

    _, _, path = save_m2m100(tmp_path, spm_dir, "nllb")
    model = load_m2m100_model(path)
    src, tgt = torch.tensor([[5, 6, 7, 8, 2]]), torch.tensor([[2, 9, 10, 11]])
    labels = torch.tensor([[9, 10, 11, 2]])
    with torch.no_grad():
        top, chosen, rank = logit_lens_chosen(model, src, tgt, labels, k=3)
        full = logit_lens(model, src, tgt, k=model.config.tgt_vocab_size)
    for layer, (probs, ids) in enumerate(full):
        where = (ids == labels[..., None]).int().argmax(-1)  # (B, T): position of the label in the sorted row
        torch.testing.assert_close(rank[layer], where)
        torch.testing.assert_close(chosen[layer], probs.gather(-1, where[..., None])[..., 0])
        torch.testing.assert_close(top[layer][0], probs[..., :3])


def test_the_heads_command_reads_references_with_the_target_language(tmp_path, spm_dir):
    """A reference translation's ids as the decoder produces them: the target code, then the pieces (as
    ``tokenizer(text_target=...)`` without its </s>)."""
    from transformer.interpret.heads import reference_ids

    _, tok, path = save_m2m100(tmp_path, spm_dir, "nllb")
    tr = transformer.load(path, device="cpu")
    for lang in ("fra_Latn", None):
        tok.tgt_lang = lang or tr.tokenizer.default_tgt
        for text in SENTENCES:
            assert reference_ids(tr, text, lang) == tok(text_target=text)["input_ids"][:-1]
