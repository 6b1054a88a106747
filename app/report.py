"""One translation as one self-contained HTML page: ``python -m app.report TEXT --out FILE.html``.

The page opens offline in any browser, with no server: plotly.js is embedded once, the numbers sit inline as
compact arrays (rounded to 3 decimals, deflated, base64, and the whole data once more; the browser inflates them
with its own ``DecompressionStream``) and a small script builds each chart from them when a selector changes. The
charts' layouts and trace styles come from the figure builders (:mod:`app.figures`, :mod:`app.grid`) with their
data stripped, so the page draws what the app draws. Every piece of text from the sentence is escaped (HTML-like
input shows as text). No Streamlit here.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from transformer import TranslationResult, Translator

from . import figures, flowgraph, grid, probes
from .analysis import AXIS_TITLES, KIND_NAMES, KINDS, escape, unique_labels
from .inference import MAX_INPUT_CHARS, Analysis, DecodeSettings, analysis_of, language_args

VIEWS = ("heatmap", "all_heads", "lines", "step", "masks", "positional", "attribution", "lens", "flow")
DEFAULT_VIEWS = VIEWS[:6]  # attribution and the logit lens run the model again: only where asked
NEEDS_MODEL = ("step", "masks", "positional", "attribution", "lens", "flow")  # views that need the translator, not
# only the translation's attentions
VIEW_TITLES = {"heatmap": "Heatmap", "all_heads": "All heads", "lines": "Lines", "step": "Step through",
               "masks": "Masks", "positional": "Positional encoding", "attribution": "What drives each word",
               "lens": "Layer by layer (logit lens)", "flow": "How each word is built"}
LINE_HEADINGS = {"encoder": ("source (query)", "source (key)"), "decoder": ("output (query)", "decoder input (key)"),
                 "cross": ("output (query)", "source (key)")}
MASK_PADS = (0, 2)  # the masks view's padding choices (the app's default is 2)
PE_POSITIONS = 64
TOP_K = 8
ATTENTION_BUDGET = 150_000  # bytes of packed weights at 3 decimals above which they are rounded to 2 (large models)
STRIP = ("z", "x", "y", "customdata", "text", "hovertext")  # what the page's script fills in from the arrays
ASSET = Path(__file__).with_name("report.js")


def pack(values: np.ndarray, lo: float | None = None, hi: float | None = None, decimals: int = 3) -> dict[str, Any]:
    """An array rounded to ``decimals`` places (coarser only where the range needs more than 65,536 steps), as
    16-bit steps above ``lo``, deflated (zlib) and base64: a few KB for a sentence's weights. The page's ``unpack``
    reverses it (``lo + step * n``)."""
    a = np.asarray(values, dtype=np.float64)
    lo = float(a.min(initial=0.0)) if lo is None else float(lo)
    hi = float(a.max(initial=1.0)) if hi is None else float(hi)
    step = max(10.0 ** -decimals, (hi - lo) / 65535)
    steps = np.rint((np.clip(a, lo, hi) - lo) / step).astype("<u2")
    return {"shape": list(a.shape), "lo": lo, "step": step,
            "b64": base64.b64encode(zlib.compress(steps.tobytes(), 9)).decode("ascii")}


def template(fig: go.Figure, keep: Sequence[int] | None = None) -> dict[str, Any]:
    """A builder's figure without its data: ``layout`` and the traces' styles (``keep``: which traces). The first
    trace loses its arrays (the page fills them in); the others (legend entries) stay as they are."""
    spec = figure_json(fig)
    traces = [t for i, t in enumerate(spec.get("data", [])) if keep is None or i in keep]
    for key in STRIP:
        if traces:
            traces[0].pop(key, None)
    return {"layout": spec["layout"], "traces": traces}


def figure_json(fig: go.Figure) -> dict[str, Any]:
    """A small figure as it is (data and layout); its axes make room for their tick labels (as Streamlit's charts
    do), and plotly's default theme is left to plotly.js (the same look, a few KB less)."""
    spec = json.loads(pio.to_json(fig, validate=False))
    layout = spec["layout"]
    layout.pop("template", None)
    for name, axis in layout.items():
        if (name.startswith("xaxis") or name.startswith("yaxis")) and isinstance(axis, dict):
            axis.setdefault("automargin", True)
    return spec


def analysis_from_result(result: TranslationResult, text: str = "") -> Analysis:
    """An :class:`Analysis` of a translation from its own attentions alone (no model at hand: no candidates)."""
    if not result.encoder_attentions:
        raise ValueError("this translation has no attentions: translate with return_attention=True")
    stack = lambda attns: np.stack([a.float().cpu().numpy() for a in attns])  # (L, H, Q, K)
    t = len(result.target_ids)
    return Analysis(
        text=text, translation=result.text, score=float(result.score), source_tokens=list(result.source_tokens),
        target_tokens=list(result.target_tokens), decoder_input_tokens=list(result.decoder_input_tokens),
        source_ids=list(result.source_ids), target_ids=list(result.target_ids), truncated=bool(result.truncated),
        source_pieces=len(result.source_ids), unknown_pieces=0, encoder=stack(result.encoder_attentions),
        decoder=stack(result.decoder_attentions), cross=stack(result.cross_attentions),
        topk_tokens=[[] for _ in range(t)], topk_ids=np.zeros((t, 0), dtype=np.int64),
        topk_probs=np.zeros((t, 0), dtype=np.float32), chosen_probs=np.full(t, np.nan, dtype=np.float32),
        hit_max_len=bool(result.hit_max_len))


def _tokens(tokens: Sequence[str]) -> dict[str, list[str]]:
    """A token list three ways: raw (for the page's text nodes), escaped (hover) and unique labels (axes)."""
    return {"raw": list(tokens), "html": [escape(t) for t in tokens], "labels": unique_labels(tokens)}


def _attention_parts(a: Analysis) -> dict[str, Any]:
    """Each attention type's weights (3 decimals, or 2 where 3 would pass ``ATTENTION_BUDGET``), tokens and the
    templates of its heatmap, grid and lines."""
    packed = {kind: pack(a.attention(kind), 0.0, 1.0) for kind in KINDS}
    if sum(len(p["b64"]) for p in packed.values()) > ATTENTION_BUDGET:
        packed = {kind: pack(a.attention(kind), 0.0, 1.0, decimals=2) for kind in KINDS}
    kinds = {}
    for kind in KINDS:
        attn = a.attention(kind)  # (L, H, Q, K)
        queries, keys = a.axes(kind)
        qt, kt = AXIS_TITLES[kind]
        heat = figures.attention_heatmap(attn[-1].mean(axis=0), queries, keys, title=KIND_NAMES[kind],
                                         query_title=qt, key_title=kt, zmax=1.0)
        tiles = grid.head_grid(attn, queries, keys, kind, zrange=(0.0, 1.0))
        lq, lk = LINE_HEADINGS[kind]
        lines = figures.attention_lines(attn[-1][:1], queries, keys, title=KIND_NAMES[kind], query_title=lq,
                                        key_title=lk)
        kinds[kind] = {
            "name": KIND_NAMES[kind], "weights": packed[kind], "decimals": 3 if packed[kind]["step"] < 0.005 else 2,
            "queries": _tokens(queries), "keys": _tokens(keys),
            "heatmap": template(heat), "grid": template(tiles, keep=[0]), "blocks": list(grid.grid_blocks(attn.shape)),
            "lines": template(lines, keep=[]),
        }
    return kinds


def _step_parts(a: Analysis) -> dict[str, Any]:
    steps = []
    for t, produced in enumerate(a.target_tokens):
        candidates = list(a.topk_tokens[t][:TOP_K])
        probs = [float(p) for p in a.topk_probs[t][:TOP_K]]
        ids = [int(i) for i in a.topk_ids[t][:TOP_K]]
        chosen = ids.index(a.target_ids[t]) if a.target_ids[t] in ids else None
        if chosen is None:  # the kept piece is outside the top k: an extra bar, as in the app
            candidates, probs, chosen = [*candidates, produced], [*probs, float(a.chosen_probs[t])], len(candidates)
        steps.append({"html": [escape(c) for c in candidates], "probs": [round(p, 5) for p in probs],
                      "chosen": chosen, "p": round(float(a.chosen_probs[t]), 5)})
    cross = a.cross[-1][:, 0, :]  # (H, S): step 1's, for the template
    first = figures.topk_figure(a.topk_tokens[0][:TOP_K] or ["?"], a.topk_probs[0][:TOP_K] if len(a.topk_probs[0])
                                else np.ones(1), 0)
    look = figures.step_cross_figure(cross, a.source_tokens, "@@TOKEN@@", zrange=(0.0, 1.0))
    return {"steps": steps, "topk": template(first), "cross": template(look),
            "heads": ["mean"] + [f"head {h + 1}" for h in range(cross.shape[0])]}


def _mask_parts(tr: Translator, a: Analysis) -> dict[str, Any]:
    out: dict[str, Any] = {"pads": list(MASK_PADS)}
    for pad in MASK_PADS:
        masks = probes.mask_arrays(tr, a, pad, pad)
        src, dec = a.source_tokens + ["<pad>"] * pad, a.decoder_input_tokens + ["<pad>"] * pad
        out[str(pad)] = {"source_tokens": _tokens(src), "decoder_tokens": _tokens(dec),
                         **{k: pack(masks[k], 0.0, 1.0) for k in ("encoder", "causal", "decoder", "cross")}}
    masks, src, dec = probes.mask_arrays(tr, a), a.source_tokens, a.decoder_input_tokens
    panels = {"encoder": ("Encoder self-attention: padding mask", src, src), "causal": ("Causal mask", dec, dec),
              "decoder": ("Decoder self-attention: padding AND causal", dec, dec),
              "cross": ("Cross-attention: source padding", dec, src)}
    out["templates"] = {
        key: template(figures.mask_figure(masks[key], q, k, title,
                                          "source (query)" if key == "encoder" else "decoder input (query)",
                                          "source (key)" if key in ("encoder", "cross") else "decoder input (key)"))
        for key, (title, q, k) in panels.items()}
    return out


def _positional_parts(tr: Translator, a: Analysis) -> dict[str, Any]:
    d_model = int(tr.config.d_model)
    length = int(min(PE_POSITIONS, max(tr.config.max_len, 8)))
    table = probes.positional_table(length, d_model)  # (P, D)
    own = probes.model_pe(tr)
    diff = float(np.abs(own - probes.positional_table(*own.shape)).max())
    sim = figures.cosine_similarity(table)  # (P, P)
    norms = probes.embedding_norms(tr, a.source_ids)
    pe_norms = np.linalg.norm(own[: len(a.source_ids)], axis=1)
    return {"d_model": d_model, "length": length, "table": pack(table, -1.0, 1.0), "similarity": pack(sim, -1.0, 1.0),
            "heatmap": template(figures.pe_heatmap(table[:2])), "similarity_tpl": template(figures.pe_similarity(
                table[:2])), "waves": figure_json(figures.pe_waves(table, figures.wave_dims(d_model, length))),
            "norms": figure_json(figures.norms_figure(a.source_tokens, norms, pe_norms)), "model_diff": diff}


def _attribution_parts(tr: Translator, a: Analysis, method: str, steps: int) -> dict[str, Any]:
    data = probes.attributions(tr, a, method, steps=steps)
    src, tgt = data["source"], data["target"]  # (T, S), (T, T)
    bound = float(max(np.abs(src).max(), np.abs(tgt).max(), 1e-9))
    args = dict(query_title="output piece", zmin=-bound, zmax=bound, colorscale=figures.DIVERGING,
                value_name="attribution")
    return {"method": method, "bound": bound, "source": pack(src, -bound, bound), "target": pack(tgt, -bound, bound),
            "source_tpl": template(figures.attention_heatmap(src, a.target_tokens, a.source_tokens,
                                                             title="Attribution to the source",
                                                             key_title="source piece", **args)),
            "target_tpl": template(figures.attention_heatmap(tgt, a.target_tokens, a.decoder_input_tokens,
                                                             title="Attribution to the decoder input",
                                                             key_title="decoder input", **args))}


def _lens_parts(tr: Translator, a: Analysis) -> dict[str, Any]:
    data = probes.lens(tr, a, 5)
    chosen = data["chosen"]  # (L, T)
    layers = [f"layer {i + 1}" for i in range(chosen.shape[0])]
    fig = figures.attention_heatmap(chosen, layers, a.target_tokens, title="Probability of the piece the model "
                                    "produced", query_title="decoder layer", key_title="output step (its piece)",
                                    value_name="probability", zmax=1.0)
    fig.update_layout(height=max(int(fig.layout.height or 0), 340))
    top = [[f"{tr.tokenizer.pieces([int(data['ids'][i, t, 0])])[0]} ({data['probs'][i, t, 0]:.3f})"
            for t in range(chosen.shape[1])] for i in range(chosen.shape[0])]
    first = [next((i + 1 for i in range(chosen.shape[0]) if data["rank"][i, t] == 0), None)
             for t in range(chosen.shape[1])]
    return {"chosen": pack(chosen, 0.0, 1.0), "layers": _tokens(layers), "template": template(fig), "top": top,
            "first": first}


def _flow_parts(tr: Translator, a: Analysis) -> dict[str, Any]:
    """The information-flow graph of each output piece at the default threshold, as whole figures."""
    figs = flowgraph.step_figures(probes.flow(tr, a), a.source_tokens, a.decoder_input_tokens, a.target_tokens,
                                  (tr.config.n_encoder_layers, tr.config.n_decoder_layers))
    return {"figures": [figure_json(f) for f in figs], "threshold": flowgraph.DEFAULT_THRESHOLD}


def page_data(analysis: Analysis, translator: Translator | None = None, views: Sequence[str] = DEFAULT_VIEWS,
              model: str = "", method: str = "integrated_gradients", steps: int = 32) -> dict[str, Any]:
    """Everything the page draws, as JSON-ready values (the views that need the model are left out without
    ``translator``, and the page says so)."""
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        raise ValueError(f"unknown view(s) {', '.join(unknown)}; choose from {', '.join(VIEWS)}")
    a = analysis
    s = a.settings
    data: dict[str, Any] = {
        "views": [v for v in VIEWS if v in views and (translator is not None or v not in NEEDS_MODEL)],
        "left_out": [v for v in VIEWS if v in views and translator is None and v in NEEDS_MODEL],
        "titles": VIEW_TITLES, "source": _tokens(a.source_tokens), "target": _tokens(a.target_tokens),
        "decoder_input": _tokens(a.decoder_input_tokens), "kinds": _attention_parts(a),
        "config": figures.PLOTLY_CONFIG, "colours": figures.HEAD_COLOURS, "buckets": figures.LINE_BUCKETS,
        "summary": {"text": a.text, "translation": a.translation, "score": a.score, "model": model,
                    "beam_size": s.beam_size, "alpha": s.alpha, "src_lang": s.src_lang, "tgt_lang": s.tgt_lang,
                    "truncated": a.truncated, "hit_max_len": a.hit_max_len,
                    "chosen_probs": [None if np.isnan(p) else round(float(p), 4) for p in a.chosen_probs]},
    }
    views = data["views"]
    if "step" in views:
        data["step"] = _step_parts(a)
    if "masks" in views:
        data["masks"] = _mask_parts(translator, a)
    if "positional" in views:
        data["positional"] = _positional_parts(translator, a)
    if "attribution" in views:
        data["attribution"] = _attribution_parts(translator, a, method, steps)
    if "lens" in views:
        data["lens"] = _lens_parts(translator, a)
    if "flow" in views:
        data["flow"] = _flow_parts(translator, a)
    return data


def deflated(value: Any) -> str:
    """The page's data: JSON, deflated (zlib) and base64, so the tokens' text and the templates (long tick and
    frame lists for a large model) take a fraction of their size, and nothing in it can end its script element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return base64.b64encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def _summary_html(data: dict[str, Any]) -> str:
    s = data["summary"]
    rows = [("Source", s["text"] or "".join(data["source"]["raw"])), ("Translation", s["translation"]),
            ("Score", f"{s['score']:.4f} (log-probability with the length penalty)"),
            ("Decoding", ("greedy" if s["beam_size"] <= 1 else f"beam {s['beam_size']}, length penalty α "
                          f"{s['alpha'] if s['alpha'] is not None else 'default'}") +
                         (" · source cut to the model's length" if s["truncated"] else "") +
                         (" · output stopped at the maximum length (not a whole translation)" if s["hit_max_len"]
                          else ""))]
    if s["model"]:
        rows.insert(0, ("Model", s["model"]))
    if s["src_lang"] or s["tgt_lang"]:
        rows.append(("Languages", f"{s['src_lang'] or 'default'} → {s['tgt_lang'] or 'default'}"))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    pieces = "".join(f'<span class="piece" title="p = {p:.4f}">{html.escape(t)}<sub>{p:.2f}</sub></span>'
                     if p is not None else f'<span class="piece">{html.escape(t)}</span>'
                     for t, p in zip(data["target"]["raw"], s["chosen_probs"]))
    return (f'<section id="summary"><h2>Translation</h2><table class="summary">{body}</table>'
            f'<p class="note">Output pieces with the probability the model gave each (teacher-forced):</p>'
            f'<div class="pieces">{pieces}</div></section>')


STYLE = """
body{font-family:Inter,'Source Sans Pro',sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222}
h1{font-size:22px;margin:4px 0 12px} h2{font-size:18px;margin:20px 0 8px;border-bottom:1px solid #ddd}
section{margin-bottom:18px} .note{color:#555;font-size:13px;margin:4px 0}
table.summary th{text-align:left;padding:2px 12px 2px 0;vertical-align:top;color:#555;font-weight:600}
table.summary td{padding:2px 0} .pieces{display:flex;flex-wrap:wrap;gap:4px}
.piece{background:#eef3fb;border-radius:4px;padding:1px 5px;font-size:13px} .piece sub{color:#666;margin-left:2px}
.controls{display:flex;flex-wrap:wrap;gap:12px;align-items:center;font-size:14px;margin:6px 0}
.row{display:flex;flex-wrap:wrap;gap:8px} .row>div{flex:1 1 460px;min-width:0}
table.lens{border-collapse:collapse;font-size:12px} table.lens td,table.lens th{border:1px solid #ddd;padding:2px 6px}
nav a{margin-right:10px;font-size:14px}
"""


def render_page(data: dict[str, Any], title: str = "Attention explorer") -> str:
    """The HTML page (plotly.js, the data and the script inline)."""
    from plotly.offline import get_plotlyjs

    views = data["views"]
    nav = "".join(f'<a href="#{v}">{html.escape(VIEW_TITLES[v])}</a>' for v in views)
    sections = "".join(f'<section id="{v}" class="view"><h2>{html.escape(VIEW_TITLES[v])}</h2>'
                       f'<div class="controls"></div><div class="body"></div></section>' for v in views)
    left = ""
    if data["left_out"]:
        names = ", ".join(VIEW_TITLES[v] for v in data["left_out"])
        left = (f'<p class="note" id="left-out">Not on this page: {html.escape(names)} (they run the model again: '
                "pass the translator).</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
            f"<script>{get_plotlyjs()}</script></head><body><h1>Attention explorer</h1><nav>{nav}</nav>"
            f"{_summary_html(data)}{left}{sections}"
            f'<script type="application/octet-stream" id="attn-data">{deflated(data)}</script>'
            f"<script>{ASSET.read_text(encoding='utf-8')}</script></body></html>\n")


def build_page(result: TranslationResult | Analysis, translator: Translator | None = None,
               views: Sequence[str] = DEFAULT_VIEWS, text: str = "", model: str = "",
               settings: DecodeSettings | None = None, method: str = "integrated_gradients", steps: int = 32) -> str:
    """The page of one translation: a ``TranslationResult`` (with its attentions) or an app ``Analysis``.
    ``translator``: the model that made it (needed for the candidates, masks, positional encoding, attribution and
    logit lens)."""
    if isinstance(result, Analysis):
        analysis = result
    elif translator is not None:
        analysis = analysis_of(translator, result, text, settings or result.settings or
                               DecodeSettings(alpha=translator.default_alpha))
    else:
        analysis = analysis_from_result(result, text)
        if (settings or result.settings) is not None:
            analysis.settings = settings or result.settings
    model = model or (str(translator.path) if translator is not None and translator.path else "")
    short = analysis.translation if len(analysis.translation) <= 80 else analysis.translation[:79] + "…"
    title = f"Attention explorer · {short}" if short else "Attention explorer"
    return render_page(page_data(analysis, translator, views, model, method, steps), title)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.report", description="Write one translation as a single "
                                     "self-contained HTML page (opens offline, no server).")
    parser.add_argument("text", help="the sentence to translate")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser.add_argument("--checkpoint", default="checkpoints/multi30k-en-de",
                        help="a checkpoint directory or a Hugging Face Hub id (default: %(default)s)")
    parser.add_argument("--beam", type=int, default=4, help="beam size; 1 is greedy search (default: %(default)s)")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty (default: the model card's)")
    parser.add_argument("--src-lang", default=None, help="source language code of a multilingual model")
    parser.add_argument("--tgt-lang", default=None, help="target language code of a multilingual model")
    parser.add_argument("--views", default=",".join(DEFAULT_VIEWS),
                        help=f"comma-separated views among {', '.join(VIEWS)} (default: %(default)s)")
    parser.add_argument("--method", default="integrated_gradients", choices=("integrated_gradients",
                        "input_x_gradient"), help="attribution method (with --views ...,attribution)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default: %(default)s)")
    args = parser.parse_args(argv)
    views = [v.strip() for v in args.views.split(",") if v.strip()]
    bad = [v for v in views if v not in VIEWS]
    if bad:
        parser.error(f"unknown view(s) {', '.join(bad)}; choose from {', '.join(VIEWS)}")
    text = args.text.strip()
    if not text:
        parser.error("the text is empty: give a sentence to translate")
    if len(text) > MAX_INPUT_CHARS:
        parser.error(f"the text has {len(text):,} characters; the page takes one sentence of at most "
                     f"{MAX_INPUT_CHARS:,}")
    from transformer import CheckpointError, load

    try:
        tr = load(args.checkpoint, device=args.device)
    except (CheckpointError, OSError, ValueError) as err:
        parser.exit(2, f"python -m app.report: cannot load {args.checkpoint!r}: {err}\n")
    for flag, code in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if code and code not in tr.languages:
            parser.error(f"{flag} {code!r} is not a language of this model"
                         + (f" (it takes e.g. {', '.join(tr.languages[:6])})" if tr.languages else
                            " (it is not multilingual)"))
    settings = DecodeSettings(beam_size=max(1, args.beam), alpha=tr.default_alpha if args.alpha is None else args.alpha,
                              src_lang=args.src_lang, tgt_lang=args.tgt_lang)
    result = tr.translate(text, beam_size=settings.beam_size, alpha=settings.alpha, return_attention=False,
                          **language_args(tr, settings))
    page = build_page(result, tr, views, text=text, model=args.checkpoint, settings=settings, method=args.method)
    out = Path(args.out)
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {result.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
