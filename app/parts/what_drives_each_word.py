"""What drives each word: attribution of each output piece to the source and to the earlier output."""

from __future__ import annotations

from ..analysis import probes
from ..analysis.inference import Analysis
from ..drawing import contributions, figures
from . import Chart, Note, Part, Source, Table

INTRO = ("For each output piece, how much each source piece and each earlier output piece pushed the model towards "
         f"it: {figures.DIVERGING_WORDS}. Unlike attention weights, these follow the whole network.")
METHOD_HELP = ("Gradient attributions over the token embeddings: input × gradient, or integrated gradients from "
               "an all-zero embedding (32 points on the path); each number is a piece's share of the output "
               "piece's log-probability. 32 points do not settle every number: on validation sentences, with 128 "
               "points the source piece that pushed most changed for about 1 output piece in 4, so read the "
               "pattern, not the third decimal.")
AGREEMENT_HELP = "Spearman rank correlation over the source pieces."
METHODS = {"integrated_gradients": "Integrated gradients (32 steps)", "input_x_gradient": "Input × gradient"}


def charts(a: Analysis, data: dict, window: tuple[int, int, int, int] | None = None) -> list[Chart]:
    """The two attribution maps and the source share per step, from :func:`app.analysis.probes.attributions`'s ``data``
    (``window``: rows ``q0:q1`` of the output pieces attributed and columns ``k0:k1`` of the source)."""
    src, tgt = data["source"], data["target"]  # (T', S), (T', T): the output pieces of the span attributed
    first, end = (int(x) for x in data.get("span", (0, len(src))))
    outputs = a.target_tokens[first:end]
    q0, q1, k0, k1 = window or (0, len(outputs), 0, len(a.source_tokens))
    d0, d1 = first + q0, min(first + q1, len(a.decoder_input_tokens))
    bound = float(max(abs(src).max(), abs(tgt).max(), 1e-9))
    s_share = abs(src).sum(1) / (abs(src).sum(1) + abs(tgt).sum(1) + 1e-12)  # (T',)
    args = dict(query_title="output piece", zmin=-bound, zmax=bound, colorscale=figures.DIVERGING,
                value_name="attribution", query_offset=first + q0)
    return [Chart(figures.attention_heatmap(src[q0:q1, k0:k1], outputs[q0:q1], a.source_tokens[k0:k1],
                                            title="Attribution to the source", key_title="source piece",
                                            key_offset=k0, **args), name="attribution-source"),
            Chart(figures.attention_heatmap(tgt[q0:q1, d0:d1], outputs[q0:q1], a.decoder_input_tokens[d0:d1],
                                            title="Attribution to the decoder input", key_title="decoder input",
                                            key_offset=d0, key_first=0, **args), name="attribution-target"),
            Chart(contributions.attribution_share(s_share[q0:q1], outputs[q0:q1], first + q0),
                  name="attribution-share")]


def agreement(data: dict) -> Table:
    """How well each cross-attention head agrees with the attribution to the source."""
    values = data["agreement"]  # (L, H)
    return Table(["layer", "head", "rank correlation with the attribution"],
                 [[str(i + 1), str(h + 1), f"{values[i, h]:.3f}"] for i in range(values.shape[0])
                  for h in range(values.shape[1])],
                 "How well each cross-attention head's weights agree with the attribution to the source: 1 = the head "
                 "ranks the source pieces exactly as the attribution does, 0 = no relation, −1 = the reverse (mean "
                 "over the output steps).")


def describe(src: Source) -> list[Part]:
    method = src.options.get("method", "integrated_gradients")
    data = probes.attributions(src.tr, src.analysis, method, steps=int(src.options.get("steps", 32)))
    return [Note(f"Method: {METHODS.get(method, method)}. {INTRO}"), *charts(src.analysis, data), agreement(data)]
