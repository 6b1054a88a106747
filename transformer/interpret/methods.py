"""Beyond attention weights: how one head computes, what each head passes on, what drives each output word.

Plain PyTorch. ``src (B, S)`` source ids, ``tgt (B, T)`` the decoder input (BOS
first), ``labels (B, T)`` the token each step produced. Everything computes from what one forward pass returns
(``return_attention=True, return_internals=True``: the attention weights, every attention sub-layer's inputs, every
layer's output): no hook, no state left on the model and no change of it, so any number of visitors may use one
model object at once.

- :func:`head_computation`: the inside of one head for one query (Q, K, V, scores, scaling, mask, softmax,
  weighted sum, this head's slice through W_O); ``weights`` is the model's own attention row.
- :func:`value_norms`: Kobayashi et al. (2020) ``||alpha_ij (v_j W_O^h)||`` per type, layer and head.
- :func:`attribute`: attribution of ``log p(labels[t])`` to every source and decoder-input piece (input x
  gradient, or integrated gradients from an all-zero embedding baseline, the numbers of captum's; one forward
  pass per group of points serves every output step).
- :func:`logit_lens`: the top-k next tokens each decoder layer's residual stream would give.
- ALTI+ (each output step's contributions from every source piece and decoder-input piece) is
  :mod:`transformer.interpret.alti`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..network.attention import MultiHeadAttention
from ..network.kinds import KINDS as KINDS  # re-exported: interpret.KINDS
from ..network.kinds import check_kind
from ..network.model import Transformer, padding_mask
from ..network.outputs import Seq2SeqOutput


@dataclass
class HeadComputation:
    """One head, one query position. ``K`` keys; ``d_head`` = d_model / n_heads."""

    kind: str
    layer: int
    head: int
    query: int
    x_query: Tensor  # (d_model,) the attention sub-layer's input at the query (after the norm in pre-norm)
    q: Tensor  # (d_head,)
    k: Tensor  # (K, d_head)
    v: Tensor  # (K, d_head)
    scores: Tensor  # (K,) q . k
    scaled: Tensor  # (K,) scores / sqrt(d_head)
    mask: Tensor  # (K,) bool, True = may attend
    weights: Tensor  # (K,) softmax of the scaled scores with blocked keys at -inf
    output: Tensor  # (d_head,) weights @ v
    projected: Tensor  # (d_model,) this head's slice of W_O applied to ``output`` (no bias)


def full(t: Tensor) -> Tensor:
    """``t`` in float32 when the model runs in a half-width float (bfloat16, float16), else as it is: what every
    method computes and returns in."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


def attention_module(model: Transformer, kind: str, layer: int) -> MultiHeadAttention:
    """The attention module of a type (``"encoder"``, ``"decoder"``, ``"cross"``) and 0-based layer."""
    if kind == "encoder":
        return model.encoder_layers[layer].self_attn
    if kind == "decoder":
        return model.decoder_layers[layer].self_attn
    if kind == "cross":
        return model.decoder_layers[layer].cross_attn
    check_kind(kind)  # a ValueError that names the kinds


def require_eval(model: Transformer, what: str) -> None:
    """Refuse a model in training mode (dropout on): switching a shared model to eval mode would change it under
    every other visitor's feet."""
    if model.training:
        raise ValueError(f"{what} needs a model in eval mode (dropout off); call model.eval() once when loading it")


def internals(model: Transformer, src: Tensor, tgt: Tensor) -> Seq2SeqOutput:
    """One teacher-forced pass that returns every attention weight, attention sub-layer input and layer output."""
    return model(src, tgt, return_attention=True, return_internals=True)


@torch.no_grad()
def head_computation(model: Transformer, src: Tensor, tgt: Tensor, kind: str, layer: int, head: int, query: int,
                     batch: int = 0) -> HeadComputation:
    """The inside of one head for one query position of batch item ``batch`` (all indices 0-based), from the
    inputs the attention sub-layer was called with in one returned forward pass."""
    module = attention_module(model, kind, layer)
    out = internals(model, src, tgt)
    inputs = out.attention_inputs[kind][layer]
    own = out.attentions()
    q_all = full(module.split_heads(module.q_proj(inputs.query)))  # (B, H, Q, d); a bfloat16 model's: in float32
    k_all, v_all = (full(t) for t in module.project_kv(inputs.key_value))  # (B, H, K, d)
    d = module.d_head
    raw = q_all @ k_all.transpose(-2, -1)  # (B, H, Q, K)
    scaled_all = q_all @ k_all.transpose(-2, -1) / math.sqrt(d)  # the model's own expression
    allowed = torch.ones_like(scaled_all, dtype=torch.bool) if inputs.mask is None else \
        inputs.mask.expand_as(scaled_all)
    weights = own[kind][layer][batch, head, query]  # (K,): the model's own row
    v = v_all[batch, head]  # (K, d)
    output = weights @ v  # (d,)
    w_o = full(module.out_proj.weight[:, head * d:(head + 1) * d])  # (D, d): this head's columns of W_O
    return HeadComputation(kind, layer, head, query, full(inputs.query[batch, query]), q_all[batch, head, query],
                           k_all[batch, head], v, raw[batch, head, query], scaled_all[batch, head, query],
                           allowed[batch, head, query], weights, output, w_o @ output)


@dataclass
class NormAttentions:
    """``||alpha_ij (v_j W_O^h)||`` shaped like the attentions: one ``(B, H, Q, K)`` tensor per layer."""

    encoder_attentions: tuple[Tensor, ...]
    decoder_attentions: tuple[Tensor, ...]
    cross_attentions: tuple[Tensor, ...]


@torch.no_grad()
def value_norms(model: Transformer, src: Tensor, tgt: Tensor) -> NormAttentions:
    """The norm-based view of Kobayashi et al. (2020): how much of each key each head passes on."""
    out = internals(model, src, tgt)
    own = out.attentions()
    result: dict[str, list[Tensor]] = {k: [] for k in KINDS}
    for kind in KINDS:
        for i, inputs in enumerate(out.attention_inputs[kind]):
            module = attention_module(model, kind, i)
            _, v = module.project_kv(inputs.key_value)  # (B, H, K, d)
            w_o = module.out_proj.weight.view(-1, module.n_heads, module.d_head)  # (D, H*d) -> (D, H, d)
            transformed = torch.einsum("bhkd,ehd->bhke", full(v), full(w_o))  # (B, H, K, D): v_j W_O^h
            result[kind].append(own[kind][i] * transformed.norm(dim=-1)[:, :, None, :])  # (B, H, Q, K)
    return NormAttentions(tuple(result["encoder"]), tuple(result["decoder"]), tuple(result["cross"]))


LENS_BYTES = 256_000_000  # the logit lens' probabilities held at once (a chunk of layers)


@torch.no_grad()
def _lens_probs(model: Transformer, src: Tensor, tgt: Tensor, max_bytes: int = LENS_BYTES) -> Iterator[Tensor]:
    """Each decoder layer's next-token probabilities ``(B, T, V)`` through the final norm and the output projection,
    from the layers' returned outputs. As many layers at a time as ``max_bytes`` of probabilities allow (at least
    one): the output projection is one matrix product per chunk, so a large vocabulary's weights (1 GB at NLLB's
    256k x 2,048 in bfloat16) are read once per chunk rather than once per layer."""
    out = model(src, tgt, return_internals=True)
    layers = out.decoder_layer_outputs  # (B, T, D) each
    per_layer = layers[0].numel() // layers[0].size(-1) * model.config.tgt_vocab_size * 4
    chunk = max(1, max_bytes // max(per_layer, 1))
    for first in range(0, len(layers), chunk):
        x = torch.stack(layers[first:first + chunk])  # (C, B, T, D)
        if model.decoder_norm is not None:
            x = model.decoder_norm(x)
        yield from model.generator(x).float().softmax(dim=-1).unbind(0)  # C x (B, T, V)


def logit_lens(model: Transformer, src: Tensor, tgt: Tensor, k: int = 5,
               max_bytes: int = LENS_BYTES) -> list[tuple[Tensor, Tensor]]:
    """For every decoder layer, ``(probs (B, T, k), ids (B, T, k))``: the top-k next tokens its output would give
    through the final norm (pre-norm) and the output projection. The last layer's equal the model's own.
    ``max_bytes``: the probabilities computed at once (layers in chunks; the result is the same)."""
    return [tuple(probs.topk(k, dim=-1)) for probs in _lens_probs(model, src, tgt, max_bytes)]


def logit_lens_chosen(model: Transformer, src: Tensor, tgt: Tensor, labels: Tensor,
                      k: int = 5) -> tuple[list[tuple[Tensor, Tensor]], Tensor, Tensor]:
    """:func:`logit_lens` and, for the tokens ``labels (B, T)``, each layer's probability of them and their rank
    (0 = top; ties ranked first), ``(L, B, T)`` each: counted against the whole vocabulary without sorting it."""
    lens, chosen, rank = [], [], []
    for probs in _lens_probs(model, src, tgt):
        lens.append(tuple(probs.topk(k, dim=-1)))
        p = probs.gather(-1, labels[..., None])  # (B, T, 1)
        chosen.append(p[..., 0])
        rank.append((probs > p).sum(dim=-1))  # (B, T)
    return lens, torch.stack(chosen), torch.stack(rank)


def forward_from_embeddings(model: Transformer, src: Tensor, tgt: Tensor, src_embeds: Tensor,
                            tgt_embeds: Tensor, positions: Tensor | None = None, project: bool = True) -> Tensor:
    """Log-probabilities ``(N, T, V)`` with the token embeddings given (``(N, S, D)``, ``(N, T, D)``, the rows of
    the embedding tables) instead of looked up; masks come from ``src``/``tgt`` ids ``(N, S)``, ``(N, T)``.
    With ``positions`` ``(N,)``, only row n's output position ``positions[n]``: ``(N, V)`` (the output projection
    over the vocabulary then runs on N vectors instead of N x T). ``project=False``: the decoder's output before
    the projection instead, ``(N, T, D)`` (:func:`log_probs` of a slice of it gives the log-probabilities)."""
    src_mask = padding_mask(src, model.config.pad_id)  # (N, 1, 1, S)
    memory = model.encode(src, src_mask, src_embeds=src_embeds).last_hidden_state
    at = None  # (N, T) bool: each row's one position (none: only the decoder's output, projected by nobody here)
    if positions is not None or not project:
        at = torch.zeros(tgt.shape, dtype=torch.bool, device=tgt.device)
    if positions is not None:
        at[torch.arange(tgt.size(0), device=tgt.device), positions] = True
    out = model.decode(tgt, memory, src_mask, logits_mask=at, tgt_embeds=tgt_embeds)
    return log_probs(model, None, out.logits) if project else out.last_hidden_state  # (N, T, V), (N, V), (N, T, D)


def log_probs(model: Transformer, states: Tensor | None, logits: Tensor | None = None) -> Tensor:
    """Log-probabilities over the vocabulary of the decoder's output ``states`` (``(..., D)``, through the output
    projection) or of ``logits`` (``(..., V)``); float32 for a half-precision model."""
    logits = model.generator(states) if logits is None else logits
    return (logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits).log_softmax(dim=-1)


DEFAULT_BATCH_BYTES = 256_000_000  # attribution's working memory per pass through the model, when none is given


def attribution_row_bytes(model: Transformer, source_len: int, target_len: int) -> int:
    """An upper estimate of the memory one row of :func:`attribute` holds through a forward and backward pass
    (``source_len`` + ``target_len`` positions): per layer and position the activations autograd keeps (about
    ten ``d_model`` vectors and two ``d_ff`` ones), the attention weights of every head, and the output row over
    the vocabulary; float32."""
    cfg = model.config
    s, t = source_len, target_len
    per_position = 10 * cfg.d_model + 2 * cfg.d_ff
    floats = cfg.n_encoder_layers * (s * per_position + 3 * cfg.n_heads * s * s)
    floats += cfg.n_decoder_layers * ((t + t) * per_position + 3 * cfg.n_heads * (t * t + t * s))
    floats += 4 * (s + t) * cfg.d_model + 3 * cfg.tgt_vocab_size
    return 4 * floats


def integration_points(method: str, steps: int) -> tuple[Tensor, Tensor]:
    """The points ``alpha`` on the path from the all-zero baseline to the input and their weights, ``(P,)`` each:
    integrated gradients' ``steps`` Gauss-Legendre points on [0, 1] (numpy's ``leggauss``, as captum's
    ``"gausslegendre"``), or input x gradient's one point, the input itself, with weight 1."""
    if method == "input_x_gradient":
        return torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    nodes, weights = np.polynomial.legendre.leggauss(steps)  # on [-1, 1]
    return torch.from_numpy((nodes + 1) / 2), torch.from_numpy(weights / 2)


def attribution_passes(method: str, steps: int, rows: int) -> tuple[int, int]:
    """The rows :func:`attribute` runs through the model for one sentence and ``rows`` output steps, each row the
    whole sentence at one point of the path: ``(forward, backward)``. A forward row per point (the points of a group
    share one pass), and per output step a backward pass through every point's row."""
    points = len(integration_points(method, steps)[0])
    return points, points * rows


def attribute(model: Transformer, src: Tensor, tgt: Tensor, labels: Tensor, method: str = "integrated_gradients",
              steps: int = 32, progress: Callable[[int, int], None] | None = None,
              max_batch_bytes: int | None = None,
              output_span: tuple[int, int] | None = None, workers: int = 1) -> tuple[Tensor, Tensor]:
    """For each step t, the attribution of ``log p(labels[t])`` to every source and decoder-input piece:
    ``(source (B, T', S), target (B, T', T))`` (summed over the embedding dimensions), T' the steps of
    ``output_span`` (``(first, end)``, end excluded; default every step, T' = T).

    ``method``: ``"input_x_gradient"`` or ``"integrated_gradients"`` (``steps`` Gauss-Legendre points from an
    all-zero embedding baseline, as captum's ``IntegratedGradients``; per step, source + target sums equal
    ``log p(x) - log p(baseline)`` up to the integration error). Every output step reads the same input at a
    point of the path, so one forward pass serves them all: each pass takes a group of points (a row each, the
    whole sentence at that point), and each output step then has its own backward pass through that one graph.
    A pass holds at most ``max_batch_bytes`` (default ``DEFAULT_BATCH_BYTES``) by :func:`attribution_row_bytes`:
    as many points as fit, at least one; points are independent, so the result does not depend on the batching.
    ``progress(done, total)`` is called after each pass, in the caller's thread. ``workers``: threads that share a
    pass's backward passes (the output steps dealt out in turn; autograd runs them at once on a retained graph), so
    a request may use more than one core with one thread per product; each step's numbers are computed as with one.
    The model must be in eval mode (it is not switched: it may be serving others); a model in training mode raises
    ``ValueError``.
    """
    if method not in ("input_x_gradient", "integrated_gradients"):
        raise ValueError("method must be 'input_x_gradient' or 'integrated_gradients'")
    require_eval(model, "attribute")
    b, t = tgt.shape
    first, end = output_span if output_span is not None else (0, t)
    if not 0 <= first < end <= t:
        raise ValueError(f"output_span must lie within the {t} output steps, not {output_span}")
    if workers < 1:
        raise ValueError(f"workers must be a whole number from 1, not {workers}")
    alphas, weights = integration_points(method, steps)  # (P,) each
    budget = DEFAULT_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
    per_pass = max(1, min(len(alphas), budget // attribution_row_bytes(model, src.size(1), t)))  # points a pass
    groups = [(p, min(p + per_pass, len(alphas))) for p in range(0, len(alphas), per_pass)]
    total, passes = b * len(groups), 0
    sources, targets = [], []
    with torch.enable_grad():  # gradients even when the caller runs under no_grad
        for i in range(b):
            e_src, e_tgt = model.src_embed(src[i:i + 1]).detach(), model.tgt_embed(tgt[i:i + 1]).detach()  # (1, ., D)
            dtype = torch.promote_types(e_src.dtype, torch.float32)  # sums in float32 at least
            g_src = e_src.new_zeros(end - first, *e_src.shape[1:], dtype=dtype)  # (T', S, D): sum of w grad
            g_tgt = e_tgt.new_zeros(end - first, *e_tgt.shape[1:], dtype=dtype)  # (T', T, D)
            for p0, p1 in groups:
                n = p1 - p0
                a = alphas[p0:p1].to(e_src)[:, None, None]  # (n, 1, 1)
                w = weights[p0:p1].to(device=e_src.device, dtype=dtype)  # (n,)
                x_src, x_tgt = (a * e_src).requires_grad_(True), (a * e_tgt).requires_grad_(True)  # (n, S|T, D)
                states = forward_from_embeddings(model, src[i:i + 1].expand(n, -1), tgt[i:i + 1].expand(n, -1),
                                                 x_src, x_tgt, project=False)  # (n, T, D)
                jobs = [(model, states, (x_src, x_tgt), labels[i], w, range(first + k, end, workers),
                         (g_src[k::workers], g_tgt[k::workers])) for k in range(min(workers, end - first))]
                if len(jobs) == 1:
                    _backward(*jobs[0])
                else:  # each step's rows belong to one thread; the graph is freed when the last one is done
                    with ThreadPoolExecutor(len(jobs)) as pool:
                        for done in [pool.submit(_backward, *job) for job in jobs]:
                            done.result()
                del states, x_src, x_tgt
                passes += 1
                if progress is not None:
                    progress(passes, total)
            src_pad = (src[i] == model.config.pad_id)[:, None]  # (S, 1)
            tgt_pad = (tgt[i] == model.config.pad_id)[:, None]  # (T, 1)
            sources.append((g_src * e_src.to(dtype)).masked_fill(src_pad, 0).sum(-1))  # (T', S): (x - 0) . integral
            targets.append((g_tgt * e_tgt.to(dtype)).masked_fill(tgt_pad, 0).sum(-1))  # (T', T)
    return full(torch.stack(sources)), full(torch.stack(targets))  # a bfloat16 model's: returned in float32


def _backward(model: Transformer, states: Tensor, inputs: tuple[Tensor, Tensor], labels: Tensor, w: Tensor,
              steps: range, sums: tuple[Tensor, Tensor]) -> None:
    """For each of ``steps``, the backward pass of ``log p(labels[step])`` through a group of points' retained graph
    (``states`` ``(n, T, D)`` from ``inputs``, the points' embeddings): its gradients weighted by ``w`` ``(n,)`` and
    added to that step's rows of ``sums`` (the next row for the next step)."""
    with torch.enable_grad():  # grad mode is per thread
        for row, step in enumerate(steps):
            value = log_probs(model, states[:, step])[:, labels[step]].sum()  # the points' rows are independent
            grads = torch.autograd.grad(value, inputs, retain_graph=True)  # (n, S, D), (n, T, D)
            for total, grad in zip(sums, grads):
                total[row] += torch.einsum("n,n...->...", w, grad.to(total.dtype))


def attention_attribution_agreement(cross_attentions: tuple[Tensor, ...] | list[Tensor],
                                    source_attribution: Tensor) -> Tensor:
    """How well each cross-attention head agrees with the attribution: Spearman rank correlation between the
    head's weights over the source and the attribution to the source, mean over steps. ``cross_attentions``:
    one ``(H, T, S)`` per layer (one sentence), ``source_attribution`` ``(T, S)``; returns ``(layers, H)``."""

    def ranks(x: Tensor) -> Tensor:
        return x.argsort(dim=-1).argsort(dim=-1).float()

    def corr(a: Tensor, b: Tensor) -> Tensor:
        a, b = a - a.mean(-1, keepdim=True), b - b.mean(-1, keepdim=True)
        return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp(min=1e-12)

    target = ranks(source_attribution)  # (T, S)
    return torch.stack([corr(ranks(layer), target[None]).mean(-1) for layer in cross_attentions])  # (L, H)
