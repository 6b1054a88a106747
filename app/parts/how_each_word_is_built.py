"""How each word is built: the information-flow graph of each output piece ("Information flow routes", Ferrando and
Voita, 2024) through the encoder, the cross-attention and the decoder, at the threshold chosen on val."""

from __future__ import annotations

from ..analysis import probes
from ..drawing import flowgraph
from ..limits import work
from . import Chart, Choice, Note, Part, Source, planned

INTRO = ("Which heads carry what decides an output piece? Every block's output is split into its terms (each head's "
         "share from each position, the feed-forward block, the residual), each weighted by how close it is to the "
         "block's output (Ferrando and Voita, 2024); the graph follows the terms at or above the threshold back from "
         "the chosen piece, through the decoder, the cross-attention and the encoder.")


def describe(src: Source) -> list[Part]:
    """One graph per output piece (the first ``flowgraph.step_figures`` draws) at ``flowgraph.DEFAULT_THRESHOLD``,
    behind an output-piece picker; nothing but a note when the graph is over this machine's work limit."""
    tr, a = src.tr, src.analysis
    fits, parts = planned(work.plan_flow(tr, len(a.source_ids), len(a.target_ids)))
    if not fits or not a.target_tokens:
        return parts
    figs = flowgraph.step_figures(probes.flow(tr, a), a.source_tokens, a.target_tokens,
                                  (tr.config.n_encoder_layers, tr.config.n_decoder_layers))
    options = [(f"{t + 1}: {a.target_tokens[t]}", [Chart(fig, name=f"flow-step{t + 1}")]) for t, fig in enumerate(figs)]
    shown = "" if len(figs) == len(a.target_tokens) else f" (the first {len(figs)} of {len(a.target_tokens)} pieces)"
    return [*parts, Note(f"{INTRO} Threshold {flowgraph.DEFAULT_THRESHOLD:g}, chosen on the validation sentences; "
                         f"the app's view changes it and opens a head{shown}."),
            Choice("Output piece", options, 0)]
