"""Export a checkpoint to a CTranslate2 model, for fast CPU/GPU serving.

    python -m transformer.ctranslate2_export --checkpoint checkpoints/multi30k-en-de --out ct2-en-de

    import ctranslate2, transformer
    from transformer.exchange.ctranslate2_export import export_ctranslate2
    export_ctranslate2("checkpoints/multi30k-en-de", "ct2-en-de")
    tok = transformer.Tokenizer("checkpoints/multi30k-en-de/tokenizer.model")
    ct2 = ctranslate2.Translator("ct2-en-de", device="cpu")
    out = ct2.translate_batch([tok.sp.encode("A man rides a bike.", out_type=str)], beam_size=4)
    print(tok.sp.decode(out[0].hypotheses[0]))

The exported directory holds ``model.bin``, ``config.json``, ``shared_vocabulary.json`` (the
sentencepiece pieces in id order) and a copy of ``tokenizer.model``. The CTranslate2 model appends
``</s>`` to the source itself (``add_source_eos``) and starts decoding from ``<s>``, exactly as
``Translator`` does, so greedy search (``beam_size=1``, ``min_decoding_length=0``) gives the same
tokens as ``greedy_decode``. Beam search differs only in its length penalty: CTranslate2 divides by
``length ** length_penalty``, we by the GNMT ``((5 + length) / 6) ** alpha``.

Only ``ctranslate2`` (``pip install ctranslate2``) is needed; it is imported lazily.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from ..checkpoint.families.ours import load_model_dir
from ..checkpoint.files import TOKENIZER_FILE
from ..checkpoint.tokenizer import Tokenizer
from ..network.model import Transformer

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")


def _np(t: torch.Tensor):
    return t.detach().to("cpu", torch.float32).contiguous().numpy().copy()


def _set_linear(spec: Any, module: torch.nn.Linear) -> None:
    spec.weight = _np(module.weight)
    if module.bias is not None:
        spec.bias = _np(module.bias)


def _set_fused_linear(spec: Any, modules: list[torch.nn.Linear]) -> None:
    """One linear layer out of several stacked along the output dimension (fused QKV / KV)."""
    spec.weight = _np(torch.cat([m.weight for m in modules], dim=0))
    if any(m.bias is not None for m in modules):
        spec.bias = _np(torch.cat([m.bias if m.bias is not None else torch.zeros(m.out_features)
                                   for m in modules]))


def _set_layer_norm(spec: Any, module: torch.nn.LayerNorm) -> None:
    spec.gamma = _np(module.weight)
    spec.beta = _np(module.bias)


def _set_attention(spec: Any, module: Any, self_attention: bool) -> None:
    if self_attention:  # linear[0] = [q; k; v]
        _set_fused_linear(spec.linear[0], [module.q_proj, module.k_proj, module.v_proj])
    else:  # linear[0] = q (from the decoder), linear[1] = [k; v] (from the encoder output)
        _set_linear(spec.linear[0], module.q_proj)
        _set_fused_linear(spec.linear[1], [module.k_proj, module.v_proj])
    _set_linear(spec.linear[-1], module.out_proj)


def _set_ffn(spec: Any, module: Any, norm: torch.nn.LayerNorm) -> None:
    _set_layer_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, module.linear1)
    _set_linear(spec.linear_1, module.linear2)


def build_spec(model: Transformer, tokenizer: Tokenizer) -> Any:
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, weights and vocabularies filled in.

    Layer norms map the same way for both architectures: CTranslate2 applies a sublayer's
    ``layer_norm`` to its input when ``pre_norm`` and after the residual sum otherwise, as we do
    (``norm_first``).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.config
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        activation=common_spec.Activation.RELU,
    )
    # our sinusoidal table (sin/cos interleaved), position 0 first; CTranslate2's built-in one
    # concatenates sin and cos instead, so the table is always written out
    pe = _np(model.pe[: cfg.max_len])

    enc = spec.encoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.scale_embeddings = True  # * sqrt(d_model)
    enc.position_encodings.encodings = pe
    for layer_spec, layer in zip(enc.layer, model.encoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.norm2)
    if cfg.norm_first:
        _set_layer_norm(enc.layer_norm, model.encoder_norm)

    dec = spec.decoder
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.scale_embeddings = True
    dec.position_encodings.encodings = pe
    _set_linear(dec.projection, model.generator)
    for layer_spec, layer in zip(dec.layer, model.decoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        _set_layer_norm(layer_spec.attention.layer_norm, layer.norm2)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.norm3)
    if cfg.norm_first:
        _set_layer_norm(dec.layer_norm, model.decoder_norm)

    pieces = tokenizer.pieces(range(tokenizer.vocab_size))
    if len(set(pieces)) != len(pieces):
        raise ValueError("the sentencepiece vocabulary has duplicate pieces; CTranslate2 needs unique tokens")
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    unk, bos, eos = (pieces[i] for i in (tokenizer.unk_id, cfg.bos_id, cfg.eos_id))
    spec.config.unk_token = unk
    spec.config.bos_token = bos
    spec.config.eos_token = eos
    spec.config.decoder_start_token = bos  # the decoder starts from <s>
    spec.config.add_source_bos = False  # the source is pieces + </s>
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    return spec


def export_ctranslate2(checkpoint: str | Path, out: str | Path, quantization: str | None = None,
                       force: bool = False) -> Path:
    """Convert a checkpoint directory into a CTranslate2 model directory; returns ``out``.

    ``quantization`` (``int8``, ``int8_float32``, ``float16``, ...) is CTranslate2's weight
    quantization; None keeps float32 (the exact weights).
    """
    try:
        import ctranslate2  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("exporting needs the ctranslate2 package: pip install ctranslate2") from err
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, not {quantization!r}")
    checkpoint, out = Path(checkpoint), Path(out)
    if out.exists():
        if not force:
            raise FileExistsError(f"{out} exists; pass force=True (--force) to overwrite it")
        if out.resolve() == checkpoint.resolve():
            raise ValueError("the output directory must differ from the checkpoint directory")
        shutil.rmtree(out)
    model, tokenizer, _ = load_model_dir(checkpoint, "cpu")
    with torch.no_grad():
        spec = build_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)  # also stores the tied embedding matrices once
    out.mkdir(parents=True)
    spec.save(str(out))
    shutil.copyfile(checkpoint / TOKENIZER_FILE, out / TOKENIZER_FILE)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m transformer.ctranslate2_export",
                                     description="Convert a checkpoint to a CTranslate2 model directory.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory (config.json, model.safetensors, tokenizer.model)")
    parser.add_argument("--out", required=True, help="output directory for the CTranslate2 model")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="weight quantization (default: keep float32)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    args = parser.parse_args(argv)
    out = export_ctranslate2(args.checkpoint, args.out, args.quantization, args.force)
    print(f"CTranslate2 model written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
