"""What the model's passes return: hidden states, logits and every attention weight, per layer; and, on request
(``return_internals=True``), what interpretation needs: each attention sub-layer's inputs and each layer's output."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class AttentionInputs:
    """What one attention sub-layer was called with. ``query (B, Q, D)``: its input at the queries (after the norm
    in pre-norm); ``key_value (B, K, D)``: where keys and values come from (the same tensor as ``query`` for
    self-attention, the encoder output for cross-attention); ``mask``: bool, broadcastable to ``(B, H, Q, K)``,
    True = may attend (None: every key); ``residual (B, Q, D)``: the stream the sub-layer's output is added to (the
    same tensor as ``query`` in post-norm; before the norm in pre-norm), what ALTI's residual term is."""

    query: Tensor
    key_value: Tensor
    mask: Tensor | None
    residual: Tensor | None = None


@dataclass
class EncoderOutput:
    """``last_hidden_state (B, S, D)``, ``attentions``: one ``(B, H, S, S)`` tensor per layer (or ()).
    With ``return_internals``: ``attention_inputs`` and ``layer_outputs`` ``(B, S, D)``, one per layer."""

    last_hidden_state: Tensor
    attentions: tuple[Tensor, ...] = ()
    attention_inputs: tuple[AttentionInputs, ...] = ()
    layer_outputs: tuple[Tensor, ...] = ()


@dataclass
class DecoderOutput:
    """``logits (B, T, V)``, ``last_hidden_state (B, T, D)``; attentions one tensor per layer. With
    ``return_internals``: both attention sub-layers' inputs and ``layer_outputs`` ``(B, T, D)``, one per layer
    (each layer's output stream, before the final norm of pre-norm)."""

    logits: Tensor
    last_hidden_state: Tensor
    self_attentions: tuple[Tensor, ...] = ()
    cross_attentions: tuple[Tensor, ...] = ()
    self_attention_inputs: tuple[AttentionInputs, ...] = ()
    cross_attention_inputs: tuple[AttentionInputs, ...] = ()
    layer_outputs: tuple[Tensor, ...] = ()


@dataclass
class Seq2SeqOutput:
    """What ``Transformer.forward`` returns; attention names follow Hugging Face / BertViz.

    ``encoder_attentions``: per layer ``(B, H, S, S)``; ``decoder_attentions``: per layer
    ``(B, H, T, T)``; ``cross_attentions``: per layer ``(B, H, T, S)``. Empty tuples unless
    ``return_attention=True``. With ``return_internals=True``: ``attention_inputs`` maps ``"encoder"``,
    ``"decoder"`` and ``"cross"`` to one :class:`AttentionInputs` per layer, and ``encoder_layer_outputs`` /
    ``decoder_layer_outputs`` hold each layer's output stream (``(B, S, D)`` / ``(B, T, D)``).
    """

    logits: Tensor
    encoder_last_hidden_state: Tensor
    decoder_last_hidden_state: Tensor
    encoder_attentions: tuple[Tensor, ...] = ()
    decoder_attentions: tuple[Tensor, ...] = ()
    cross_attentions: tuple[Tensor, ...] = ()
    attention_inputs: dict[str, tuple[AttentionInputs, ...]] = field(default_factory=dict)
    encoder_layer_outputs: tuple[Tensor, ...] = ()
    decoder_layer_outputs: tuple[Tensor, ...] = ()

    def attentions(self) -> dict[str, tuple[Tensor, ...]]:
        """The attention weights by kind (``transformer.kinds.KINDS``): ``"encoder"``, ``"decoder"``, ``"cross"``."""
        return {"encoder": self.encoder_attentions, "decoder": self.decoder_attentions, "cross": self.cross_attentions}
