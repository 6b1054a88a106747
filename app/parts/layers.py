"""Layer by layer: the logit lens over the decoder (when does each output piece become the top prediction?)."""

from __future__ import annotations

import numpy as np

from transformer import Translator

from ..compute import probes, work
from ..compute.inference import Analysis
from ..drawing import figures
from . import Chart, Note, Part, Source, Table

KEY = "lens"
WORKING = "Reading every layer's predictions…"
INTRO = ("The logit lens: each decoder layer's output sent straight through the final norm and the output "
         "projection, as if it were the last layer. Where does each output piece become the top prediction?")


def top_cell(piece: str, probability: float) -> str:
    """A layer's top prediction and what its number is: ``▁Jemand (probability 0.412)``."""
    return f"{piece} (probability {probability:.3f})"


def parts(a: Analysis, data: dict, pieces) -> list[Part]:
    """The heatmap of the produced piece's probability per layer and step, the table of each layer's top guess and
    the summary line, from :func:`app.compute.probes.lens`'s ``data`` (``pieces``: ids -> pieces, the tokenizer's)."""
    steps = a.target_tokens
    chosen = data["chosen"]  # (L, T)
    names = [f"layer {i + 1}" for i in range(chosen.shape[0])]
    fig = figures.attention_heatmap(chosen, names, steps, title="Probability of the piece the model produced",
                                    query_title="decoder layer", key_title="output step (its piece)",
                                    value_name="probability", zmax=1.0)
    fig.update_layout(height=max(int(fig.layout.height or 0), 340))  # a colour bar one can read, even at 4 layers
    first_top = [next((i + 1 for i in range(chosen.shape[0]) if data["rank"][i, t] == 0), None)
                 for t in range(len(steps))]
    top = [[top_cell(pieces([int(data['ids'][i, t, 0])])[0], float(data['probs'][i, t, 0])) for i in range(len(names))]
           for t in range(len(steps))]
    rows = [[f"{t}: {p}", str(f) if f else "never", *top[t - 1]] for t, (p, f) in enumerate(zip(steps, first_top), 1)]
    settled = [f for f in first_top if f]
    return [Chart(fig, name="logit-lens"),
            Table(["output piece", "top from layer", *names], rows,
                  "Each layer's top prediction at each output step, with its probability; 'top from layer': the "
                  "first layer whose top prediction is the piece the model produced."),
            Note(f"{len(settled)} of {len(steps)} pieces are the top prediction by the last layer"
                 + (f"; on average from layer {np.mean(settled):.1f}." if settled else "."))]


def cost(tr: Translator, a: Analysis) -> float:
    """The work of :func:`describe` (units): two teacher-forced passes."""
    return work.forced_work(tr, len(a.source_ids), len(a.target_ids), 2)


def describe(src: Source) -> list[Part]:
    return parts(src.analysis, probes.lens(src.tr, src.analysis, 5), src.tr.tokenizer.pieces)
