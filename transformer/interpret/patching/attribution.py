"""Attribution patching: every site's effect to first order from one forward and one backward pass
(:func:`first_order`), and :func:`preview`, its top sites patched exactly beside it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ...translator import Translator
from .exact import begin, fill
from .pair import Pair
from .runs import PatchResult, Site, gradients, site_value


@dataclass
class Preview:
    """:func:`preview`'s answer: ``estimate``, every site's first-order effect (attribution patching: one forward
    and one backward pass); ``sites``, the ``top`` sites by its absolute value; ``exact``, their effects patched
    exactly, one at a time; ``agreement``, the Spearman rank correlation of the two over those sites (1: the same
    order; nan when fewer than two sites or either side is constant)."""

    estimate: PatchResult
    sites: list[Site]
    first_order: np.ndarray
    exact: np.ndarray
    agreement: float


def first_order(pair: Pair, direction: str) -> np.ndarray:
    """Attribution patching (Nanda 2023; Syed et al. 2023): each site's patched ``m`` to first order, ``m_receiver +
    (donor - receiver) . dm/d(value)`` at the receiving run, for ``pair.sites()`` in order; one forward and one
    backward pass whatever the number of sites."""
    receiver, donor = pair.receiver_donor(direction)
    run = 1 if direction == "denoise" else 0
    grad = gradients(pair.model, pair.src[run:run + 1], pair.tgt, pair.direction_m, pair.bias_m)
    step = pair.step
    return pair.m(run) + np.array([float(((site_value(donor, s, step) - site_value(receiver, s, step)).double()
                                          * site_value(grad, s, step).double()).sum()) for s in pair.sites()])


def preview(translator: Translator, source: str, edited: str, *, top: int = 16, direction: str = "denoise",
            sites: Iterable[str] | str | None = None, **chosen: object) -> Preview:
    """For a model too large to patch every site exactly on a CPU (over a billion parameters): every site's
    first-order effect (:func:`first_order`), then the ``top`` sites by its absolute value patched exactly, and how
    well the two agree. ``chosen``: :func:`patch`'s ``target_ids``, ``step``, ``target``, ``foil``, ``src_lang``,
    ``tgt_lang``, ``edited_target_ids``. Nothing is estimated when the change is too small to normalise
    (``estimate.note``)."""
    pair, result, kinds = begin(translator, source, edited, direction, sites, **chosen)
    if result.note:
        return Preview(result, [], np.zeros(0), np.zeros(0), float("nan"))
    every = pair.sites()
    estimate = first_order(pair, direction)
    asked = [i for i, s in enumerate(every) if s[0] in kinds]
    fill(result, pair, kinds, estimate[asked])
    effect = pair.effects(estimate[asked], direction)
    chosen_sites = [every[asked[i]] for i in np.argsort(-np.abs(effect), kind="stable")[:top]]
    exact = pair.effects(pair.metrics([[s] for s in chosen_sites], direction), direction)
    estimated = np.array([effect[asked.index(every.index(s))] for s in chosen_sites])
    return Preview(result, chosen_sites, estimated, exact, spearman(estimated, exact))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """The Spearman rank correlation of two equally long arrays (nan for fewer than two values or a constant one)."""
    if len(a) < 2:
        return float("nan")
    ra, rb = (np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float) for x in (a, b))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
