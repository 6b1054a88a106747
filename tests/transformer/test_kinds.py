"""The three attention kinds in one place (``transformer.network.kinds``): head masks, decoder input and the
per-query head statistics, against plain loops; the app's head table and ``transformer.heads`` read the same
statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from transformer import TransformerConfig
from transformer.network import kinds


def random_weights(h: int, q: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(h, q, k, generator=g, dtype=torch.float64)
    if k > 1:
        w[0, 0, 0] = 0.0  # a zero weight: 0 log 0 = 0
    return w / w.sum(-1, keepdim=True)


def test_head_mask_switches_off_exactly_the_named_heads():
    cfg = TransformerConfig(d_model=12, n_heads=3, n_encoder_layers=2, n_decoder_layers=4)
    assert kinds.layer_counts(cfg) == {"encoder": 2, "decoder": 4, "cross": 4}
    heads = kinds.all_heads(cfg)
    assert len(heads) == 3 * (2 + 4 + 4) == len(set(heads)) and heads[0] == ("encoder", 0, 0)
    off = [("encoder", 1, 2), ("cross", 3, 0)]
    mask = kinds.head_mask(cfg, off)
    for kind, layer, head in heads:
        assert mask[kind][layer, head] == (0.0 if (kind, layer, head) in off else 1.0)
    for bad in (("cross", 4, 0), ("encoder", 0, 3), ("self", 0, 0)):
        with pytest.raises(ValueError, match="no head"):
            kinds.head_mask(cfg, [bad])
    with pytest.raises(ValueError, match="kind must be one of"):
        kinds.check_kind("self")


def test_decoder_input_is_bos_and_all_outputs_but_the_last():
    assert kinds.decoder_input(2, [7, 8, 3]) == [2, 7, 8]
    assert kinds.decoder_input(2, []) == [2]


@pytest.mark.parametrize(("q", "k"), [(4, 6), (5, 5), (6, 3), (1, 1)])
def test_query_stats_equal_plain_loops(q, k):
    w = random_weights(2, q, k)
    stats = kinds.query_stats(w, special=k - 1)
    for h in range(2):
        for i in range(q):
            row = w[h, i].tolist()
            assert stats["entropy"][h, i] == pytest.approx(-sum(x * math.log(x) for x in row if x > 0))
            assert stats["max_weight"][h, i] == max(row)
            assert stats["on_special"][h, i] == row[k - 1]
            for name, offset in (("on_previous", -1), ("on_same", 0), ("on_next", 1)):
                assert stats[name][h, i] == (row[i + offset] if 0 <= i + offset < k else 0.0)
    assert "on_special" not in kinds.query_stats(w, special=None)
    assert kinds.special_key("decoder", k) == 0 and kinds.special_key("cross", k) == k - 1


def test_the_app_head_table_means_the_same_statistics():
    pytest.importorskip("streamlit")
    from app.drawing.analysis import diagonal_share, head_diagnostics

    w = random_weights(3, 5, 4, seed=1)
    rows = head_diagnostics({"cross": w[None].numpy()}, {"cross": 3})
    for head, row in enumerate(rows):
        plain = w[head].numpy()
        assert row["entropy"] == pytest.approx(float(np.mean([-sum(x * math.log(x) for x in r if x > 0)
                                                               for r in plain])))
        assert row["on special token"] == pytest.approx(plain[:, 3].mean())
        # previous: queries 1..4 have a key q - 1; next: queries 0..2 have a key q + 1 (4 keys)
        assert row["on previous"] == pytest.approx(np.mean([plain[i, i - 1] for i in range(1, 5)]))
        assert row["on next"] == pytest.approx(np.mean([plain[i, i + 1] for i in range(0, 3)]))
        assert row["on same"] == pytest.approx(diagonal_share(plain, 0))
