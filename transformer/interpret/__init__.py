"""Interpretation beyond attention weights, from the model's own returned forward pass.

    methods.py  one head's computation, value norms (Kobayashi et al.), attribution (captum), the logit lens and
                ALTI+ contributions (Ferrando et al. 2022)
    heads.py    ``python -m transformer.heads``: head importance, statistics, pruning curve, roles and the ALTI+
                section over a whole test set (``heads.json``)
    signals.py  per-sentence hallucination signals (``pair_signals``: sequence log-probability, ALTI+ source share,
                attention on ``</s>``; ``repetition``), and ``flag``: the rule stored beside a checkpoint

The names below are the public entry point (``from transformer.interpret import head_computation``).
"""

from .methods import (
    DEFAULT_ALTI_BYTES,
    DEFAULT_BATCH_BYTES,
    KINDS,
    Contributions,
    HeadComputation,
    NormAttentions,
    alti_rows,
    attention_attribution_agreement,
    attention_module,
    attention_terms,
    attribute,
    attribution_row_bytes,
    block_contributions,
    block_terms,
    contributions,
    forward_from_embeddings,
    head_computation,
    internals,
    logit_lens,
    logit_lens_chosen,
    require_eval,
    value_norms,
)
from .signals import (
    DEFAULT_RULE,
    SIGNALS,
    Condition,
    FlagRule,
    flag,
    flag_rule,
    looping,
    pair_signals,
    reasons,
    repetition,
    translation_row,
    write_flag_rule,
)

__all__ = [
    "DEFAULT_ALTI_BYTES", "DEFAULT_BATCH_BYTES", "KINDS", "Contributions", "HeadComputation", "NormAttentions",
    "alti_rows", "attention_attribution_agreement", "attention_module", "attention_terms", "attribute",
    "attribution_row_bytes", "block_contributions", "block_terms", "contributions", "forward_from_embeddings",
    "head_computation", "internals", "logit_lens", "logit_lens_chosen", "require_eval", "value_norms",
    "DEFAULT_RULE", "SIGNALS", "Condition", "FlagRule", "flag", "flag_rule", "looping", "pair_signals", "reasons",
    "repetition", "translation_row", "write_flag_rule",
]
