"""Open Marian / OPUS-MT checkpoints (``MarianMTModel.save_pretrained`` directories or Hub ids) with our Transformer.

OPUS-MT models are the paper's architecture with a few differences, each a named ``TransformerConfig`` field:
SiLU ("swish") feed-forward activation, a sin-half / cos-half positional table, a bias on the output logits,
and decoding that starts from ``<pad>``. This module reads the Hugging Face files directly (``config.json``,
``model.safetensors`` or, only through ``torch.load(weights_only=True)``, ``pytorch_model.bin``); it never
imports transformers. The registry (``transformer.checkpoint.families``) opens them through :data:`FAMILY`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ...network.model import Transformer, TransformerConfig
from ..files import CheckpointError, loadable
from ..tokenizer import SplitTokenizer
from .shared import HubModel, HuggingFaceFamily, read_weights


def config_from_marian(hf: dict) -> TransformerConfig:
    """Our config from a Marian ``config.json`` (raises ``CheckpointError`` for what we cannot represent, for a
    field of the wrong type and for sizes a process should not build: ``transformer.checkpoint.files.loadable``)."""
    try:
        return loadable(_config_from_marian(hf), "config.json")
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as err:
        raise CheckpointError(f"config.json is not a usable Marian config: {type(err).__name__}: {err}") from err


def _config_from_marian(hf: dict) -> TransformerConfig:
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        raise CheckpointError("this Marian variant uses pre-norm or extra layer norms, which are not supported")
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads") or \
            hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        raise CheckpointError("encoder and decoder of different widths are not supported")
    vocab = int(hf["vocab_size"])
    if int(hf.get("decoder_vocab_size") or vocab) != vocab:
        raise CheckpointError("separate source and target vocabularies of different sizes are not supported")
    activation = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}.get(
        str(hf.get("activation_function", "swish")))
    if activation is None:
        raise CheckpointError(f"activation {hf.get('activation_function')!r} is not supported")
    tied = bool(hf.get("share_encoder_decoder_embeddings", True)) and bool(hf.get("tie_word_embeddings", True))
    return TransformerConfig(
        src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=int(hf["d_model"]),
        n_heads=int(hf["encoder_attention_heads"]), n_encoder_layers=int(hf["encoder_layers"]),
        n_decoder_layers=int(hf["decoder_layers"]), d_ff=int(hf["encoder_ffn_dim"]),
        dropout=float(hf.get("dropout", 0.1)), attention_dropout=float(hf.get("attention_dropout", 0.0)),
        max_len=int(hf.get("max_position_embeddings", 512)), norm_first=False, share_embeddings=tied,
        pad_id=int(hf["pad_token_id"]), bos_id=int(hf.get("decoder_start_token_id", hf["pad_token_id"])),
        eos_id=int(hf["eos_token_id"]), activation=activation, positional_layout="halves",
        final_logits_bias=True, scale_embedding=bool(hf.get("scale_embedding", True)))


read_marian_weights = read_weights  # model.safetensors, else pytorch_model.bin (tensors only)


def state_dict_from_marian(hf: dict[str, Tensor], config: TransformerConfig) -> dict[str, Tensor]:
    """Rename Marian's weights to ours."""
    def get(*names: str) -> Tensor:
        for name in names:
            for prefix in ("", "model."):
                if prefix + name in hf:
                    return hf[prefix + name]
        raise CheckpointError(f"the Marian weights lack {names[0]}")

    out: dict[str, Tensor] = {}
    shared = ("shared.weight", "encoder.embed_tokens.weight")
    out["src_embed.weight"] = get(*shared)
    out["tgt_embed.weight"] = get("decoder.embed_tokens.weight", *shared)
    out["generator.weight"] = hf.get("lm_head.weight", out["tgt_embed.weight"])
    out["generator.bias"] = hf.get("final_logits_bias", torch.zeros(1, config.tgt_vocab_size)).reshape(-1)
    attn = ("q_proj", "k_proj", "v_proj", "out_proj")
    for i in range(config.n_encoder_layers):
        src = f"encoder.layers.{i}."
        for p in attn:
            for w in ("weight", "bias"):
                out[f"encoder_layers.{i}.self_attn.{p}.{w}"] = get(f"{src}self_attn.{p}.{w}")
        for ours, theirs in (("norm1", "self_attn_layer_norm"), ("norm2", "final_layer_norm"),
                             ("ffn.linear1", "fc1"), ("ffn.linear2", "fc2")):
            for w in ("weight", "bias"):
                out[f"encoder_layers.{i}.{ours}.{w}"] = get(f"{src}{theirs}.{w}")
    for i in range(config.n_decoder_layers):
        src = f"decoder.layers.{i}."
        for ours_attn, theirs_attn in (("self_attn", "self_attn"), ("cross_attn", "encoder_attn")):
            for p in attn:
                for w in ("weight", "bias"):
                    out[f"decoder_layers.{i}.{ours_attn}.{p}.{w}"] = get(f"{src}{theirs_attn}.{p}.{w}")
        for ours, theirs in (("norm1", "self_attn_layer_norm"), ("norm2", "encoder_attn_layer_norm"),
                             ("norm3", "final_layer_norm"), ("ffn.linear1", "fc1"), ("ffn.linear2", "fc2")):
            for w in ("weight", "bias"):
                out[f"decoder_layers.{i}.{ours}.{w}"] = get(f"{src}{theirs}.{w}")
    return out


class MarianFamily(HuggingFaceFamily):
    """Marian / OPUS-MT (``MarianMTModel``): swish, sin | cos positions, a logits bias, decoding from ``<pad>``."""

    name = "Marian / OPUS-MT"
    short = "Marian"
    model_types = ("marian",)
    tokenizer_files = ("source.spm", "target.spm", "vocab.json")
    copied_files = (*tokenizer_files, "tokenizer_config.json")
    hub = tuple(HubModel(f"Helsinki-NLP/opus-mt-{pair}", "OPUS-MT")
                for pair in ("en-de", "de-en", "en-fr", "fr-en", "en-es", "es-en"))
    metadata_defaults = {"source": "marian", "beam_scoring": "transformers"}
    config_from = staticmethod(config_from_marian)
    rename = staticmethod(state_dict_from_marian)

    def tokenizer(self, path: Path) -> SplitTokenizer:
        try:
            return SplitTokenizer.from_dir(path)
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise CheckpointError(f"{path} has no usable Marian tokenizer files (source.spm, target.spm, "
                                  f"vocab.json): {err}") from err

    def load(self, path: Path, name: str | None = None, dtype: torch.dtype = torch.float32,
             ) -> tuple[Transformer, SplitTokenizer, dict]:
        tokenizer = self.tokenizer(path)
        name = name or str(path)
        pair = name.rsplit("opus-mt-", 1)[-1] if "opus-mt-" in name else ""
        metadata = {**self.metadata_defaults, "converted_from": name, "language_pair": pair}
        return self.model(path, dtype), tokenizer, metadata


FAMILY = MarianFamily()


def load_marian_model(path: str | Path) -> Transformer:
    """Our ``Transformer`` with a Marian checkpoint's weights (CPU, eval mode)."""
    return FAMILY.model(path)
