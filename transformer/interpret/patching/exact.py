"""Exact patching: :func:`patch`, every site of the kinds asked for, each patched alone."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from ...translator import Translator
from .pair import Pair, prepare
from .runs import MIN_CHANGE, PatchResult, check_direction, check_sites, site_value


def begin(translator: Translator, source: str, edited: str, direction: str, sites: Iterable[str] | str | None,
           **chosen: object) -> tuple[Pair, PatchResult, tuple[str, ...]]:
    """The pair, the result with its metrics and nothing patched yet (its ``note`` set when the change is too small
    to normalise), and the site kinds asked for."""
    check_direction(direction)
    kinds = check_sites(sites)
    pair = prepare(translator, source, edited, **chosen)
    m_clean, m_edit = pair.m(0), pair.m(1)
    result = PatchResult(m_clean, m_edit, pair.logp[0], pair.logp[1], pair.target, pair.foil, pair.step,
                         pair.target_ids, direction, pair.edited_positions)
    if abs(m_clean - m_edit) < MIN_CHANGE:
        result.note = (f"the edit barely changes the metric (m_clean {m_clean:.4g}, m_edit {m_edit:.4g}: a "
                       f"difference under {MIN_CHANGE}), too small to normalise: nothing was patched")
    return pair, result, kinds


def fill(result: PatchResult, pair: Pair, kinds: tuple[str, ...], m: np.ndarray) -> PatchResult:
    """``result`` with each kind's metric and effect arrays from ``m``, one value per site of ``pair.sites(kinds)``."""
    shapes, start = pair.shapes(), 0
    effect = pair.effects(m, result.direction)
    for kind in kinds:
        n = math.prod(shapes[kind])
        result.metric[kind] = m[start:start + n].reshape(shapes[kind])  # (rows, columns)
        result.effect[kind] = effect[start:start + n].reshape(shapes[kind])
        start += n
    return result


def patch(translator: Translator, source: str, edited: str, *, target_ids: Sequence[int] | None = None,
          step: int | None = None, target: int | None = None, foil: int | None = None, direction: str = "denoise",
          sites: Iterable[str] | str | None = None, src_lang: str | None = None,
          tgt_lang: str | None = None, edited_target_ids: Sequence[int] | None = None) -> PatchResult:
    """Patch every site of the kinds ``sites`` (None: all of :data:`SITES`) between ``source`` and ``edited``
    (texts whose source ids have the same length and differ somewhere; else a ``ValueError`` naming both piece
    lists), teacher-forced on ``[BOS] + target_ids`` (default: ``source``'s translation under the default settings).

    ``step``: the decoder position whose logits predict ``target_ids[step]`` (default: the first step where the two
    texts' translations differ, else where their next-piece distributions differ most by KL; a multilingual model's
    forced language code is never a step; ``edited_target_ids``: ``edited``'s translation where the caller has it,
    e.g. under its own settings, else it is translated under the default ones). ``target`` (default
    ``target_ids[step]``) and ``foil`` (default: the edited run's top piece there, its second if that is ``target``)
    make the metric ``logit[target] - logit[foil]``. ``direction``: ``"denoise"`` or ``"noise"`` (see the package
    docstring). When ``|m_clean - m_edit|`` is below :data:`MIN_CHANGE`, nothing is patched: ``effect`` and
    ``metric`` are empty and ``note`` says why. A site whose value is the same in both runs (an unedited piece's
    embedding, the decoder's input) gives the receiving run's own ``m`` without a pass."""
    pair, result, kinds = begin(translator, source, edited, direction, sites, target_ids=target_ids, step=step,
                                 target=target, foil=foil, src_lang=src_lang, tgt_lang=tgt_lang,
                                 edited_target_ids=edited_target_ids)
    if result.note:
        return result
    receiver, donor = pair.receiver_donor(direction)
    every = pair.sites(kinds)
    moved = [i for i, site in enumerate(every)
             if not torch.equal(site_value(receiver, site, pair.step), site_value(donor, site, pair.step))]
    m = np.full(len(every), pair.m(1 if direction == "denoise" else 0))
    m[moved] = pair.metrics([[every[i]] for i in moved], direction)
    return fill(result, pair, kinds, m)
