"""The explorer's figures, statistics and model helpers, without a browser or a Streamlit runtime."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from conftest import tiny_model

import transformer
from app.analysis import inference, probes
from app.analysis.inference import DecodeSettings
from app.drawing import analysis, figures, grid
from app.drawing import positional as pe_figures
from app.models import card, catalog

torch.set_num_threads(1)


def _rows(q: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.random((q, k))
    return w / w.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------------------------------------ labels, escaping


def test_unique_labels_keep_repeated_tokens_apart_and_escape_markup():
    tokens = ["▁a", "▁dog", "▁a", "<script>", "&"]
    labels = analysis.unique_labels(tokens)
    assert len(set(labels)) == len(tokens)
    assert labels[0] == "▁a·1" and labels[2] == "▁a·3"  # positions count from 1 and labels[1] == "▁dog"
    assert labels[3] == "&lt;script&gt;" and labels[4] == "&amp;"
    assert all("<" not in label for label in labels)


def test_heatmap_z_axes_and_hover_match_the_matrix():
    w = _rows(4, 5)
    queries = ["▁Ein", "▁Hund", "<unk>", "▁Hund"]
    keys = ["▁A", "▁dog", "<b>", "▁dog", "</s>"]
    fig = figures.attention_heatmap(w, queries, keys, title="t")
    heat = fig.data[0]
    np.testing.assert_allclose(np.asarray(heat.z), w)
    assert list(heat.x) == list(range(5)) and list(heat.y) == list(range(4))
    # repeated tokens keep their own rows / columns: tick labels are unique
    assert len(set(fig.layout.yaxis.ticktext)) == 4 and len(set(fig.layout.xaxis.ticktext)) == 5
    assert "&lt;b&gt;" in fig.layout.xaxis.ticktext[2]
    assert fig.layout.yaxis.autorange == "reversed"  # first query on top
    custom = np.asarray(heat.customdata)
    assert custom[2, 2, 0] == "&lt;unk&gt;" and custom[2, 2, 1] == "&lt;b&gt;"
    assert custom[3, 1, 0] == "▁Hund" and custom[3, 1, 2] == 4 and custom[3, 1, 3] == 2
    assert "customdata[0]" in heat.hovertemplate and "customdata[1]" in heat.hovertemplate
    assert "%{z" in heat.hovertemplate
    # no raw markup from tokens anywhere in the figure
    assert "<b>" not in json.dumps(fig.layout.xaxis.ticktext)


def test_heatmap_window_offsets_show_true_positions():
    w = _rows(3, 3)
    fig = figures.attention_heatmap(w, ["a", "b", "c"], ["x", "y", "z"], query_offset=10, key_offset=20)
    custom = np.asarray(fig.data[0].customdata)
    assert custom[0, 0, 2] == 11 and custom[2, 1, 3] == 22  # 1-based, past the window start


def test_lines_in_a_layout_are_plotly_s_own_hline_and_vline():
    """``figures.hline`` / ``vline`` (a line given with the layout, so that a builder makes its figure in one call)
    are what plotly's ``add_hline`` / ``add_vline`` add."""
    import plotly.graph_objects as go

    line = dict(dash="dot", width=2, color="#c62828")
    ours = go.Figure(go.Bar(x=[0, 1], y=[1, 2]), dict(shapes=[figures.hline(0.4, line=line, name="median"),
                                                               figures.vline(0.5, line=line)]))
    theirs = go.Figure(go.Bar(x=[0, 1], y=[1, 2]))
    theirs.add_hline(y=0.4, line_dash="dot", line_width=2, line_color="#c62828", name="median")
    theirs.add_vline(x=0.5, line_dash="dot", line_width=2, line_color="#c62828")
    assert ours.to_plotly_json() == theirs.to_plotly_json()


def test_head_grid_has_every_head_on_one_colour_scale():
    rng = np.random.default_rng(1)
    attn = rng.random((2, 3, 4, 5))
    attn /= attn.sum(-1, keepdims=True)
    fig = grid.head_grid(attn, list("abcd"), ["v", "<w>", "x", "y", "z"], "encoder", highlight=(1, 2))
    assert [t.type for t in fig.data] == ["heatmap", "scatter"]  # one tiled heatmap, one colour scale, click cells
    z = np.asarray(fig.data[0].z, dtype=float)
    assert tuple(fig.layout.meta["grid"]) == attn.shape
    for layer in range(2):
        for head in range(3):
            np.testing.assert_allclose(grid.grid_block(z, attn.shape, layer, head), attn[layer, head], atol=1e-6)
    assert np.isnan(z).sum() == z.size - attn[:, :, :, :].size  # gaps are empty, nothing else
    assert fig.data[0].zmin == 0 and fig.data[0].zmax == pytest.approx(attn.max())
    frames = [s for s in fig.layout.shapes if str(s.name).startswith("frame")]
    assert len(frames) == 2 * 3  # one frame a head, drawn around exactly its block
    gap, bh, bw = grid.grid_blocks(attn.shape)
    for s in frames:
        layer, head = (int(part[1:]) - 1 for part in s.name.split()[1:])
        assert (s.x0, s.x1) == (head * bw - 0.5, head * bw + 5 - 0.5)
        assert (s.y0, s.y1) == (layer * bh - 0.5, layer * bh + 4 - 0.5)
    picked = [s for s in fig.layout.shapes if s.name == "picked"]
    assert len(picked) == 1 and picked[0].x0 < 2 * bw - 0.5 < picked[0].x1 and picked[0].y0 < bh - 0.5 < picked[0].y1
    fixed = grid.head_grid(attn, list("abcd"), list("vwxyz"), "encoder", zrange=(0.0, 1.0))
    assert fixed.data[0].zmax == 1.0


def test_head_grid_cells_name_their_head_for_hover_and_click():
    rng = np.random.default_rng(2)
    attn = rng.random((2, 3, 4, 5))
    fig = grid.head_grid(attn, list("abcd"), ["v", "<w>", "x", "y", "z"], "encoder")
    heat, cells = fig.data
    assert heat.hoverinfo == "skip" and cells.marker.opacity == 0  # invisible, but hoverable and clickable
    custom = np.asarray(cells.customdata, dtype=object)
    x, y = np.asarray(cells.x), np.asarray(cells.y)
    assert len(custom) == len(x) == attn.size  # one marker a weight, none on the gaps
    z = np.asarray(heat.z, dtype=float)
    gap, bh, bw = grid.grid_blocks(attn.shape)
    for i in rng.choice(attn.size, 12, replace=False):
        layer, head = int(custom[i][0]) - 1, int(custom[i][1]) - 1
        qi, ki = int(y[i]) - layer * bh, int(x[i]) - head * bw
        assert 0 <= qi < 4 and 0 <= ki < 5  # inside its own block
        assert z[y[i], x[i]] == pytest.approx(attn[layer, head, qi, ki], abs=1e-6)  # on its own cell
        assert custom[i][4] == pytest.approx(attn[layer, head, qi, ki], abs=1e-4)
        assert custom[i][2] == "abcd"[qi] and custom[i][3] == ["v", "&lt;w&gt;", "x", "y", "z"][ki]
    # a Streamlit point selection on a cell picks its head; nothing picked without a point
    point = {"curve_number": 1, "point_index": 7, "customdata": list(custom[7])}
    assert grid.grid_pick({"points": [point]}) == (int(custom[7][0]), int(custom[7][1]))
    assert grid.grid_pick({"points": []}) is None and grid.grid_pick(None) is None
    # larger grids: no marker a cell (too many for the browser); the heatmap names the tokens itself, and a
    # coarse lattice of click targets over every block still opens the head clicked
    big = rng.random((2, 3, 42, 42))
    assert big.size > grid.GRID_CLICK_CELLS
    fig = grid.head_grid(big, [f"q{i}" for i in range(42)], [f"k{i}" for i in range(42)], "encoder")
    custom = np.asarray(fig.data[0].customdata, dtype=object)
    assert list(custom[3, 5]) == [1, 1, "q3", "k5"]
    huge = grid.head_grid(rng.random((2, 3, 120, 120)), ["q"] * 120, ["k"] * 120, "encoder")
    assert huge.data[0].customdata is None  # the weights only: no text a cell
    targets = fig.data[1]
    gap, bh, bw = grid.grid_blocks(big.shape)
    tx, ty, tc = np.asarray(targets.x), np.asarray(targets.y), np.asarray(targets.customdata)
    assert len(tx) <= 2 * 3 * 64
    assert {(int(a), int(b)) for a, b in tc} == {(layer, head) for layer in (1, 2) for head in (1, 2, 3)}
    for i in range(len(tx)):  # every target sits inside the block of the head it names
        layer, head = int(tc[i][0]) - 1, int(tc[i][1]) - 1
        assert 0 <= ty[i] - layer * bh < 42 and 0 <= tx[i] - head * bw < 42
        point = {"curve_number": 1, "point_index": i, "customdata": list(tc[i])}
        assert grid.grid_pick({"points": [point]}) == (layer + 1, head + 1)


def test_lines_draw_only_weights_above_the_threshold():
    attn = np.zeros((2, 3, 3))
    attn[0] = np.eye(3)
    attn[1] = [[0.5, 0.5, 0.0], [0.02, 0.98, 0.0], [0.3, 0.3, 0.4]]
    fig = figures.attention_lines(attn, ["a", "b", "c"], ["x", "y", "z"], threshold=0.05)
    segments = sum(int(np.isnan(np.asarray(t.x, dtype=float)).sum()) for t in fig.data
                   if t.mode == "lines" and t.x is not None and len(t.x) > 1)
    assert segments == int((attn >= 0.05).sum())  # 3 + 6 (the 0.02 weight is hidden)
    focused = figures.attention_lines(attn, ["a", "b", "c"], ["x", "y", "z"], focus=1, threshold=0.05)
    segs = sum(int(np.isnan(np.asarray(t.x, dtype=float)).sum()) for t in focused.data
               if t.mode == "lines" and t.x is not None and len(t.x) > 1)
    assert segs == 2  # head 1: b->y, head 2: b->y
    only_head_2 = figures.attention_lines(attn, ["a", "b", "c"], ["x", "y", "z"], heads=[1])
    assert {t.name for t in only_head_2.data if t.showlegend is not False and t.mode == "lines"} == {"head 2"}


def test_mask_figure_and_masked_weight():
    mask = np.tril(np.ones((3, 3), dtype=bool))
    fig = figures.mask_figure(mask, ["<s>", "a", "b"], ["<s>", "a", "b"], "causal")
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), mask.astype(float))
    assert fig.layout.yaxis.ticktext[0] == "&lt;s&gt;"
    weights = np.tril(np.ones((3, 3))) / np.arange(1, 4)[:, None]
    assert analysis.masked_weight(weights, mask) == 0.0
    weights[0, 2] = 0.1
    assert analysis.masked_weight(weights, mask) == pytest.approx(0.1)


# ------------------------------------------------------------------------------------------------ statistics


def test_head_diagnostics_on_known_patterns():
    n = 5
    identity = np.eye(n)
    uniform = np.full((n, n), 1.0 / n)
    previous = np.zeros((n, n))
    previous[0, 0] = 1.0
    previous[np.arange(1, n), np.arange(n - 1)] = 1.0
    attn = {"encoder": np.stack([np.stack([identity, uniform, previous])])}  # (1 layer, 3 heads, n, n)
    rows = analysis.head_diagnostics(attn, {"encoder": n - 1})
    assert [r["head"] for r in rows] == [1, 2, 3]
    ident, unif, prev = rows
    assert ident["entropy"] == pytest.approx(0.0) and ident["on same"] == pytest.approx(1.0)
    assert ident["max weight"] == pytest.approx(1.0) and ident["on special token"] == pytest.approx(1.0 / n)
    assert unif["entropy"] == pytest.approx(np.log(n)) and unif["max weight"] == pytest.approx(1.0 / n)
    assert prev["on previous"] == pytest.approx(1.0) and prev["on next"] == pytest.approx(0.0)


def sinusoid(length: int, d_model: int) -> np.ndarray:
    """The paper's formula written out by hand: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...)."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(0, d_model, 2):
            table[pos, i] = np.sin(pos / 10000 ** (i / d_model))
            table[pos, i + 1] = np.cos(pos / 10000 ** (i / d_model))
    return table


def test_sinusoid_matches_the_package_and_similarity_depends_on_distance():
    table = sinusoid(50, 16)
    np.testing.assert_allclose(table, transformer.positional_encoding(50, 16).numpy(), atol=1e-6)
    sim = analysis.cosine_similarity(table)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-9)
    # cosine similarity of sinusoidal codes depends only on the distance (constant along diagonals)
    np.testing.assert_allclose(np.diag(sim, 3)[:-1], np.diag(sim, 3)[1:], atol=1e-9)
    fig = pe_figures.pe_similarity(table)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), sim)
    waves = pe_figures.pe_waves(table, [0, 3])
    np.testing.assert_allclose(np.asarray(waves.data[1].y), table[:, 3])
    assert "cos" in waves.data[1].name and "sin" in waves.data[0].name


def test_small_figures_escape_tokens():
    fig = figures.topk_figure(["<x>", "▁b"], np.array([0.6, 0.3]), chosen=0)
    assert fig.data[0].customdata[0] == "&lt;x&gt;"
    assert fig.data[0].marker.color[0] == "#2e7d32"
    norms = pe_figures.norms_figure(["<a>", "b"], np.array([3.0, 4.0]), np.array([2.0, 2.0]), np.array([3.5]))
    np.testing.assert_allclose(np.asarray(norms.data[0].y), [3.0, 4.0])
    evo = figures.evolution_figure([("step 1", np.eye(2)), ("final", np.ones((2, 2)) / 2)], ["a", "b"], ["c", "d"], "t")
    heat = [t for t in evo.data if t.type == "heatmap"]
    np.testing.assert_allclose(np.asarray(heat[0].z), np.eye(2))
    np.testing.assert_allclose(np.asarray(heat[1].z), np.full((2, 2), 0.5))
    hist = figures.history_figure([{"step": 1, "val_bleu": 2.0, "val_loss": 3.0}], marks=[1])
    assert hist is not None and list(hist.data[0].y) == [2.0]
    assert figures.history_figure([]) is None


# ------------------------------------------------------------------------------------------------ model helpers


def test_analysis_equals_the_translators_attentions(tr):
    text = "A man rides a red bike."
    settings = DecodeSettings(beam_size=2, max_len_a=0.0, max_len_b=8)
    result = inference.analyse(tr, text, settings)
    ref = tr.translate(text, beam_size=2, max_len_a=0.0, max_len_b=8)
    assert result.translation == ref.text and result.target_tokens == ref.target_tokens
    assert result.score == pytest.approx(ref.score, abs=1e-5)
    for kind, ref_attn in (("encoder", ref.encoder_attentions), ("decoder", ref.decoder_attentions),
                           ("cross", ref.cross_attentions)):
        got = result.attention(kind)
        assert got.shape[:2] == (len(ref_attn), tr.config.n_heads)
        for layer, a in enumerate(ref_attn):
            np.testing.assert_allclose(got[layer], a.numpy(), atol=1e-6)
    q, k = result.axes("cross")
    assert result.cross.shape[2:] == (len(q), len(k))
    # top-k candidates are the softmax of the teacher-forced logits, best first
    out = tr.attentions(result.source_ids, result.target_ids[:-1])
    probs = out.logits[0].softmax(-1)
    np.testing.assert_allclose(result.topk_probs[:, 0], probs.max(-1).values.numpy(), atol=1e-6)
    np.testing.assert_allclose(result.chosen_probs, probs[torch.arange(len(result.target_ids)),
                                                         torch.tensor(result.target_ids)].numpy(), atol=1e-6)
    assert np.all(np.diff(result.topk_probs, axis=1) <= 1e-7)


def test_ablation_matches_the_translator_head_mask(tr):
    text = "Two dogs play in the park."
    heads = (("cross", 0, 1), ("encoder", 1, 0))
    mask = inference.build_head_mask(tr, heads)
    assert mask["cross"][0, 1] == 0 and mask["encoder"][1, 0] == 0 and mask["decoder"].min() == 1
    assert float(mask["cross"].sum()) == tr.config.n_decoder_layers * tr.config.n_heads - 1
    ablated = inference.analyse(tr, text, DecodeSettings(beam_size=1), heads)
    ref = tr.translate(text, beam_size=1, head_mask=mask)
    assert ablated.translation == ref.text
    for layer, a in enumerate(ref.cross_attentions):
        np.testing.assert_allclose(ablated.cross[layer], a.numpy(), atol=1e-6)
    # switching every head off changes the probability of the original translation
    base = inference.analyse(tr, text, DecodeSettings(beam_size=1))
    every = tuple(inference.all_heads(tr))
    assert len(every) == (tr.config.n_encoder_layers + 2 * tr.config.n_decoder_layers) * tr.config.n_heads
    before = inference.forced_logprob(tr, base.source_ids, base.target_ids)
    after = inference.forced_logprob(tr, base.source_ids, base.target_ids, every)
    assert before != pytest.approx(after, abs=1e-4)
    with pytest.raises(ValueError):
        inference.build_head_mask(tr, (("cross", 99, 0),))


def test_switching_off_every_cross_head_cuts_the_decoder_off_from_the_source(tr):
    cross = tuple(h for h in inference.all_heads(tr) if h[0] == "cross")
    settings = DecodeSettings(beam_size=1, max_len_a=0.0, max_len_b=6)
    one = inference.analyse(tr, "A dog runs.", settings, cross)
    two = inference.analyse(tr, "Two women walk on the beach with a red ball.", settings, cross)
    assert one.translation == two.translation  # the source no longer reaches the output
    np.testing.assert_allclose(one.decoder, two.decoder, atol=1e-5)
    assert one.source_tokens != two.source_tokens
    normal = inference.analyse(tr, "Two women walk on the beach with a red ball.", settings)
    assert not np.allclose(normal.topk_probs, two.topk_probs, atol=1e-4)


def test_masks_are_the_models_masks(tr):
    result = inference.analyse(tr, "A dog runs.", DecodeSettings(beam_size=1, max_len_a=0.0, max_len_b=5))
    masks = probes.mask_arrays(tr, result, extra_source_pad=2, extra_target_pad=3)
    s, t = len(result.source_ids) + 2, len(result.target_ids) + 3
    assert masks["encoder"].shape == (s, s) and masks["decoder"].shape == (t, t) and masks["cross"].shape == (t, s)
    assert not masks["encoder"][:, -2:].any() and masks["encoder"][:, :-2].all()
    np.testing.assert_array_equal(masks["causal"], np.tril(np.ones((t, t), dtype=bool)))
    expected = np.tril(np.ones((t, t), dtype=bool))
    expected[:, -3:] = False
    np.testing.assert_array_equal(masks["decoder"], expected)
    # the real weights respect the masks
    plain = probes.mask_arrays(tr, result)
    assert analysis.masked_weight(result.decoder, plain["decoder"]) == 0.0


def test_positional_helpers(tr):
    own = probes.model_pe(tr)
    assert own.shape == (tr.config.max_len, tr.config.d_model)
    np.testing.assert_allclose(own, probes.positional_table(*own.shape), atol=1e-6)
    norms = probes.embedding_norms(tr, [4, 5])
    expected = tr.model.src_embed.weight[4].norm().item() * tr.config.d_model ** 0.5
    assert norms[0] == pytest.approx(expected, rel=1e-5)
    assert len(probes.vocab_embedding_norms(tr)) == tr.config.src_vocab_size - 1


def test_embedding_norms_of_a_model_that_does_not_scale_its_embeddings(tr):
    """M2M100 / NLLB without ``scale_embedding`` add the table's rows as they are: their norms are not times
    sqrt(d_model) (they were, before the model's own ``embedding_scale`` was read)."""
    model = tiny_model(scale_embedding=False)
    plain = transformer.Translator(model, tr.tokenizer)
    rows = model.src_embed.weight.detach()
    assert probes.embedding_norms(plain, [4, 5]) == pytest.approx(rows[[4, 5]].norm(dim=-1).numpy(), rel=1e-5)
    keep = [i for i in range(rows.size(0)) if i != model.config.pad_id]
    assert probes.vocab_embedding_norms(plain) == pytest.approx(rows[keep].norm(dim=-1).numpy(), rel=1e-5)


def test_exports_round_trip(tr):
    result = inference.analyse(tr, "A <b>girl</b> & a boy.", DecodeSettings(beam_size=1, max_len_b=6))
    data = json.loads(inference.export_json(result, "ckpt"))
    assert data["source"] == "A <b>girl</b> & a boy." and data["source_tokens"] == result.source_tokens
    np.testing.assert_allclose(np.asarray(data["attention"]["cross"]), result.cross, atol=1e-6)
    npz = np.load(io.BytesIO(inference.export_npz(result)))
    np.testing.assert_array_equal(npz["encoder"], result.encoder)
    assert list(npz["target_tokens"]) == result.target_tokens


def test_snapshots_load_into_a_copy(tr, tmp_path):
    from safetensors.torch import save_file

    ckpt = tmp_path / "ckpt"
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, {"steps": 9})
    (ckpt / "snapshots").mkdir()
    state = {k: v.half().contiguous() for k, v in tr.model.state_dict().items()
             if k not in ("tgt_embed.weight", "generator.weight")}
    save_file(state, str(ckpt / "snapshots" / "step0000003.safetensors"))
    (ckpt / "snapshots" / "step0000001.safetensors").write_bytes(b"not a safetensors file")
    local = catalog.load_translator(str(ckpt), "cpu")
    snaps = probes.list_snapshots(local)
    assert [probes.snapshot_step(p) for p in snaps] == [1, 3]
    with pytest.raises(transformer.CheckpointError):
        probes.load_snapshot_model(local, snaps[0])
    model = probes.load_snapshot_model(local, snaps[1])
    assert model is not local.model and model.generator.weight is model.src_embed.weight
    result = inference.analyse(local, "A dog.", DecodeSettings(beam_size=1, max_len_b=5))
    attn, text = probes.snapshot_attentions(local, model, result.source_ids, result.target_ids)
    np.testing.assert_allclose(attn["cross"], result.cross, atol=2e-2)  # fp16 copy of the same weights
    own = transformer.Translator(model, local.tokenizer).generate([result.source_ids], beam_size=1)[0][0]
    assert text == local.tokenizer.decode(own)  # the snapshot's own greedy translation, not the final model's
    assert probes.list_snapshots(tr) == []


def test_model_card_without_front_matter(tr, tmp_path):
    ckpt = tmp_path / "card"
    transformer.save_checkpoint(ckpt, tr.model, tr.tokenizer, {})
    local = catalog.load_translator(str(ckpt), "cpu")
    assert card.model_card(local) is None
    (ckpt / "README.md").write_text("---\nlicense: mit\n---\n# Card\n\nBLEU 12.3\n", encoding="utf-8")
    assert card.model_card(local) == "# Card\n\nBLEU 12.3"


def test_load_errors_are_checkpoint_errors(tmp_path):
    with pytest.raises(transformer.CheckpointError, match="No such directory"):
        catalog.load_translator(str(tmp_path / "nope"), "cpu")
    with pytest.raises(transformer.CheckpointError):
        catalog.load_translator("  ", "cpu")
    (tmp_path / "bad").mkdir()
    with pytest.raises(transformer.CheckpointError, match="missing"):
        catalog.load_translator(str(tmp_path / "bad"), "cpu")


# ------------------------------------------------------------------------------------------------ rough edges (#9)


def test_lines_have_query_and_key_headings_on_their_sides():
    attn = np.full((1, 2, 3), 1 / 3)
    fig = figures.attention_lines(attn, ["a", "b"], ["x", "y", "z"], query_title="source (query)",
                                  key_title="<key>")
    headings = {a.name: a for a in fig.layout.annotations}
    assert "source (query)" in headings["query heading"].text and headings["query heading"].x == 0.0
    assert "&lt;key&gt;" in headings["key heading"].text and headings["key heading"].x == 1.0


def test_mask_figure_has_an_allowed_and_blocked_legend():
    fig = figures.mask_figure(np.tril(np.ones((3, 3), dtype=bool)), list("abc"), list("abc"), "causal")
    legend = {t.name: t.marker.color for t in fig.data if t.showlegend}
    assert set(legend) == {"may attend", "blocked (weight 0)"}
    # the legend colours are the colours the heatmap uses for 1 (allowed) and 0 (blocked)
    assert legend["may attend"] == figures.MASK_SCALE[-1][1]
    assert legend["blocked (weight 0)"] == figures.MASK_SCALE[0][1]


def test_evolution_panels_label_their_keys_and_history_has_axis_titles():
    evo = figures.evolution_figure([("step 1", np.eye(2)), ("final", np.eye(2))], ["a", "b"], ["<c>", "d"], "t")
    xaxes = [evo.layout[name] for name in ("xaxis", "xaxis2")]
    for axis in xaxes:
        assert axis.showticklabels and list(axis.ticktext) == ["&lt;c&gt;", "d"]
    hist = figures.history_figure([{"step": 1, "val_bleu": 2.0, "val_loss": 3.0}])
    assert hist.layout.xaxis.title.text == "training step"
    assert hist.layout.yaxis.title.text == "validation BLEU" and hist.layout.yaxis2.title.text == "validation loss"


def test_ablation_mean_leaves_out_the_heads_switched_off():
    from app.views.ablation import live_mean

    rng = np.random.default_rng(3)
    layer = rng.random((4, 3, 5))
    mean, n_off = live_mean(layer, "cross", 1, (("cross", 1, 0), ("cross", 1, 2), ("cross", 0, 3), ("encoder", 1, 1)))
    assert n_off == 2
    np.testing.assert_allclose(mean, layer[[1, 3]].mean(axis=0))
    every = tuple(("cross", 1, h) for h in range(4))
    mean, n_off = live_mean(layer, "cross", 1, every)
    assert n_off == 4 and not mean.any()


# ------------------------------------------------------------------------------------------------ byte budget


def test_byte_budget_evicts_least_recently_used_first(monkeypatch):
    from app.limits.budget import ByteLRU, budget_bytes, size_of

    reserved = [0]
    cache = ByteLRU(budget=lambda: 12_000, reserved=lambda: reserved[0])
    made = []

    def make(n: int):
        made.append(n)
        return {"weights": np.zeros(n, dtype=np.float32)}  # 4n bytes

    for key, n in (("a", 1000), ("b", 1000), ("c", 500)):
        cache.get(key, lambda n=n: make(n))
    assert cache.nbytes == sum(size_of({"weights": np.zeros(n, np.float32)}) for n in (1000, 1000, 500))
    cache.get("a", lambda: make(-1))  # a hit: nothing made, "a" becomes the most recent
    assert made == [1000, 1000, 500]
    cache.get("d", lambda: make(1000))  # over 12,000 bytes: the least recently used go, down to 80% of the budget
    assert cache.nbytes <= 0.8 * 12_000 and len(cache) == 2  # "b" and "c" went, "a" (just used) and "d" stay
    cache.get("b", lambda: make(1000))
    assert made[-1] == 1000 and len(made) == 5  # "b" had to be made again
    assert cache.nbytes <= 12_000
    reserved[0] = 9_000  # the loaded models take most of the budget: only the newest result stays
    cache.get("e", lambda: make(10))
    assert len(cache) == 1 and cache.get("e", lambda: make(-1)) is not None
    monkeypatch.setenv("ATTN_CACHE_MB", "2")
    assert budget_bytes() == 2_000_000
    monkeypatch.setenv("ATTN_CACHE_MB", "")
    assert budget_bytes() == 1_024_000_000
    for raw in ("-1", "0", "inf"):  # a cache is never unlimited: refused, naming the variable
        monkeypatch.setenv("ATTN_CACHE_MB", raw)
        with pytest.raises(ValueError, match="ATTN_CACHE_MB"):
            budget_bytes()


def test_analysis_size_counts_its_arrays(tiny_checkpoint):
    from app.limits.budget import size_of

    tr = catalog.load_translator(str(tiny_checkpoint), "cpu")
    result = inference.analyse(tr, "A dog runs in the park.", DecodeSettings(beam_size=1))
    arrays = sum(a.nbytes for a in (result.encoder, result.decoder, result.cross, result.topk_ids, result.topk_probs,
                                    result.chosen_probs))
    assert arrays <= size_of(result) < arrays + 200_000


def test_the_budget_reserves_room_for_one_analysis_of_the_longest_input(tiny_checkpoint):
    """Beside each loaded model the budget keeps back the working memory of one analysis of the longest input, so
    the results kept plus the analysis in flight stay within ``ATTN_CACHE_MB``: the reserve is at least twice
    that analysis' attention arrays (model tensors and numpy copies coexist) plus its logits."""
    from app.limits.budget import analysis_working_bytes

    tr = catalog.load_translator(str(tiny_checkpoint), "cpu")
    cfg = tr.config
    longest = " ".join(["dog"] * (cfg.max_len * 2))  # cut to the model's maximum source length
    result = inference.analyse(tr, longest, DecodeSettings(beam_size=1, max_len_a=2.0, max_len_b=50))
    assert result.truncated and len(result.source_tokens) == cfg.max_len
    attention = sum(a.nbytes for a in (result.encoder, result.decoder, result.cross))
    logits = 4 * len(result.target_tokens) * cfg.tgt_vocab_size
    assert analysis_working_bytes(cfg) >= 2 * attention + logits
    # and the app counts it with the weights against the budget
    from app.analysis import cached

    loaded = cached.get_translator(str(tiny_checkpoint), "cpu")
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    extra = sum(m.packed.weight.numel() * 4 for m in loaded.model.modules()  # the prepacked copies, where oneDNN won
                if getattr(m, "packed", None) is not None)
    assert cached.MODEL_BYTES[id(loaded)] == weights + extra + analysis_working_bytes(loaded.config)
