"""Tiny NLLB-200 / M2M100 checkpoints saved by transformers, for the tests (imported by test_m2m100.py and
test_app_m2m100.py; no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import sentencepiece as spm
import torch
import transformers

from transformer.checkpoint.families.fairseq_codes import NLLB_CODES

# (tokenizer, encoder layers, decoder layers, d_model, heads, ffn, activation, scale_embedding, tied)
CONFIGS = {
    "m2m100": ("m2m100", 2, 2, 32, 4, 64, "relu", True, True),
    "nllb": ("nllb", 3, 2, 48, 6, 96, "relu", True, True),
    "gelu-unscaled-untied": ("m2m100", 1, 2, 36, 6, 40, "gelu", False, False),
    "nllb-12x16": ("nllb", 12, 12, 64, 16, 64, "relu", True, True),  # NLLB-600M's layers and heads, narrow
}
LANGS = {"nllb": ("eng_Latn", "deu_Latn", "fra_Latn"), "m2m100": ("en", "de", "fr")}


def train_spm(directory: Path, corpus: Path) -> Path:
    """A tiny BPE sentencepiece model (as NLLB's and M2M100's ``sentencepiece.bpe.model``) and M2M100's vocab.json:
    <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces."""
    spm.SentencePieceTrainer.train(input=",".join(str(corpus / f) for f in ("train.en", "train.de")),
                                   model_prefix=str(directory / "sp"), vocab_size=90, character_coverage=1.0,
                                   model_type="bpe", minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (directory / "vocab.json").write_text(json.dumps(vocab))
    return directory


def hf_tokenizer(kind: str, spm_dir: Path, out: Path):
    """transformers' own tokenizer for a tiny model, saved into ``out`` (NLLB: tokenizer.json with the language
    codes' ids, plus the sentencepiece model as the Hub repo ships it; M2M100: vocab.json + sentencepiece.bpe.model)."""
    if kind == "nllb":
        src = out.parent / f"{out.name}-spm"
        src.mkdir(exist_ok=True)
        shutil.copy(spm_dir / "sp.model", src / "sentencepiece.bpe.model")
        (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NllbTokenizer"}))
        tok = transformers.NllbTokenizer.from_pretrained(src, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                                         extra_special_tokens=list(NLLB_CODES))
        tok.save_pretrained(out)
        shutil.copy(spm_dir / "sp.model", out / "sentencepiece.bpe.model")
        return transformers.NllbTokenizer.from_pretrained(out)
    tok = transformers.M2M100Tokenizer(vocab_file=str(spm_dir / "vocab.json"), spm_file=str(spm_dir / "sp.model"),
                                       src_lang="en", tgt_lang="de")
    tok.save_pretrained(out)
    return transformers.M2M100Tokenizer.from_pretrained(out)


def save_m2m100(tmp_path: Path, spm_dir: Path, name: str = "m2m100"):
    """A tiny random M2M100ForConditionalGeneration with its tokenizer, saved by transformers: (model, tokenizer,
    directory)."""
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
