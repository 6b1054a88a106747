"""Beyond attention weights: how one head computes, what each head passes on, what drives each output word.

Plain PyTorch (plus captum for attributions). ``src (B, S)`` source ids, ``tgt (B, T)`` the decoder input (BOS
first), ``labels (B, T)`` the token each step produced. Everything computes from what one forward pass returns
(``return_attention=True, return_internals=True``: the attention weights, every attention sub-layer's inputs, every
layer's output): no hook, no state left on the model and no change of it, so any number of visitors may use one
model object at once.

- :func:`head_computation`: the inside of one head for one query (Q, K, V, scores, scaling, mask, softmax,
  weighted sum, this head's slice through W_O); ``weights`` is the model's own attention row.
- :func:`value_norms`: Kobayashi et al. (2020) ``||alpha_ij (v_j W_O^h)||`` per type, layer and head.
- :func:`attribute`: attribution of ``log p(labels[t])`` to every source and decoder-input piece (captum:
  input x gradient, or integrated gradients from an all-zero embedding baseline).
- :func:`logit_lens`: the top-k next tokens each decoder layer's residual stream would give.
- :func:`contributions`: ALTI+ (Ferrando et al., 2022), each output step's contributions from every source piece and
  every decoder-input piece, rolled out through the layers (``source_share``: how much came from the source).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from ..network.kinds import KINDS as KINDS  # re-exported: interpret.KINDS
from ..network.kinds import check_kind
from ..network.model import MultiHeadAttention, Transformer, padding_mask
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
    q_all = module.split_heads(module.q_proj(inputs.query))  # (B, H, Q, d)
    k_all, v_all = module.project_kv(inputs.key_value)  # (B, H, K, d)
    d = module.d_head
    raw = q_all @ k_all.transpose(-2, -1)  # (B, H, Q, K)
    scaled_all = q_all @ k_all.transpose(-2, -1) / math.sqrt(d)  # the model's own expression
    allowed = torch.ones_like(scaled_all, dtype=torch.bool) if inputs.mask is None else \
        inputs.mask.expand_as(scaled_all)
    weights = own[kind][layer][batch, head, query]  # (K,): the model's own row
    v = v_all[batch, head]  # (K, d)
    output = weights @ v  # (d,)
    w_o = module.out_proj.weight[:, head * d:(head + 1) * d]  # (D, d): this head's columns of W_O
    return HeadComputation(kind, layer, head, query, inputs.query[batch, query], q_all[batch, head, query],
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
            transformed = torch.einsum("bhkd,ehd->bhke", v, w_o)  # (B, H, K, D): v_j W_O^h
            result[kind].append(own[kind][i] * transformed.norm(dim=-1)[:, :, None, :])  # (B, H, Q, K)
    return NormAttentions(tuple(result["encoder"]), tuple(result["decoder"]), tuple(result["cross"]))


@torch.no_grad()
def _lens_probs(model: Transformer, src: Tensor, tgt: Tensor) -> Iterator[Tensor]:
    """Each decoder layer's next-token probabilities ``(B, T, V)`` through the final norm and the output projection,
    one layer at a time (a 256k vocabulary never holds all layers' at once), from the layers' returned outputs."""
    out = model(src, tgt, return_internals=True)
    for x in out.decoder_layer_outputs:  # (B, T, D) each
        if model.decoder_norm is not None:
            x = model.decoder_norm(x)
        yield model.generator(x).float().softmax(dim=-1)  # (B, T, V)


def logit_lens(model: Transformer, src: Tensor, tgt: Tensor, k: int = 5) -> list[tuple[Tensor, Tensor]]:
    """For every decoder layer, ``(probs (B, T, k), ids (B, T, k))``: the top-k next tokens its output would give
    through the final norm (pre-norm) and the output projection. The last layer's equal the model's own."""
    return [tuple(probs.topk(k, dim=-1)) for probs in _lens_probs(model, src, tgt)]


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
                            tgt_embeds: Tensor, positions: Tensor | None = None) -> Tensor:
    """Log-probabilities ``(N, T, V)`` with the token embeddings given (``(N, S, D)``, ``(N, T, D)``, the rows of
    the embedding tables) instead of looked up; masks come from ``src``/``tgt`` ids ``(N, S)``, ``(N, T)``.
    With ``positions`` ``(N,)``, only row n's output position ``positions[n]``: ``(N, V)`` (the output projection
    over the vocabulary then runs on N vectors instead of N x T)."""
    src_mask = padding_mask(src, model.config.pad_id)  # (N, 1, 1, S)
    memory = model.encode(src, src_mask, src_embeds=src_embeds).last_hidden_state
    at = None  # (N, T) bool: each row's one position
    if positions is not None:
        at = torch.zeros(tgt.shape, dtype=torch.bool, device=tgt.device)
        at[torch.arange(tgt.size(0), device=tgt.device), positions] = True
    logits = model.decode(tgt, memory, src_mask, logits_mask=at, tgt_embeds=tgt_embeds).logits  # (N, T, V) or (N, V)
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


def attribute(model: Transformer, src: Tensor, tgt: Tensor, labels: Tensor, method: str = "integrated_gradients",
              steps: int = 32, progress: Callable[[int, int], None] | None = None,
              max_batch_bytes: int | None = None,
              output_span: tuple[int, int] | None = None) -> tuple[Tensor, Tensor]:
    """For each step t, the attribution of ``log p(labels[t])`` to every source and decoder-input piece:
    ``(source (B, T', S), target (B, T', T))`` (summed over the embedding dimensions), T' the steps of
    ``output_span`` (``(first, end)``, end excluded; default every step, T' = T).

    ``method``: ``"input_x_gradient"`` or ``"integrated_gradients"`` (captum, ``steps`` points from an all-zero
    embedding baseline; per step, source + target sums equal ``log p(x) - log p(baseline)`` up to the integration
    error). Each pass through the model holds at most ``max_batch_bytes`` (default ``DEFAULT_BATCH_BYTES``) by
    :func:`attribution_row_bytes`: as many rows (output step x interpolation point) as fit, at least one; rows
    are independent, so the result does not depend on the batching. ``progress(done, total)`` is called after
    each pass. The model must be in eval mode (it is not switched: it may be serving others); a model in
    training mode raises ``ValueError``.
    """
    with warnings.catch_warnings():  # captum imports tqdm.auto, which warns in a notebook without ipywidgets about
        warnings.filterwarnings("ignore", message="IProgress not found")  # a progress bar that is never shown
        from captum.attr import InputXGradient, IntegratedGradients

    if method not in ("input_x_gradient", "integrated_gradients"):
        raise ValueError("method must be 'input_x_gradient' or 'integrated_gradients'")
    require_eval(model, "attribute")
    b, t = tgt.shape
    first, end = output_span if output_span is not None else (0, t)
    if not 0 <= first < end <= t:
        raise ValueError(f"output_span must lie within the {t} output steps, not {output_span}")
    points = steps if method == "integrated_gradients" else 1
    budget = DEFAULT_BATCH_BYTES if max_batch_bytes is None else max_batch_bytes
    rows_per_pass = max(1, budget // attribution_row_bytes(model, src.size(1), t))
    chunk = min(end - first, rows_per_pass)  # output steps attributed together
    chunks = [(c, min(c + chunk, end)) for c in range(first, end, chunk)]
    per_chunk = [-(-points // max(1, rows_per_pass // (c1 - c0))) for c0, c1 in chunks]  # passes per chunk
    total = b * sum(per_chunk)
    passes = [0]
    sources, targets = [], []
    with torch.enable_grad():  # gradients even when the caller runs under no_grad
        for i in range(b):
            src_rows, tgt_rows = [], []
            for c0, c1 in chunks:
                n_rows = c1 - c0
                s_ids, t_ids = src[i:i + 1].expand(n_rows, -1), tgt[i:i + 1].expand(n_rows, -1)  # (n, S), (n, T)
                steps_idx, lab = torch.arange(c0, c1, device=tgt.device), labels[i]

                def forward(src_e: Tensor, tgt_e: Tensor, s_ids: Tensor = s_ids, t_ids: Tensor = t_ids,
                            steps_idx: Tensor = steps_idx, lab: Tensor = lab, n_rows: int = n_rows) -> Tensor:
                    n = src_e.size(0)  # n_rows times the interpolation points captum batched
                    reps = n // n_rows
                    at = steps_idx.repeat(reps)  # (n,): the output position each row is about
                    logp = forward_from_embeddings(model, s_ids.repeat(reps, 1), t_ids.repeat(reps, 1), src_e,
                                                   tgt_e, positions=at)  # (n, V)
                    passes[0] += 1
                    if progress is not None:
                        progress(min(passes[0], total), total)
                    return logp[torch.arange(n, device=logp.device), lab[at]]  # (n,)

                src_e = model.src_embed(s_ids).detach().requires_grad_(True)  # (n, S, D)
                tgt_e = model.tgt_embed(t_ids).detach().requires_grad_(True)  # (n, T, D)
                if method == "input_x_gradient":
                    a_src, a_tgt = InputXGradient(forward).attribute((src_e, tgt_e))
                else:
                    per_pass = n_rows * max(1, min(points, rows_per_pass // n_rows))  # whole interpolation points
                    a_src, a_tgt = IntegratedGradients(forward).attribute(
                        (src_e, tgt_e), baselines=(torch.zeros_like(src_e), torch.zeros_like(tgt_e)),
                        n_steps=steps, method="gausslegendre", internal_batch_size=per_pass)
                src_pad = (s_ids == model.config.pad_id)[..., None]
                tgt_pad = (t_ids == model.config.pad_id)[..., None]
                src_rows.append(a_src.masked_fill(src_pad, 0).sum(-1).detach())  # (n, S)
                tgt_rows.append(a_tgt.masked_fill(tgt_pad, 0).sum(-1).detach())  # (n, T)
                del a_src, a_tgt, src_e, tgt_e
            sources.append(torch.cat(src_rows))  # (T', S)
            targets.append(torch.cat(tgt_rows))  # (T', T)
    return torch.stack(sources), torch.stack(targets)


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


# ----------------------------------------------------------------------------------------------
# ALTI / ALTI+: how much each input piece contributes to each output (Ferrando et al., EMNLP 2022)


@dataclass
class Contributions:
    """ALTI+ contributions of one teacher-forced pass; every row non-negative and summing to 1.

    Rolled out through the whole model: ``encoder (B, S, S)`` (each encoder output position from each source
    piece), ``source (B, T, S)`` and ``target (B, T, T)`` (each output step from each source piece and each
    decoder-input piece; ``target`` zero above the diagonal; a row of ``source`` and ``target`` together sums
    to 1) and ``source_share (B, T)`` (``source`` summed over the source pieces).
    Per layer, not rolled out (one tensor per layer): ``encoder_layers (B, S, S)``, ``decoder_layers (B, T, T)``
    (the decoder self-attention block), ``cross_layers (B, T, S)`` and ``cross_residual (B, T)`` (the
    cross-attention block: each source piece, and the residual stream from the target side; together 1)."""

    encoder: Tensor
    source: Tensor
    target: Tensor
    source_share: Tensor
    encoder_layers: tuple[Tensor, ...]
    decoder_layers: tuple[Tensor, ...]
    cross_layers: tuple[Tensor, ...]
    cross_residual: tuple[Tensor, ...]


DEFAULT_ALTI_BYTES = 256_000_000  # the per-token terms one chunk of queries may hold, when none is given


def transformed_values(module: MultiHeadAttention, key_value: Tensor) -> Tensor:
    """Each key's value through its head's slice of the output projection, ``v^h_j W_O^h`` (value bias included,
    the output bias not): ``(B, H, K, D)`` from the keys' source ``key_value (B, K, D)``."""
    _, v = module.project_kv(key_value)  # (B, H, K, d)
    w_o = module.out_proj.weight.view(-1, module.n_heads, module.d_head)  # (D, H*d) -> (D, H, d)
    return torch.einsum("bhkd,ehd->bhke", v, w_o)  # (B, H, K, D)


def attention_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor) -> Tensor:
    """The attention sub-layer's output split per key: ``sum_h alpha^h_ij (v^h_j W_O^h)`` (value bias included, the
    output bias not), ``(B, Q, K, D)`` from ``weights (B, H, Q, K)`` and the keys' source ``key_value (B, K, D)``.
    Summed over the keys, plus the output bias, it is the sub-layer's output."""
    transformed = transformed_values(module, key_value)  # (B, H, K, D): v_j W_O^h
    return torch.einsum("bhqk,bhke->bqke", weights, transformed)  # (B, Q, K, D), summed over the heads


def head_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor) -> Tensor:
    """:func:`attention_terms` before the sum over the heads: ``alpha^h_ij (v^h_j W_O^h)``, ``(B, Q, H, K, D)``
    (summed over ``H`` it is :func:`attention_terms`)."""
    transformed = transformed_values(module, key_value)  # (B, H, K, D)
    return torch.einsum("bhqk,bhke->bqhke", weights, transformed)  # (B, Q, H, K, D)


def block_terms(module: MultiHeadAttention, weights: Tensor, key_value: Tensor, residual: Tensor,
                norm: torch.nn.LayerNorm | None, cross: bool, offset: int = 0,
                per_head: bool = False) -> tuple[Tensor, Tensor]:
    """ALTI's decomposition of one attention block's output at each query ``i``: ``y_i = sum_j T_i(x_j) + bias``.

    ``weights (B, H, Q, K)`` of the queries ``offset .. offset+Q-1``, ``residual (B, Q, D)`` the stream at them.
    Self-attention: one term per key, the residual added to the query's own key (``offset + i``);
    cross-attention (``cross``): one term per source key, then the residual as a last term. ``norm``: the
    post-norm LayerNorm after the residual sum (None in pre-norm, where the block's output is the sum itself): its
    centring and scaling by the real standard deviation of the whole sum are linear given that deviation, so each
    term goes through them; the output bias (through the norm) and the norm's own bias are left out of every
    term, as ALTI does. Returns ``(terms (B, Q, K', D), y (B, Q, D))``, K' = K (+1 for cross-attention), ``y``
    the block's output. ``per_head`` (the information-flow graph, :mod:`.flow`): one term per head and key
    (head-major, ``h * K + j``, from :func:`head_terms`), then the residual as a last term for every kind:
    K' = H * K + 1; the same norm."""
    if per_head:
        terms = head_terms(module, weights, key_value).flatten(2, 3)  # (B, Q, H, K, D) -> (B, Q, H*K, D)
        terms = torch.cat([terms, residual[:, :, None]], dim=2)  # (B, Q, H*K+1, D)
        return through_norm(terms, module.out_proj.bias, norm)
    terms = attention_terms(module, weights, key_value)  # (B, Q, K, D)
    b, q, k, _ = terms.shape
    if cross:
        terms = torch.cat([terms, residual[:, :, None]], dim=2)  # (B, Q, K+1, D)
    else:
        own = torch.arange(offset, offset + q, device=terms.device)  # (Q,) each query's own key
        terms[:, torch.arange(q, device=terms.device), own] += residual  # the residual on j = i
    return through_norm(terms, module.out_proj.bias, norm)


def through_norm(terms: Tensor, bias: Tensor | None,
                 norm: torch.nn.LayerNorm | None) -> tuple[Tensor, Tensor]:
    """A residual block's terms ``(B, Q, K', D)``, whose sum plus ``bias`` is the block's sum, through the block's
    post-norm LayerNorm as ALTI does (:func:`block_terms`): ``(terms, y)``, ``y (B, Q, D)`` the block's output."""
    total = terms.sum(dim=2) + (0 if bias is None else bias)  # (B, Q, D): the block's sum before any norm
    if norm is None:
        return terms, total
    std = (total.var(dim=-1, unbiased=False, keepdim=True) + norm.eps).sqrt()  # (B, Q, 1): the real deviation
    gamma = norm.weight if norm.weight is not None else torch.ones_like(total[0, 0])
    scale = (gamma / std)[:, :, None]  # (B, Q, 1, D)
    terms = (terms - terms.mean(dim=-1, keepdim=True)) * scale
    y = terms.sum(dim=2)
    if bias is not None:
        y = y + (bias - bias.mean()) * scale[:, :, 0]
    if norm.bias is not None:
        y = y + norm.bias
    return terms, y


def alti_rows(terms: Tensor, y: Tensor, own: Tensor) -> Tensor:
    """``c_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1)``, normalised per row: ``(B, Q, K')`` from ``terms
    (B, Q, K', D)`` and ``y (B, Q, D)``. A row with no positive proximity (possible, rarely) gives all of itself to
    its residual term, the column ``own (Q,)`` of each query. The distances ``||y_i - T_i(x_j)||_1`` come from
    ``torch.cdist`` (p=1), which never holds the differences ``(B, Q, K', D)``: about 10x faster on a CPU; ``||y_i||_1``
    too, as the distance to a zero term, so that a zero term (a key the query cannot see) gets exactly 0."""
    b, q, k, d = terms.shape
    y = y.float().reshape(b * q, 1, d)  # (B*Q, 1, D)
    dist = torch.cdist(y, terms.float().reshape(b * q, k, d), p=1).view(b, q, k)  # (B, Q, K')
    norm = torch.cdist(y, torch.zeros_like(y), p=1).view(b, q, 1)  # (B, Q, 1)
    c = (norm - dist).clamp(min=0)  # (B, Q, K')
    total = c.sum(-1, keepdim=True)  # (B, Q, 1)
    fallback = torch.zeros_like(c)
    fallback[:, torch.arange(c.size(1), device=c.device), own] = 1.0
    return torch.where(total > 0, c / total.clamp(min=torch.finfo(c.dtype).tiny), fallback)


def block_contributions(module: MultiHeadAttention, weights: Tensor, key_value: Tensor, residual: Tensor,
                        norm: torch.nn.LayerNorm | None, cross: bool, max_bytes: int,
                        per_head: bool = False) -> Tensor:
    """:func:`alti_rows` of :func:`block_terms`, a chunk of queries at a time so that the per-token terms held at
    once stay within ``max_bytes``: ``(B, Q, K')`` (``per_head``: ``K' = H * K + 1``, the residual last)."""
    b, h, q, k = weights.shape
    n_terms = h * k + 1 if per_head else k + 1
    per_query = 4 * 4 * b * n_terms * key_value.size(-1)  # float32 terms, centred copy, distances, scratch
    chunk = max(1, max_bytes // per_query)
    rows = []
    for start in range(0, q, chunk):
        sl = slice(start, start + chunk)
        terms, y = block_terms(module, weights[:, :, sl], key_value, residual[:, sl], norm, cross, start, per_head)
        n = terms.size(1)
        if per_head or cross:  # the residual is the last term
            own = torch.full((n,), terms.size(2) - 1, device=terms.device)
        else:
            own = torch.arange(start, start + n, device=terms.device)
        rows.append(alti_rows(terms, y, own))
        del terms, y
    return torch.cat(rows, dim=1)


@torch.no_grad()
def contributions(model: Transformer, src: Tensor, tgt: Tensor, max_bytes: int | None = None) -> Contributions:
    """ALTI+ (Ferrando et al., 2022) from one returned forward pass: every attention block's output split into one
    term per input piece (:func:`block_terms`), each piece's contribution its proximity to the output
    (:func:`alti_rows`), rolled out through the layers: the encoder's self-attention blocks one after the other;
    in each decoder layer the self-attention block over the target prefix, then the cross-attention block, whose
    source terms carry the encoder's rollout and whose residual term carries what the target side held so far.

    Post-norm: each term through its block's LayerNorm (linear given the real deviation); pre-norm: the block's
    output is the residual sum. The final LayerNorm of a pre-norm stack, like the feed-forward and every other
    norm, acts on each position alone: it mixes nothing, so the rollout passes through it unchanged (as in ALTI).
    Scaled embeddings are the stream the first residual carries. ``max_bytes`` (default ``DEFAULT_ALTI_BYTES``)
    bounds the per-token terms held at once (queries are taken in chunks; the result does not depend on it). The
    model must be in eval mode (a model in training mode raises ``ValueError``)."""
    require_eval(model, "contributions")
    budget = DEFAULT_ALTI_BYTES if max_bytes is None else max_bytes
    out = internals(model, src, tgt)
    post = not model.config.norm_first

    def block(kind: str, i: int, weights: Tensor, norm: torch.nn.LayerNorm) -> Tensor:
        inputs = out.attention_inputs[kind][i]
        return block_contributions(attention_module(model, kind, i), weights, inputs.key_value, inputs.residual,
                                   norm if post else None, kind == "cross", budget)

    enc_layers = tuple(block("encoder", i, w, layer.norm1)
                       for i, (w, layer) in enumerate(zip(out.encoder_attentions, model.encoder_layers)))
    b, s, t = src.size(0), src.size(1), tgt.size(1)
    encoder = torch.eye(s, device=src.device).expand(b, s, s)  # (B, S, S) before any layer: each piece itself
    for c in enc_layers:
        encoder = c @ encoder
    dec_layers, cross_layers, cross_res = [], [], []
    source = torch.zeros(b, t, s, device=src.device)  # (B, T, S): the rollout so far, source part
    target = torch.eye(t, device=src.device).expand(b, t, t)  # (B, T, T): target part
    for i, layer in enumerate(model.decoder_layers):
        c_self = block("decoder", i, out.decoder_attentions[i], layer.norm1)  # (B, T, T)
        c_cross = block("cross", i, out.cross_attentions[i], layer.norm2)  # (B, T, S+1)
        from_source, residual = c_cross[..., :s], c_cross[..., s]  # (B, T, S), (B, T)
        source = from_source @ encoder + residual[..., None] * (c_self @ source)
        target = residual[..., None] * (c_self @ target)
        dec_layers.append(c_self)
        cross_layers.append(from_source)
        cross_res.append(residual)
    return Contributions(encoder, source, target, source.sum(-1), enc_layers, tuple(dec_layers),
                         tuple(cross_layers), tuple(cross_res))
