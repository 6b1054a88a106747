"""Step through: the top-k candidates of one output step and where its cross-attention looked."""

from __future__ import annotations

import numpy as np

from ..analysis.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import escape
from . import Chart, Choice, Note, Part, Source, as_json, variant

INTRO = ("Step-through decoding: at each output step, the model's top candidates for the next piece with their "
         "probabilities (given the pieces before it), and where that step's cross-attention looked.")
SHOWN_TOP_K = 8
OFFLINE_STEPS = 60  # output steps the offline page holds


def so_far(a: Analysis, t: int) -> str:
    """The output up to step ``t`` (0-based), the piece of this step last, in brackets."""
    return "  ".join(a.target_tokens[:t]) + ("  " if t else "") + f"[{a.target_tokens[t]}]"


def candidates(a: Analysis, t: int, k: int = SHOWN_TOP_K) -> Chart:
    """The top ``k`` candidates of step ``t`` (0-based), the kept piece an extra bar when it is not among them."""
    cands, probs = list(a.topk_tokens[t][:k]), np.asarray(a.topk_probs[t][:k])
    ids = list(a.topk_ids[t][:k])
    chosen = ids.index(a.target_ids[t]) if a.target_ids[t] in ids else None
    if chosen is None:  # the kept piece is outside the top k: show it as an extra bar
        cands, probs, chosen = [*cands, a.target_tokens[t]], np.append(probs, a.chosen_probs[t]), len(cands)
    return Chart(figures.topk_figure(cands, probs, chosen),
                 f"Kept piece: p = {a.chosen_probs[t]:.3f}. Beam search can keep a piece that is not the most "
                 "probable at its own step, when it leads to a better whole sentence.", f"step{t + 1}-topk")


def looked(a: Analysis, t: int, layer: int, zrange: tuple[float, float] | None = None) -> Chart:
    """Step ``t``'s (0-based) cross-attention per head in ``layer`` (from 1)."""
    cross = a.cross[layer - 1][:, t, :]  # (H, S)
    return Chart(figures.step_cross_figure(cross, a.source_tokens, a.target_tokens[t], zrange=zrange),
                 name=f"step{t + 1}-cross")


def describe(src: Source) -> list[Part]:
    a = src.analysis
    if not len(a.topk_ids[0]):  # a translation without its candidates: they need the model
        src.tr  # noqa: B018  (raises NeedsModel)
    n_layers = a.cross.shape[0]
    base = as_json(looked(a, 0, n_layers, (0.0, 1.0)))  # built once; the other steps and layers are its variants
    said = f"<b>{escape(a.target_tokens[0])}</b>"  # the produced piece, in the title
    steps = []
    for t in range(min(len(a.target_tokens), OFFLINE_STEPS)):
        title = base.figure["layout"]["title"]["text"].replace(said, f"<b>{escape(a.target_tokens[t])}</b>")
        layers = Choice("Cross-attention layer", [
            (f"layer {i}", [variant(base, np.vstack([a.cross[i - 1][:, t].mean(axis=0, keepdims=True),
                                                      a.cross[i - 1][:, t]]),  # (1 + H, S): the mean, each head
                                    title, f"step{t + 1}-cross")]) for i in range(1, n_layers + 1)], n_layers - 1)
        steps.append((f"{t + 1}: {a.target_tokens[t]}", [Note("Output so far: " + so_far(a, t)), candidates(a, t),
                                                         layers]))
    return [Choice("Output step", steps)]
