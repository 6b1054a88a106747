"""Activation and path patching of a translation (causal tracing, Meng et al. 2022; Heimersheim and Nanda's guide):
which layers, positions and heads carry the change of one source word to the output.

Two sources of the same piece count, ``source`` (clean) and ``edited``, are read teacher-forced on the same decoder
input ``[BOS] + target_ids``. The metric at decoder position ``step`` is ``m = logit[target] - logit[foil]`` from
the final logits (two rows of the output projection). One *site* at a time takes its value from the other run:

- ``enc_resid`` ``(L_e+1, S)``: the encoder stream at a source position, row 0 the embeddings (scaled, positions
  added), row ``l`` encoder layer ``l``'s output (before the final norm of pre-norm);
- ``enc_head`` ``(L_e, H)``: an encoder self-attention head's output (before W_O) at every position;
- ``cross_kv`` ``(L_d, S)``: decoder layer ``l``'s cross-attention reads source position ``j``'s memory row (its keys
  and values, for every head and query) from the other run; every other layer reads the run's own memory (a path
  patch: at which decoder layer is source piece ``j`` read);
- ``cross_head``, ``dec_head`` ``(L_d, H)``: a cross- or decoder self-attention head's output at query ``step``;
- ``dec_resid`` ``(L_d+1, step+1)``: the decoder stream at a position after row ``l`` (row 0 the embeddings).

``"denoise"``: the edited run with one site from the clean run, ``E = (m_patched - m_edit) / (m_clean - m_edit)``;
``"noise"``: the clean run with one site from the edited run, ``E = (m_clean - m_patched) / (m_clean - m_edit)``.
1: the site carries the whole change. Values outside [0, 1] are kept.

The layers run in :mod:`.layers`, each through the model's own sub-layers (``SublayerStack.residual``, the
attention's projections, ``merge_heads``, the feed-forward block, the norms): no hook, nothing set on the model, so
one model serves every visitor. Sites are batched (the site on the batch axis) and share the unpatched prefix's work:
a row enters the encoder or the decoder at the layer of its first patch, from the recorded stream of the run it
patches.

    layers.py       the encoder and decoder layers and one attention sub-layer, a head's output replaceable
    runs.py         the sites, :class:`PatchResult`, one run's every value (:class:`Record`) and its gradients
    batched.py      :func:`patched_metrics`: the batched patched pass
    pair.py         :class:`Pair` and :func:`prepare`: the two runs and the defaults (step, target, foil)
    exact.py        :func:`patch`: every site exactly
    attribution.py  :func:`preview`: attribution patching (first order), its top sites exact

The names below are the public entry point (``from transformer.interpret.patching import patch``).
"""

from .attribution import Preview, first_order, preview, spearman
from .batched import patched_metrics
from .exact import patch
from .layers import HeadPatch, attend, decoder_layer, encoder_layer
from .pair import PATCH_BYTES, Pair, prepare
from .runs import (
    DIRECTIONS,
    ENCODER_SITES,
    MIN_CHANGE,
    RECORD_FIELDS,
    SITES,
    PatchResult,
    Record,
    Site,
    check_direction,
    check_sites,
    final_stream,
    gradients,
    memory_of,
    record,
    site_value,
)

__all__ = [
    "DIRECTIONS", "ENCODER_SITES", "MIN_CHANGE", "PATCH_BYTES", "RECORD_FIELDS", "SITES", "HeadPatch", "Pair",
    "PatchResult", "Preview", "Record", "Site", "attend", "check_direction", "check_sites", "decoder_layer",
    "encoder_layer", "final_stream", "first_order", "gradients", "memory_of", "patch", "patched_metrics", "prepare",
    "preview", "record", "site_value", "spearman",
]
