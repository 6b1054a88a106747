"""Operations on a built model's weights: the decoding layout (column-major matrices, each product's route measured,
prepacked copies where oneDNN won) and the post-norm initialisation scale."""

from __future__ import annotations

import torch
from torch import nn

from . import linear as products  # bf16_matmul_fast read through the module at each call
from .attention import FUSE_QKV_MAX_D, MultiHeadAttention, route_calls
from .linear import Linear, in_float32, pack
from .model import Transformer
from .routes import attention_route


@torch.no_grad()
def column_major_weights(model: nn.Module) -> nn.Module:
    """Store every linear layer's weight (the output projection tied to the embeddings too) column-major, in place:
    the same values and shape ``(out, in)``, held as the transpose of a contiguous ``(in, out)`` tensor. ``x @ W.T``
    then streams W in the order MKL's GEMM reads best, most of all for the one-step decoder's few rows over a large
    vocabulary (measured in docs/benchmarks.md). An inference layout:
    parameters, ties and values are unchanged (results agree up to float rounding); checkpoints are saved
    contiguous (``safetensors.torch.save_model``)."""
    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, nn.Linear) and id(module.weight) not in seen:
            seen.add(id(module.weight))
            module.weight.data = module.weight.data.t().contiguous().t()  # (out, in) view of (in, out) storage
    return model


COLUMN_MAJOR_MAX_BYTES = 1 << 30  # models up to this size are laid out column-major for decoding (OPUS-MT: 300 MB)


def decoding_layout(model: Transformer) -> Transformer:
    """The layout a loaded model decodes fastest in: a model of up to :data:`COLUMN_MAJOR_MAX_BYTES` gets
    :func:`column_major_weights` (measured faster decoding at OPUS-MT's size: docs/benchmarks.md); a
    larger one keeps its weights as loaded, memory-mapped from the checkpoint (the copy would cost seconds and the
    model's size again for a few percent), and so does a bfloat16 model on a CPU without bfloat16 instructions
    (PyTorch's own bfloat16 product, its route for a row or a few, reads a column-major weight many times slower
    than a row-major one: docs/families.md). Then each product's route on this CPU (:func:`choose_routes`; prepacked
    copies only for a model of our own copies). Values, parameters and results are unchanged (up to float
    rounding)."""
    own = sum(p.numel() * p.element_size() for p in model.parameters()) <= COLUMN_MAJOR_MAX_BYTES
    slow_bf16 = not products.bf16_matmul_fast() and any(p.dtype == torch.bfloat16 and p.device.type == "cpu"
                                                for p in model.parameters())
    if own and not slow_bf16:
        column_major_weights(model)
    choose_routes(model, prepack=own)
    return model


def choose_routes(model: nn.Module, prepack: bool = True) -> None:
    """Each linear product's route on this CPU, measured now (once per product class and process: ``linear``)
    rather than at a first request: with ``prepack``, float32 weights get oneDNN's prepacked copy where its product
    measured faster than MKL's (``Linear.pack``; a decoding self-attention's fused Q|K|V at each search likewise);
    not for memory-mapped weights, whose copy would double the resident weights; bfloat16 weights on a CPU with
    bfloat16 instructions likewise, against ``F.linear``'s bfloat16 product. bfloat16 weights on a CPU without
    them: the native or the float32 product (``linear.in_float32``)."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            if module.q_proj.weight.device.type == "cpu":  # the attention's route too (``written_out_here``)
                attention_route(products.activation_dtype(module.q_proj.weight), module.n_heads, module.d_head, 1,
                                route_calls)
            fused = module.fused_qkv() if module.q_proj.in_features <= FUSE_QKV_MAX_D else None
            if fused is not None and fused[0].dtype == torch.bfloat16 and not products.bf16_matmul_fast():
                in_float32(fused[0], 1)
            elif fused is not None and prepack:
                pack(*fused)  # its class measured; a search makes its copy where a product takes it
            module.prepack = prepack
        elif isinstance(module, Linear):
            if module.weight.dtype == torch.bfloat16 and not products.bf16_matmul_fast():
                in_float32(module.weight, 1)
            elif prepack:
                module.pack()


def packed_bytes(model: nn.Module) -> int:
    """Bytes of every prepacked copy the model's linear layers hold (``Linear.packed_bytes``)."""
    return sum(m.packed_bytes() for m in model.modules() if isinstance(m, Linear))


@torch.no_grad()
def scale_residual_branches(model: Transformer, beta: float) -> Transformer:
    """Multiply the initial weights that write into the residual stream's branches (value and output
    projections of every attention, both feed-forward matrices) by ``beta``, in place.

    An initialisation choice, not a change of architecture: with the paper's post-norm layout and the
    stock Xavier scale, the encoder of a small model collapses early in training (its positions become
    alike, so cross-attention stays uniform); ``beta`` about 0.5 avoids it, as DeepNet's beta does
    (Wang et al., 2022: 0.87 (N^4 M)^(-1/16), 0.56 for 4 + 4 layers).
    """
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        for attn in (layer.self_attn, getattr(layer, "cross_attn", None)):
            if attn is not None:
                attn.v_proj.weight.mul_(beta)
                attn.out_proj.weight.mul_(beta)
        layer.ffn.linear1.weight.mul_(beta)
        layer.ffn.linear2.weight.mul_(beta)
    return model
