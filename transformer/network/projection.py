"""The output projection, ``d_model`` -> vocabulary, with a prepacked copy for CPU decoding; its logits a block of the
vocabulary at a time for a search that reads them in cache."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from .linear import linear

VOCAB_BLOCK = 4096  # pieces a block of :meth:`OutputProjection.blocks` (256 rows' logits of a block: 4 MB, in cache)


class OutputProjection(nn.Linear):
    """The last linear layer, ``d_model`` -> vocabulary (tied to the embeddings by default).

    :meth:`pack` keeps a copy of the weight prepacked by oneDNN for decoding on a CPU (float32): faster than MKL's GEMM
    for a few rows and more over a large vocabulary (no faster for one row, which keeps the plain path; measured in
    docs/benchmarks.md). The copy is used only without gradients, on CPU, and while the weight is
    still the one packed (same storage, no in-place change since: an optimizer step or ``load_state_dict`` makes
    it stale); otherwise the plain ``nn.Linear`` path runs.
    """

    packed: tuple[Tensor, int, int] | None = None  # (oneDNN weight, weight._version, weight.data_ptr())

    @torch.no_grad()
    def pack(self) -> bool:
        """Prepack the weight for CPU decoding; False (nothing kept) where oneDNN's packed linear is missing."""
        w = self.weight
        ops = getattr(torch.ops, "mkldnn", None)
        if (w.device.type != "cpu" or w.dtype != torch.float32 or not torch.backends.mkldnn.is_available()
                or not hasattr(ops, "_reorder_linear_weight") or not hasattr(ops, "_linear_pointwise")):
            self.packed = None
            return False
        self.packed = (torch.ops.mkldnn._reorder_linear_weight(w.detach(), None), w._version, w.data_ptr())
        return True

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed copy behind (an opaque oneDNN tensor); they decode on the plain path."""
        state = dict(super().__getstate__())
        state.pop("packed", None)
        return state

    def packed_bytes(self) -> int:
        """Bytes of the prepacked copy (0 when there is none)."""
        return 0 if self.packed is None else self.packed[0].numel() * self.packed[0].element_size()

    def blocks(self, x: Tensor) -> Iterator[tuple[int, Tensor]]:
        """The logits of ``x (N, D)`` one block of :data:`VOCAB_BLOCK` pieces at a time: ``(first piece, logits
        (N, block))``, each from the block's rows of the weight (a search reads a block while it is in cache; the
        whole ``(N, V)`` tensor of a large batch is not). A bias of zeros (OPUS-MT's ``final_logits_bias``) is left
        out: adding it would copy it into every block first."""
        bias = self.bias if self.bias is not None and bool(self.bias.any()) else None
        for start in range(0, self.weight.size(0), VOCAB_BLOCK):
            end = start + VOCAB_BLOCK
            yield start, linear(x, self.weight[start:end], None if bias is None else bias[start:end])

    def forward(self, x: Tensor) -> Tensor:
        p = self.packed
        if (p is None or torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
                or x.numel() == x.size(-1)  # one row: the column-major GEMM is as fast
                or p[1] != self.weight._version or p[2] != self.weight.data_ptr()):
            return linear(x, self.weight, self.bias)
        flat = x.reshape(-1, x.size(-1))  # (..., D) -> (N, D)
        y = torch.ops.mkldnn._linear_pointwise(flat, p[0], self.bias, "none", [], "")  # (N, V)
        return y.view(*x.shape[:-1], y.size(-1))  # (N, V) -> (..., V)
