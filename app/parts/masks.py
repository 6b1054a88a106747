"""Masks: the padding and causal masks of this sentence, and how they combine."""

from __future__ import annotations

from transformer import Translator

from ..analysis import probes
from ..analysis.inference import Analysis
from ..drawing import figures
from ..drawing.analysis import masked_weight
from . import Chart, Choice, Note, Part, Source

INTRO = ("The masks decide which keys a query may see: a blocked key's score is set to −∞ before the softmax, so its "
         "weight is exactly 0. Add padding to see the sentence as it sits in a batch next to longer ones.")
# each panel: its mask, title, whether its queries / keys are the source (else the decoder input), and its caption
PANELS = (
    ("encoder", "Encoder self-attention: padding mask", True, True,
     "Every source piece may look at every real source piece, in both directions. Only the <pad> columns are "
     "blocked: the same for every query."),
    ("causal", "Causal mask", False, False,
     "Lower triangle: decoder position i sees positions 0…i only, so training on whole sentences never lets "
     "a step peek at the piece it must predict."),
    ("decoder", "Decoder self-attention: padding AND causal", False, False,
     "What the decoder really uses: the causal triangle with the <pad> columns removed."),
    ("cross", "Cross-attention: source padding", False, True,
     "Each decoder position may read every real source piece; only the source <pad> columns are blocked. No "
     "causal part: the whole source is known before decoding starts."),
)
# each panel's short name (the page's picker: one mask drawn at a time)
MASK_NAMES = {"encoder": "Encoder: padding", "causal": "Causal", "decoder": "Decoder: padding AND causal",
         "cross": "Cross: source padding"}
# each panel's code (transformer/network/masks.py), for a tooltip
CODE = {"encoder": "padding_mask(src): True where the key is a real token, broadcast over all queries.",
        "causal": "causal_mask(T): True on and below the diagonal.",
        "decoder": "padding_mask(tgt) & causal_mask(T)",
        "cross": "padding_mask(src), broadcast over the decoder positions."}
OFFLINE_PADS = (0, 2)  # the offline page's padding choices (the app's default is 2)


def charts(tr: Translator, a: Analysis, pad_src: int, pad_tgt: int, window: tuple[int, int] | None = None,
           shown: tuple[str, ...] | None = None) -> list[Chart | Note]:
    """The four masks with ``pad_src`` / ``pad_tgt`` <pad> pieces after the source / the decoder input, of the
    positions ``window`` (``p0:p1`` on both axes of each mask; None: all); a note for a mask with no position in it.
    ``shown``: only these masks (keys of ``PANELS``, in ``PANELS``' order; None: all four)."""
    masks = probes.mask_arrays(tr, a, pad_src, pad_tgt)
    src = a.source_tokens + ["<pad>"] * pad_src
    dec = a.decoder_input_tokens + ["<pad>"] * pad_tgt
    p0, p1 = window or (0, max(len(src), len(dec)))
    src, dec = src[p0:p1], dec[p0:p1]
    out: list[Chart | Note] = []
    for key, title, q_src, k_src, text in PANELS:
        if shown is not None and key not in shown:
            continue
        cells = masks[key][p0:p1, p0:p1]
        if not cells.size:  # a window past the end of the shorter side
            out.append(Note(f"{title}: no positions in this window."))
            continue
        qtitle = "source (query)" if q_src else "decoder input (query)"
        ktitle = "source (key)" if k_src else "decoder input (key)"
        firsts = (1 if q_src else 0, 1 if k_src else 0)  # <s> is 0
        out.append(Chart(figures.mask_figure(cells, src if q_src else dec, src if k_src else dec, title, qtitle,
                                             ktitle, *(first + p0 for first in firsts)), text, f"mask-{key}"))
    return out


def check(tr: Translator, a: Analysis) -> str:
    """The sentence's real attention on the blocked positions (0: the masks hold)."""
    unpadded = probes.mask_arrays(tr, a, 0, 0)
    leak = max(masked_weight(a.decoder, unpadded["decoder"]), masked_weight(a.cross, unpadded["cross"]),
               masked_weight(a.encoder, unpadded["encoder"]))
    return (f"Check on this sentence's real attention: the largest weight on any blocked position is {leak:g} "
            "(decoder self-attention never looks ahead).")


def describe(src: Source) -> list[Part]:
    tr, a = src.tr, src.analysis
    return [Choice("Padding after each sentence", [(str(p), charts(tr, a, p, p)) for p in OFFLINE_PADS], 1),
            Note(check(tr, a))]
