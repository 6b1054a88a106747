"""``python -m transformer.heads``: which heads matter, over a whole test set.

- importance: Michel et al. (2019, "Are Sixteen Heads Really Better than One?"), the expected absolute
  gradient of the teacher-forced loss on the reference translations with respect to each head's gate
  (the model's head mask, all ones), accumulated per batch and normalised per layer (l2 over the layer's heads);
- stats: corpus means per head of entropy, maximum weight, share on the end / start token, share on the
  previous / same / next position, and for cross-attention how often the head's strongest source piece is the
  one most other heads of the layer pick (a rough alignment agreement);
- pruning: BLEU with the least important heads switched off, from none to all in steps of at most 10%
  (Michel et al.'s Figure 2), all types pooled and per type;
- roles: Voita et al. (2019, "Analyzing Multi-Head Self-Attention") rules: positional, end-token sink, mixed.

``--json`` prints one JSON object as the last line; ``--out`` writes the same object to a file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .checkpoint import CheckpointError
from .data import DataError, pad_sequences, read_parallel
from .evaluate import score, translate_all
from .translator import Translator, load

KINDS = ("encoder", "decoder", "cross")
IMPORTANCE_NOTE = ("Michel et al. (2019): mean over batches of |d loss / d gate| for each head's gate (the head "
                   "mask), teacher-forced on the reference translations, then normalised per layer by the l2 norm "
                   "over that layer's heads.")
ROLE_RULES = {
    "positional": "the same relative position (key index - query index, e.g. -1 = previous piece; for "
                  "cross-attention, source index - output index) is the head's strongest key for >= 90% of queries "
                  "(Voita et al., 2019)",
    "end-token sink": "not positional, and on average >= 50% of the weight goes to the end token (</s> for source "
                      "keys, <s> for decoder-input keys)",
    "mixed": "neither rule holds",
}
POSITIONAL_SHARE = 0.9
SINK_SHARE = 0.5


def layer_counts(tr: Translator) -> dict[str, int]:
    cfg = tr.config
    return {"encoder": cfg.n_encoder_layers, "decoder": cfg.n_decoder_layers, "cross": cfg.n_decoder_layers}


def head_mask_off(tr: Translator, off: Sequence[tuple[str, int, int]]) -> dict[str, torch.Tensor]:
    """Head mask (1 = on) with the heads ``(kind, layer, head)`` (0-based) switched off."""
    mask = {k: torch.ones(n, tr.config.n_heads, device=tr.device) for k, n in layer_counts(tr).items()}
    for kind, layer, head in off:
        mask[kind][layer, head] = 0.0
    return mask


def batches(n: int, lengths: Sequence[int], size: int) -> list[list[int]]:
    """Length-sorted batches of sentence indices."""
    order = sorted(range(n), key=lambda i: lengths[i])
    return [order[i:i + size] for i in range(0, n, size)]


def analyse_heads(tr: Translator, sources: Sequence[str], references: Sequence[str], batch_size: int = 32,
                  progress: bool = False) -> dict[str, Any]:
    """Importance, corpus statistics and per-sentence confidence of every head, teacher-forced on the references."""
    model, cfg, tok = tr.model, tr.config, tr.tokenizer
    src_ids = [tr.encode_source(s)[0] for s in sources]
    tgt_ids = [[cfg.bos_id] + tok.encode(r)[: cfg.max_len - 2] + [cfg.eos_id] for r in references]
    counts, h = layer_counts(tr), cfg.n_heads
    gates = {k: torch.ones(n, h, device=tr.device, requires_grad=True) for k, n in counts.items()}
    importance = {k: torch.zeros(n, h) for k, n in counts.items()}
    names = ("entropy", "max_weight", "on_end_token", "on_start_token", "on_previous", "on_same", "on_next")
    sums = {k: {s: torch.zeros(n, h, dtype=torch.float64) for s in names} for k, n in counts.items()}
    agree = torch.zeros(counts["cross"], h, dtype=torch.float64)
    offsets = {k: [[dict() for _ in range(h)] for _ in range(n)] for k, n in counts.items()}  # best-key offsets
    queries = {k: 0 for k in KINDS}
    confidence = {k: torch.zeros(n, h, len(sources)) for k, n in counts.items()}
    was_training = model.training
    model.eval()
    todo = batches(len(sources), [len(s) for s in src_ids], batch_size)
    for rows in tqdm(todo, desc="heads", unit="batch", disable=not progress, file=sys.stderr):
        src = pad_sequences([src_ids[i] for i in rows], cfg.pad_id).to(tr.device)  # (B, S)
        tgt = pad_sequences([tgt_ids[i] for i in rows], cfg.pad_id).to(tr.device)  # (B, T+1)
        out = model(src, tgt[:, :-1], return_attention=True, head_mask=gates)
        logits = out.logits.float()
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=cfg.pad_id)
        for g in gates.values():
            g.grad = None
        loss.backward()
        for k in KINDS:
            importance[k] += gates[k].grad.detach().abs().cpu()
        with torch.no_grad():
            src_real = (src != cfg.pad_id).cpu()  # (B, S)
            dec_real = (tgt[:, :-1] != cfg.pad_id).cpu()  # (B, T)
            attn = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
                    "cross": out.cross_attentions}
            masks = {"encoder": (src_real, src_real), "decoder": (dec_real, dec_real), "cross": (dec_real, src_real)}
            for kind in KINDS:
                q_real, k_real = masks[kind]
                valid = q_real[:, None, :].expand(-1, h, -1)  # (B, H, Q)
                n_q = q_real.sum(1)  # (B,)
                queries[kind] += int(n_q.sum())
                key_len = k_real.sum(1)  # (B,)
                end = key_len - 1  # </s> is the last real source piece; <s> is key 0 of the decoder input
                for layer, a in enumerate(attn[kind]):
                    w = a.detach().float().cpu()  # (B, H, Q, K)
                    ent = -(w * torch.where(w > 0, w.log(), torch.zeros_like(w))).sum(-1)  # (B, H, Q)
                    peak, best = w.max(-1)  # (B, H, Q)
                    qpos = torch.arange(w.size(2))[None, None, :]  # (1, 1, Q)
                    special = end[:, None, None] if kind != "decoder" else torch.zeros_like(end)[:, None, None]
                    idx = special.expand(-1, h, w.size(2))[..., None]  # (B, H, Q, 1)
                    on_special = w.gather(-1, idx)[..., 0]  # (B, H, Q)

                    none = torch.zeros_like(peak)
                    values = {"entropy": ent, "max_weight": peak, "on_previous": diagonal(w, -1, key_len),
                              "on_same": diagonal(w, 0, key_len), "on_next": diagonal(w, 1, key_len),
                              "on_end_token": on_special if kind != "decoder" else none,
                              "on_start_token": on_special if kind == "decoder" else none}
                    for name, v in values.items():
                        sums[kind][name][layer] += (v * valid).sum((0, 2)).double()
                    per_sentence = (peak * valid).sum(2) / n_q[:, None].clamp(min=1)  # (B, H)
                    confidence[kind][layer][:, rows] = per_sentence.T
                    rel = (best - qpos) * valid + (~valid) * 10**6  # (B, H, Q) offsets, padding marked
                    for head in range(h):
                        for r, c in zip(*torch.unique(rel[:, head][valid[:, head]], return_counts=True)):
                            offsets[kind][layer][head][int(r)] = offsets[kind][layer][head].get(int(r), 0) + int(c)
                    if kind == "cross":
                        majority = torch.mode(best, dim=1).values  # (B, Q): the key most heads pick
                        agree[layer] += ((best == majority[:, None, :]) & valid).sum((0, 2)).double()
    model.train(was_training)
    for k in KINDS:
        imp = importance[k]
        importance[k] = imp / imp.norm(dim=-1, keepdim=True).clamp(min=1e-20)  # per layer, l2 over the heads
    stats = {k: {name: (v / max(queries[k], 1)).tolist() for name, v in sums[k].items()} for k in KINDS}
    stats["cross"]["alignment_agreement"] = (agree / max(queries["cross"], 1)).tolist()
    roles = {k: [[role(offsets[k][layer][head], stats[k], layer, head, k) for head in range(h)]
                 for layer in range(counts[k])] for k in KINDS}
    top = {k: [[torch.argsort(confidence[k][layer][head], descending=True)[:5].tolist() for head in range(h)]
                for layer in range(counts[k])] for k in KINDS}
    return {"importance": {k: v.tolist() for k, v in importance.items()}, "importance_note": IMPORTANCE_NOTE,
            "stats": stats, "roles": roles, "role_rules": ROLE_RULES, "most_confident": top}


def diagonal(w: torch.Tensor, offset: int, key_len: torch.Tensor) -> torch.Tensor:
    """``w (B, H, Q, K)`` -> the weight each query puts on key ``query + offset`` ``(B, H, Q)`` (0 where there is
    no such real key)."""
    b, h, q, k = w.shape
    qpos = torch.arange(q)[None, None, :]  # (1, 1, Q)
    cols = (qpos + offset).clamp(0, k - 1).expand(b, h, -1)[..., None]  # (B, H, Q, 1)
    ok = ((qpos + offset >= 0) & (qpos + offset < key_len[:, None, None])).expand(b, h, q)
    return w.gather(-1, cols)[..., 0] * ok


def role(offsets: dict[int, int], stats: dict[str, list], layer: int, head: int, kind: str) -> str:
    """A head's role by Voita et al.'s rules (see ``ROLE_RULES``)."""
    total = sum(offsets.values())
    if total:
        offset, n = max(offsets.items(), key=lambda item: item[1])
        if n / total >= POSITIONAL_SHARE:
            return f"positional ({offset:+d})"
    sink = stats["on_start_token" if kind == "decoder" else "on_end_token"][layer][head]
    return "end-token sink" if sink >= SINK_SHARE else "mixed"


def ranked_heads(importance: dict[str, list], kinds: Sequence[str]) -> list[tuple[str, int, int]]:
    """Heads of ``kinds``, least important first (ties in a fixed order)."""
    heads = [(k, layer, head) for k in kinds for layer, row in enumerate(importance[k]) for head in range(len(row))]
    return sorted(heads, key=lambda x: (importance[x[0]][x[1]][x[2]], KINDS.index(x[0]), x[1], x[2]))


def pruning_curve(tr: Translator, sources: Sequence[str], references: Sequence[str], order: list[tuple[str, int, int]],
                  tgt_lang: str, beam: int, alpha: float, batch_size: int, progress: bool = False) -> list[dict]:
    """BLEU with the first ``n`` heads of ``order`` switched off, for n from 0 to all in steps of at most 10%."""
    total = len(order)
    step = max(1, total // 10)  # whole heads, never more than 10% at a time
    counts = sorted(set(range(0, total, step)) | {total})
    points = []
    for n in tqdm(counts, desc="pruning", disable=not progress, file=sys.stderr):
        mask = head_mask_off(tr, order[:n]) if n else None
        hyps = translate_all(tr, sources, beam, batch_size, alpha, progress=False, head_mask=mask)
        bleu = score(hyps, references, tgt_lang)["bleu"]
        points.append({"fraction": round(n / total, 4), "heads_off": n, "bleu": bleu,
                       "off": [list(h) for h in order[:n]]})
    return points


def run(tr: Translator, sources: Sequence[str], references: Sequence[str], tgt_lang: str, beam: int = 5,
        alpha: float = 0.6, batch_size: int = 64, progress: bool = False) -> dict[str, Any]:
    """Everything ``python -m transformer.heads`` reports, for one model on one split."""
    result = analyse_heads(tr, sources, references, progress=progress)
    pooled = pruning_curve(tr, sources, references, ranked_heads(result["importance"], KINDS), tgt_lang, beam, alpha,
                           batch_size, progress)
    by_type = {k: pruning_curve(tr, sources, references, ranked_heads(result["importance"], [k]), tgt_lang, beam,
                                alpha, batch_size, progress) for k in KINDS}
    result.update(baseline_bleu=pooled[0]["bleu"], pruning=pooled, pruning_by_type=by_type, beam=beam, alpha=alpha,
                  sentences=len(sources))
    return result


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m transformer.heads", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="checkpoints/multi30k-en-de")
    p.add_argument("--data-dir", default="../shared/data/multi30k")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0: all)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    p.add_argument("--out", help="write the JSON object to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        sources, refs = read_parallel(args.data_dir, args.split, args.src, args.tgt)
        tr = load(args.checkpoint, device=args.device)
    except (DataError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.limit > 0:
        sources, refs = sources[: args.limit], refs[: args.limit]
    start = time.perf_counter()
    result = run(tr, sources, refs, args.tgt, args.beam, args.alpha, progress=not args.no_progress)
    result.update(split=args.split, checkpoint=str(args.checkpoint), seconds=round(time.perf_counter() - start, 1))
    print(f"{args.split}: {len(sources)} sentences, baseline BLEU {result['baseline_bleu']:.2f} (beam {args.beam}), "
          f"{result['seconds']} s")
    print(IMPORTANCE_NOTE)
    for point in result["pruning"]:
        print(f"  {point['heads_off']:3d} heads off ({point['fraction']:.0%}): BLEU {point['bleu']:.2f}")
    text = json.dumps(result, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
