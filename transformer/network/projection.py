"""The output projection, ``d_model`` -> vocabulary (a :class:`~.linear.Linear`: prepacked for CPU decoding where that
measured faster); its logits a block of the vocabulary at a time for a search that reads them in cache."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .linear import Linear, Packed, linear, pack

VOCAB_BLOCK = 4096  # pieces a block of :meth:`OutputProjection.blocks` (256 rows' logits of a block: 4 MB, in cache)


class OutputProjection(Linear):
    """The last linear layer, ``d_model`` -> vocabulary (tied to the embeddings by default); prepacked for CPU
    decoding where oneDNN's product measured faster (``Linear.pack``), and so are its blocks (:meth:`blocks`)."""

    packed_blocks: tuple[int, tuple[Packed | None, ...]] | None = None  # (block size, each block's copy)

    @torch.no_grad()
    def pack(self) -> bool:
        """The whole weight's copy (``Linear.pack``) and, over a vocabulary of more than one block, each block's
        where oneDNN measured faster for a beam batch's rows (the only rows :meth:`blocks` serves: a second copy of
        the weight, counted in :meth:`packed_bytes`)."""
        super().pack()
        self.packed_blocks = None
        if self.weight.size(0) > VOCAB_BLOCK:
            bias = self._block_bias()
            copies = [pack(self.weight[start:start + VOCAB_BLOCK],
                           None if bias is None else bias[start:start + VOCAB_BLOCK])
                      for start in range(0, self.weight.size(0), VOCAB_BLOCK)]
            copies = [c if c is not None and c.onednn[-1] else None for c in copies]
            if any(c is not None for c in copies):
                self.packed_blocks = (VOCAB_BLOCK, tuple(copies))
        return self.packed is not None or self.packed_blocks is not None

    def packed_bytes(self) -> int:
        """Bytes of the prepacked copies, the whole weight's and the blocks' (0 when there are none)."""
        blocks = () if self.packed_blocks is None else self.packed_blocks[1]
        return super().packed_bytes() + sum(c.nbytes for c in blocks if c is not None)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("packed_blocks", None)
        return state

    def extra_repr(self) -> str:
        extra = super().extra_repr()
        if self.packed_blocks is not None:
            extra += ", blocks: onednn"
        return extra

    def _block_bias(self) -> Tensor | None:
        """The bias the blocks add: none for a bias of zeros (OPUS-MT's ``final_logits_bias``), which adding would
        copy into every block first."""
        return self.bias if self.bias is not None and bool(self.bias.any()) else None

    def blocks(self, x: Tensor) -> Iterator[tuple[int, Tensor]]:
        """The logits of ``x (N, D)`` one block of :data:`VOCAB_BLOCK` pieces at a time: ``(first piece, logits
        (N, block))``, each from the block's rows of the weight (a search reads a block while it is in cache; the
        whole ``(N, V)`` tensor of a large batch is not), through the block's prepacked copy where there is one."""
        bias = self._block_bias()
        copies = self.packed_blocks[1] if self.packed_blocks is not None and self.packed_blocks[0] == VOCAB_BLOCK \
            else None
        for i, start in enumerate(range(0, self.weight.size(0), VOCAB_BLOCK)):
            end = start + VOCAB_BLOCK
            yield start, linear(x, self.weight[start:end], None if bias is None else bias[start:end],
                                None if copies is None else copies[i])
