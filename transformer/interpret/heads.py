"""Which heads matter, over a whole test set: everything ``heads.json`` holds (:func:`run`, :func:`alti_section`).
The command, ``python -m transformer.heads``, is ``transformer/heads.py``; its help says what each section means.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from ..decoding.settings import DEFAULTS, DecodeSettings
from ..evaluation.scores import score, translate_all
from ..network.kinds import KINDS as KINDS  # re-exported: heads.KINDS, heads.offset_weight
from ..network.kinds import decoder_input, head_mask, query_stats, special_key
from ..network.kinds import layer_counts as _layer_counts
from ..network.kinds import offset_weight as offset_weight
from ..translator import Translator
from .alti import contributions
from .methods import require_eval

POSITIONAL_SHARE = 0.9
SINK_SHARE = 0.5
TOP_SENTENCES = 5
DROP = 1.0  # BLEU points: "heads_off_within_1_bleu"
IMPORTANCE_NOTE = ("Michel et al. (2019): I_h = mean over the sentences x of |dL(x)/d gate_h|, where gate_h is "
                   "head h's entry of the head mask (all ones) and L(x) the teacher-forced cross-entropy of x's "
                   "reference translation (summed over its target pieces, no label smoothing); then normalised per "
                   "layer by the l2 norm over that layer's heads (their section 4.1), so each layer's row has norm 1. "
                   "importance_raw holds the means before that normalisation.")
ROLE_RULES = {
    "positional": f"the same relative position (key index - query index, e.g. -1 = the previous piece; for "
                  f"cross-attention, source index - output index) is the head's strongest key for >= "
                  f"{POSITIONAL_SHARE:.0%} of its queries over the split (Voita et al., 2019); labelled "
                  f"'positional (+k)' with that offset",
    "end-token sink": f"not positional, and on average >= {SINK_SHARE:.0%} of the head's weight goes to the end "
                      f"token: </s> (the last source piece) for encoder self-attention and cross-attention; for "
                      f"decoder self-attention, whose input holds no </s>, the start token <s> (key 0)",
    "mixed": "neither rule holds",
}
STATS_NOTES = {
    "entropy": "entropy of the query's weights over its keys, in nats",
    "max_weight": "the query's largest weight",
    "on_end_token": "weight on </s> (the last source piece); null for decoder self-attention (no </s> in its input)",
    "on_start_token": "weight on <s> (decoder key 0); null for encoder self-attention and cross-attention (no <s> "
                      "among the source pieces)",
    "on_previous": "weight on key index = query index - 1 (0 where there is none)",
    "on_same": "weight on key index = query index (cross-attention: source index = output index)",
    "on_next": "weight on key index = query index + 1 (0 where there is none; always 0 for causal decoder "
               "self-attention)",
    "top_offset": "the relative position (key index - query index) that is most often the strongest key",
    "top_offset_share": "the share of queries whose strongest key is at top_offset (the positional rule's measure)",
    "alignment_agreement": "cross-attention only: share of output pieces for which the head's strongest source piece "
                           "is also the one picked by most of the layer's other heads (ties count as agreement)",
    "averaging": "every value is a mean over all queries (pieces) of the split, teacher-forced on the references",
}
MOST_CONFIDENT_NOTE = (f"per type, layer and head: 0-based line numbers in the split (of the first `sentences` lines) "
                       f"of the {TOP_SENTENCES} sentences where the head's mean maximum weight over the sentence's "
                       f"queries is highest, highest first; most_confident_weight holds those means")
PRUNING_NOTE = ("Michel et al.'s Figure 2: heads switched off (head mask 0) from the least important up, by the "
                "normalised importance; `pruning` pools all three types, `pruning_by_type` ranks within one type. "
                "Each point: fraction and number of heads off, the split's sacreBLEU with beam search (same settings "
                "as python -m transformer.evaluate), and `off`, the heads switched off as [type, layer, head], "
                "0-based.")


def layer_counts(tr: Translator) -> dict[str, int]:
    """Layers of each attention kind (``transformer.network.kinds.layer_counts``)."""
    return _layer_counts(tr.config)


def head_mask_off(tr: Translator, off: Sequence[tuple[str, int, int]]) -> dict[str, torch.Tensor]:
    """Head mask (1 = on) with the heads ``(kind, layer, head)`` (0-based) switched off."""
    return head_mask(tr.config, off, tr.device)


def reference_ids(tr: Translator, text: str, tgt_lang: str | None = None) -> list[int]:
    """A reference translation's target ids (no BOS/EOS), cut so that ``[BOS] + ids`` fits the model: the
    tokenizer's ``encode_target`` (Marian: its target sentencepiece model; NLLB / M2M100: the target language's code
    first, ``tgt_lang`` or the tokenizer's default)."""
    return tr.tokenizer.encode_target(text, tgt_lang)[: tr.config.max_len - 1]


def agreement(best: torch.Tensor, n_keys: int) -> torch.Tensor:
    """``best (H, Q)`` strongest key per head and query -> ``(H, Q)`` bool: the head's key is the one most of the
    other heads pick (ties included; never with no other head picking it)."""
    picks = F.one_hot(best, n_keys)  # (H, Q, K)
    others = picks.sum(0, keepdim=True) - picks  # (H, Q, K): how many other heads pick each key
    mine = others.gather(-1, best[..., None])[..., 0]  # (H, Q)
    return (mine > 0) & (mine == others.max(-1).values)


def analyse_heads(tr: Translator, sources: Sequence[str], references: Sequence[str],
                  progress: bool = False) -> dict[str, Any]:
    """Importance, corpus statistics, roles and most confident sentences of every head, teacher-forced on the
    references one sentence at a time (a batch of one: Michel et al.'s expectation is over sentences). The model
    must be in eval mode (``Translator`` puts it there); it is never switched."""
    model, cfg = tr.model, tr.config
    counts, h, n = layer_counts(tr), cfg.n_heads, len(sources)
    gates = {k: torch.ones(layers, h, device=tr.device, requires_grad=True) for k, layers in counts.items()}
    importance = {k: torch.zeros(layers, h, dtype=torch.float64) for k, layers in counts.items()}
    names = ("entropy", "max_weight", "on_end_token", "on_start_token", "on_previous", "on_same", "on_next")
    sums = {k: {s: torch.zeros(layers, h, dtype=torch.float64) for s in names} for k, layers in counts.items()}
    agree = torch.zeros(counts["cross"], h, dtype=torch.float64)
    offsets = {k: [[Counter() for _ in range(h)] for _ in range(layers)] for k, layers in counts.items()}
    queries = dict.fromkeys(KINDS, 0)
    confidence = {k: torch.zeros(layers, h, n) for k, layers in counts.items()}
    require_eval(model, "analyse_heads")
    for i in tqdm(range(n), desc="importance", unit="sent", disable=not progress, file=sys.stderr):
        ref = reference_ids(tr, references[i])
        src = torch.tensor([tr.encode_source(sources[i])[0]], device=tr.device)  # (1, S), ends in </s>
        gold = torch.tensor([*ref, cfg.eos_id], device=tr.device)  # (T,)
        tgt = torch.tensor([decoder_input(cfg.bos_id, gold.tolist())], device=tr.device)  # (1, T), <s> first
        out = model(src, tgt, return_attention=True, head_mask=gates)
        loss = F.cross_entropy(out.logits[0].float(), gold, reduction="sum")
        grads = torch.autograd.grad(loss, [gates[k] for k in KINDS])
        for k, g in zip(KINDS, grads):
            importance[k] += g.detach().abs().double().cpu()
        attn = out.attentions()
        with torch.no_grad():
            for kind in KINDS:
                for layer, a in enumerate(attn[kind]):
                    w = a[0].detach().float().cpu()  # (H, Q, K)
                    q, k = w.shape[1:]
                    if layer == 0:
                        queries[kind] += q
                    peak, best = w.max(-1)  # (H, Q)
                    values = query_stats(w, special_key(kind, k))  # (H, Q) each; on_special: </s> or <s>
                    values["on_start_token" if kind == "decoder" else "on_end_token"] = values.pop("on_special")
                    for name, v in values.items():
                        if v is not None:
                            sums[kind][name][layer] += v.sum(-1).double()
                    confidence[kind][layer, :, i] = peak.mean(-1)
                    rel = best - torch.arange(q)[None, :]  # (H, Q): strongest key's offset from the query
                    for head in range(h):
                        offsets[kind][layer][head].update(rel[head].tolist())
                    if kind == "cross":
                        agree[layer] += agreement(best, k).sum(-1).double()
    raw = {k: importance[k] / max(n, 1) for k in KINDS}
    normalised = {k: v / v.norm(dim=-1, keepdim=True).clamp(min=1e-30) for k, v in raw.items()}  # l2 per layer
    stats: dict[str, dict[str, list]] = {}
    for kind in KINDS:
        stats[kind] = {}
        for name in names:
            unused = (name, kind == "decoder") in (("on_end_token", True), ("on_start_token", False))
            stats[kind][name] = ([[None] * h for _ in range(counts[kind])] if unused
                                 else (sums[kind][name] / max(queries[kind], 1)).tolist())
        tops = [[c.most_common(1)[0] if c else (0, 0) for c in row] for row in offsets[kind]]
        stats[kind]["top_offset"] = [[off for off, _ in row] for row in tops]
        stats[kind]["top_offset_share"] = [[m / max(queries[kind], 1) for _, m in row] for row in tops]
    stats["cross"]["alignment_agreement"] = (agree / max(queries["cross"], 1)).tolist()
    roles = {k: [[role(stats[k], k, layer, head) for head in range(h)] for layer in range(counts[k])] for k in KINDS}
    ranked = {k: torch.sort(confidence[k], dim=-1, descending=True, stable=True) for k in KINDS}
    return {"importance": {k: v.tolist() for k, v in normalised.items()}, "importance_note": IMPORTANCE_NOTE,
            "importance_raw": {k: v.tolist() for k, v in raw.items()},
            "stats": stats, "stats_notes": STATS_NOTES, "roles": roles, "role_rules": ROLE_RULES,
            "most_confident": {k: v.indices[..., :TOP_SENTENCES].tolist() for k, v in ranked.items()},
            "most_confident_weight": {k: v.values[..., :TOP_SENTENCES].tolist() for k, v in ranked.items()},
            "most_confident_note": MOST_CONFIDENT_NOTE}


ALTI_PERCENTILE = 1.0  # the hallucination threshold: this percentile of the calibration split's mean source shares
ALTI_NOTE = ("ALTI+ (Ferrando et al., 2022): each attention block's output split into one term per input piece, each "
             "piece's contribution its L1 proximity to the output, rolled out through the encoder, the decoder "
             "self-attention and the cross-attention. Teacher-forced on the references, like `stats`. "
             "source_share_by_position[t]: mean over the sentences with an output position t+1 (sentences[t] of "
             "them) of the share of that step's prediction from the source (the rest: the target prefix). "
             "alignment_agreement: share of output steps whose strongest source piece by ALTI+ (argmax of the "
             "rolled-out source contributions) is the strongest by cross-attention: per layer (the mean over the "
             "layer's heads), and for the mean over every layer and head.")
THRESHOLD_NOTE = (f"hallucination_threshold: percentile {ALTI_PERCENTILE:g} (in %) of the sentences' mean "
                  "source share (mean over the output steps) of the model's own translations (beam search, the "
                  "settings of this command) of the calibration split: a translation whose mean source share is "
                  "below it may be a hallucination (Dale et al., 2023: low source contribution). The app's notice "
                  "uses the checkpoint's flag.json instead (python -m transformer.detect: this and other signals).")


def alti_summary(tr: Translator, sources: Sequence[str], references: Sequence[str],
                 progress: bool = False) -> dict[str, Any]:
    """ALTI+ over a split, teacher-forced on the references one sentence at a time: the mean source share per
    output position and over every step, and the agreement of ALTI+'s alignment with cross-attention's (see
    ``ALTI_NOTE``)."""
    model, cfg = tr.model, tr.config
    require_eval(model, "alti_summary")
    share_sum: list[float] = []
    share_n: list[int] = []
    layers = cfg.n_decoder_layers
    agree = torch.zeros(layers + 1, dtype=torch.float64)
    steps = 0
    for i in tqdm(range(len(sources)), desc="alti", unit="sent", disable=not progress, file=sys.stderr):
        src = torch.tensor([tr.encode_source(sources[i])[0]], device=tr.device)  # (1, S)
        tgt = torch.tensor([[cfg.bos_id, *reference_ids(tr, references[i])]], device=tr.device)  # (1, T)
        c = contributions(model, src, tgt)
        with torch.no_grad():
            cross = model(src, tgt, return_attention=True).cross_attentions  # (1, H, T, S) per layer
        share = c.source_share[0].double().cpu()  # (T,)
        for t, value in enumerate(share.tolist()):
            if t == len(share_sum):
                share_sum.append(0.0)
                share_n.append(0)
            share_sum[t] += value
            share_n[t] += 1
        alti_best = c.source[0].argmax(-1).cpu()  # (T,)
        means = [a[0].mean(0).float().cpu() for a in cross]  # (T, S) per layer, mean over heads
        picks = [m.argmax(-1) for m in means] + [torch.stack(means).mean(0).argmax(-1)]
        agree += torch.tensor([(p == alti_best).sum().item() for p in picks], dtype=torch.float64)
        steps += share.numel()
    by_layer = (agree[:layers] / max(steps, 1)).tolist()
    return {"source_share_by_position": [s / n for s, n in zip(share_sum, share_n)], "sentences": share_n,
            "source_share_mean": sum(share_sum) / max(steps, 1),
            "alignment_agreement": {"by_layer": by_layer, "mean_of_layers_and_heads": float(agree[layers] /
                                                                                        max(steps, 1)),
                                    "best_layer": int(max(range(layers), key=lambda i: by_layer[i])) + 1},
            "alti_note": ALTI_NOTE}


def mean_source_shares(tr: Translator, sources: Sequence[str], settings: DecodeSettings = DEFAULTS,
                       batch_size: int = 64, progress: bool = False) -> list[float]:
    """Each sentence's mean source share (ALTI+, mean over its output steps) on the model's own translation under
    ``settings``."""
    cfg, shares = tr.model.config, []
    for start in tqdm(range(0, len(sources), batch_size), desc="calibration", unit="batch", disable=not progress,
                      file=sys.stderr):
        for r in tr.translate_batch(list(sources[start:start + batch_size]), settings):
            src = torch.tensor([r.source_ids], device=tr.device)  # (1, S)
            tgt = torch.tensor([[cfg.bos_id, *r.target_ids[:-1]]], device=tr.device)  # (1, T): the decoder input
            shares.append(float(contributions(tr.model, src, tgt).source_share[0].mean()))
    return shares


def hallucination_threshold(shares: Sequence[float], percentile: float = ALTI_PERCENTILE) -> float:
    """The ``percentile``-th percentile (linear interpolation) of the sentences' mean source shares."""
    return float(torch.quantile(torch.tensor(list(shares), dtype=torch.float64), percentile / 100))


def role(stats: dict[str, list], kind: str, layer: int, head: int) -> str:
    """A head's role by the rules in ``ROLE_RULES`` (Voita et al., 2019), from its corpus statistics."""
    if stats["top_offset_share"][layer][head] >= POSITIONAL_SHARE:
        return f"positional ({stats['top_offset'][layer][head]:+d})"
    sink = stats["on_start_token" if kind == "decoder" else "on_end_token"][layer][head]
    return "end-token sink" if sink >= SINK_SHARE else "mixed"


def ranked_heads(importance: dict[str, list], kinds: Sequence[str]) -> list[tuple[str, int, int]]:
    """Heads of ``kinds``, least important first (ties in a fixed order)."""
    heads = [(k, layer, head) for k in kinds for layer, row in enumerate(importance[k]) for head in range(len(row))]
    return sorted(heads, key=lambda x: (importance[x[0]][x[1]][x[2]], KINDS.index(x[0]), x[1], x[2]))


def curve_counts(total: int) -> list[int]:
    """Numbers of heads off, 0 to ``total``, never more than 10% of ``total`` apart."""
    step = max(1, total // 10)
    return sorted(set(range(0, total, step)) | {total})


def pruning_curves(tr: Translator, sources: Sequence[str], references: Sequence[str],
                   orders: dict[str, list[tuple[str, int, int]]], tgt_lang: str, settings: DecodeSettings,
                   batch_size: int, progress: bool = False, streams: int = 1) -> dict[str, list[dict]]:
    """One curve per named order: BLEU with its first ``n`` heads switched off, ``n`` from 0 to all (see
    ``curve_counts``). The same set of heads is decoded once (every curve starts at the baseline); ``streams``:
    ``translate_all``'s, batches side by side on a CPU."""
    plans = {name: [(n, order[:n]) for n in curve_counts(len(order))] for name, order in orders.items()}
    todo = list(dict.fromkeys(frozenset(off) for plan in plans.values() for _, off in plan))
    bleu: dict[frozenset, float] = {}
    for off in tqdm(todo, desc="pruning", unit="decode", disable=not progress, file=sys.stderr):
        mask = head_mask_off(tr, sorted(off)) if off else None
        hyps = translate_all(tr, sources, settings, batch_size, progress=False, head_mask=mask, streams=streams)
        bleu[off] = score(hyps, references, tgt_lang)["bleu"]
    return {name: [{"fraction": round(n / len(orders[name]), 4), "heads_off": n, "bleu": bleu[frozenset(off)],
                    "off": [list(x) for x in off]} for n, off in plan] for name, plan in plans.items()}


def within(curve: Sequence[dict], drop: float = DROP) -> int:
    """Most heads switched off (on the curve) before BLEU first falls more than ``drop`` below the first point."""
    best = 0
    for point in curve:
        if point["bleu"] < curve[0]["bleu"] - drop:
            break
        best = point["heads_off"]
    return best


def run(tr: Translator, sources: Sequence[str], references: Sequence[str], tgt_lang: str,
        settings: DecodeSettings = DEFAULTS, batch_size: int = 64, progress: bool = False,
        streams: int = 1) -> dict[str, Any]:
    """Everything ``python -m transformer.heads`` reports, for one model on one split, decoding as ``settings`` say
    (what they leave None: the checkpoint's own; ``streams``: the pruning curves' decodes, as ``translate_all``)."""
    settings = tr.settings(settings)
    start = time.perf_counter()
    result = analyse_heads(tr, sources, references, progress=progress)
    analysed = time.perf_counter()
    orders = {"pooled": ranked_heads(result["importance"], KINDS),
              **{k: ranked_heads(result["importance"], [k]) for k in KINDS}}
    curves = pruning_curves(tr, sources, references, orders, tgt_lang, settings, batch_size, progress, streams)
    pooled = curves.pop("pooled")
    result.update(baseline_bleu=pooled[0]["bleu"], pruning=pooled, pruning_by_type=curves, pruning_note=PRUNING_NOTE,
                  heads_off_within_1_bleu={"pooled": within(pooled), **{k: within(v) for k, v in curves.items()}},
                  beam=settings.beam_size, alpha=settings.alpha, batch_size=batch_size, sentences=len(sources),
                  seconds_importance=round(analysed - start, 1),
                  seconds_pruning=round(time.perf_counter() - analysed, 1))
    result["cited_sentences"] = cited_sentences(result["most_confident"], sources)
    return result


def cited_sentences(most_confident: dict[str, list], sources: Sequence[str]) -> dict[str, str]:
    """The source sentences ``most_confident`` cites, by their 0-based line number (a JSON key, so a string): the
    few lines a reader of ``heads.json`` needs where the data set itself is not at hand."""
    lines = sorted({int(i) for rows in most_confident.values() for row in rows for top in row for i in top})
    return {str(i): sources[i] for i in lines if 0 <= i < len(sources)}


def alti_section(tr: Translator, sources: Sequence[str], references: Sequence[str], calibration: Sequence[str],
                 calibration_split: str, settings: DecodeSettings = DEFAULTS, batch_size: int = 64,
                 progress: bool = False) -> dict[str, Any]:
    """heads.json's ``alti``: :func:`alti_summary` on the split and the hallucination threshold chosen on the
    calibration sentences (the model's own translations)."""
    start = time.perf_counter()
    section = alti_summary(tr, sources, references, progress)
    shares = mean_source_shares(tr, calibration, tr.settings(settings), batch_size, progress)
    section.update(hallucination_threshold=hallucination_threshold(shares), threshold_percentile=ALTI_PERCENTILE,
                   threshold_split=calibration_split, threshold_sentences=len(shares),
                   threshold_note=THRESHOLD_NOTE, seconds=round(time.perf_counter() - start, 1))
    return section
