"""Source or prefix: how much of each output piece comes from the source and how much from the target prefix
(ALTI+, Ferrando et al. 2022), beside the plain cross-attention, with a hallucination notice (Dale et al. 2023)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from .. import controls, figures, heatmaps, work
from ..catalog import load_heads
from ..params import Param
from ..state import ViewContext

ALL = "all"


def _layer(value: str) -> str | int | None:
    if value == ALL:
        return ALL
    return int(value) if value.isdigit() and 1 <= int(value) <= 64 else None


PARAMS = (Param("cl", "source_prefix_layer", _layer), *heatmaps.window_params("source_prefix_chart"))


def threshold_of(tr_path: object) -> tuple[float | None, dict]:
    """The checkpoint's hallucination threshold (heads.json ``alti``; chosen on val), or None, and the section."""
    data = load_heads(tr_path) or {}
    section = data.get("alti") if isinstance(data.get("alti"), dict) else {}
    value = section.get("hallucination_threshold")
    return (float(value) if isinstance(value, (int, float)) else None), section


def agreement(source: np.ndarray, cross: np.ndarray) -> float:
    """Share of output pieces whose strongest source piece by ALTI+ ``(T, S)`` is cross-attention's ``(T, S)``."""
    return float((source.argmax(-1) == cross.argmax(-1)).mean()) if len(source) else 0.0


def render(ctx: ViewContext) -> None:
    """The hallucination notice, the source share per output piece, the full contribution matrix and the
    cross-attention beside it."""
    result = ctx.result
    st.caption("Did this word come from the source, or did the decoder make it up from its own prefix? ALTI+ "
               "(Ferrando et al., 2022) splits every attention block's output into one term per input piece (the "
               "residual included, through the layer norm), measures each piece's contribution by how close its "
               "term is to the output, and rolls that out through the encoder, the decoder's self-attention and "
               "its cross-attention. Each row sums to 1 over the source and the target prefix.")
    fits, notices = work.plan_alti(ctx.tr, len(result.source_ids), len(result.target_ids))
    controls.capped(notices)
    if not fits:
        return
    data = ctx.model.beyond("alti", result, work.work_bytes())
    share = data["source_share"]  # (T,)
    mean = float(share.mean()) if len(share) else 0.0
    threshold, section = threshold_of(ctx.tr.path)
    text = controls.md_escape  # heads.json's strings are shown as text, never as Markdown or links
    percentile = f"{section['threshold_percentile']:g}" if isinstance(section.get("threshold_percentile"),
                                                                        (int, float)) else "?"
    if threshold is not None and mean < threshold:
        st.warning(f"This translation may be a hallucination: on average only {mean:.1%} of each output piece "
                   f"comes from the source, below this model's threshold of {threshold:.1%} ("
                   f"percentile {percentile} of the mean source shares over "
                   f"{text(section.get('threshold_split', 'val'))}; Dale et al., 2023, flag low source contribution).",
                   icon=":material/report:")
    elif threshold is not None:
        st.caption(f"Mean source share {mean:.1%}: above this model's hallucination threshold of {threshold:.1%} "
                   f"(percentile {percentile} of the sentences' mean source share "
                   f"over {text(section.get('threshold_split', 'val'))}, on the model's own translations).")
    else:
        st.caption(f"Mean source share {mean:.1%}. This model has no hallucination threshold yet (heads.json's "
                   "`alti` section: `python -m transformer.heads --only-alti --out <checkpoint>/heads.json`).")
    outputs = result.target_tokens
    # a long sentence: a window of the output pieces (rows of both maps and bars of the share) and of the source
    # pieces, with the target prefix of the same steps (what the browser must draw stays bounded)
    q0, q1, k0, k1 = heatmaps.window(len(outputs), len(result.source_tokens), "source_prefix_chart",
                                     ("Output pieces (rows)", "Source pieces (columns)"))
    prefix = result.decoder_input_tokens
    d0 = q0  # decoder input t fed output step t: the prefixes of the rows shown, as many as the window's cells allow
    d1 = min(q1, len(prefix), d0 + max(1, heatmaps.MOST_CELLS // max(1, q1 - q0)))
    st.plotly_chart(figures.source_share_figure(share[q0:q1], outputs[q0:q1], threshold, first=q0,
                                                    mean=mean),
                    config=figures.plotly_config("source-share"), key="source_prefix_share")
    layers = [ALL, *range(1, ctx.tr.config.n_decoder_layers + 1)]
    layer = controls.choose(st.selectbox, "Cross-attention to compare with", layers, "source_prefix_layer",
                            layers[-1], format_func=lambda v: "mean over every layer and head" if v == ALL
                            else f"layer {v}, mean over heads")
    cross = result.cross.mean(axis=(0, 1)) if layer == ALL else result.cross[int(layer) - 1].mean(axis=0)  # (T, S)
    long = len(result.source_tokens) + len(prefix) >= 30
    c1, c2 = (st.container(), st.container()) if long else st.columns([3, 2])
    c1.plotly_chart(figures.contribution_matrix_figure(data["source"][q0:q1, k0:k1], data["target"][q0:q1, d0:d1],
                                                       outputs[q0:q1], result.source_tokens[k0:k1], prefix[d0:d1],
                                                       query_offset=q0),
                    config=figures.plotly_config("alti-contributions"), key="source_prefix_matrix")
    name = "every layer" if layer == ALL else f"layer {layer}"
    c2.plotly_chart(figures.attention_heatmap(cross[q0:q1, k0:k1], outputs[q0:q1], result.source_tokens[k0:k1],
                                              title=f"Cross-attention · {name} · mean over heads",
                                              query_title="output piece", key_title="source piece",
                                              query_offset=q0, key_offset=k0),
                    config=figures.plotly_config("cross-attention"), key="source_prefix_cross")
    if (q0, q1, k0, k1) != (0, len(outputs), 0, len(result.source_tokens)):
        st.caption(f"A window of the sentence: output pieces {q0 + 1}–{q1}, source pieces {k0 + 1}–{k1} and the "
                   f"target prefix of the same steps ({d0}–{d1 - 1}); the share and the agreement count every piece.")
    st.caption(f"ALTI+'s strongest source piece is this cross-attention's strongest for "
               f"{agreement(data['source'], cross):.0%} of the output pieces of this sentence."
               + (f" Over {text(section.get('split', 'the test set'))}: "
                  f"{section['alignment_agreement']['mean_of_layers_and_heads']:.0%} for the mean of every layer "
                  f"and head, best layer {text(section['alignment_agreement']['best_layer'])}."
                  if isinstance(section.get("alignment_agreement"), dict) else ""))
