"""Dropout for training on a CPU: the mask from 16-bit random numbers instead of ``bernoulli_``."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """``nn.Dropout`` that, in training on a CPU, draws its mask from 16-bit random numbers (four from each random
    64-bit word) instead of ``bernoulli_``, which was a large share of a small model's training step
    (measured in docs/training.md). A unit is dropped with probability ``round(p * 65536) / 65536`` (within 1e-5
    of ``p``) and the kept ones are scaled by ``1 / (1 - p)``; elsewhere (evaluation, CUDA) it is ``nn.Dropout``."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0 or x.device.type != "cpu" or self.p >= 1:
            return super().forward(x)
        n = x.numel()
        words = torch.randint(-2 ** 63, 2 ** 63 - 1, ((n + 3) // 4,), dtype=torch.int64)  # 4 x 16 random bits each
        r = words.view(torch.int16)[:n].view(x.shape)  # (ceil(n/4) * 4,) -> x's shape
        scale = torch.where(r >= round(self.p * 65536) - 32768, 1.0 / (1.0 - self.p), 0.0).to(x.dtype)  # keep
        return x * scale
