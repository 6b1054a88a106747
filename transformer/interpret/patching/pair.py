"""A clean and an edited source prepared for patching (:class:`Pair`, :func:`prepare`): their runs recorded, and the
defaults of what is measured: the step, the target and the foil."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ...network.model import Transformer
from ...translator import Translator
from ..methods import full, require_eval
from .batched import patched_metrics
from .runs import SITES, Record, Site, check_direction, record

PATCH_BYTES = 256_000_000  # rows patched in one batch: about this much working memory (rows are independent)


@dataclass
class Pair:
    """A clean and an edited source prepared for patching: their ids ``src (2, S)``, the decoder input ``tgt (1,
    step + 1)``, ``target_ids``, the metric's pieces and their two rows of the output projection (``direction_m (D,)``
    the target's row minus the foil's, ``bias_m`` their biases' difference), and both runs' recorded values
    (``runs[0]`` clean, ``runs[1]`` edited) with ``log p(target)`` in each (``logp``)."""

    model: Transformer
    src: Tensor
    tgt: Tensor
    target_ids: list[int]
    target: int
    foil: int
    runs: list[Record]
    direction_m: Tensor
    bias_m: float
    logp: tuple[float, float]

    @property
    def edited_positions(self) -> list[int]:
        """The source positions whose ids differ."""
        return (self.src[0] != self.src[1]).nonzero()[:, 0].tolist()

    @property
    def step(self) -> int:
        """The decoder position of the metric (the last of ``tgt``)."""
        return self.tgt.size(1) - 1

    def m(self, run: int) -> float:
        """``logit[target] - logit[foil]`` of run ``run`` (0 clean, 1 edited), unpatched."""
        return float(full(self.runs[run].final) @ self.direction_m + self.bias_m)

    def shapes(self) -> dict[str, tuple[int, int]]:
        """Each site's array shape (see the package docstring)."""
        cfg, s = self.model.config, self.src.size(1)
        h, le, ld = cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers
        return {"enc_resid": (le + 1, s), "enc_head": (le, h), "cross_kv": (ld, s), "cross_head": (ld, h),
                "dec_head": (ld, h), "dec_resid": (ld + 1, self.step + 1)}

    def sites(self, kinds: Sequence[str] = SITES) -> list[Site]:
        """Every site of ``kinds``, kind by kind in that order, each kind's array in row-major order."""
        shapes = self.shapes()
        return [(kind, a, b) for kind in kinds for a, b in np.ndindex(shapes[kind])]

    def receiver_donor(self, direction: str) -> tuple[Record, Record]:
        """The run patched and the run its values come from: denoise, the edited and the clean; noise, the other
        way round."""
        return (self.runs[1], self.runs[0]) if check_direction(direction) == "denoise" else (self.runs[0],
                                                                                           self.runs[1])

    def metrics(self, rows: Sequence[Sequence[Site]], direction: str = "denoise", zero: bool = False) -> np.ndarray:
        """``m`` with each row's sites patched together, ``(len(rows),)``: denoise, the edited run with them from the
        clean run; noise, the clean run with them from the edited run; ``zero``: the ``direction``'s receiving run
        with them set to zero instead."""
        receiver, donor = self.receiver_donor(direction)
        donor = receiver.zeros() if zero else donor
        cfg = self.model.config
        row_bytes = 16 * max(self.src.size(1), self.tgt.size(1)) * max(cfg.d_ff, 4 * cfg.d_model)  # a few live
        chunk = max(1, PATCH_BYTES // row_bytes)  # float32 tensors of the widest sub-layer, per row
        return np.concatenate([patched_metrics(self.model, self.src[:1], self.tgt, receiver, donor,
                                               rows[i:i + chunk], self.direction_m, self.bias_m)
                               for i in range(0, len(rows), chunk)] or [np.zeros(0)])

    def effects(self, m: np.ndarray, direction: str) -> np.ndarray:
        """The normalised effect of patched metrics ``m`` (see the package docstring)."""
        clean, edit = self.m(0), self.m(1)
        return (m - edit) / (clean - edit) if check_direction(direction) == "denoise" else (clean - m) / (clean - edit)


def _is_id(value: object) -> bool:
    """An integer (Python's or NumPy's; not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _pieces_message(tr: Translator, source_ids: list[int], edited_ids: list[int]) -> str:
    a, b = tr.tokenizer.pieces(source_ids), tr.tokenizer.pieces(edited_ids)
    return f"source {a} ({len(a)} pieces) and edited {b} ({len(b)} pieces)"


@torch.no_grad()
def prepare(translator: Translator, source: str, edited: str, *, target_ids: Sequence[int] | None = None,
            step: int | None = None, target: int | None = None, foil: int | None = None,
            src_lang: str | None = None, tgt_lang: str | None = None,
            edited_target_ids: Sequence[int] | None = None) -> Pair:
    """The :class:`Pair` :func:`patch` patches (its arguments, defaults and errors are :func:`patch`'s)."""
    model = translator.model
    require_eval(model, "patch")
    cfg = model.config
    clean_ids, _ = translator.encode_source(source, src_lang)
    edited_ids, _ = translator.encode_source(edited, src_lang)
    if len(clean_ids) != len(edited_ids) or clean_ids == edited_ids:
        raise ValueError("the two texts must have the same number of pieces and differ somewhere: "
                         + _pieces_message(translator, clean_ids, edited_ids))
    forced = len(translator.tokenizer.target_prefix(tgt_lang))  # a language code: never a step
    needed = [text for text, missing in ((source, target_ids is None),
                                         (edited, step is None and edited_target_ids is None)) if missing]
    translated = [r.target_ids for r in translator.translate_batch(needed, src_lang=src_lang, tgt_lang=tgt_lang)
                  ] if needed else []  # in the order of `needed`
    target_ids = list(translated.pop(0) if target_ids is None else target_ids)
    other = list(translated.pop(0) if translated else edited_target_ids or [])  # the edited text's translation
    for name, values in (("target_ids", target_ids), ("edited_target_ids", other), ("target", [target]),
                         ("foil", [foil])):
        if not all(v is None and name != "target_ids" or _is_id(v) and 0 <= v < cfg.tgt_vocab_size for v in values):
            raise ValueError(f"{name} must be piece ids in [0, {cfg.tgt_vocab_size}), not {values}")
    target_ids = [int(t) for t in target_ids]
    if len(target_ids) <= forced:
        raise ValueError(f"target_ids {target_ids} has no step after the forced language code")
    if len(target_ids) + 1 > cfg.max_len:
        raise ValueError(f"target_ids of {len(target_ids)} pieces is longer than the model takes ({cfg.max_len - 1})")
    src = torch.tensor([clean_ids, edited_ids], device=translator.device)  # (2, S)
    if step is None:  # the first step where the edited text's translation differs
        step = next((t for t in range(forced, len(target_ids)) if t >= len(other) or other[t] != target_ids[t]), None)
        if step is None:  # the same translation: where the next-piece distributions differ most
            tgt = torch.tensor([[cfg.bos_id, *target_ids[:-1]]] * 2, device=src.device)  # (2, T)
            logp = full(model(src, tgt).logits).log_softmax(-1)  # (2, T, V)
            kl = (logp[0].exp() * (logp[0] - logp[1])).sum(-1)  # (T,)
            step = forced + int(kl[forced:].argmax())
    if not (_is_id(step) and forced <= step < len(target_ids)):
        raise ValueError(f"step must be an output step in [{forced}, {len(target_ids)}), not {step!r}"
                         + (" (the forced language code is no step)" if forced else ""))
    step = int(step)
    tgt = torch.tensor([[cfg.bos_id, *target_ids[:step]]], device=src.device)  # (1, step + 1)
    runs = record(model, src, tgt)
    logits = full(model.generator(torch.stack([r.final for r in runs])))  # (2, V): the two runs at the step
    logp = logits.log_softmax(-1)
    target = target_ids[step] if target is None else int(target)
    if foil is None:
        top2 = logits[1].topk(2).indices.tolist()
        foil = top2[1] if top2[0] == target else top2[0]
    foil = int(foil)
    if target == foil:
        raise ValueError(f"target and foil must be two pieces, not both {target}")
    weight = full(model.generator.weight[[target, foil]])  # (2, D): two rows of the output projection
    b = model.generator.bias
    bias = 0.0 if b is None else float(full(b[target] - b[foil]))
    return Pair(model, src, tgt, target_ids, target, foil, runs, weight[0] - weight[1], bias,
                (float(logp[0, target]), float(logp[1, target])))
