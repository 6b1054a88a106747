"""What the model's passes return: hidden states, logits and every attention weight, per layer."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class EncoderOutput:
    """``last_hidden_state (B, S, D)``, ``attentions``: one ``(B, H, S, S)`` tensor per layer (or ())."""

    last_hidden_state: Tensor
    attentions: tuple[Tensor, ...] = ()


@dataclass
class DecoderOutput:
    """``logits (B, T, V)``, ``last_hidden_state (B, T, D)``; attentions one tensor per layer."""

    logits: Tensor
    last_hidden_state: Tensor
    self_attentions: tuple[Tensor, ...] = ()
    cross_attentions: tuple[Tensor, ...] = ()


@dataclass
class Seq2SeqOutput:
    """What ``Transformer.forward`` returns; attention names follow Hugging Face / BertViz.

    ``encoder_attentions``: per layer ``(B, H, S, S)``; ``decoder_attentions``: per layer
    ``(B, H, T, T)``; ``cross_attentions``: per layer ``(B, H, T, S)``. Empty tuples unless
    ``return_attention=True``.
    """

    logits: Tensor
    encoder_last_hidden_state: Tensor
    decoder_last_hidden_state: Tensor
    encoder_attentions: tuple[Tensor, ...] = ()
    decoder_attentions: tuple[Tensor, ...] = ()
    cross_attentions: tuple[Tensor, ...] = ()
