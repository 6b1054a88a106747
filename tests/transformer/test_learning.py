"""The model can learn: a tiny Transformer masters copying short random sequences it never saw, in seconds."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from transformer import Transformer, TransformerConfig, beam_search, greedy_decode

PAD, BOS, EOS = 0, 2, 3
SYMBOLS = list(range(4, 12))  # 8 symbols besides the specials: 8^2 + ... + 8^6 ~ 300k possible sequences
STEPS = 300


def pad(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def batch(seqs: list[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source ``seq + EOS``; decoder input ``BOS + seq``; decoder target ``seq + EOS``."""
    src = pad([[*s, EOS] for s in seqs])
    tgt = pad([[BOS, *s, EOS] for s in seqs])
    return src, tgt[:, :-1], tgt[:, 1:]


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm (the paper)", "pre-norm"])
def test_tiny_model_learns_to_copy(norm_first: bool):
    rng = random.Random(0)
    torch.manual_seed(0)

    def sample() -> tuple[int, ...]:
        return tuple(rng.choice(SYMBOLS) for _ in range(rng.randint(2, 6)))

    held_out: set[tuple[int, ...]] = set()
    while len(held_out) < 128:
        held_out.add(sample())

    cfg = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=32, n_heads=4, n_encoder_layers=1,
                            n_decoder_layers=1, d_ff=64, dropout=0.0, max_len=16, norm_first=norm_first)
    model = Transformer(cfg).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / STEPS)))
    losses = []
    for _ in range(STEPS):
        seqs: list[tuple[int, ...]] = []
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
        schedule.step()
        losses.append(loss.item())
    model.eval()
    assert losses[-1] < losses[0] / 20

    tests = sorted(held_out)
    src, _, _ = batch(tests)
    expected = [[*s, EOS] for s in tests]
    for name, hyp in [("greedy", greedy_decode(model, src, max_len_a=1.0, max_len_b=2)),
                      ("beam", beam_search(model, src, beam_size=3, max_len_a=1.0, max_len_b=2))]:
        got = [row[: len(e)] for row, e in zip(hyp.tokens.tolist(), expected)]
        wrong = [(s, g) for s, g, e in zip(tests, got, expected) if g != e]
        assert not wrong, f"{name}: {len(wrong)}/{len(tests)} held-out sequences wrong, e.g. {wrong[:3]}"


def test_branch_init_scale_touches_exactly_the_residual_branches():
    from transformer.network.weights import scale_residual_branches

    cfg = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2, n_encoder_layers=2,
                            n_decoder_layers=2, d_ff=32)
    torch.manual_seed(3)
    plain = Transformer(cfg).state_dict()
    torch.manual_seed(3)
    scaled = scale_residual_branches(Transformer(cfg), 0.5).state_dict()
    branch = ("v_proj.weight", "out_proj.weight", "linear1.weight", "linear2.weight")
    touched = 0
    for name, value in plain.items():
        if name.endswith(branch):
            torch.testing.assert_close(scaled[name], value * 0.5)
            touched += 1
        else:
            assert torch.equal(scaled[name], value), name
    assert touched == 2 * 4 + 2 * 6  # encoder: self v/out + ffn 2; decoder: self + cross v/out + ffn 2
