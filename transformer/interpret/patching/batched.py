"""The batched patched pass: every row's sites patched together, the site on the batch axis, each layer run once
for the rows that have reached it (:func:`patched_metrics`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ...network.masks import decoder_self_mask, padding_mask
from ...network.model import Transformer
from ..methods import full
from .layers import HeadPatch, decoder_layer, encoder_layer
from .runs import ENCODER_SITES, Record, Site, final_stream, memory_of


def _head_patch(rows: list[int], heads: list[int], donor: Tensor, query: int | None) -> HeadPatch | None:
    """Batch rows ``rows`` take head ``heads[i]``'s output from ``donor (H, Tq, d)``: at every query, or at
    ``query`` only."""
    if not rows:
        return None
    def replace(z: Tensor) -> Tensor:
        r, h = torch.tensor(rows, device=z.device), torch.tensor(heads, device=z.device)
        z = z.clone()
        if query is None:
            z[r, h] = donor[h].to(z.dtype)
        else:
            z[r, h, query] = donor[h, query].to(z.dtype)
        return z
    return replace


def _at(rows: Sequence[Sequence[Site]], order: list[int], kind: str, layer: int) -> tuple[list[int], list[int]]:
    """The batch positions (in ``order``) and indices of the ``kind`` patches of ``layer``."""
    found = [(b, index) for b, r in enumerate(order) for k, lay, index in rows[r] if k == kind and lay == layer]
    return [b for b, _ in found], [i for _, i in found]


def _enter(x: Tensor | None, order: list[int], rows: Sequence[Sequence[Site]], start: dict[int, int], kind: str,
           layer: int, receiver_stream: Tensor, donor_stream: Tensor) -> tuple[Tensor | None, list[int]]:
    """The encoder's or the decoder's active batch ``x`` at ``layer`` and its rows' ``order``: the rows whose
    ``start`` is ``layer`` join it from the receiver's stream there (``(S, D)`` or ``(T, D)``), then its rows'
    ``kind`` patches (``enc_resid`` or ``dec_resid``) take the donor's stream rows (None: no row has entered yet)."""
    new = [r for r, s in start.items() if s == layer]
    if new:
        fresh = receiver_stream.expand(len(new), *receiver_stream.shape)  # (new, S or T, D)
        x, order = fresh.clone() if x is None else torch.cat([x, fresh]), order + new  # fresh: patches write in it
    if x is not None:
        b, p = _at(rows, order, kind, layer)
        if b:
            x[b, p] = donor_stream[p]
    return x, order


@torch.no_grad()
def patched_metrics(model: Transformer, src: Tensor, tgt: Tensor, receiver: Record, donor: Record,
                    rows: Sequence[Sequence[Site]], direction_m: Tensor, bias_m: float) -> np.ndarray:
    """``m`` of the ``receiver`` run with each row's sites taken from ``donor``, ``(len(rows),)``. ``src (1, S)``
    (any of the two runs' ids: only their padding mask is read), ``tgt (1, T)``; ``direction_m (D,)`` the
    difference of the target's and the foil's rows of the output projection, ``bias_m`` of their biases.

    A row enters the encoder at its first encoder patch's layer (from the receiver's stream there) and the decoder at
    layer 0 when it has one, else at its first decoder patch's layer; rows are batched, each layer once."""
    cfg = model.config
    n_enc, n_dec = cfg.n_encoder_layers, cfg.n_decoder_layers
    step = tgt.size(1) - 1
    src_mask = padding_mask(src, cfg.pad_id)  # (1, 1, 1, S)
    self_mask = decoder_self_mask(tgt, cfg.pad_id)  # (1, 1, T, T)
    start_enc = {r: min(lay for k, lay, _ in sites if k in ENCODER_SITES) for r, sites in enumerate(rows)
                 if any(k in ENCODER_SITES for k, _, _ in sites)}
    memory: dict[int, Tensor] = {}  # a row's own memory (S, D), for rows with an encoder patch
    x, order = None, []
    for lay in range(n_enc + 1) if start_enc else ():
        x, order = _enter(x, order, rows, start_enc, "enc_resid", lay, receiver.enc_stream[lay], donor.enc_stream[lay])
        if x is None:
            continue
        if lay < n_enc:
            b, h = _at(rows, order, "enc_head", lay)
            x, _ = encoder_layer(model.encoder_layers[lay], x, src_mask, _head_patch(b, h, donor.enc_z[lay], None))
    if start_enc:
        memory = dict(zip(order, memory_of(model, x)))
    start_dec = {r: 0 if r in memory else min((lay for _, lay, _ in sites), default=n_dec)
                 for r, sites in enumerate(rows)}
    y, order = None, []
    for lay in range(n_dec + 1):
        y, order = _enter(y, order, rows, start_dec, "dec_resid", lay, receiver.dec_stream[lay], donor.dec_stream[lay])
        if y is None:
            continue
        if lay == n_dec:
            break
        layer = model.decoder_layers[lay]
        k, v = receiver.cross_k[lay], receiver.cross_v[lay]  # (H, S, d)
        own = [b for b, r in enumerate(order) if r in memory]
        b, j = _at(rows, order, "cross_kv", lay)
        if own or b:
            k, v = k.expand(len(order), *k.shape).clone(), v.expand(len(order), *v.shape).clone()  # (N, H, S, d)
            if own:
                k[own], v[own] = layer.cross_attn.project_kv(torch.stack([memory[order[i]] for i in own]))
            if b:
                k[b, :, j], v[b, :, j] = donor.cross_k[lay][:, j].transpose(0, 1), \
                    donor.cross_v[lay][:, j].transpose(0, 1)  # (H, n, d) -> (n, H, d)
        else:
            k, v = k[None], v[None]  # (1, H, S, d): every row reads the receiver's memory
        bs, hs = _at(rows, order, "dec_head", lay)
        bc, hc = _at(rows, order, "cross_head", lay)
        y, _, _ = decoder_layer(layer, y, self_mask, (k, v), src_mask,
                                _head_patch(bs, hs, donor.self_z[lay], step),
                                _head_patch(bc, hc, donor.cross_z[lay], step))
    last = final_stream(model, y[:, step])  # (N, D)
    m = full(last) @ direction_m + bias_m  # (N,)
    out = np.empty(len(rows))
    out[order] = m.double().cpu().numpy()
    return out
