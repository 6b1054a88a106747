"""The one linear map every layer of the model runs through (``x W^T + b``), with a float32 branch for bfloat16
weights on a CPU where oneDNN's bfloat16 product is slow.

PyTorch multiplies bfloat16 matrices on a CPU with oneDNN. With ``avx512_bf16`` or AMX that is several times faster
than float32. With AVX-512 but without those instructions (Intel Skylake to Ice Lake) oneDNN converts in software:
several times slower than float32, which a product of many rows (a batch, a beam) feels and one row (a greedy
step, bounded by reading the weights) does not. Without AVX-512 (AVX2 only: most laptops, AMD before Zen 4) oneDNN
has no bfloat16 product and PyTorch falls back to a plain single-threaded loop, tens of times slower than float32
(measured in docs/families.md). In those cases :func:`linear`
computes in float32 from float32 copies of the operands and rounds the result back to bfloat16: the arithmetic of
oneDNN's bfloat16 product (float32 accumulation, one rounding at the end), at float32 speed plus the copies.
"""
from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# oneDNN's CPU instruction-set caps (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) below AVX-512: no bfloat16 matmul
_BELOW_AVX512 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
# ... and at AVX-512 without its bfloat16 instructions: bfloat16 converted in software
_AVX512_WITHOUT_BF16 = ("AVX512_CORE", "AVX512_CORE_VNNI")


def _onednn_cap() -> str:
    """The instruction set oneDNN is capped at (``ONEDNN_MAX_CPU_ISA`` or its old name), upper case; "" for none."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()


@functools.cache
def bf16_matmul_native() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in oneDNN (AVX-512 and newer, not capped below it by
    ``ONEDNN_MAX_CPU_ISA``); False: PyTorch's slow fallback, which :func:`linear` avoids."""
    if _onednn_cap() in _BELOW_AVX512:
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


@functools.cache
def bf16_matmul_fast() -> bool:
    """Whether this CPU has bfloat16 instructions (``avx512_bf16`` or AMX, not capped below them by
    ``ONEDNN_MAX_CPU_ISA``): oneDNN's bfloat16 product is then faster than float32 at any size."""
    if not bf16_matmul_native() or _onednn_cap() in _AVX512_WITHOUT_BF16:
        return False
    cpu = getattr(torch, "cpu", None)
    return any(bool(getattr(cpu, name, lambda: False)()) for name in ("_is_avx512_bf16_supported",
                                                                      "_is_amx_tile_supported"))


FLOAT32_MIN_ROWS = 32  # where oneDNN converts bfloat16 in software, products of this many rows or more run in float32
# (there the copy of the weight costs about what a few tens of rows of the slow product do)


def in_float32(weight: Tensor, rows: int | None = None) -> bool:
    """Whether a product of ``rows`` rows (None: a few) with ``weight`` runs in float32 here (:func:`linear`'s
    branch): a bfloat16 weight on a CPU without :func:`bf16_matmul_native`, or without :func:`bf16_matmul_fast`
    for :data:`FLOAT32_MIN_ROWS` rows or more."""
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        return False
    if not bf16_matmul_native():
        return True
    return rows is not None and rows >= FLOAT32_MIN_ROWS and not bf16_matmul_fast()


CHUNK_BYTES = 1 << 21  # the float32 branch converts this much of a weight at a time (it stays in a core's cache)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: ``x (..., in)``, ``weight (out, in)`` -> ``(..., out)`` in ``x``'s dtype; for a
    bfloat16 weight where :func:`in_float32` says so, computed in float32 and rounded back, a block of
    output features at a time (a float32 copy of the whole weight would cost more memory traffic than the product:
    each block is converted, used and dropped while it is still in cache)."""
    if weight.dtype != torch.bfloat16 or not in_float32(weight, x.numel() // max(x.size(-1), 1)):
        return F.linear(x, weight, bias)
    n_out, n_in = weight.shape
    step = max(1, CHUNK_BYTES // (4 * n_in))  # output features a block
    flat = x.reshape(-1, n_in).float()  # (..., in) -> (N, in)
    if torch.is_grad_enabled() or step >= n_out:  # autograd (attributions) or a small weight: one product
        y = F.linear(flat, weight.float(), None if bias is None else bias.float())
    else:
        y = flat.new_empty(flat.size(0), n_out)  # (N, out)
        for start in range(0, n_out, step):
            end = min(start + step, n_out)
            # (in, end - start), converted in the order the weight is stored (row- or column-major: weights.py)
            block = weight[start:end].float().t() if weight.is_contiguous() else weight.t()[:, start:end].float()
            if bias is None:
                torch.mm(flat, block, out=y[:, start:end])
            else:
                torch.addmm(bias[start:end].float(), flat, block, out=y[:, start:end])
    return y.to(x.dtype).view(*x.shape[:-1], n_out)  # (N, out) -> (..., out)


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear` (the model's projections: called as modules, or through
    :func:`linear` with their weights, the same product)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
