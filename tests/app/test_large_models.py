"""What the app does at large models' sizes, checked on small ones: the All heads grid's bytes stay bounded however
many layers x heads a model has (NLLB-200-3.3B: 24 x 16), and the work estimates grow with the model as its cost
does."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("plotly")

from app.drawing import grid  # noqa: E402
from app.parts import all_heads  # noqa: E402


def _attn(shape: tuple[int, int, int, int], seed: int = 0) -> np.ndarray:
    attn = np.random.default_rng(seed).random(shape).astype(np.float32)
    return attn / attn.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape", [(3, 4, 60, 60), (24, 16, 45, 27), (24, 16, 60, 60), (48, 32, 60, 60)])
def test_the_grid_holds_at_most_its_cells_and_one_layer_at_least(shape):
    shown = grid.grid_layers(shape)
    per_layer = shape[1] * shape[2] * shape[3]
    assert 1 <= shown <= shape[0]
    assert shown * per_layer <= max(grid.GRID_MOST_CELLS, per_layer)  # one layer even when it alone is over
    assert shown == shape[0] or (shown + 1) * per_layer > grid.GRID_MOST_CELLS  # as many as fit


def test_a_grid_of_some_layers_names_the_models_layers():
    attn = _attn((5, 2, 3, 4))
    fig = grid.head_grid(attn[2:4], list("abc"), list("wxyz"), "encoder", highlight=(1, 0), first_layer=2)
    assert list(fig.layout.yaxis.ticktext) == ["layer 3", "layer 4"]
    cells = np.asarray(fig.data[1].customdata, dtype=object)
    assert {int(c[0]) for c in cells} == {3, 4}  # hover and clicks name the model's layers (1-based)
    z = np.asarray(fig.data[0].z, dtype=float)
    np.testing.assert_allclose(grid.grid_block(z, (2, 2, 3, 4), 1, 1), attn[3, 1], atol=1e-6)
    frames = {s.name for s in fig.layout.shapes if str(s.name).startswith("frame")}
    assert frames == {f"frame L{layer} H{head}" for layer in (3, 4) for head in (1, 2)}
    assert fig.layout.meta["first_layer"] == 2


def test_the_offline_grid_of_a_many_headed_model_stays_bounded():
    """24 x 16 heads (NLLB-200-3.3B) over a 45 x 27 sentence: the offline page's grid holds the first layers that
    fit, says so, and its chart data is a bounded size; a small model's grid is drawn whole, without a caption."""

    class A:  # the part reads the attention and its axes only
        def __init__(self, attn):
            self._attn = attn

        def attention(self, kind):
            return self._attn

        def axes(self, kind):
            return [f"q{i}" for i in range(self._attn.shape[2])], [f"k{i}" for i in range(self._attn.shape[3])]

    big = all_heads.chart(A(_attn((24, 16, 45, 27))), "cross")
    shown = len(big.figure.layout.yaxis.ticktext)
    assert shown == grid.grid_layers((24, 16, 45, 27)) < 24
    assert f"Layers 1–{shown} of 24" in big.caption
    cells = np.isfinite(np.asarray(big.figure.data[0].z, dtype=float)).sum()
    assert cells == shown * 16 * 45 * 27 <= grid.GRID_MOST_CELLS
    assert len(big.figure.to_json()) < 12 * grid.GRID_MOST_CELLS  # about 8 bytes a weight
    small = all_heads.chart(A(_attn((3, 4, 45, 27))), "cross")
    assert len(small.figure.layout.yaxis.ticktext) == 3 and small.caption == ""


def test_the_page_shows_some_layers_at_a_time_when_the_grid_is_over_its_cells(app_env, tr, monkeypatch):
    """The All heads view of a model whose grid is over ``GRID_MOST_CELLS`` (here the tiny model, with the bound
    lowered to one layer's weights): a slider of layers, a caption that says so, the grid of the chosen layers
    with the model's layer numbers, and a picked head of any layer still opens."""
    from conftest import assert_clean, charts, new_app

    text = "A dog runs in the park."
    ref = tr.translate(text)
    one_layer = ref.cross_attentions[0].numel()  # heads x queries x keys of one cross-attention layer (the default)
    monkeypatch.setattr(grid, "GRID_MOST_CELLS", one_layer)
    at = new_app({"text": text, "view": "all_heads"})
    assert_clean(at)
    slider = at.slider(key="grid_layers")
    assert slider.value == (1, 1)
    assert any("Layers 1–1 of" in c.value for c in at.caption)
    spec = next(s for s in charts(at) if "every head" in s["layout"]["title"]["text"])
    assert spec["layout"]["yaxis"]["ticktext"] == ["layer 1"]
    slider.set_value((2, 2))
    at.run()
    spec = next(s for s in charts(at) if "every head" in s["layout"]["title"]["text"])
    assert spec["layout"]["yaxis"]["ticktext"] == ["layer 2"] and spec["layout"]["meta"]["first_layer"] == 1
    assert at.query_params["layers"] == "2-2"
    at.pills(key="grid_pick").set_value("L1 · H2")  # a head outside the shown layers
    at.run()
    assert_clean(at)
    assert any("layer 1 · head 2" in s["layout"]["title"]["text"] for s in charts(at))


def test_vocabulary_norms_a_block_at_a_time_equal_the_whole_tables(tr, monkeypatch):
    """Positional encoding's embedding lengths are computed a block of rows at a time (no float32 copy of a large
    model's whole table): the same numbers as over the whole table at once, padding left out."""
    import torch

    from app.analysis import probes

    weight = tr.model.src_embed.weight.detach().float()
    keep = torch.ones(weight.size(0), dtype=torch.bool)
    keep[tr.config.pad_id] = False
    whole = (weight[keep].norm(dim=-1) * tr.model.embedding_scale).numpy()
    monkeypatch.setattr(probes, "EMBEDDING_BLOCK", 7)  # blocks that split the table unevenly
    np.testing.assert_allclose(probes.vocab_embedding_norms(tr), whole, rtol=1e-6)
