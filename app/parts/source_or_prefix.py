"""Source or prefix: how much of each output piece comes from the source and how much from the target prefix
(ALTI+, Ferrando et al. 2022), beside the plain cross-attention, with a hallucination notice (Dale et al. 2023)."""

from __future__ import annotations

import numpy as np

from transformer import Translator
from transformer.interpret.flagging import flag_rule, reason_text, reasons, rule_text, score_text
from transformer.interpret.signals import translation_row

from ..analysis import probes
from ..analysis.inference import Analysis
from ..drawing import contributions, figures
from ..limits import work
from ..models import card
from ..models.catalog import load_heads
from . import Chart, Choice, Note, Part, Source, planned

INTRO = ("Did this word come from the source, or did the decoder make it up from its own prefix? ALTI+ (Ferrando et "
         "al., 2022) splits every attention block's output into one term per input piece (the residual included, "
         "through the layer norm), measures each piece's contribution by how close its term is to the output, and "
         "rolls that out through the encoder, the decoder's self-attention and its cross-attention. Each row sums to "
         "1 over the source and the target prefix.")
ALL = "all"


def threshold_of(tr_path: object) -> tuple[float | None, dict]:
    """heads.json's ALTI+ section (its alignment agreement over the test set) and its older threshold on the mean
    source share alone, or None (the notice reads the ``flag`` rule instead)."""
    data = load_heads(tr_path) or {}
    section = data.get("alti") if isinstance(data.get("alti"), dict) else {}
    value = section.get("hallucination_threshold")
    return (float(value) if isinstance(value, (int, float)) else None), section


def agreement(source: np.ndarray, cross: np.ndarray) -> float:
    """Share of output pieces whose strongest source piece by ALTI+ ``(T, S)`` is cross-attention's ``(T, S)``."""
    return float((source.argmax(-1) == cross.argmax(-1)).mean()) if len(source) else 0.0


FLAG_HELP = ("The rule is stored with the model (flag.json) and was chosen on the validation sentences by `python -m "
             "transformer.detect`: the combination of signals that finds the most of its constructed errors (detached "
             "references, unrelated German, one noun swapped, a clause dropped, loops, fluent output on nonsense "
             "input) while flagging at most 4% of the model's own translations and of the references, also with the "
             "sources written as people type them (no final full stop, a lower-case start, extra spaces; Guerreiro "
             "et al., 2023; Dale et al., 2023). How often it finds each kind on held-back sentences is in "
             "docs/alti.md. The same rule flags the lines of the Whole test set view.")


def row_of(tr: Translator, a: Analysis, share: np.ndarray) -> dict:
    """The flag's row of this translation (``translation_row``: the signals the corpus table computes, by the same
    function), from its analysis and ALTI+'s ``share (T,)``."""
    return translation_row(tr, a.source_ids, a.target_ids, a.translation,
                           np.log(np.maximum(a.chosen_probs.astype(np.float64), 1e-300)), share, a.cross,
                           a.end_logprobs, hit_max_len=a.hit_max_len, tgt_lang=a.settings.tgt_lang)


def notice(tr: Translator, a: Analysis, share: np.ndarray) -> tuple[Note, float | None]:
    """The checkpoint's ``flag`` (``transformer.interpret.signals``: the rule in its ``flag.json``, chosen on val) on
    this translation, in words (a warning when it holds), and the rule's source-share threshold (None without one)."""
    rule = flag_rule(tr.path)
    row = row_of(tr, a, share)
    why = reasons(row, rule)
    origin = ("this model's rule, chosen on the validation set" if rule.origin != "default"
              else f"this model's flag.json is there but was refused ({rule.refused}), so only looping output is "
                   "flagged" if rule.refused else
              "this model has no rule chosen on the validation set yet, so only looping output is flagged")
    threshold = next((c.value for c in rule.conditions if c.column == "source_share"), None)
    far = score_text(row, rule)
    far = f" {far[0].upper()}{far[1:]}." if far else ""
    if why:
        fired = "the part of the rule that fired" if len(why) == 1 else f"the {len(why)} parts of the rule that fired"
        return Note(f"This translation may be a hallucination; {fired}: " + "; ".join(reason_text(c, row) for c in why)
                    + f".{far} A translation is flagged when {rule_text(rule)} ({origin}).", warning=True), threshold
    mean = float(share.mean()) if len(share) else 0.0
    return Note(f"Not flagged as a possible hallucination (mean source share {mean:.1%}, mean log-probability "
                f"{row['seq_logprob']:.2f} per piece).{far} A translation is flagged when {rule_text(rule)} "
                f"({origin})."), threshold


Window = tuple[int, int, int, int, int, int]  # rows q0:q1, source pieces k0:k1, target prefix d0:d1 (0-based)


def cross_chart(a: Analysis, data: dict, layer: str | int, section: dict, window: Window | None = None) -> Chart:
    """The cross-attention of a layer (from 1, or ``ALL``: every layer), mean over heads, and its agreement (over
    every piece, whatever ``window`` of the sentence is drawn)."""
    cross = a.cross.mean(axis=(0, 1)) if layer == ALL else a.cross[int(layer) - 1].mean(axis=0)  # (T, S)
    q0, q1, k0, k1, _, _ = window or full(a)
    name = "every layer" if layer == ALL else f"layer {layer}"
    over = section.get("alignment_agreement")
    return Chart(figures.attention_heatmap(cross[q0:q1, k0:k1], a.target_tokens[q0:q1], a.source_tokens[k0:k1],
                                           title=f"Cross-attention · {name} · mean over heads",
                                           query_title="output piece", key_title="source piece",
                                           query_offset=q0, key_offset=k0),
                 f"ALTI+'s strongest source piece is this cross-attention's strongest for "
                 f"{agreement(data['source'], cross):.0%} of the output pieces of this sentence."
                 + (f" Over {card.split_words(section.get('split', 'the test set'))}: "
                    f"{over['mean_of_layers_and_heads']:.0%} for the mean of every layer and head, best layer "
                    f"{over['best_layer']}." if isinstance(over, dict) else ""), "cross-attention")


def full(a: Analysis) -> Window:
    """The whole sentence as a window."""
    return 0, len(a.target_tokens), 0, len(a.source_tokens), 0, len(a.decoder_input_tokens)


def charts(a: Analysis, data: dict, threshold: float | None, window: Window | None = None) -> list[Chart]:
    """The source share per output piece (its mean line the whole sentence's) and the full contribution matrix, of
    ``window`` (default: the whole sentence)."""
    q0, q1, k0, k1, d0, d1 = window or full(a)
    share = data["source_share"]  # (T,)
    mean = float(share.mean()) if len(share) else 0.0
    return [Chart(contributions.source_share_figure(share[q0:q1], a.target_tokens[q0:q1], threshold, first=q0,
                                                    mean=mean), name="source-share"),
            Chart(contributions.contribution_matrix_figure(data["source"][q0:q1, k0:k1], data["target"][q0:q1, d0:d1],
                                                           a.target_tokens[q0:q1], a.source_tokens[k0:k1],
                                                           a.decoder_input_tokens[d0:d1], query_offset=q0,
                                                           source_offset=k0, prefix_offset=d0),
                  name="alti-contributions")]


def fits(tr: Translator, a: Analysis) -> tuple[bool, list[str]]:
    """Whether ALTI+ of this sentence fits the work allowed, and the notices (``app.limits.work.plan_alti``)."""
    return work.plan_alti(tr, len(a.source_ids), len(a.target_ids))


def describe(src: Source) -> list[Part]:
    tr, a = src.tr, src.analysis
    ok, parts = planned(fits(tr, a))
    if not ok:
        return parts
    data = probes.alti(tr, a, work.work_bytes())
    share = data["source_share"]  # (T,)
    _, section = threshold_of(tr.path)
    note, threshold = notice(tr, a, share)
    layers = [*range(1, a.cross.shape[0] + 1), ALL]
    return [*parts, note, *charts(a, data, threshold),
            Choice("Cross-attention to compare with",
                   [("mean over every layer and head" if v == ALL else f"layer {v}, mean over heads",
                     [cross_chart(a, data, v, section)]) for v in layers], len(layers) - 2)]
