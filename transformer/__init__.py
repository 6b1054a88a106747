"""The Transformer of "Attention Is All You Need", returning every attention weight.

    from transformer import Transformer, TransformerConfig
    out = model(src, tgt, return_attention=True)   # out.encoder_attentions, .decoder_attentions, .cross_attentions

    import transformer
    translator = transformer.load("checkpoints/multi30k-en-de")
    result = translator.translate("A man rides a bike.", beam_size=4)
"""

from .checkpoint.families.ours import load_model_dir
from .checkpoint.files import CheckpointError, resolve_device
from .checkpoint.save import save_checkpoint
from .checkpoint.tokenizer import Tokenizer, TokenizerProtocol
from .decoding.search import Hypotheses, beam_search, greedy_decode
from .decoding.settings import DEFAULT_ALPHA, DecodeSettings, length_penalty
from .decoding.tree import BeamNode, BeamTree
from .network.attention import scaled_dot_product_attention
from .network.model import (
    DecoderOutput,
    EncoderOutput,
    Seq2SeqOutput,
    Transformer,
    TransformerConfig,
    causal_mask,
    decoder_self_mask,
    padding_mask,
    positional_encoding,
)
from .translator import TranslationResult, Translator, load

__all__ = [
    "DEFAULT_ALPHA", "BeamNode", "BeamTree", "CheckpointError", "DecodeSettings", "DecoderOutput", "EncoderOutput",
    "Hypotheses", "Seq2SeqOutput",
    "Tokenizer", "TokenizerProtocol",
    "TranslationResult", "Transformer", "TransformerConfig", "Translator", "beam_search", "causal_mask",
    "decoder_self_mask", "greedy_decode", "length_penalty", "load", "load_model_dir", "padding_mask",
    "positional_encoding", "resolve_device", "save_checkpoint", "scaled_dot_product_attention",
]
__version__ = "0.1.0"
