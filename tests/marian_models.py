"""Tiny Marian / OPUS-MT checkpoints saved by transformers, for the tests (imported by test_marian.py, test_report.py
and through test_marian by test_patching.py and test_ctranslate2_export.py; no network)."""

from __future__ import annotations

import torch


def save_marian(tmp_path, vocab: dict, activation: str = "swish", tied: bool = True, safetensors: bool = True,
                files=None) -> tuple:
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    torch.manual_seed(len(vocab) + (activation == "relu") + 2 * tied)
    v, pad = len(vocab), vocab["<pad>"]
    cfg = MarianConfig(vocab_size=v, decoder_vocab_size=v, d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       max_position_embeddings=64, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
                       activation_function=activation, share_encoder_decoder_embeddings=tied,
                       tie_word_embeddings=tied, attn_implementation="eager")
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)
    out = tmp_path / f"marian-{activation}-{tied}"
    model.save_pretrained(out, safe_serialization=safetensors)
    if files is not None:
        d, _ = files
        tok = MarianTokenizer(source_spm=str(d / "sp.model"), target_spm=str(d / "sp.model"),
                              vocab=str(d / "vocab.json"), source_lang="en", target_lang="de")
        tok.save_pretrained(out)
    return model, out
