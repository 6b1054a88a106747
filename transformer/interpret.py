"""Beyond attention weights: how one head computes, what each head passes on, what drives each output word.

Plain PyTorch (plus captum for attributions). ``src (B, S)`` source ids, ``tgt (B, T)`` the decoder input (BOS
first), ``labels (B, T)`` the token each step produced. Everything runs the model's own modules; hooks are
removed before returning (no state is left on the model).

- :func:`head_computation`: the inside of one head for one query (Q, K, V, scores, scaling, mask, softmax,
  weighted sum, this head's slice through W_O); ``weights`` is the model's own attention row.
- :func:`value_norms`: Kobayashi et al. (2020) ``||alpha_ij (v_j W_O^h)||`` per type, layer and head.
- :func:`attribute`: attribution of ``log p(labels[t])`` to every source and decoder-input piece (captum:
  input x gradient, or integrated gradients from an all-zero embedding baseline).
- :func:`logit_lens`: the top-k next tokens each decoder layer's residual stream would give.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .model import MultiHeadAttention, Transformer, decoder_self_mask, padding_mask

KINDS = ("encoder", "decoder", "cross")


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
    raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")


@contextmanager
def capture_inputs(modules: dict[Any, nn.Module]):
    """Record the positional and keyword arguments of each module's calls; the hooks go when the block ends."""
    seen: dict[Any, list[tuple[tuple, dict]]] = {key: [] for key in modules}
    handles = []
    for key, module in modules.items():
        def hook(mod: nn.Module, args: tuple, kwargs: dict, key: Any = key) -> None:
            seen[key].append((args, kwargs))

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def _call_inputs(args: tuple, kwargs: dict) -> tuple[Tensor, Tensor, Tensor | None]:
    """(query input, key/value input, mask) of a ``MultiHeadAttention.forward`` call."""
    names = ("query", "key_value", "mask")
    values = {**dict(zip(names, args)), **{k: v for k, v in kwargs.items() if k in names}}
    return values["query"], values["key_value"], values.get("mask")


@torch.no_grad()
def head_computation(model: Transformer, src: Tensor, tgt: Tensor, kind: str, layer: int, head: int, query: int,
                     batch: int = 0) -> HeadComputation:
    """The inside of one head for one query position of batch item ``batch`` (all indices 0-based)."""
    module = attention_module(model, kind, layer)
    with capture_inputs({"attn": module}) as seen:
        out = model(src, tgt, return_attention=True)  # the explicit attention path, as the weights are returned
    query_in, key_value, mask = _call_inputs(*seen["attn"][0])
    q_all = module.split_heads(module.q_proj(query_in))  # (B, H, Q, d)
    k_all, v_all = module.project_kv(key_value)  # (B, H, K, d)
    d = module.d_head
    raw = q_all @ k_all.transpose(-2, -1)  # (B, H, Q, K)
    scaled_all = q_all @ k_all.transpose(-2, -1) / math.sqrt(d)  # the model's own expression
    allowed = torch.ones_like(scaled_all, dtype=torch.bool) if mask is None else mask.expand_as(scaled_all)
    weights_all = scaled_all.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    del out  # the model's own weights are the same numbers (tested), recomputed here step by step
    weights = weights_all[batch, head, query]
    v = v_all[batch, head]  # (K, d)
    output = weights @ v  # (d,)
    w_o = module.out_proj.weight[:, head * d:(head + 1) * d]  # (D, d): this head's columns of W_O
    return HeadComputation(kind, layer, head, query, query_in[batch, query], q_all[batch, head, query],
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
    modules = {(kind, i): attention_module(model, kind, i) for kind in KINDS
               for i in range(len(model.encoder_layers if kind == "encoder" else model.decoder_layers))}
    with capture_inputs(modules) as seen:
        out = model(src, tgt, return_attention=True)
    own = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    result: dict[str, list[Tensor]] = {k: [] for k in KINDS}
    for (kind, i), module in modules.items():
        _, key_value, _ = _call_inputs(*seen[(kind, i)][0])
        _, v = module.project_kv(key_value)  # (B, H, K, d)
        w_o = module.out_proj.weight.view(-1, module.n_heads, module.d_head)  # (D, H*d) -> (D, H, d)
        transformed = torch.einsum("bhkd,ehd->bhke", v, w_o)  # (B, H, K, D): v_j W_O^h
        result[kind].append(own[kind][i] * transformed.norm(dim=-1)[:, :, None, :])  # (B, H, Q, K)
    return NormAttentions(tuple(result["encoder"]), tuple(result["decoder"]), tuple(result["cross"]))


@torch.no_grad()
def _lens_probs(model: Transformer, src: Tensor, tgt: Tensor) -> Iterator[Tensor]:
    """Each decoder layer's next-token probabilities ``(B, T, V)`` through the final norm and the output projection,
    one layer at a time (a 256k vocabulary never holds all layers' at once)."""
    outputs: list[Tensor] = []
    handles = [layer.register_forward_hook(lambda mod, args, output: outputs.append(output[0]))
               for layer in model.decoder_layers]
    try:
        model(src, tgt)
    finally:
        for handle in handles:
            handle.remove()
    for x in outputs:
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
    scale = math.sqrt(model.config.d_model) if model.config.scale_embedding else 1.0
    src_mask = padding_mask(src, model.config.pad_id)  # (N, 1, 1, S)
    x = src_embeds * scale + model.pe[: src.size(1)].to(src_embeds.dtype)
    for layer in model.encoder_layers:
        x, _ = layer(x, src_mask)
    if model.encoder_norm is not None:
        x = model.encoder_norm(x)
    y = tgt_embeds * scale + model.pe[: tgt.size(1)].to(tgt_embeds.dtype)
    self_mask = decoder_self_mask(tgt, model.config.pad_id)  # (N, 1, T, T)
    for layer in model.decoder_layers:
        y, _, _ = layer(y, x, self_mask, src_mask)
    if positions is not None:
        y = y[torch.arange(y.size(0), device=y.device), positions]  # (N, T, D) -> (N, D)
    if model.decoder_norm is not None:
        y = model.decoder_norm(y)
    logits = model.generator(y)
    return (logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits).log_softmax(dim=-1)


def attribute(model: Transformer, src: Tensor, tgt: Tensor, labels: Tensor, method: str = "integrated_gradients",
              steps: int = 32, progress: Callable[[int, int], None] | None = None) -> tuple[Tensor, Tensor]:
    """For each step t, the attribution of ``log p(labels[t])`` to every source and decoder-input piece:
    ``(source (B, T, S), target (B, T, T))`` (summed over the embedding dimensions).

    ``method``: ``"input_x_gradient"`` or ``"integrated_gradients"`` (captum, ``steps`` points from an all-zero
    embedding baseline; per step, source + target sums equal ``log p(x) - log p(baseline)`` up to the integration
    error). ``progress(done, total)`` is called after each pass through the model (integrated gradients make
    ``ceil(steps / 8)`` passes per batch item, input x gradient one).
    """
    from captum.attr import InputXGradient, IntegratedGradients

    if method not in ("input_x_gradient", "integrated_gradients"):
        raise ValueError("method must be 'input_x_gradient' or 'integrated_gradients'")
    was_training = model.training
    model.eval()
    b, t = tgt.shape
    per_item = -(-steps // 8) if method == "integrated_gradients" else 1  # captum runs t * 8 rows a pass
    passes = [0]
    sources, targets = [], []
    try:
        for i in range(b):
            s_ids, t_ids = src[i:i + 1].expand(t, -1), tgt[i:i + 1].expand(t, -1)  # one row per step: (T, S), (T, T)
            steps_idx, lab = torch.arange(t, device=tgt.device), labels[i]

            def forward(src_e: Tensor, tgt_e: Tensor, s_ids: Tensor = s_ids, t_ids: Tensor = t_ids,
                        steps_idx: Tensor = steps_idx, lab: Tensor = lab) -> Tensor:
                n = src_e.size(0)  # t rows times the interpolation points captum batched
                reps = n // t
                at = steps_idx.repeat(reps)  # (n,): the output position each row is about
                logp = forward_from_embeddings(model, s_ids.repeat(reps, 1), t_ids.repeat(reps, 1), src_e, tgt_e,
                                               positions=at)  # (n, V)
                passes[0] += 1
                if progress is not None:
                    progress(min(passes[0], b * per_item), b * per_item)
                return logp[torch.arange(n, device=logp.device), lab[at]]  # (n,)

            src_e = model.src_embed(s_ids).detach().requires_grad_(True)  # (T, S, D)
            tgt_e = model.tgt_embed(t_ids).detach().requires_grad_(True)  # (T, T, D)
            if method == "input_x_gradient":
                a_src, a_tgt = InputXGradient(forward).attribute((src_e, tgt_e))
            else:
                a_src, a_tgt = IntegratedGradients(forward).attribute(
                    (src_e, tgt_e), baselines=(torch.zeros_like(src_e), torch.zeros_like(tgt_e)), n_steps=steps,
                    method="gausslegendre", internal_batch_size=t * 8)
            src_pad = (s_ids == model.config.pad_id)[..., None]
            tgt_pad = (t_ids == model.config.pad_id)[..., None]
            sources.append(a_src.masked_fill(src_pad, 0).sum(-1).detach())  # (T, S)
            targets.append(a_tgt.masked_fill(tgt_pad, 0).sum(-1).detach())  # (T, T)
    finally:
        model.train(was_training)
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
