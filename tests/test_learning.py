"""The model can learn: a tiny Transformer masters reversing short random sequences in seconds."""

from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F

from transformer import Transformer, TransformerConfig, beam_search, greedy_decode

PAD, BOS, EOS = 0, 2, 3
SYMBOLS = list(range(4, 12))  # 8 symbols besides the specials


def pad(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def batch(seqs: list[tuple[int, ...]]):
    src = pad([[*s, EOS] for s in seqs])
    tgt = pad([[BOS, *reversed(s), EOS] for s in seqs])
    return src, tgt[:, :-1], tgt[:, 1:]


def test_tiny_model_learns_to_reverse():
    rng = random.Random(0)
    torch.manual_seed(0)

    def sample() -> tuple[int, ...]:
        return tuple(rng.choice(SYMBOLS) for _ in range(rng.randint(2, 6)))

    held_out = set()
    while len(held_out) < 64:
        held_out.add(sample())

    cfg = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=2, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=64, dropout=0.0, max_len=16)
    model = Transformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    start = time.monotonic()
    model.train()
    for step in range(600):
        seqs = []
        while len(seqs) < 64:
            s = sample()
            if s not in held_out:  # never trained on a test sequence
                seqs.append(s)
        src, tgt_in, tgt_out = batch(seqs)
        logits = model(src, tgt_in).logits
        loss = F.cross_entropy(logits.reshape(-1, cfg.tgt_vocab_size), tgt_out.reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 200 and step % 50 == 0 and loss.item() < 0.01:
            break
    model.eval()

    tests = sorted(held_out)
    src, _, tgt_out = batch(tests)
    expected = [[*reversed(s), EOS] for s in tests]
    for hyp in (greedy_decode(model, src, max_len_a=1.0, max_len_b=2),
                beam_search(model, src, beam_size=3, max_len_a=1.0, max_len_b=2)):
        got = [row[: len(e)] for row, e in zip(hyp.tokens.tolist(), expected)]
        accuracy = sum(g == e for g, e in zip(got, expected)) / len(expected)
        assert accuracy == 1.0, f"reversal accuracy {accuracy:.2%} after {step + 1} steps, loss {loss.item():.4f}"
    assert time.monotonic() - start < 60
