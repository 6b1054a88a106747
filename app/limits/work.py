"""How much work each job of a request asks for, and what the page does when that is more than is left of the
request's ceiling (no Streamlit here; ``app.analysis.cached`` and the views show the notices; the ledger of a request
and the heavy-job slots are :mod:`app.limits.ledger`).

One estimate per job, in **work units**: parameters x token positions x passes / ``UNIT`` (one unit is a
1M-parameter model run over 250 positions, its cost on a CPU in docs/limits.md; a decoding step counts
``DECODE_STEP`` positions per beam plus ``STEP_OVERHEAD``, as one-token steps use a CPU far worse than whole
sequences; a backward pass counts two). Every job of a request (its sentences, its analysis, the view's own jobs:
a second model, ablation, attribution, snapshots) is planned against what is ``ledger.left()`` of the request's ceiling
(``$ATTN_MAX_WORK``); over it the page does less: beam capped, long texts translated a group of sentences at a time,
integrated gradients with fewer steps, then over the first output pieces only, then input x gradient, training
snapshots subsampled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from transformer import Translator, environment
from transformer.decoding import DecodeSettings
from transformer.interpret import attribution_passes

from .ledger import amount, left

UNIT = 2.5e8  # parameters x token positions per work unit
DECODE_STEP = 10  # positions one decoding step counts, per beam
STEP_OVERHEAD = 40  # and once per step, beams or not (calibrated: docs/limits.md)
FORCED_FLOOR = 96  # positions a teacher-forced pass counts at least: over few positions a pass costs the read of
# every weight (measured at NLLB-200-3.3B's sizes, one pass over 31 positions: counted without this floor, a unit
# cost several times attribution's; docs/limits.md)
BACKWARD = 3  # a forward and a backward pass count three forwards
ALTI_TERM = 90  # ALTI+'s per-token terms: each element counts this many parameter x position products
FLOW_TERM = 2 * ALTI_TERM  # the information-flow graph's per-head terms, each element this many products
# (both calibrated with python -m bench.work_units so that a unit costs about what the others do: docs/limits.md)
FLOW_NODE, FLOW_EDGE = 1 / 100, 1 / 400  # units a node and an edge of one step's information-flow graph cost to
# build and to pick the drawn ones from (calibrated the same way, with the shipped model: docs/limits.md)
RULE_CHECKS, RULE_FLOOR = 500_000, 20_000  # a flag rule's conditions tested on a table's lines: this many
# line x condition tests a unit, and each condition counting at least this many lines (its column's conversion);
# measured a column at a time, the floor for the conversion that a short column costs as much as a long one;
# Whole test set's whole note then costs a unit what the other jobs do (docs/limits.md; the times:
# docs/benchmarks.md#figures-behind-the-codes-comments)
IG_STEPS = (32, 16, 8)  # integrated gradients' steps, tried in turn
MIN_IG_SPAN = 8  # integrated gradients cover at least this many output pieces before input x gradient is used
DEFAULT_WORK_MB = 512.0




def work_bytes() -> int:
    """``$ATTN_WORK_MB`` (default 512) in bytes: the memory one pass of an attribution may hold."""
    return int(environment.number("ATTN_WORK_MB", DEFAULT_WORK_MB, unit="MB") * 1e6)


def parameters(tr: Translator) -> int:
    """The model size the estimates use: its parameters (tied embeddings once)."""
    return sum(p.numel() for p in tr.model.parameters())


def positions(tr: Translator, pieces: int) -> int:
    """Source positions the model will read for a text of ``pieces`` pieces: at most the model's limit, and
    ``</s>``."""
    return min(pieces, tr.max_source_tokens) + 1


def source_length(tr: Translator, text: str) -> int:
    """Source positions the model will read for ``text`` (:func:`positions`; the page passes the pieces it has)."""
    return positions(tr, len(tr.tokenizer.encode(text)))


def output_limit(tr: Translator, source: int, settings: DecodeSettings) -> int:
    """The most output positions decoding may produce for ``source`` positions: the decoder's start token and the
    tokens the length rule allows (``DecodeSettings.max_output_length``)."""
    return 1 + settings.max_output_length(tr.model, source)


def units(params: int, positions: float) -> float:
    return params * positions / UNIT


def translation_work(tr: Translator, source: int, settings: DecodeSettings) -> float:
    """Decoding one sentence (every step of every beam, to the length limit) and the teacher-forced pass that
    collects its attention."""
    out = output_limit(tr, source, settings)
    return units(parameters(tr), source + out * decode_step(settings.beam_size) + source + out)


def decode_step(beam: int) -> int:
    """Positions one decoding step counts: ``DECODE_STEP`` per beam and ``STEP_OVERHEAD`` once."""
    return beam * DECODE_STEP + STEP_OVERHEAD


def forced_work(tr: Translator, source: int, target: int, passes: int = 1) -> float:
    """``passes`` teacher-forced passes over a sentence (weighted norms, inside a head, the logit lens, ablation's
    log-probabilities), each counting at least ``FORCED_FLOOR`` positions."""
    return units(parameters(tr), max(source + target, FORCED_FLOOR) * passes)


def lens_work(tr: Translator, source: int, target: int) -> float:
    """The logit lens: one teacher-forced pass, then every decoder layer's output through the output projection
    (``n_decoder_layers x vocabulary x d_model`` products per output position). On the shipped model this is about
    two passes; on a large vocabulary (NLLB's 256k) the projections are most of it."""
    cfg = tr.model.config
    return forced_work(tr, source, target) + units(cfg.n_decoder_layers * cfg.tgt_vocab_size * cfg.d_model, target)


def cap_translation(tr: Translator, source: int, settings: DecodeSettings,
                    ceiling: float | None = None) -> tuple[DecodeSettings, list[str]]:
    """The decoding settings to use for a sentence of ``source`` positions (the beam capped when the estimate is
    over ``ceiling``, default what is :func:`left` of this request), and a notice for each cut."""
    ceiling = left() if ceiling is None else ceiling
    asked = translation_work(tr, source, settings)
    if asked <= ceiling or settings.beam_size <= 1:
        return settings, []
    beam = settings.beam_size
    while beam > 1 and translation_work(tr, source, replace(settings, beam_size=beam)) > ceiling:
        beam -= 1
    return replace(settings, beam_size=beam), [f"beam size capped at {beam} (of {settings.beam_size}) for "
                                               f"about {amount(asked)} units asked"]




def plain_work(tr: Translator, source: int, settings: DecodeSettings) -> float:
    """A plain translation of one sentence of ``source`` positions (no attention pass)."""
    return units(parameters(tr), source + output_limit(tr, source, settings) * decode_step(settings.beam_size))


def sentence_groups(costs: list[float], ceiling: float | None = None) -> list[list[int]]:
    """The indices of sentences whose plain translations cost ``costs``, in groups, each group within ``ceiling``
    (default what is :func:`left` of this request; one sentence at least); the page translates the first group and
    the rest on request."""
    ceiling = left() if ceiling is None else ceiling
    groups: list[list[int]] = [[]]
    total = 0.0
    for i, cost in enumerate(costs):
        if groups[-1] and total + cost > ceiling:
            groups.append([])
            total = 0.0
        groups[-1].append(i)
        total += cost
    return groups


@dataclass(frozen=True)
class TextPlan:
    """How one request spends its work on a longer text: the picked sentence's analysis first (at most half of
    the ceiling), the sentences' plain translations in ``groups`` (each within the rest; the page translates one
    group a request), with ``settings`` (the beam capped so that no sentence alone is over the rest: ``notices``);
    ``costs``: each sentence's plain translation under them."""

    settings: DecodeSettings
    groups: list[list[int]]
    costs: list[float]
    notices: list[str]


def plan_text(tr: Translator, pieces: list[int], picked: int, settings: DecodeSettings,
              ceiling: float | None = None) -> TextPlan:
    """The :class:`TextPlan` of a text whose sentences have ``pieces`` pieces each, sentence ``picked`` (0-based)
    to be analysed, within ``ceiling`` (default what is :func:`left` of this request)."""
    ceiling = left() if ceiling is None else ceiling
    sources = [positions(tr, n) for n in pieces]
    ceiling -= min(translation_work(tr, sources[picked], settings), ceiling / 2)
    settings, notices = cap_translation(tr, max(sources), settings, ceiling)  # no sentence alone over the rest
    costs = [plain_work(tr, source, settings) for source in sources]
    return TextPlan(settings, sentence_groups(costs, ceiling), costs, notices)


@dataclass(frozen=True)
class AttributionPlan:
    """What an attribution will run: method, integrated-gradient steps, the output span ``(first, end)``."""

    method: str
    steps: int
    span: tuple[int, int]
    estimate: float  # units, after the cuts
    notices: tuple[str, ...]


def attribution_work(params: int, source: int, target: int, rows: int, method: str, steps: int) -> float:
    """``rows`` output steps as ``transformer.interpret.attribution_passes`` runs them: a forward row per point of
    the path and a backward row per point and output step (each ``BACKWARD - 1`` forwards), every row the
    ``source + target`` positions."""
    forward, backward = attribution_passes(method, steps, rows)
    return units(params, (source + target) * (forward + (BACKWARD - 1) * backward))


def plan_attribution(tr: Translator, source: int, target: int, method: str, steps: int = IG_STEPS[0],
                     ceiling: float | None = None) -> AttributionPlan:
    """The attribution to run for a sentence of ``source`` positions and ``target`` output steps: integrated
    gradients with fewer steps, then over the first output pieces only, then input x gradient, until the estimate
    is within ``ceiling`` (default what is :func:`left` of this request)."""
    ceiling, params = (left() if ceiling is None else ceiling), parameters(tr)
    full = (0, target)

    def cost(m: str, s: int, rows: int) -> float:
        return attribution_work(params, source, target, rows, m, s)

    def rows_within(m: str, s: int) -> int:
        """The most output steps within the ceiling (the cost grows by the same amount with each one)."""
        return int((ceiling - cost(m, s, 0)) // (cost(m, s, 1) - cost(m, s, 0)))

    asked = cost(method, steps, target)
    if asked <= ceiling:
        return AttributionPlan(method, steps, full, asked, ())
    why = f"about {amount(asked)} units asked"
    if method == "integrated_gradients":
        for s in (n for n in IG_STEPS if n < steps):
            if cost(method, s, target) <= ceiling:
                return AttributionPlan(method, s, full, cost(method, s, target), (
                    f"integrated gradients with {s} steps instead of {steps} ({why})",))
        s = min(min(IG_STEPS), steps)
        rows = rows_within(method, s)
        if rows >= min(MIN_IG_SPAN, target):
            return AttributionPlan(method, s, (0, rows), cost(method, s, rows), (
                f"integrated gradients with {s} steps instead of {steps}, over the first {rows} of the {target} "
                f"output pieces only ({why})",))
        method, lead = "input_x_gradient", "input × gradient instead of integrated gradients"
    else:
        lead = "input × gradient"
    if cost(method, 1, target) <= ceiling:
        return AttributionPlan(method, 1, full, cost(method, 1, target), (f"{lead} ({why})",))
    rows = max(1, rows_within(method, 1))
    return AttributionPlan(method, 1, (0, rows), cost(method, 1, rows), (
        f"{lead}, over the first {rows} of the {target} output pieces only ({why})",))


def alti_work(tr: Translator, source: int, target: int) -> float:
    """ALTI+ on a sentence: the teacher-forced pass, and per attention block the per-token terms (each key's value
    through W_O, ``K x d_model^2``, then each query's ``K x d_model`` terms per head and their distances), each
    element ``ALTI_TERM`` times a parameter x position product (they are memory-bound work, not multiply-adds)."""
    cfg = tr.config
    d = cfg.d_model

    def block(q: int, k: int) -> float:
        return k * d * d + q * k * d * (cfg.n_heads + 4)

    per_token_terms = (cfg.n_encoder_layers * block(source, source)
                       + cfg.n_decoder_layers * (block(target, target) + block(target, source + 1)))
    return units(parameters(tr), source + target) + ALTI_TERM * per_token_terms / UNIT


def plan_alti(tr: Translator, source: int, target: int) -> tuple[bool, list[str]]:
    """Whether ALTI+ of this sentence fits this server's work limit, and the notice when it does not."""
    return _fits(alti_work(tr, source, target), "contributions (ALTI+)")


def _fits(asked: float, what: str) -> tuple[bool, list[str]]:
    """Whether one job of ``asked`` units fits what is :func:`left` of this request, and the notice when not."""
    if asked <= left():
        return True, []
    return False, [f"{what} not computed for this sentence (about {amount(asked)} units asked; a shorter sentence "
                   "fits)"]


def table_work(tr: Translator, sentence: str, settings: DecodeSettings) -> float:
    """One line of a test-set table (``transformer.corpus``): its plain translation, then the teacher-forced pass and
    ALTI+ over the longest output the length rule allows."""
    source = source_length(tr, sentence)
    return plain_work(tr, source, settings) + alti_work(tr, source, output_limit(tr, source, settings))


def table_lines(tr: Translator, sentences: list[str], settings: DecodeSettings,
                ceiling: float | None = None) -> tuple[int, float]:
    """How many of ``sentences``, from the first, a table fits within ``ceiling`` (default what is :func:`left` of
    this request), and their estimate."""
    ceiling = left() if ceiling is None else ceiling
    total = 0.0
    for i, sentence in enumerate(sentences):
        cost = table_work(tr, sentence, settings)
        if total + cost > ceiling:
            return i, total
        total += cost
    return len(sentences), total


def rule_work(rows: int, conditions: int) -> float:
    """A flag rule's ``conditions`` each tested on ``rows`` lines of a table (what Whole test set says of the lines
    beyond a threshold's line)."""
    return conditions * (rows + RULE_FLOOR) / RULE_CHECKS


def flow_work(tr: Translator, source: int, target: int) -> float:
    """The information-flow graph of a sentence: the teacher-forced pass, per attention block each head's terms
    (``H`` times ALTI+'s per query and key) and per layer the feed-forward block again."""
    cfg = tr.config
    d = cfg.d_model

    def block(q: int, k: int) -> float:
        return k * d * d + q * k * d * 5 * cfg.n_heads

    per_term = (cfg.n_encoder_layers * block(source, source)
                + cfg.n_decoder_layers * (block(target, target) + block(target, source)))
    return units(parameters(tr), 2 * (source + target)) + FLOW_TERM * per_term / UNIT


def plan_flow(tr: Translator, source: int, target: int) -> tuple[bool, list[str]]:
    """Whether the information-flow graph of this sentence fits this server's work limit, and the notice when it
    does not."""
    return _fits(flow_work(tr, source, target), "the information-flow graph")


def flow_graph_size(data: Any, step: int, threshold: float) -> tuple[int, int]:
    """At most how many nodes and edges ``data.graph(step, threshold)`` (a ``transformer.interpret.Flow``, its
    arrays with a batch axis of 1) can reach, from its weights alone: every head's term at or above the threshold
    (and above 0) of every query the graph may reach (the encoder's, the decoder's up to ``step``), the residual
    of each attention block and the two terms of each feed-forward block; nodes at most one per edge."""
    edges = nodes = 0
    for kind, layers in data.heads.items():
        for weights in layers:
            w = np.asarray(weights)[0]  # (H, Q, K)
            w = w if kind == "encoder" else w[:, :step + 1]
            edges += int(np.count_nonzero((w > 0) & (w >= threshold))) + w.shape[1]
            nodes += w.shape[1]
    for side, layers in data.ffn.items():
        for weights in layers:
            positions = np.asarray(weights)[0].shape[0] if side == "encoder" else min(
                np.asarray(weights)[0].shape[0], step + 1)
            edges, nodes = edges + 2 * positions, nodes + positions
    embeds = sum(np.asarray(data.ffn[side][0])[0].shape[0] for side in data.ffn if data.ffn[side])
    return min(nodes + embeds, edges + 1), edges


def flow_graph_work(data: Any, step: int, threshold: float) -> float:
    """Building one output step's information-flow graph at ``threshold`` and what the view does with its edges
    (the strongest, each head's strongest edge): its nodes and edges at most (:func:`flow_graph_size`), each
    ``FLOW_NODE`` and ``FLOW_EDGE`` units."""
    nodes, edges = flow_graph_size(data, step, threshold)
    return nodes * FLOW_NODE + edges * FLOW_EDGE


def plan_flow_graph(data: Any, step: int, threshold: float, ceiling: float | None = None,
                    grid: float = 0.01, highest: float = 0.5) -> tuple[float | None, float, list[str]]:
    """The threshold to build one output step's graph at: ``threshold`` when its work (:func:`flow_graph_work`)
    fits ``ceiling`` (default what is :func:`left` of this request), else the lowest on the slider's ``grid`` up to
    ``highest`` that fits (None: none does); its estimate, and the notice when raised."""
    ceiling = left() if ceiling is None else ceiling
    asked = flow_graph_work(data, step, threshold)
    if asked <= ceiling:
        return threshold, asked, []
    low, high = math.floor(threshold / grid) + 1, round(highest / grid)  # the graph shrinks as the threshold grows
    if flow_graph_work(data, step, high * grid) > ceiling:
        return None, 0.0, [f"the information-flow graph not drawn even at threshold {highest:g} (about "
                           f"{amount(asked)} units asked at {threshold:g})"]
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if flow_graph_work(data, step, mid * grid) <= ceiling else (mid + 1, high)
    chosen = round(low * grid, 6)
    return chosen, flow_graph_work(data, step, chosen), [
        f"the information-flow graph drawn at threshold {chosen:g} instead of {threshold:g} (about {amount(asked)} "
        "units asked)"]


PREVIEW_PARAMETERS = 1_000_000_000  # a model over this many parameters on a CPU: patching's first-order preview
PREVIEW_TOP = 16  # the preview's sites patched exactly


def patching_preview(tr: Translator) -> bool:
    """Whether patching previews (``transformer.interpret.patching.preview``: every site to first order, one forward
    and one backward pass, then the ``PREVIEW_TOP`` strongest exactly) instead of patching every site: a model over
    ``PREVIEW_PARAMETERS`` on a CPU."""
    return tr.device.type == "cpu" and parameters(tr) > PREVIEW_PARAMETERS


def patching_work(tr: Translator, source: int, target: int, settings: DecodeSettings) -> float:
    """Patching one edit of a sentence (``transformer.interpret.patching``, every site): the edited sentence's plain
    translation (twice: the page's, and the library's for the default step), the two recorded runs, and each site's
    row of the batch, at most a pass of the encoder and the decoder (an encoder site: the residual stream at a
    position, a head) or of the decoder (a cross-attention reading, a head, the decoder's stream), over the whole
    sentence. A previewed model (:func:`patching_preview`): a forward and a backward pass, then ``PREVIEW_TOP`` rows
    instead of every site's."""
    cfg = tr.config
    heads, enc, dec = cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers
    encoder_rows = (enc + 1) * source + enc * heads
    decoder_rows = dec * source + 2 * dec * heads + (dec + 1) * target
    rows = encoder_rows * (source + target) + decoder_rows * target
    if patching_preview(tr):
        rows = BACKWARD * (source + target) + PREVIEW_TOP * (source + target)
    return 2 * plain_work(tr, source, settings) + forced_work(tr, source, target, 2) + units(parameters(tr), rows)


def plan_patching(tr: Translator, source: int, target: int, settings: DecodeSettings) -> tuple[bool, list[str]]:
    """Whether patching an edit of this sentence fits this server's work limit, and the notice when it does not."""
    return _fits(patching_work(tr, source, target, settings), "patching (what carries the change)")


def snapshot_work(tr: Translator, source: int, target: int) -> float:
    """One training snapshot on a sentence: the teacher-forced pass and its own greedy translation."""
    return units(parameters(tr), 2 * source + target + target * decode_step(1))


def pick_snapshots(tr: Translator, source: int, target: int, snapshots: list,
                   ceiling: float | None = None) -> tuple[list, list[str]]:
    """The snapshots to run (all, or an even subsample keeping the first and the last, within ``ceiling``, default
    what is :func:`left` of this request), and a notice when cut."""
    ceiling, each = (left() if ceiling is None else ceiling), snapshot_work(tr, source, target)
    if each * len(snapshots) <= ceiling:
        return list(snapshots), []
    fit = max(1, int(ceiling // each))
    if fit == 1:
        chosen = [snapshots[-1]]
    else:
        chosen = [snapshots[round(i * (len(snapshots) - 1) / (fit - 1))] for i in range(fit)]
        chosen = list(dict.fromkeys(chosen))
    return chosen, [f"{len(chosen)} of the {len(snapshots)} training snapshots shown (about "
                    f"{amount(each * len(snapshots))} units asked)"]
