"""Source or prefix: how much of each output piece comes from the source and how much from the target prefix
(ALTI+, Ferrando et al. 2022), beside the plain cross-attention, with a hallucination notice (Dale et al. 2023)."""

from __future__ import annotations

import numpy as np

from transformer import Translator

from .. import figures, probes, work
from ..catalog import load_heads
from ..inference import Analysis
from . import Chart, Choice, Note, Part, Source

NAME, KEY = "Source or prefix", "source_prefix"
INTRO = ("Did this word come from the source, or did the decoder make it up from its own prefix? ALTI+ (Ferrando et "
         "al., 2022) splits every attention block's output into one term per input piece (the residual included, "
         "through the layer norm), measures each piece's contribution by how close its term is to the output, and "
         "rolls that out through the encoder, the decoder's self-attention and its cross-attention. Each row sums to "
         "1 over the source and the target prefix.")
ALL = "all"


def threshold_of(tr_path: object) -> tuple[float | None, dict]:
    """The checkpoint's hallucination threshold (heads.json ``alti``; chosen on val), or None, and the section."""
    data = load_heads(tr_path) or {}
    section = data.get("alti") if isinstance(data.get("alti"), dict) else {}
    value = section.get("hallucination_threshold")
    return (float(value) if isinstance(value, (int, float)) else None), section


def agreement(source: np.ndarray, cross: np.ndarray) -> float:
    """Share of output pieces whose strongest source piece by ALTI+ ``(T, S)`` is cross-attention's ``(T, S)``."""
    return float((source.argmax(-1) == cross.argmax(-1)).mean()) if len(source) else 0.0


def notice(mean: float, threshold: float | None, section: dict) -> Note:
    """What the sentence's mean source share says against the model's threshold (a warning below it)."""
    percentile = f"{section['threshold_percentile']:g}" if isinstance(section.get("threshold_percentile"),
                                                                        (int, float)) else "?"
    split = section.get("threshold_split", "val")
    if threshold is not None and mean < threshold:
        return Note(f"This translation may be a hallucination: on average only {mean:.1%} of each output piece "
                    f"comes from the source, below this model's threshold of {threshold:.1%} (percentile "
                    f"{percentile} of the mean source shares over {split}; Dale et al., 2023, flag low source "
                    "contribution).", warning=True)
    if threshold is not None:
        return Note(f"Mean source share {mean:.1%}: above this model's hallucination threshold of {threshold:.1%} "
                    f"(percentile {percentile} of the sentences' mean source share over {split}, on the model's "
                    "own translations).")
    return Note(f"Mean source share {mean:.1%}. This model has no hallucination threshold yet (heads.json's `alti` "
                "section: `python -m transformer.heads --only-alti --out <checkpoint>/heads.json`).")


def cross_chart(a: Analysis, data: dict, layer: str | int, section: dict) -> Chart:
    """The cross-attention of a layer (from 1, or ``ALL``: every layer), mean over heads, and its agreement."""
    cross = a.cross.mean(axis=(0, 1)) if layer == ALL else a.cross[int(layer) - 1].mean(axis=0)  # (T, S)
    name = "every layer" if layer == ALL else f"layer {layer}"
    over = section.get("alignment_agreement")
    return Chart(figures.attention_heatmap(cross, a.target_tokens, a.source_tokens,
                                           title=f"Cross-attention · {name} · mean over heads",
                                           query_title="output piece", key_title="source piece"),
                 f"ALTI+'s strongest source piece is this cross-attention's strongest for "
                 f"{agreement(data['source'], cross):.0%} of the output pieces of this sentence."
                 + (f" Over {section.get('split', 'the test set')}: {over['mean_of_layers_and_heads']:.0%} for the "
                    f"mean of every layer and head, best layer {over['best_layer']}." if isinstance(over, dict)
                    else ""), "cross-attention")


def charts(a: Analysis, data: dict, threshold: float | None) -> list[Chart]:
    """The source share per output piece and the full contribution matrix."""
    return [Chart(figures.source_share_figure(data["source_share"], a.target_tokens, threshold), name="source-share"),
            Chart(figures.contribution_matrix_figure(data["source"], data["target"], a.target_tokens,
                                                     a.source_tokens, a.decoder_input_tokens),
                  name="alti-contributions")]


def fits(tr: Translator, a: Analysis) -> tuple[bool, list[str]]:
    """Whether ALTI+ of this sentence fits the work allowed, and the notices (``app.work.plan_alti``)."""
    return work.plan_alti(tr, len(a.source_ids), len(a.target_ids))


def describe(src: Source) -> list[Part]:
    tr, a = src.tr, src.analysis
    ok, notices = fits(tr, a)
    parts: list[Part] = [Note(text) for text in notices]
    if not ok:
        return parts
    data = probes.alti(tr, a, work.work_bytes())
    share = data["source_share"]  # (T,)
    threshold, section = threshold_of(tr.path)
    layers = [*range(1, a.cross.shape[0] + 1), ALL]
    return [*parts, notice(float(share.mean()) if len(share) else 0.0, threshold, section), *charts(a, data, threshold),
            Choice("Cross-attention to compare with",
                   [("mean over every layer and head" if v == ALL else f"layer {v}, mean over heads",
                     [cross_chart(a, data, v, section)]) for v in layers], len(layers) - 2)]
