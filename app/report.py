"""One translation as one self-contained HTML page: ``python -m app.report TEXT --out FILE.html``.

The page opens offline in any browser, with no server. It draws the views described in :mod:`app.parts` (the
descriptions the Streamlit page draws from): every chart is the figure its builder made (:mod:`app.drawing.figures`,
:mod:`app.drawing.grid`), as plotly JSON (numbers rounded to 3 decimals), all of them deflated and base64 in one
element, with plotly.js once; a picker shows one of its pre-built options, and a few lines of script
(``RUNTIME``) draw the charts on screen. A view that needs the model is computed here, at build time, from the
translator; without one it is left out and the page says so. :func:`fragment` is the same views without plotly.js,
for the notebook (:mod:`app.notebook`). Every piece of text from the sentence is escaped (HTML-like input shows as
text); the text passes the app's input rules (``app.analysis.inference.take_input``). No Streamlit here.
"""

from __future__ import annotations

import argparse
import base64
import html
import itertools
import json
import math
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from transformer import CheckpointError, TranslationResult, Translator, cli, load

from . import registry
from .analysis.inference import (
    MAX_INPUT_CHARS,
    Analysis,
    DecodeSettings,
    analysis_of,
    clean_text,
    language_args,
    take_input,
)
from .drawing import figures
from .drawing.layout import own_look
from .parts import Chart, Choice, NeedsModel, Note, Part, Source, Table, plain

OFFLINE_VIEWS = tuple(registry.DESCRIBED)  # the keys of the views this page draws (app.parts), in the registry's order
# attribution runs the model 32 times, flow draws one graph per output piece: only where asked
DEFAULT_VIEWS = tuple(v for v in OFFLINE_VIEWS if v not in ("what_drives_each_word", "how_each_word_is_built"))
VIEW_TITLES = registry.TITLES  # key -> the view's name in the app
DECIMALS = 3  # decimals a chart's numbers keep on the page (more where its largest value is below 1)
PHONE_PX = 700  # narrower screens: no plotly toolbar (it would sit on the charts), the charts scroll sideways
TICK_PX = 14  # the width a column's tick label needs, so a phone's chart keeps its labels apart (it scrolls)
DEFLATE_LEVEL = 6  # zlib's default: 5% larger than level 9, in a fifth of the time (bench/report.py)
_IDS = itertools.count()


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
        end_logprobs=np.full(t, np.nan, dtype=np.float32), hit_max_len=bool(result.hit_max_len))


def sentence(a: Analysis) -> str:
    """The source sentence: the text given, else the source pieces joined back (sentencepiece's ``▁`` is a space;
    ``</s>`` and a language code left out)."""
    if a.text:
        return clean_text(a.text)
    specials = {"</s>", "<s>", "<pad>", a.settings.src_lang if a.settings else None}
    return clean_text("".join(t for t in a.source_tokens if t not in specials).replace("▁", " ").strip())


def _rounded(values: Any) -> Any:
    """A float array as a list rounded to ``DECIMALS`` places, or to 3 significant digits of its largest value
    where that is smaller (NaN: None)."""
    a = np.asarray(values)
    if a.dtype.kind != "f" or a.size == 0:
        return values
    top = float(np.nanmax(np.abs(a))) if np.isfinite(a).any() else 0.0
    decimals = max(DECIMALS, DECIMALS - math.ceil(math.log10(top))) if top > 0 else DECIMALS
    out = np.round(a.astype(np.float64), decimals)
    finite = np.isfinite(out)
    return out.tolist() if finite.all() else np.where(finite, out, None).tolist()


_SCALARS = {str, int, float, bool, type(None)}  # what JSON holds as it is (``_plain`` returns them unchanged)


def _plain(value: Any, shared: dict[int, tuple[np.ndarray, list]] | None = None) -> Any:
    """A figure's value as JSON-ready Python: float arrays rounded (:func:`_rounded`), other arrays as lists.
    ``shared``: the lists already made of object arrays (the hover's tokens), by the array's id, each kept with its
    array (so the id is not reused): the copies of one chart (``parts.variant``) share that array, listed once."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return _rounded(value)
        if value.dtype.kind != "O":
            return value.tolist()
        if shared is not None and id(value) in shared:
            return shared[id(value)][1]
        items = value.tolist()  # nested lists of the objects themselves (the hover's tokens and numbers)
        items = items if set(map(type, value.flat)) <= _SCALARS else [_plain(v) for v in items]
        if shared is not None:
            shared[id(value)] = (value, items)
        return items
    if isinstance(value, dict) and isinstance(value.get("bdata"), str) and "dtype" in value:  # a typed array
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]).newbyteorder("<"))
        shape = [int(n) for n in str(value.get("shape", array.size)).split(",")]
        return _plain(array.reshape(shape))
    if isinstance(value, dict):
        return {k: _plain(v, shared) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, shared) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def figure_json(fig: go.Figure | dict, shared: dict[int, tuple[np.ndarray, list]] | None = None) -> dict[str, Any]:
    """A builder's figure as the page draws it: its numbers rounded, its look its own as on the explorer's page
    (``own_look``: no template, its axes making room for their tick labels), and its title taken out (``"title"``:
    plain text, which the page shows above the chart, where it wraps on a phone and no toolbar covers it).
    ``shared``: see :func:`_plain` (the lists in it are shared too: never change them)."""
    spec = fig if isinstance(fig, dict) else fig.to_plotly_json()
    spec = own_look(_plain({**spec, "layout": {k: v for k, v in spec["layout"].items() if k != "template"}}, shared))
    layout = spec["layout"]
    title = layout.pop("title", None)
    text = plain(title.get("text", "") if isinstance(title, dict) else title or "")
    if text and isinstance(layout.get("margin"), dict) and "t" in layout["margin"]:
        layout["margin"]["t"] = max(30, int(layout["margin"]["t"]) - 25)  # the title's room, less the toolbar's
    spec["title"] = text
    return spec


def min_width(spec: dict[str, Any]) -> int:
    """The width (px) below which a chart's column labels would run together, or the plot's width its builder asked
    for (``layout.meta["min_width"]``, as ``app.drawing.layout.min_width`` reads it) and 120 px for its row labels: the
    chart scrolls sideways there."""
    columns = max((len(axis.get("ticktext") or ()) for name, axis in spec["layout"].items()
                   if name.startswith("xaxis") and isinstance(axis, dict)), default=0)
    meta = spec["layout"].get("meta")
    asked = int(meta.get("min_width", 0)) if isinstance(meta, dict) else 0
    return max(asked + 120 if asked else 0, 0 if columns < 10 else 120 + TICK_PX * columns)


class _Html:
    """The HTML of described views, with their figures collected in one list."""

    def __init__(self) -> None:
        self.figures: list[dict[str, Any]] = []
        self.shared: dict[int, tuple[np.ndarray, list]] = {}  # the object arrays listed (``figure_json``)

    def parts(self, items: Sequence[Part]) -> str:
        return "".join(self.part(p) for p in items)

    def part(self, p: Part) -> str:
        if isinstance(p, Chart):
            spec = figure_json(p.figure, self.shared)
            spec["config"] = figures.plotly_config(p.name)
            self.figures.append(spec)
            width = min_width(spec)
            text = spec.pop("title")
            title = f'<div class="fig-title">{html.escape(text)}</div>' if text else ""
            style = f' style="min-width:{width}px"' if width else ""
            caption = f'<p class="note">{html.escape(p.caption)}</p>' if p.caption else ""
            return (f'<figure class="fig">{title}<div class="scroll"><div class="chart" data-fig='
                    f'"{len(self.figures) - 1}"{style}></div></div><p class="hint" hidden>Swipe sideways to see the '
                    f"whole chart.</p>{caption}</figure>")
        if isinstance(p, Note):
            return f'<p class="{"warning" if p.warning else "note"}">{html.escape(p.text)}</p>'
        if isinstance(p, Table):
            head = "".join(f"<th>{html.escape(c)}</th>" for c in p.columns)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                           for row in p.rows)
            caption = f'<p class="note">{html.escape(p.caption)}</p>' if p.caption else ""
            return (f'{caption}<p class="hint" hidden>Swipe sideways to see the whole table (its first column '
                    f'stays).</p><div class="scroll"><table class="values"><tr>{head}</tr>{body}</table></div>')
        if isinstance(p, Choice):
            options = "".join(f'<option value="{i}"{" selected" if i == p.default else ""}>{html.escape(name)}'
                              "</option>" for i, (name, _) in enumerate(p.options))
            bodies = "".join(f'<div class="option" data-i="{i}"{"" if i == p.default else " hidden"}>'
                             f"{self.parts(items)}</div>" for i, (_, items) in enumerate(p.options))
            return (f'<div class="choice"><label class="picker">{html.escape(p.label)} <select data-choice>'
                    f"{options}</select></label>{bodies}</div>")
        raise TypeError(f"not a part: {type(p).__name__}")


def view_keys(names: Sequence[str]) -> list[str]:
    """The keys of the offline views ``names`` name (a key, an old short name of ``registry.ALIASES`` or a title);
    a ``ValueError`` naming those that are none."""
    keys = [registry.view_key(name) for name in names]
    unknown = [name for name, key in zip(names, keys) if key not in registry.DESCRIBED]
    if unknown:
        raise ValueError(f"unknown view(s) {', '.join(unknown)}; choose from {', '.join(OFFLINE_VIEWS)}")
    return [key for key in keys if key]


def views_parts(analysis: Analysis, translator: Translator | None = None, views: Sequence[str] = DEFAULT_VIEWS,
             **options: Any) -> tuple[list[tuple[str, list[Part]]], list[str]]:
    """Each view's parts (``app.parts``), and the views left out (they need the translator, and there is none).
    ``views``: keys of the registry, or their old short names (``registry.ALIASES``)."""
    views = view_keys(views)
    src = Source(analysis, translator, options)
    drawn, left_out = [], []
    for key in (v for v in OFFLINE_VIEWS if v in views):
        try:
            drawn.append((key, registry.DESCRIBED[key].describe(src)))
        except NeedsModel:
            left_out.append(key)
    return drawn, left_out


def deflated(value: Any) -> str:
    """JSON, deflated (zlib) and base64: a fraction of its size, and nothing in it can end its script element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return base64.b64encode(zlib.compress(text.encode("utf-8"), DEFLATE_LEVEL)).decode("ascii")


WITH_PROBS = " with the probability the model gave each (teacher-forced)"


def summary_html(a: Analysis, model: str = "", notices: Sequence[str] = ()) -> str:
    """The translation, its settings and its pieces (each with the probability the model gave it, where known)."""
    s = a.settings
    rows = [("Source", sentence(a)), ("Translation", a.translation),
            ("Score", f"{a.score:.4f} (log-probability with the length penalty)")]
    if s is not None:
        rows.append(("Decoding", ("greedy" if s.beam_size <= 1 else f"beam {s.beam_size}, length penalty α "
                                  f"{s.alpha if s.alpha is not None else 'default'}")
                     + (" · source cut to the model's length" if a.truncated else "")
                     + (" · output stopped at the maximum length (not a whole translation)" if a.hit_max_len
                        else "")))
        if s.src_lang or s.tgt_lang:
            rows.append(("Languages", f"{s.src_lang or 'default'} → {s.tgt_lang or 'default'}"))
    if model:
        rows.insert(0, ("Model", model))
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    probs = [None if np.isnan(p) else float(p) for p in a.chosen_probs]
    pieces = "".join(f'<span class="piece" title="p = {p:.4f}">{html.escape(t)}<sub>{p:.2f}</sub></span>'
                     if p is not None else f'<span class="piece">{html.escape(t)}</span>'
                     for t, p in zip(a.target_tokens, probs))
    said = "".join(f'<p class="warning">{html.escape(n)}</p>' for n in notices)
    known = any(p is not None for p in probs)
    return (f'<section id="summary"><h2>Translation</h2>{said}<table class="summary">{body}</table>'
            f'<p class="note">Output pieces{WITH_PROBS if known else ""}:</p><div class="pieces">{pieces}</div>'
            "</section>")


STYLE = """
.attn-report{font-family:Inter,'Source Sans Pro',sans-serif;color:#222;max-width:1200px;margin:0 auto}
.attn-report h1{font-size:22px;margin:4px 0 12px}
.attn-report h2{font-size:18px;margin:20px 0 8px;border-bottom:1px solid #ddd}
.attn-report section{margin-bottom:18px} .attn-report .note{color:#555;font-size:13px;margin:4px 0}
.attn-report .warning{background:#fff4e5;border-left:3px solid #e65100;padding:4px 8px;font-size:13px}
.attn-report table.summary th{text-align:left;padding:2px 12px 2px 0;vertical-align:top;color:#555;font-weight:600}
.attn-report table.summary td{padding:2px 0;overflow-wrap:anywhere}
.attn-report .pieces{display:flex;flex-wrap:wrap;gap:4px}
.attn-report .piece{background:#eef3fb;border-radius:4px;padding:1px 5px;font-size:13px;unicode-bidi:isolate}
.attn-report .piece sub{color:#666;margin-left:2px}
.attn-report .picker{display:inline-block;font-size:14px;margin:6px 12px 4px 0}
.attn-report .fig{margin:8px 0}
.attn-report .fig-title{font-weight:600;font-size:15px;margin:6px 0 0;overflow-wrap:anywhere}
.attn-report .scroll{overflow-x:auto;max-width:100%} .attn-report .hint{color:#555;font-size:12px;margin:0}
.attn-report table.values{border-collapse:collapse;font-size:12px}
.attn-report table.values td,.attn-report table.values th{border:1px solid #ddd;padding:2px 6px;unicode-bidi:isolate}
.attn-report table.values tr>:first-child{position:sticky;left:0;background:#fff;box-shadow:inset -1px 0 #bbb}
.attn-report nav a{margin-right:10px;font-size:14px;display:inline-block}
"""
PAGE_STYLE = "body{margin:0;padding:12px}"
ASSET = Path(__file__).with_name("report.js")  # the runtime: draws the charts on screen and those of a pick


def fragment(analysis: Analysis, translator: Translator | None = None, views: Sequence[str] = DEFAULT_VIEWS,
             model: str = "", notices: Sequence[str] = (), summary: bool = True, **options: Any) -> str:
    """The views as one block of HTML (its own style, data and script; plotly.js not included: the page or the
    notebook brings it once)."""
    drawn, left_out = views_parts(analysis, translator, views, **options)
    out = _Html()
    sections = "".join(f'<section id="{key}" class="view"><h2>{html.escape(VIEW_TITLES[key])}</h2>'
                       f'<p class="note">{html.escape(registry.DESCRIBED[key].INTRO)}</p>{out.parts(items)}</section>'
                       for key, items in drawn)
    left = ""
    if left_out:
        names = ", ".join(VIEW_TITLES[v] for v in left_out)
        left = (f'<p class="note" id="left-out">Not here: {html.escape(names)} (they run the model: pass the '
                "translator).</p>")
    nav = "".join(f'<a href="#{key}">{html.escape(VIEW_TITLES[key])}</a>' for key, _ in drawn) if len(drawn) > 1 else ""
    uid = f"attn-{next(_IDS)}-{zlib.crc32(sections.encode()):08x}"
    return (f'<style>{STYLE}</style><div class="attn-report" id="{uid}" data-views="{",".join(k for k, _ in drawn)}" '
            f'data-left-out="{",".join(left_out)}">{f"<nav>{nav}</nav>" if nav else ""}'
            f'{summary_html(analysis, model, notices) if summary else ""}{left}{sections}</div>'
            f'<script type="application/octet-stream" id="{uid}-data">{deflated(out.figures)}</script>'
            f'<script>{ASSET.read_text(encoding="utf-8")}\nwindow.attentionReport = '
            f'{{ready: window.attnDraw("{uid}")}};</script>')


def analysis_for(result: TranslationResult | Analysis, translator: Translator | None = None, text: str = "",
                 settings: DecodeSettings | None = None) -> Analysis:
    """The :class:`Analysis` of a result: as it is, or with the candidates the translator gives (teacher-forced)."""
    if isinstance(result, Analysis):
        return result
    if translator is not None:
        return analysis_of(translator, result, text, settings or result.settings or
                           DecodeSettings(alpha=translator.default_alpha))
    analysis = analysis_from_result(result, text)
    if (settings or result.settings) is not None:
        analysis.settings = settings or result.settings
    return analysis


def build_page(result: TranslationResult | Analysis, translator: Translator | None = None,
               views: Sequence[str] = DEFAULT_VIEWS, text: str = "", model: str = "",
               settings: DecodeSettings | None = None, method: str = "integrated_gradients", steps: int = 32,
               notices: Sequence[str] = (), **options: Any) -> str:
    """The page of one translation: a ``TranslationResult`` (with its attentions) or an app ``Analysis``.
    ``translator``: the model that made it (the views that need it are computed here; without it they are left
    out). ``options``: the descriptions' other options (What carries the change: ``word``, ``substitute``,
    ``direction``)."""
    from plotly.offline import get_plotlyjs

    analysis = analysis_for(result, translator, text, settings)
    model = model or (str(translator.path) if translator is not None and translator.path else "")
    short = analysis.translation if len(analysis.translation) <= 80 else analysis.translation[:79] + "…"
    title = f"Attention explorer · {short}" if short else "Attention explorer"
    body = fragment(analysis, translator, views, model, notices, method=method, steps=steps, **options)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style>"
            f"<script>{get_plotlyjs()}</script></head><body><div class=\"attn-report\"><h1>Attention explorer</h1>"
            f"</div>{body}</body></html>\n")


def command_line() -> argparse.ArgumentParser:
    """The command's flags (the shared ones from :mod:`transformer.cli`)."""
    parser = argparse.ArgumentParser(prog="python -m app.report", description="Write one translation as a single "
                                     "self-contained HTML page (opens offline, no server).")
    parser.add_argument("text", help="the sentence to translate")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    cli.add_checkpoint(parser)
    cli.add_decoding(parser, languages=True)
    parser.add_argument("--views", default=",".join(DEFAULT_VIEWS),
                        help=f"comma-separated views among {', '.join(OFFLINE_VIEWS)} (default: %(default)s)")
    parser.add_argument("--method", default="integrated_gradients", choices=("integrated_gradients",
                        "input_x_gradient"), help="attribution method (with --views ...,what_drives_each_word)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default: %(default)s)")
    cli.add_threads(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line()
    args = parser.parse_args(argv)
    cli.use_threads(args)
    try:
        views = view_keys([v.strip() for v in args.views.split(",") if v.strip()])
    except ValueError as e:
        parser.error(str(e))
    text = clean_text(args.text).strip()
    if not text:
        parser.error("the text is empty: give a sentence to translate")
    if len(text) > MAX_INPUT_CHARS:
        parser.error(f"the text has {len(text):,} characters; the page takes one sentence of at most "
                     f"{MAX_INPUT_CHARS:,}")
    text, notices = take_input(args.text.strip())  # the app's input rules, and what they changed
    text = text.strip()
    for notice in notices:
        print(notice, file=sys.stderr)

    try:
        tr = load(args.checkpoint, device=args.device)
    except (CheckpointError, OSError, ValueError) as err:
        parser.exit(2, f"python -m app.report: cannot load {args.checkpoint!r}: {cli.one_line(err)}\n")
    for flag, code in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if code and code not in tr.languages:
            parser.error(f"{flag} {code!r} is not a language of this model"
                         + (f" (it takes e.g. {', '.join(tr.languages[:6])})" if tr.languages else
                            " (it is not multilingual)"))
    settings = cli.settings(args).filled(tr.metadata)
    result = tr.translate(text, beam_size=settings.beam_size, alpha=settings.alpha, return_attention=False,
                          **language_args(tr, settings))
    page = build_page(result, tr, views, text=text, model=args.checkpoint, settings=settings, method=args.method,
                      notices=notices)
    out = Path(args.out)
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {result.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
