"""Export a checkpoint to a CTranslate2 model, for fast CPU/GPU serving (the command,
``python -m transformer.ctranslate2_export``, is ``transformer/ctranslate2_export.py``).

    python -m transformer.ctranslate2_export --checkpoint checkpoints/multi30k-en-de --out ct2-en-de

    import ctranslate2, transformer
    from transformer.exchange.ctranslate2_export import export_ctranslate2
    export_ctranslate2("checkpoints/multi30k-en-de", "ct2-en-de")
    tok = transformer.Tokenizer("checkpoints/multi30k-en-de/tokenizer.model")
    ct2 = ctranslate2.Translator("ct2-en-de", device="cpu")
    out = ct2.translate_batch([tok.sp.encode("A man rides a bike.", out_type=str)], beam_size=4)
    print(tok.sp.decode(out[0].hypotheses[0]))

Any checkpoint ``transformer.load`` opens exports: ours, one converted from another family, or a Marian / OPUS-MT
or NLLB-200 / M2M100 ``save_pretrained`` directory. Every field of its :class:`TransformerConfig` is mapped
(:data:`CONFIG_FIELDS` says where each goes): the feed-forward activation, the embedding scale, the positional
table of any layout and offset (written out row by row), pre- or post-norm, the output projection's bias
(``final_logits_bias``), the tied tables, the special tokens and the LayerNorm epsilon. A value CTranslate2 cannot
express, or a field this export does not know, is refused with a ``ValueError`` naming it, never exported wrong.

The exported directory holds ``model.bin``, ``config.json``, ``shared_vocabulary.json`` (the tokenizer's pieces in id
order, padded with unused names up to the model's vocabulary) and a copy of the tokenizer's files. The CTranslate2
model appends ``</s>`` to the source itself (``add_source_eos``; a multilingual model's source starts with its
language code, given as the first token) and starts decoding from the checkpoint's start token, exactly as
``Translator`` does, so greedy search (``beam_size=1``, ``min_decoding_length=0``, padding and a start token other
than ``</s>`` in ``suppress_sequences``, a multilingual model's target code as ``target_prefix``) gives the same tokens
as ``greedy_decode``. Beam search differs only in its length penalty: CTranslate2 divides by
``length ** length_penalty``, the GNMT rules by ``((5 + length) / 6) ** alpha``.

Only ``ctranslate2`` (``pip install ctranslate2``) is needed; it is imported lazily.
"""

from __future__ import annotations

import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from ..checkpoint.families import family_of_dir, tokenizer_family
from ..checkpoint.tokenizer import TokenizerProtocol
from ..network.config import TransformerConfig
from ..network.model import Transformer

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                 "float32")
# our feed-forward activation -> the name of CTranslate2's ``common_spec.Activation`` (GELU: the exact, erf one, as
# ``F.gelu``; GELUTanh would be the tanh approximation)
CT2_ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "silu": "SWISH", "gelu": "GELU"}
# Every TransformerConfig field, and where it goes. A field missing here is refused unless it holds its default
# (the paper's): a new field's meaning is never guessed.
CONFIG_FIELDS = {
    "src_vocab_size": "the source embedding's rows and the source vocabulary",
    "tgt_vocab_size": "the target embedding's and the projection's rows and the target vocabulary",
    "d_model": "the weights' shapes", "d_ff": "the weights' shapes",
    "n_heads": "num_heads", "n_encoder_layers": "num_layers", "n_decoder_layers": "num_layers",
    "norm_first": "pre_norm, and the final LayerNorm of each stack",
    "share_embeddings": "the tied tables, stored once (spec.optimize)",
    "pad_id": "the padding row of the tables (an output CTranslate2 must suppress, as ours never gives it)",
    "bos_id": "decoder_start_token", "eos_id": "eos_token",
    "layer_norm_eps": "layer_norm_epsilon",
    "activation": "activation (CT2_ACTIVATIONS)",
    "positional_layout": "position_encodings, the table written out",
    "position_offset": "position_encodings, the table from the first token's row",
    "max_len": "position_encodings' rows",
    "final_logits_bias": "decoder.projection.bias",
    "scale_embedding": "scale_embeddings of both stacks",
    "dropout": "nothing: training only", "attention_dropout": "nothing: training only",
}


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


def check_exportable(config: TransformerConfig) -> None:
    """Refuse (``ValueError`` naming the field) a config CTranslate2 cannot express or this export does not know."""
    for f in fields(config):
        if f.name not in CONFIG_FIELDS and getattr(config, f.name) != f.default:
            raise ValueError(f"the config's {f.name} = {getattr(config, f.name)!r} has no CTranslate2 equivalent this "
                             f"export knows (only its default, {f.default!r}, exports)")
    if config.activation not in CT2_ACTIVATIONS:
        raise ValueError(f"activation {config.activation!r} has no CTranslate2 equivalent (it has "
                         f"{', '.join(sorted(CT2_ACTIVATIONS))})")
    if config.n_encoder_layers < 1 or config.n_decoder_layers < 1:
        raise ValueError("CTranslate2 needs at least one encoder and one decoder layer (the config has "
                         f"{config.n_encoder_layers} and {config.n_decoder_layers})")


def vocabulary(tokenizer: TokenizerProtocol, size: int) -> list[str]:
    """The tokenizer's pieces in id order, padded with unused names (``<unused:N>``) up to ``size`` rows (a converted
    multilingual model may have a few rows past its tokenizer's ids); ``ValueError`` when they cannot name the rows
    one to one (more ids than rows, or two ids with the same piece)."""
    if tokenizer.vocab_size > size:
        raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {size} rows")
    pieces = list(tokenizer.pieces(range(tokenizer.vocab_size)))
    if len(set(pieces)) != len(pieces):
        raise ValueError("the tokenizer has duplicate pieces; CTranslate2 needs unique tokens")
    taken = set(pieces)
    extra = (f"<unused:{i}>" for i in range(len(pieces), 2 * size + 1))
    pieces += [name for name in extra if name not in taken][: size - len(pieces)]
    return pieces


def build_spec(model: Transformer, tokenizer: TokenizerProtocol) -> Any:
    """The ``ctranslate2.specs.TransformerSpec`` of ``model``, weights and vocabularies filled in.

    Layer norms map the same way for both architectures: CTranslate2 applies a sublayer's
    ``layer_norm`` to its input when ``pre_norm`` and after the residual sum otherwise, as we do
    (``norm_first``).
    """
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.config
    check_exportable(cfg)
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        activation=common_spec.Activation[CT2_ACTIVATIONS[cfg.activation]],
    )
    # our table (any layout), its first row the first token's position (past ``position_offset``): CTranslate2's
    # built-in one concatenates sin and cos from position 0, so the table is always written out
    pe = _np(model.pe[: cfg.max_len])

    enc = spec.encoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.scale_embeddings = cfg.scale_embedding  # * sqrt(d_model), or not
    enc.position_encodings.encodings = pe
    for layer_spec, layer in zip(enc.layer, model.encoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.norm2)
    if cfg.norm_first:
        _set_layer_norm(enc.layer_norm, model.encoder_norm)

    dec = spec.decoder
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.scale_embeddings = cfg.scale_embedding
    dec.position_encodings.encodings = pe
    _set_linear(dec.projection, model.generator)  # with its bias when the config has final_logits_bias
    for layer_spec, layer in zip(dec.layer, model.decoder_layers):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        _set_layer_norm(layer_spec.attention.layer_norm, layer.norm2)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.norm3)
    if cfg.norm_first:
        _set_layer_norm(dec.layer_norm, model.decoder_norm)

    source, target = vocabulary(tokenizer, cfg.src_vocab_size), vocabulary(tokenizer, cfg.tgt_vocab_size)
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.unk_token = target[tokenizer.unk_id]
    spec.config.bos_token = target[cfg.bos_id]
    spec.config.eos_token = target[cfg.eos_id]
    spec.config.decoder_start_token = target[cfg.bos_id]  # the decoder starts from the checkpoint's start token
    spec.config.add_source_bos = False  # the source is [language code] pieces + </s>
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    return spec


def export_ctranslate2(checkpoint: str | Path, out: str | Path, quantization: str | None = None,
                       force: bool = False) -> Path:
    """Convert a checkpoint directory (any family ``transformer.load`` opens) into a CTranslate2 model directory;
    returns ``out``. ``quantization`` (``int8``, ``int8_float32``, ``float16``, ...) is CTranslate2's weight
    quantization; None keeps float32 (the exact weights). ``ValueError`` for what CTranslate2 cannot express."""
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
    model, tokenizer, _ = family_of_dir(checkpoint).load(checkpoint)
    with torch.no_grad():
        spec = build_spec(model, tokenizer)  # refuses before anything is written
    spec.validate()
    spec.optimize(quantization=quantization)  # also stores the tied embedding matrices once
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spec.save(str(out))
    family = tokenizer_family(checkpoint)
    for name in family.copied_files if family is not None else ():
        if (checkpoint / name).is_file():
            shutil.copyfile(checkpoint / name, out / name)
    return out
