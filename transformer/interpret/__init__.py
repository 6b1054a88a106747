"""Interpretation beyond attention weights, from the model's own returned forward pass.

    flow.py     the information-flow graph (Ferrando and Voita 2024): each head's, residual's and feed-forward
                block's importance for every query, and the graph followed back from one output step
    methods.py  one head's computation, value norms (Kobayashi et al.), attributions, the logit lens
    patching/   activation and path patching: which encoder streams and heads, which decoder layer's reading of
                each source piece, which decoder heads and streams carry a one-word edit to the output
    alti.py     ALTI+ contributions (Ferrando et al. 2022): each output piece's shares of every source and
                decoder-input piece, per layer and rolled out
    heads.py    what ``python -m transformer.heads`` runs: head importance, statistics, pruning curve, roles and
                the ALTI+ section over a whole test set (``heads.json``)
    signals.py  per-sentence hallucination signals (``pair_signals``: sequence log-probability, ALTI+ source share,
                attention on ``</s>``; ``repetition``), and ``flag``: the rule stored beside a checkpoint
    detect.py   what ``python -m transformer.detect`` runs: that rule chosen on val, measured on a constructed
                test set

The commands themselves (their flags, output and exit codes) are the modules of the same names at the top of
``transformer/``.

The names below are the public entry point (``from transformer.interpret import head_computation``).
"""

from .alti import (
    DEFAULT_ALTI_BYTES,
    Contributions,
    alti_rows,
    attention_terms,
    block_contributions,
    block_terms,
    contributions,
    head_terms,
)
from .flagging import (
    DEFAULT_RULE,
    Condition,
    FlagRule,
    flag,
    flag_rule,
    flag_score,
    reason_text,
    reasons,
    rule_text,
    write_flag_rule,
)
from .flow import Edge, Flow, FlowGraph, Node, flow, head_logits, head_output
from .methods import (
    DEFAULT_BATCH_BYTES,
    KINDS,
    HeadComputation,
    NormAttentions,
    attention_attribution_agreement,
    attention_module,
    attribute,
    attribution_passes,
    attribution_row_bytes,
    forward_from_embeddings,
    head_computation,
    internals,
    logit_lens,
    logit_lens_chosen,
    require_eval,
    value_norms,
)
from .patching import SITES as PATCH_SITES
from .patching import PatchResult, Preview, patch, preview
from .signals import (
    SIGNALS,
    looping,
    pair_signals,
    repetition,
    translation_row,
)

__all__ = [
    "DEFAULT_ALTI_BYTES", "DEFAULT_BATCH_BYTES", "KINDS", "Contributions", "Edge", "Flow", "FlowGraph",
    "HeadComputation", "Node", "NormAttentions", "flow", "head_logits", "head_output", "head_terms",
    "alti_rows", "attention_attribution_agreement", "attention_module", "attention_terms", "attribute",
    "attribution_passes", "attribution_row_bytes", "block_contributions", "block_terms", "contributions",
    "forward_from_embeddings",
    "head_computation", "internals", "logit_lens", "logit_lens_chosen", "require_eval", "value_norms",
    "DEFAULT_RULE", "SIGNALS", "Condition", "FlagRule", "flag", "flag_rule", "looping", "pair_signals", "reason_text",
    "reasons", "repetition", "rule_text", "translation_row", "write_flag_rule", "flag_score",
    "PATCH_SITES", "PatchResult", "Preview", "patch", "preview",
]
