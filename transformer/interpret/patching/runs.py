"""The sites, the result of a patching run (:class:`PatchResult`) and one run's every patchable value
(:class:`Record`): recorded through the layers of :mod:`.layers`, or their gradients for attribution patching."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ...network.masks import decoder_self_mask, padding_mask
from ...network.model import Transformer, layer_norm
from ..methods import full
from .layers import decoder_layer, encoder_layer

SITES = ("enc_resid", "enc_head", "cross_kv", "cross_head", "dec_head", "dec_resid")
ENCODER_SITES = ("enc_resid", "enc_head")  # the sites that change the memory (every decoder layer reads it)
DIRECTIONS = ("denoise", "noise")
MIN_CHANGE = 1e-3  # |m_clean - m_edit| below this (in logits) is too small to normalise: nothing is computed
Site = tuple[str, int, int]  # (site kind, 0-based layer or row, position or head)


@dataclass
class PatchResult:
    """One patching run. ``m_clean``, ``m_edit``: ``logit[target] - logit[foil]`` at ``step`` in each run;
    ``logp_clean``, ``logp_edit``: ``log p(target)`` there; ``target_ids`` the teacher-forced output (decoder input
    ``[BOS] + target_ids[:step]``); ``edited_positions`` the source positions whose ids differ; ``effect[site]`` the
    normalised effect, ``metric[site]`` the patched ``m``, each of the site's shape (see the package docstring).
    ``note``: why nothing was computed when ``|m_clean - m_edit|`` is below :data:`MIN_CHANGE` (``effect`` and
    ``metric`` are then empty), else ``""``."""

    m_clean: float
    m_edit: float
    logp_clean: float
    logp_edit: float
    target: int
    foil: int
    step: int
    target_ids: list[int]
    direction: str
    edited_positions: list[int]
    effect: dict[str, np.ndarray] = field(default_factory=dict)
    metric: dict[str, np.ndarray] = field(default_factory=dict)
    note: str = ""


def check_direction(direction: str) -> str:
    """``direction`` if it is one of :data:`DIRECTIONS`, else a ``ValueError`` that names them."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    return direction


def check_sites(sites: Iterable[str] | str | None) -> tuple[str, ...]:
    """The site kinds asked for, in :data:`SITES` order (None: all; one name alone is one kind)."""
    if sites is None:
        return SITES
    asked = {sites} if isinstance(sites, str) else set(sites)
    unknown = asked - set(SITES)
    if unknown:
        raise ValueError(f"unknown sites {sorted(unknown)}: choose among {SITES}")
    return tuple(s for s in SITES if s in asked)


@dataclass
class Record:
    """Every patchable value of one run (no batch axis): ``enc_stream`` ``L_e+1`` x ``(S, D)``, ``enc_z`` ``L_e`` x
    ``(H, S, d)``, ``memory`` ``(S, D)``, ``cross_k`` / ``cross_v`` ``L_d`` x ``(H, S, d)``, ``dec_stream``
    ``L_d+1`` x ``(T, D)``, ``self_z`` / ``cross_z`` ``L_d`` x ``(H, T, d)``, ``final`` ``(D,)``: the stream at the
    last position after the final norm (what the output projection reads)."""

    enc_stream: list[Tensor]
    enc_z: list[Tensor]
    memory: Tensor
    cross_k: list[Tensor]
    cross_v: list[Tensor]
    dec_stream: list[Tensor]
    self_z: list[Tensor]
    cross_z: list[Tensor]
    final: Tensor

    def zeros(self) -> Record:
        """The same shapes, all zero (zero-ablation: a head's output set to 0 is the model's ``head_mask``)."""
        z = torch.zeros_like
        return Record([z(t) for t in self.enc_stream], [z(t) for t in self.enc_z], z(self.memory),
                      [z(t) for t in self.cross_k], [z(t) for t in self.cross_v], [z(t) for t in self.dec_stream],
                      [z(t) for t in self.self_z], [z(t) for t in self.cross_z], z(self.final))


RECORD_FIELDS = tuple(Record.__dataclass_fields__)


def site_value(run: Record, site: Site, step: int) -> Tensor:
    """The value of ``run`` that ``site`` takes from the other run: a stream row ``(D,)``, a head's output ``(S, d)``
    (encoder) or ``(d,)`` (at the step's query), a memory row's keys and values ``(2, H, d)``."""
    kind, a, b = site
    if kind == "enc_resid":
        return run.enc_stream[a][b]
    if kind == "enc_head":
        return run.enc_z[a][b]
    if kind == "cross_kv":
        return torch.stack([run.cross_k[a][:, b], run.cross_v[a][:, b]])
    if kind == "cross_head":
        return run.cross_z[a][b, step]
    if kind == "dec_head":
        return run.self_z[a][b, step]
    if kind == "dec_resid":
        return run.dec_stream[a][b]
    check_sites([kind])
    raise AssertionError(kind)


def final_stream(model: Transformer, x: Tensor) -> Tensor:
    """The decoder's last layer output ``(..., D)`` through the final norm of pre-norm (post-norm: as it is)."""
    return x if model.decoder_norm is None else layer_norm(model.decoder_norm, x)


def memory_of(model: Transformer, x: Tensor) -> Tensor:
    """The encoder's last layer output ``(..., S, D)`` through the final norm of pre-norm: the memory."""
    return x if model.encoder_norm is None else layer_norm(model.encoder_norm, x)


def _run(model: Transformer, src: Tensor, tgt: Tensor) -> list[list[Tensor]]:
    """The runs ``src (N, S)`` (unpadded), each teacher-forced on ``tgt (1, T)``, through :func:`encoder_layer` and
    :func:`decoder_layer`: every patchable value, batched, in :class:`Record`'s field order."""
    n = src.size(0)
    src_mask = padding_mask(src, model.config.pad_id)  # (N, 1, 1, S)
    self_mask = decoder_self_mask(tgt, model.config.pad_id)  # (1, 1, T, T)
    x = model.embed(src, model.src_embed)  # (N, S, D)
    enc_stream, enc_z = [x], []
    for layer in model.encoder_layers:
        x, z = encoder_layer(layer, x, src_mask)
        enc_stream.append(x)
        enc_z.append(z)
    memory = memory_of(model, x)
    y = model.embed(tgt, model.tgt_embed).expand(n, -1, -1)  # (1, T, D) -> (N, T, D)
    cross_k, cross_v, dec_stream, self_z, cross_z = [], [], [y], [], []
    for layer in model.decoder_layers:
        k, v = layer.cross_attn.project_kv(memory)  # (N, H, S, d) each
        y, zs, zc = decoder_layer(layer, y, self_mask, (k, v), src_mask)
        for seq, value in ((cross_k, k), (cross_v, v), (dec_stream, y), (self_z, zs), (cross_z, zc)):
            seq.append(value)
    return [enc_stream, enc_z, [memory], cross_k, cross_v, dec_stream, self_z, cross_z,
            [final_stream(model, y[:, -1])]]  # the last: (N, D)


def _records(fields: list[list[Tensor]], n: int) -> list[Record]:
    """:func:`_run`'s batched values as one :class:`Record` per run."""
    return [Record(*[f[0][i] if name in ("memory", "final") else [t[i] for t in f]
                     for name, f in zip(RECORD_FIELDS, fields)]) for i in range(n)]


@torch.no_grad()
def record(model: Transformer, src: Tensor, tgt: Tensor) -> list[Record]:
    """Every patchable value of the runs ``src (N, S)`` (unpadded), each teacher-forced on ``tgt (1, T)``."""
    return _records(_run(model, src, tgt), src.size(0))


def gradients(model: Transformer, src: Tensor, tgt: Tensor, direction_m: Tensor, bias_m: float) -> Record:
    """The gradient of ``m`` with respect to every patchable value of the run ``src (1, S)`` (``torch.autograd.grad``:
    nothing is written into the model's parameters)."""
    with torch.enable_grad():
        fields = _run(model, src, tgt)
        m = full(fields[-1][0][0]) @ direction_m + bias_m
        flat = [t for f in fields for t in f]
        grads = torch.autograd.grad(m, flat, allow_unused=True)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(flat, grads)]
    it = iter(grads)
    return _records([[next(it) for _ in f] for f in fields], 1)[0]
