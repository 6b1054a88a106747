"""Layer by layer: the logit lens over the decoder (when does each output piece become the top prediction?)."""

from __future__ import annotations

import numpy as np

from ..analysis import probes
from ..analysis.inference import Analysis
from ..drawing import figures
from . import Chart, Note, Part, Source, Table

PROBE = "lens"  # what it runs: its record in app.analysis.probes.PROBES (cost, the page's words)
INTRO = ("The logit lens: each decoder layer's output sent straight through the final norm and the output "
         "projection, as if it were the last layer. Where does each output piece become the top prediction?")


def probability_text(p: float) -> str:
    """A probability to three decimals, or below 0.01 to its first two significant digits: ``0.412``, ``0.00041`` (an
    early layer's top prediction over a flat spread: never shown as 0.000 beside "on top from" that layer)."""
    if p >= 0.01 or p <= 0:
        return f"{p:.3f}"
    if p < 1e-6:
        return "below 0.000001"
    return f"{p:.{int(-np.floor(np.log10(p))) + 1}f}"


def top_cell(piece: str, probability: float) -> str:
    """A layer's top prediction and its probability at that layer: ``▁Jemand (probability 0.412)``."""
    return f"{piece} (probability {probability_text(probability)})"


STAYS = "on top from layer"  # the table's column: the layer from which the produced piece stays the top prediction


def stays_top_from(ranks: np.ndarray) -> int | None:
    """The first layer (from 1) from which the produced piece is every layer's top prediction, given its rank at
    each layer (0: the top); None when the last layer's top prediction is another piece."""
    above = np.flatnonzero(np.asarray(ranks) != 0)  # the layers where another piece is on top
    if len(ranks) == 0 or (len(above) and above[-1] == len(ranks) - 1):
        return None
    return int(above[-1]) + 2 if len(above) else 1


def parts(a: Analysis, data: dict, pieces) -> list[Part]:
    """The heatmap of the produced piece's probability per layer and step, the table of each layer's top guess and
    the summary line, from :func:`app.analysis.probes.lens`'s ``data`` (``pieces``: ids -> pieces, the tokenizer's)."""
    steps = a.target_tokens
    chosen = data["chosen"]  # (L, T)
    names = [f"layer {i + 1}" for i in range(chosen.shape[0])]
    fig = figures.attention_heatmap(chosen, names, steps, title="Probability of the piece the model produced",
                                    query_title="decoder layer", key_title="output step (its piece)",
                                    value_name="probability", zmax=1.0)
    fig.update_layout(height=max(int(fig.layout.height or 0), 340))  # a colour bar one can read, even at 4 layers
    stays = [stays_top_from(data["rank"][:, t]) for t in range(len(steps))]
    top = [[top_cell(pieces([int(data['ids'][i, t, 0])])[0], float(data['probs'][i, t, 0])) for i in range(len(names))]
           for t in range(len(steps))]
    rows = [[f"{t}: {p}", str(f) if f else "never", *top[t - 1]] for t, (p, f) in enumerate(zip(steps, stays), 1)]
    settled = [f for f in stays if f]
    return [Chart(fig, name="logit-lens"),
            Table(["output piece", STAYS, *names], rows,
                  "Each layer's top prediction at each output step, with its probability at that layer (an early "
                  f"layer's top prediction may have a small one: its guesses are spread thin); '{STAYS}': the first "
                  "layer from which every layer's top prediction is the piece the model produced ('never': the last "
                  "layer's is another piece, as beam search may choose)."),
            Note(f"{len(settled)} of {len(steps)} pieces are the top prediction by the last layer"
                 + (f"; on average they stay on top from layer {np.mean(settled):.1f}." if settled else "."))]


def describe(src: Source) -> list[Part]:
    return parts(src.analysis, probes.PROBES[PROBE].run(src.tr, src.analysis, 5), src.tr.tokenizer.pieces)
