"""The one linear map every layer of the model runs through (``x W^T + b``), its product's route on a CPU chosen by
measurement.

**Float32: MKL or oneDNN.** PyTorch's ``F.linear`` is MKL's GEMM on every x86 CPU; oneDNN's
(``torch.ops.mkldnn._linear_pointwise`` on a weight prepacked by ``_reorder_linear_weight``) is faster on some CPUs
and shapes and slower on others (faster for an AMD EPYC's output projection at one row, slower for this Intel Xeon's
small products, oneDNN's cost per call: docs/benchmarks.md, "Each product's library chosen by measurement").
Neither the vendor nor the shape decides: :func:`pack` times both, once per product class (the weight's shape and
layout, with or without a bias, the thread count) and row bucket
(:data:`BUCKET_ROWS`: one row, a greedy step; a few, a sentence's beams; many, a beam batch), as oneDNN's and
cuDNN's benchmark modes do, and keeps a prepacked copy where oneDNN won a bucket. ``ATTN_GEMM=mkl|onednn`` forces
a route (:func:`gemm_setting`). Gradients (attributions) always take the plain ``F.linear``.

**bfloat16 without bfloat16 instructions.** PyTorch multiplies bfloat16 matrices on a CPU with oneDNN. With
``avx512_bf16`` or AMX that is several times faster than float32. With AVX-512 but without those instructions (Intel
Skylake to Ice Lake) oneDNN converts in software; without AVX-512 (AVX2 only: most laptops, AMD before Zen 4) oneDNN
has no bfloat16 product and PyTorch falls back to a plain loop. Either is fine for a row or a few (bounded by
reading the weights, where bfloat16's half the bytes helps) and several times slower than float32 for many, and
bfloat16's other operations (norms, softmax, the conversions at each product) are slower there than float32's. So
on such a CPU a bfloat16 model keeps its weights in bfloat16 (half the memory) and computes its activations in
float32 (:func:`activation_dtype`: the residual stream, norms, attention, the key/value cache, the logits); each
product reads its bfloat16 weight by the faster of two routes, chosen by measurement for each product class and row
bucket (:func:`in_float32`): the native product (the float32 rows rounded to bfloat16 at its input, its output
back to float32: :func:`native_product`) or float32 from the weight converted a block at a time into one float32
buffer (no rounding of the rows; measured in docs/families.md), each block's product through MKL or oneDNN as
measured for it (:func:`block_onednn`).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .routes import BUCKET_ROWS, ONEDNN_MARGIN, measure_once, measured, row_bucket

# oneDNN's CPU instruction-set caps (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) below AVX-512: no bfloat16 matmul
_BELOW_AVX512 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")
# ... and at AVX-512 without its bfloat16 instructions: bfloat16 converted in software
_AVX512_WITHOUT_BF16 = ("AVX512_CORE", "AVX512_CORE_VNNI")


def _onednn_cap() -> str:
    """The instruction set oneDNN is capped at (``ONEDNN_MAX_CPU_ISA`` or its old name), upper case; "" for none."""
    return (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()


GEMM_SETTINGS = ("auto", "mkl", "onednn")


def gemm_setting() -> str:
    """``ATTN_GEMM``: "auto" (unset: each float32 product's library measured, :func:`pack`), "mkl" (``F.linear``
    only, no prepacked copies) or "onednn" (every float32 CPU product through oneDNN's prepacked weights). Anything
    else raises ValueError, one line naming the variable."""
    raw = os.environ.get("ATTN_GEMM", "")
    value = raw.strip().lower() or "auto"
    if value not in GEMM_SETTINGS:
        raise ValueError(f"ATTN_GEMM={raw[:24]!r} is not understood: give {' or '.join(GEMM_SETTINGS)}, or leave it "
                         "unset for auto")  # the words of transformer.environment's refusals
    return value


@functools.cache
def bf16_matmul_native() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in oneDNN (AVX-512 and newer, not capped below it by
    ``ONEDNN_MAX_CPU_ISA``); False: PyTorch's own loop."""
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


def activation_dtype(weight: Tensor) -> torch.dtype:
    """The dtype a model whose weights are like ``weight`` computes its activations in: float32 for bfloat16 weights
    on a CPU without bfloat16 instructions (see the module's text), else the weight's own."""
    if weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and not bf16_matmul_fast():
        return torch.float32
    return weight.dtype


# ----------------------------------------------------------------------------------------------
# Float32: MKL or oneDNN's prepacked product


@dataclass(frozen=True)
class Packed:
    """A weight prepacked by oneDNN (``weight``), the weight's ``version`` and ``data_ptr`` when packed (a change
    since makes the copy stale; an inference tensor has no version: None), and for each row bucket whether products
    run through it (``onednn``); ``plain``: the other route's name (``mkl`` for float32, ``plain`` for bfloat16:
    ``F.linear``, oneDNN without the prepacked weight)."""

    weight: Tensor
    version: int | None
    data_ptr: int
    onednn: tuple[bool, ...]
    plain: str = "mkl"

    def runs(self, weight: Tensor, rows: int) -> bool:
        """Whether a product of ``rows`` rows with ``weight`` goes through this copy: oneDNN's bucket, no
        gradients, and the weight unchanged since (same storage, no in-place change: an optimizer step or
        ``load_state_dict`` makes the copy stale)."""
        return (self.onednn[row_bucket(rows)] and not torch.is_grad_enabled()
                and weight.data_ptr() == self.data_ptr and (self.version is None or weight._version == self.version))

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()

    def route(self) -> str:
        """The route of each bucket, ``mkl|onednn|onednn`` (the model's repr)."""
        return "|".join("onednn" if o else self.plain for o in self.onednn)


def _onednn_linear() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise"))


def _onednn_product(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's product of ``x (N, in)`` with a prepacked weight: ``(N, out)``."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


NO_ONEDNN = (False,) * len(BUCKET_ROWS)  # no bucket through oneDNN's copy


def _packable(weight: Tensor, setting: str) -> bool:
    """Whether :func:`pack` may make a copy of ``weight`` at all under ``setting`` (:func:`gemm_setting`)."""
    bf16 = weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and bf16_matmul_fast()
    return (setting != "mkl" and weight.device.type == "cpu" and (weight.dtype == torch.float32 or bf16)
            and weight.dim() == 2 and _onednn_linear())


def onednn_buckets(weight: Tensor, bias: Tensor | None = None) -> tuple[bool, ...]:
    """For each row bucket, whether a product with ``weight`` runs through oneDNN's prepacked copy, as :func:`pack`
    decides; a class measured already (``weights.choose_routes`` measures them at load) costs no copy, so a copy
    made per search (a decoding self-attention's fused Q|K|V) can wait for the first product that takes it."""
    setting = gemm_setting()
    if not _packable(weight, setting):
        return NO_ONEDNN
    known = measured(weight, bias is not None)
    if setting == "auto" and known is not None:
        return tuple(route == "onednn" for route in known.chosen)
    packed = pack(weight, bias)  # forced, or a class not seen yet: measured now, the copy dropped
    return NO_ONEDNN if packed is None else packed.onednn


def pack(weight: Tensor, bias: Tensor | None = None) -> Packed | None:
    """oneDNN's prepacked copy of a float32 CPU ``weight (out, in)`` for the row buckets where its product measured
    faster than MKL's (the class measured on first sight, once per process, under a lock), or for all with
    ``ATTN_GEMM=onednn``; likewise a bfloat16 weight on a CPU with bfloat16 instructions (:func:`bf16_matmul_fast`),
    against ``F.linear``'s bfloat16 product, which reorders the weight for those instructions at every call. None
    where the plain product won every bucket, with ``ATTN_GEMM=mkl``, for any other weight, or where this torch
    lacks oneDNN's packed linear."""
    setting = gemm_setting()
    if not _packable(weight, setting):
        return None
    plain = "plain" if weight.dtype == torch.bfloat16 else "mkl"
    known = measured(weight, bias is not None)
    if setting == "auto" and known is not None and "onednn" not in known.chosen:
        return None  # no copy made
    w, b = weight.detach(), None if bias is None else bias.detach()
    packed = torch.ops.mkldnn._reorder_linear_weight(w, None)
    if setting == "onednn":
        onednn = (True,) * len(BUCKET_ROWS)
    else:
        chosen = measure_once(w, b, (plain, "onednn"),
                              lambda x: (lambda: F.linear(x, w, b), lambda: _onednn_product(x, packed, b)),
                              give_up=False, margin=ONEDNN_MARGIN, rows_dtype=activation_dtype(w)).chosen
        onednn = tuple(route == "onednn" for route in chosen)
    if not any(onednn):
        return None
    return Packed(packed, None if weight.is_inference() else weight._version, weight.data_ptr(), onednn, plain)


# ----------------------------------------------------------------------------------------------
# bfloat16: the native product or float32


def in_float32(weight: Tensor, rows: int | None = None) -> bool:
    """Whether a product of ``rows`` rows with the bfloat16 ``weight`` runs in float32 here (:func:`linear`'s
    branch; None: not a weight's product, attention's: float32 where the CPU has no bfloat16 product at all). On a
    CPU with :func:`bf16_matmul_fast`, never; elsewhere as measured for the weight's class and the rows' bucket
    (:func:`bfloat16_routes`)."""
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or bf16_matmul_fast():
        return False
    if rows is None:
        return not bf16_matmul_native()
    return bfloat16_routes(weight)[row_bucket(rows)]


def bfloat16_routes(weight: Tensor) -> tuple[bool, ...]:
    """For each row bucket, whether a bfloat16 ``weight (out, in)`` on this CPU (without bfloat16 instructions) runs
    its products in float32: the faster of that and the native product, measured once per class and process, on rows
    of the model's activations (:func:`activation_dtype`)."""
    w = weight.detach()
    chosen = measure_once(w, None, ("float32", "native"),
                          lambda x: (lambda: _float32_product(x, w, None), lambda: native_product(x, w, None)),
                          give_up=True, margin=1.0, rows_dtype=activation_dtype(w)).chosen
    return tuple(route == "float32" for route in chosen)


def native_product(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear`` in the weight's dtype, ``x`` rounded to it at the input and the output returned in ``x``'s
    (float32 rows of a bfloat16 model on a CPU without bfloat16 instructions: :func:`activation_dtype`)."""
    if x.dtype == weight.dtype:
        return F.linear(x, weight, bias)
    return F.linear(x.to(weight.dtype), weight, bias).to(x.dtype)


CONVERT_BLOCK_BYTES = 1 << 21  # the float32 branch converts this much of a weight at a time (in a core's cache)


def block_onednn(buffer: Tensor, bias: bool, rows: int) -> bool:
    """Whether :func:`_float32_product` multiplies its float32 blocks ``buffer (step, in)`` (row-major, rewritten
    for every block, so not prepacked) through oneDNN rather than MKL's ``mm`` for ``rows`` rows: as measured for
    the block's class and the rows' bucket (``routes.measure_once``, the two libraries as :func:`pack` races them,
    oneDNN here on the plain block), MKL with ``ATTN_GEMM=mkl`` or without oneDNN's linear, oneDNN with
    ``ATTN_GEMM=onednn``."""
    setting = gemm_setting()
    if setting == "mkl" or not _onednn_linear():
        return False
    if setting == "onednn":
        return True
    known = measured(buffer, bias)
    if known is None:  # the class's first product: a bias of its own to time with
        block, bias_row = buffer.detach(), buffer.new_zeros(buffer.size(0)) if bias else None
        known = measure_once(block, bias_row, ("mkl", "onednn"),
                             lambda x: (lambda: F.linear(x, block, bias_row),
                                        lambda: _onednn_product(x, block, bias_row)),
                             give_up=False, margin=ONEDNN_MARGIN, rows_dtype=torch.float32)
    return known.chosen[row_bucket(rows)] == "onednn"


def _float32_product(x: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor | None = None) -> Tensor:
    """``F.linear`` of a bfloat16 ``weight`` computed in float32, returned in ``x``'s dtype (rounded back once where
    ``x`` is bfloat16), a block of output features at a time: each block converted into one float32 buffer, used and
    overwritten while it is still in cache (a float32 copy of the whole weight would cost more memory traffic than
    the product). ``out``: a float32 ``(N, out)`` tensor to write into (a search's logits)."""
    n_out, n_in = weight.shape
    step = max(1, CONVERT_BLOCK_BYTES // (4 * n_in))  # output features a block
    flat = x.reshape(-1, n_in).float()  # (..., in) -> (N, in)
    b = None if bias is None else bias.float()
    if torch.is_grad_enabled() or step >= n_out:  # autograd (attributions) or a small weight: one product
        y = F.linear(flat, weight.float(), b)
        if out is not None:
            return out.copy_(y)
    else:
        y = flat.new_empty(flat.size(0), n_out) if out is None else out  # (N, out)
        buffer = flat.new_empty(step, n_in)  # (step, in): each block's float32 copy in turn
        onednn = block_onednn(buffer, b is not None, flat.size(0))
        row_major = weight.is_contiguous()
        for start in range(0, n_out, step):
            end = min(start + step, n_out)
            block = buffer[:end - start]
            # (end - start, in), read in the order the weight is stored (row- or column-major: weights.py)
            if row_major:
                block.copy_(weight[start:end])
            else:
                block.t().copy_(weight.t()[:, start:end])
            bias_block = None if b is None else b[start:end]
            if onednn:  # oneDNN's product measured faster for a block here: (N, end - start) copied into place
                y[:, start:end] = _onednn_product(flat, block, bias_block)
            elif b is None:
                torch.mm(flat, block.t(), out=y[:, start:end])
            else:
                torch.addmm(bias_block, flat, block.t(), out=y[:, start:end])
        if out is not None:
            return out
    return y.to(x.dtype).view(*x.shape[:-1], n_out)  # (N, out) -> (..., out)


# ----------------------------------------------------------------------------------------------
# The linear map


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, packed: Packed | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``: ``x (..., in)``, ``weight (out, in)`` -> ``(..., out)`` in ``x``'s dtype, by
    the route measured for this product (see the module's text): oneDNN's product where ``packed``
    (:func:`pack`) runs this many rows; a bfloat16 weight in float32 where :func:`in_float32` says so, else its
    native product (float32 rows rounded at its edges: :func:`native_product`); else ``F.linear``."""
    if packed is not None:
        rows = x.numel() // max(x.size(-1), 1)
        if packed.runs(weight, rows) and x.dtype == weight.dtype:
            y = _onednn_product(x.reshape(rows, x.size(-1)), packed.weight, bias)  # (..., in) -> (N, in): (N, out)
            return y.view(*x.shape[:-1], y.size(-1))  # (N, out) -> (..., out)
    elif weight.dtype == torch.bfloat16 and in_float32(weight, x.numel() // max(x.size(-1), 1)):
        return _float32_product(x, weight, bias)
    return native_product(x, weight, bias)


def logits_into(x: Tensor, weight: Tensor, bias: Tensor | None, packed: Packed | None, out: Tensor) -> Tensor:
    """:func:`linear` of ``x (N, in)`` written into ``out (N, out)`` where its route can write there (MKL's
    float32 product, bfloat16's float32 blocks: a search reuses one logits tensor across its steps, since a fresh
    N x V tensor each step costs more in page faults than the softmax over it); else a tensor of its own."""
    rows = x.size(0)
    if weight.dtype == torch.bfloat16 and x.dtype == out.dtype == torch.float32 and in_float32(weight, rows):
        return _float32_product(x, weight, bias, out)  # bfloat16's float32 blocks
    if out.dtype != x.dtype or weight.dtype != x.dtype or (packed is not None and packed.runs(weight, rows)):
        return linear(x, weight, bias, packed)  # the native product or oneDNN's: a tensor of its own
    if bias is None:
        return torch.mm(x, weight.t(), out=out)  # (N, D) @ (D, V)
    return torch.addmm(bias, x, weight.t(), out=out)


class Linear(nn.Linear):
    """``nn.Linear`` whose forward is :func:`linear` (the model's projections: called as modules, or through
    :func:`linear` with their weights and ``packed``, the same product). :meth:`pack` keeps oneDNN's prepacked
    copy where its product measured faster (CPU decoding, float32)."""

    packed: Packed | None = None

    @torch.no_grad()
    def pack(self) -> bool:
        """Prepack the weight where oneDNN's product measured faster for some row bucket (:func:`pack`); False:
        no copy kept."""
        self.packed = pack(self.weight, self.bias)
        return self.packed is not None

    def packed_bytes(self) -> int:
        """Bytes of the prepacked copy (0 when there is none)."""
        return 0 if self.packed is None else self.packed.nbytes

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed copy behind (an opaque oneDNN tensor); they run on the plain path."""
        state = dict(super().__getstate__())
        state.pop("packed", None)
        return state

    def extra_repr(self) -> str:
        """nn.Linear's, and the product's route per row bucket where it is not the plain one everywhere."""
        extra = super().extra_repr()
        if self.packed is not None:
            extra += f", gemm={self.packed.route()}"
        elif self.weight.dtype == torch.bfloat16 and self.weight.device.type == "cpu" and not bf16_matmul_fast():
            known = measured(self.weight, False)
            if known is not None:
                extra += f", bfloat16={'|'.join(known.chosen)}"
        return extra

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias, self.packed)
