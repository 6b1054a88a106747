"""NLLB-200 and M2M100 (``M2M100ForConditionalGeneration``, ``model_type: m2m_100``) run by our Transformer.

What differs from the paper, each a ``TransformerConfig`` field: pre-norm with a final LayerNorm on both stacks
(``norm_first``), fairseq's sinusoidal table (``positional_layout="fairseq"``) with positions counted from past the
padding id (``position_offset = pad_id + 1``), the embedding scale (``scale_embedding``), and decoding that starts
from ``</s>`` (``bos_id = eos_id``) with the target language's code forced as the first token
(``Translator.translate(..., tgt_lang=...)``). The tokenizer is :class:`FairseqTokenizer`. Never imports
transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...network.model import Transformer, TransformerConfig
from ..files import CheckpointError, loadable
from .fairseq_tokenizer import SPM_FILE, FairseqTokenizer
from .marian import state_dict_from_marian
from .shared import HubModel, HuggingFaceFamily

OUR_ACTIVATION = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}


def config_from_m2m100(hf: dict[str, Any]) -> TransformerConfig:
    """Our config from an M2M100 / NLLB ``config.json`` (``CheckpointError`` for what we cannot represent)."""
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads") or \
            hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        raise CheckpointError("encoder and decoder of different widths are not supported")
    activation = OUR_ACTIVATION.get(str(hf.get("activation_function", "relu")))
    if activation is None:
        raise CheckpointError(f"activation {hf.get('activation_function')!r} is not supported")
    try:
        vocab, pad = int(hf["vocab_size"]), int(hf.get("pad_token_id", 1))
        eos = int(hf.get("eos_token_id", 2))
        return loadable(TransformerConfig(
            src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=int(hf["d_model"]),
            n_heads=int(hf["encoder_attention_heads"]), n_encoder_layers=int(hf["encoder_layers"]),
            n_decoder_layers=int(hf["decoder_layers"]), d_ff=int(hf["encoder_ffn_dim"]),
            dropout=float(hf.get("dropout", 0.1)), attention_dropout=float(hf.get("attention_dropout", 0.0)),
            max_len=int(hf.get("max_position_embeddings", 1024)), norm_first=True,
            share_embeddings=bool(hf.get("tie_word_embeddings", True)), pad_id=pad,
            bos_id=int(hf.get("decoder_start_token_id", eos)), eos_id=eos, activation=activation,
            positional_layout="fairseq", position_offset=pad + 1, final_logits_bias=False,
            scale_embedding=bool(hf.get("scale_embedding", True))), "config.json")
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise CheckpointError(f"config.json is not a usable M2M100 config: {err}") from err


def state_dict_from_m2m100(hf: dict[str, Tensor], config: TransformerConfig) -> dict[str, Tensor]:
    """Rename M2M100's weights to ours: its layers are named as Marian's, plus the final LayerNorm of each stack."""
    out = state_dict_from_marian(hf, config)
    out.pop("generator.bias")  # no final_logits_bias
    for name in ("model.encoder.embed_tokens.weight", "encoder.embed_tokens.weight"):
        if name in hf:  # untied (tie_word_embeddings false): the encoder's table may differ from ``shared``
            out["src_embed.weight"] = hf[name]
            break
    for ours, theirs in (("encoder_norm", "encoder.layer_norm"), ("decoder_norm", "decoder.layer_norm")):
        for w in ("weight", "bias"):
            name = next((p + f"{theirs}.{w}" for p in ("model.", "") if p + f"{theirs}.{w}" in hf), None)
            if name is None:
                raise CheckpointError(f"the M2M100 weights lack {theirs}.{w}")
            out[f"{ours}.{w}"] = hf[name]
    return out


class M2M100Family(HuggingFaceFamily):
    """NLLB-200 / M2M100: pre-norm, fairseq positions, decoding from ``</s>`` with a forced target-language code."""

    name = "NLLB-200 / M2M100"
    short = "M2M100"
    model_types = ("m2m_100",)
    tokenizer_files = (SPM_FILE,)
    copied_files = (SPM_FILE, "vocab.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    # offered for local use, in public mode only when $ATTN_MODELS names them; their download said in the picker
    hub = (HubModel("facebook/nllb-200-distilled-600M", "NLLB-200, 200 languages", 2460),
           HubModel("facebook/m2m100_418M", "M2M100, 100 languages", 1940))
    metadata_defaults = {"source": "m2m100", "beam_scoring": "transformers", "decoding": {"alpha": 1.0}}  # generate's
    config_from = staticmethod(config_from_m2m100)
    rename = staticmethod(state_dict_from_m2m100)

    def tokenizer(self, path: Path) -> FairseqTokenizer:
        try:
            return FairseqTokenizer.from_dir(path)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
            raise CheckpointError(f"{path} has no usable NLLB / M2M100 tokenizer ({SPM_FILE}, with vocab.json for "
                                  f"M2M100): {err}") from err

    def load(self, path: Path, name: str | None = None, dtype: torch.dtype = torch.float32,
             ) -> tuple[Transformer, FairseqTokenizer, dict]:
        tokenizer = self.tokenizer(path)
        model = self.model(path, dtype)
        if tokenizer.vocab_size > model.config.tgt_vocab_size:
            raise CheckpointError(f"the tokenizer has {tokenizer.vocab_size} ids but config.json says vocab_size="
                                  f"{model.config.tgt_vocab_size}")
        metadata = {**self.metadata_defaults, "converted_from": name or str(path),
                    "languages": len(tokenizer.languages)}
        return model, tokenizer, metadata


FAMILY = M2M100Family()


def load_m2m100_model(path: str | Path) -> Transformer:
    """Our ``Transformer`` with an M2M100 / NLLB checkpoint's weights (CPU, eval mode)."""
    return FAMILY.model(path)
