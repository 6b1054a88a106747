"""Activation and path patching of a translation (causal tracing, Meng et al. 2022; Heimersheim and Nanda's guide):
which layers, positions and heads carry the change of one source word to the output.

Two sources of the same piece count, ``source`` (clean) and ``edited``, are read teacher-forced on the same decoder
input ``[BOS] + target_ids``. The metric at decoder position ``step`` is ``m = logit[target] - logit[foil]`` from
the final logits (two rows of the output projection). One *site* at a time takes its value from the other run:

- ``enc_resid`` ``(L_e+1, S)``: the encoder stream at a source position, row 0 the embeddings (scaled, positions
  added), row ``l`` encoder layer ``l``'s output (before the final norm of pre-norm);
- ``enc_head`` ``(L_e, H)``: an encoder self-attention head's output (before W_O) at every position;
- ``cross_kv`` ``(L_d, S)``: decoder layer ``l``'s cross-attention reads source position ``j``'s memory row (its keys
  and values, for every head and query) from the other run; every other layer reads the run's own memory (a path
  patch: at which decoder layer is source piece ``j`` read);
- ``cross_head``, ``dec_head`` ``(L_d, H)``: a cross- or decoder self-attention head's output at query ``step``;
- ``dec_resid`` ``(L_d+1, step+1)``: the decoder stream at a position after row ``l`` (row 0 the embeddings).

``"denoise"``: the edited run with one site from the clean run, ``E = (m_patched - m_edit) / (m_clean - m_edit)``;
``"noise"``: the clean run with one site from the edited run, ``E = (m_clean - m_patched) / (m_clean - m_edit)``.
1: the site carries the whole change. Values outside [0, 1] are kept.

The layers run here, each through the model's own sub-layers (``SublayerStack.residual``, the attention's
projections, ``merge_heads``, the feed-forward block, the norms): no hook, nothing set on the model, so one model
serves every visitor. Sites are batched (the site on the batch axis) and share the unpatched prefix's work: a row
enters the encoder or the decoder at the layer of its first patch, from the recorded stream of the run it patches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..network.attention import MultiHeadAttention
from ..network.masks import decoder_self_mask, padding_mask
from ..network.model import DecoderLayer, EncoderLayer, Transformer, layer_norm
from ..translator import Translator
from .methods import full, require_eval

SITES = ("enc_resid", "enc_head", "cross_kv", "cross_head", "dec_head", "dec_resid")
ENCODER_SITES = ("enc_resid", "enc_head")  # the sites that change the memory (every decoder layer reads it)
DIRECTIONS = ("denoise", "noise")
PATCH_BYTES = 256_000_000  # rows patched in one batch: about this much working memory (rows are independent)
MIN_CHANGE = 1e-3  # |m_clean - m_edit| below this (in logits) is too small to normalise: nothing is computed
Site = tuple[str, int, int]  # (site kind, 0-based layer or row, position or head)


@dataclass
class PatchResult:
    """One patching run. ``m_clean``, ``m_edit``: ``logit[target] - logit[foil]`` at ``step`` in each run;
    ``logp_clean``, ``logp_edit``: ``log p(target)`` there; ``target_ids`` the teacher-forced output (decoder input
    ``[BOS] + target_ids[:step]``); ``edited_positions`` the source positions whose ids differ; ``effect[site]`` the
    normalised effect, ``metric[site]`` the patched ``m``, each of the site's shape (see the module docstring).
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


# ------------------------------------------------------------------------------------------------ the layers


HeadPatch = Callable[[Tensor], Tensor]  # each head's output (N, H, Tq, d) -> the same with some rows replaced


def attend(module: MultiHeadAttention, query: Tensor, kv: tuple[Tensor, Tensor], mask: Tensor | None,
           heads: HeadPatch | None = None) -> tuple[Tensor, Tensor]:
    """One attention sub-layer through the module's own projections: ``query (N, Tq, D)``, keys and values
    ``(N, H, Tk, d)`` -> the output ``(N, Tq, D)`` and every head's output before W_O ``(N, H, Tq, d)`` (``heads``
    replaces some of them first)."""
    q = module.split_heads(module.q_proj(query))  # (N, H, Tq, d)
    k, v = kv
    z = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask)  # (N, H, Tq, d)
    if heads is not None:
        z = heads(z)
    return module.merge_heads(z), z


def encoder_layer(layer: EncoderLayer, x: Tensor, mask: Tensor | None,
                  heads: HeadPatch | None = None) -> tuple[Tensor, Tensor]:
    """Encoder layer ``x (N, S, D)`` -> its output and its heads' outputs ``(N, H, S, d)``, as
    ``EncoderLayer.forward`` runs it (in eval mode)."""
    seen = []

    def self_attention(h: Tensor) -> tuple[Tensor, None]:
        out, z = attend(layer.self_attn, h, layer.self_attn.project_kv(h), mask, heads)
        seen.append(z)
        return out, None

    x, _, _ = layer.residual(x, layer.norm1, self_attention)
    x, _, _ = layer.residual(x, layer.norm2, lambda h: (layer.ffn(h), None))
    return x, seen[0]


def decoder_layer(layer: DecoderLayer, x: Tensor, self_mask: Tensor, cross_kv: tuple[Tensor, Tensor],
                  cross_mask: Tensor | None, self_heads: HeadPatch | None = None,
                  cross_heads: HeadPatch | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder layer ``x (N, T, D)`` reading the cross-attention keys and values ``cross_kv`` ``(N, H, S, d)`` ->
    its output, its self-attention heads' and its cross-attention heads' outputs ``(N, H, T, d)``, as
    ``DecoderLayer.forward`` runs it (in eval mode)."""
    seen = []

    def attention(module: MultiHeadAttention, kv: Callable[[Tensor], tuple[Tensor, Tensor]], mask: Tensor | None,
                  heads: HeadPatch | None) -> Callable[[Tensor], tuple[Tensor, None]]:
        def run(h: Tensor) -> tuple[Tensor, None]:
            out, z = attend(module, h, kv(h), mask, heads)
            seen.append(z)
            return out, None
        return run

    x, _, _ = layer.residual(x, layer.norm1, attention(layer.self_attn, layer.self_attn.project_kv, self_mask,
                                                       self_heads))
    x, _, _ = layer.residual(x, layer.norm2, attention(layer.cross_attn, lambda h: cross_kv, cross_mask,
                                                       cross_heads))
    x, _, _ = layer.residual(x, layer.norm3, lambda h: (layer.ffn(h), None))
    return x, seen[0], seen[1]


# ------------------------------------------------------------------------------------------------ one run's values


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


def _rows_from(x: Tensor | None, base: Tensor, new: int) -> Tensor:
    """The active batch ``x`` with ``new`` rows of ``base`` appended (a fresh tensor: patches write into it)."""
    fresh = base.expand(new, *base.shape)
    return fresh.clone() if x is None else torch.cat([x, fresh])


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
        new = [r for r, s in start_enc.items() if s == lay]
        if new:
            x, order = _rows_from(x, receiver.enc_stream[lay], len(new)), order + new
        if x is None:
            continue
        b, j = _at(rows, order, "enc_resid", lay)
        if b:
            x[b, j] = donor.enc_stream[lay][j]
        if lay < n_enc:
            b, h = _at(rows, order, "enc_head", lay)
            x, _ = encoder_layer(model.encoder_layers[lay], x, src_mask, _head_patch(b, h, donor.enc_z[lay], None))
    if start_enc:
        memory = dict(zip(order, memory_of(model, x)))
    start_dec = {r: 0 if r in memory else min((lay for _, lay, _ in sites), default=n_dec)
                 for r, sites in enumerate(rows)}
    y, order = None, []
    for lay in range(n_dec + 1):
        new = [r for r, s in start_dec.items() if s == lay]
        if new:
            y, order = _rows_from(y, receiver.dec_stream[lay], len(new)), order + new
        if y is None:
            continue
        b, p = _at(rows, order, "dec_resid", lay)
        if b:
            y[b, p] = donor.dec_stream[lay][p]
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


# ------------------------------------------------------------------------------------------------ the pair


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
        """Each site's array shape (see the module docstring)."""
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
        """The normalised effect of patched metrics ``m`` (see the module docstring)."""
        clean, edit = self.m(0), self.m(1)
        return (m - edit) / (clean - edit) if check_direction(direction) == "denoise" else (clean - m) / (clean - edit)


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


def _is_id(value: object) -> bool:
    """An integer (Python's or NumPy's; not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _pieces_message(tr: Translator, source_ids: list[int], edited_ids: list[int]) -> str:
    a, b = tr.tokenizer.pieces(source_ids), tr.tokenizer.pieces(edited_ids)
    return f"source {a} ({len(a)} pieces) and edited {b} ({len(b)} pieces)"


@torch.no_grad()
def prepare(translator: Translator, source: str, edited: str, *, target_ids: Sequence[int] | None = None,
            step: int | None = None, target: int | None = None, foil: int | None = None,
            src_lang: str | None = None, tgt_lang: str | None = None) -> Pair:
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
    needed = [text for text, missing in ((source, target_ids is None), (edited, step is None)) if missing]
    translations = [r.target_ids for r in translator.translate_batch(needed, src_lang=src_lang, tgt_lang=tgt_lang)]
    target_ids = list(translations[0] if target_ids is None else target_ids)
    for name, values in (("target_ids", target_ids), ("target", [target]), ("foil", [foil])):
        if not all(v is None and name != "target_ids" or _is_id(v) and 0 <= v < cfg.tgt_vocab_size for v in values):
            raise ValueError(f"{name} must be piece ids in [0, {cfg.tgt_vocab_size}), not {values}")
    target_ids = [int(t) for t in target_ids]
    if len(target_ids) <= forced:
        raise ValueError(f"target_ids {target_ids} has no step after the forced language code")
    if len(target_ids) + 1 > cfg.max_len:
        raise ValueError(f"target_ids of {len(target_ids)} pieces is longer than the model takes ({cfg.max_len - 1})")
    src = torch.tensor([clean_ids, edited_ids], device=translator.device)  # (2, S)
    if step is None:
        other = translations[-1]
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


def _begin(translator: Translator, source: str, edited: str, direction: str, sites: Iterable[str] | str | None,
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


def _fill(result: PatchResult, pair: Pair, kinds: tuple[str, ...], m: np.ndarray) -> PatchResult:
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
          tgt_lang: str | None = None) -> PatchResult:
    """Patch every site of the kinds ``sites`` (None: all of :data:`SITES`) between ``source`` and ``edited``
    (texts whose source ids have the same length and differ somewhere; else a ``ValueError`` naming both piece
    lists), teacher-forced on ``[BOS] + target_ids`` (default: ``source``'s translation under the default settings).

    ``step``: the decoder position whose logits predict ``target_ids[step]`` (default: the first step where the two
    texts' translations differ, else where their next-piece distributions differ most by KL; a multilingual model's
    forced language code is never a step). ``target`` (default ``target_ids[step]``) and ``foil`` (default: the
    edited run's top piece there, its second if that is ``target``) make the metric ``logit[target] -
    logit[foil]``. ``direction``: ``"denoise"`` or ``"noise"`` (see the module docstring). When ``|m_clean -
    m_edit|`` is below :data:`MIN_CHANGE`, nothing is patched: ``effect`` and ``metric`` are empty and ``note`` says
    why. A site whose value is the same in both runs (an unedited piece's embedding, the decoder's input) gives the
    receiving run's own ``m`` without a pass."""
    pair, result, kinds = _begin(translator, source, edited, direction, sites, target_ids=target_ids, step=step,
                                 target=target, foil=foil, src_lang=src_lang, tgt_lang=tgt_lang)
    if result.note:
        return result
    receiver, donor = pair.receiver_donor(direction)
    every = pair.sites(kinds)
    moved = [i for i, site in enumerate(every)
             if not torch.equal(site_value(receiver, site, pair.step), site_value(donor, site, pair.step))]
    m = np.full(len(every), pair.m(1 if direction == "denoise" else 0))
    m[moved] = pair.metrics([[every[i]] for i in moved], direction)
    return _fill(result, pair, kinds, m)


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
    ``tgt_lang``. Nothing is estimated when the change is too small to normalise (``estimate.note``)."""
    pair, result, kinds = _begin(translator, source, edited, direction, sites, **chosen)
    if result.note:
        return Preview(result, [], np.zeros(0), np.zeros(0), float("nan"))
    every = pair.sites()
    estimate = first_order(pair, direction)
    asked = [i for i, s in enumerate(every) if s[0] in kinds]
    _fill(result, pair, kinds, estimate[asked])
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
