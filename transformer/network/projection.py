"""The output projection, ``d_model`` -> vocabulary (a :class:`~.linear.Linear`: prepacked for CPU decoding where that
measured faster); its logits a block of the vocabulary at a time for a search that reads them in cache."""

from __future__ import annotations

from collections.abc import Iterator

from torch import Tensor

from .linear import Linear, linear

VOCAB_BLOCK = 4096  # pieces a block of :meth:`OutputProjection.blocks` (256 rows' logits of a block: 4 MB, in cache)


class OutputProjection(Linear):
    """The last linear layer, ``d_model`` -> vocabulary (tied to the embeddings by default); prepacked for CPU
    decoding where oneDNN's product measured faster (``Linear.pack``)."""

    def blocks(self, x: Tensor) -> Iterator[tuple[int, Tensor]]:
        """The logits of ``x (N, D)`` one block of :data:`VOCAB_BLOCK` pieces at a time: ``(first piece, logits
        (N, block))``, each from the block's rows of the weight (a search reads a block while it is in cache; the
        whole ``(N, V)`` tensor of a large batch is not). A bias of zeros (OPUS-MT's ``final_logits_bias``) is left
        out: adding it would copy it into every block first."""
        bias = self.bias if self.bias is not None and bool(self.bias.any()) else None
        for start in range(0, self.weight.size(0), VOCAB_BLOCK):
            end = start + VOCAB_BLOCK
            yield start, linear(x, self.weight[start:end], None if bias is None else bias[start:end])
