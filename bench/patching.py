"""``python -m bench.patching``: what activation patching (``transformer.interpret.patching``) finds, how well its
top sites recover the change together, and what it costs.

Minimal pairs are built without looking at any signal: in each English source of a split, the first word of
:data:`SWAPS` (a noun, a gender or a colour) is swapped for its partner, and the pair is kept when both sides have
the same number of pieces under the model's tokenizer. Each pair is patched with the defaults (the clean source's
translation, the first step where the two translations differ, the edited run's top piece as the foil), every site,
both directions. Then, among the *components* (every head of the three kinds and every ``cross_kv`` site; the
residual streams are cuts that carry everything by construction), the top-k by single-site effect are patched
together and their recovery ``R(k)`` (the effect of the k together) is compared with k sites drawn at random, k drawn
at random with the top-k's count of each kind (kind-matched), and the k with the highest attention weight on the
edited source pieces in the clean run (a cross-attention head or ``cross_kv`` row at the step's query, an encoder
head averaged over its queries; decoder self-attention heads never attend to the source: weight 0). The setting, the
smallest k whose top-k recover 90% of the change (denoise, mean over val's pairs), is chosen on val and reported
once on test_2016_flickr with every k.

``--opus-size`` adds an OPUS-MT-sized Marian model (512 / 6+6 / 8 heads / 2048, 58,101 pieces) with **random
weights** (``bench.marian.marian_dir``; no download; alone when no ``--checkpoint`` is named): the same measures on a
few pairs of test_2016_flickr, the time of one default call (both translations, every site) there, and of patching
every site at step 12 of the clean translation. Times are
CPU seconds of this process (``time.process_time``) and wall seconds, the median call; the CPU seconds of patching
alone (the noise call: the step and pieces given, nothing translated); and of every site at step 12 (20 test pairs).

    python -m bench.patching --checkpoint checkpoints/multi30k-en-de --data-dir ../shared/data/multi30k
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformer import load
from transformer.interpret.patching import DIRECTIONS, patch, prepare

from .common import DEFAULT_CHECKPOINT, DEFAULT_DATA_DIR, args_and_splits, read_sentences

SWAPS = {"noun": (("dog", "cat"), ("car", "bus"), ("ball", "hat"), ("street", "beach"), ("boat", "bike")),
         "gender": (("man", "woman"), ("men", "women"), ("boy", "girl"), ("boys", "girls"), ("he", "she")),
         "colour": (("red", "blue"), ("black", "white"), ("green", "yellow"), ("brown", "gray"), ("pink", "orange"))}
PARTNER = {w: (kind, b if w == a else a) for kind, pairs in SWAPS.items() for a, b in pairs for w in (a, b)}
COMPONENTS = ("enc_head", "cross_kv", "cross_head", "dec_head")
KS = (1, 2, 4, 8, 16)
TARGET_RECOVERY = 0.9
TIMED_STEP = 12  # every site is also timed at this step (a later step costs more) ...
TIMED_PAIRS = 20  # ... on this many test pairs of a checkpoint (all of OPUS-MT size's)
_WORD = re.compile(r"[A-Za-z]+")


def minimal_pairs(tr, sentences: list[str], limit: int) -> list[tuple[str, str, str]]:
    """``(kind, source, edited)``: each sentence's first swappable word swapped (case kept), when both sides have
    the same number of pieces; at most ``limit``."""
    out = []
    for text in sentences:
        for m in _WORD.finditer(text):
            word = m.group(0)
            if word.lower() in PARTNER:
                kind, other = PARTNER[word.lower()]
                other = other.capitalize() if word[0].isupper() else other
                edited = text[:m.start()] + other + text[m.end():]
                if len(tr.encode_source(text)[0]) == len(tr.encode_source(edited)[0]):
                    out.append((kind, text, edited))
                break
        if len(out) >= limit:
            break
    return out


def attention_scores(pair, sites: list[tuple[str, int, int]]) -> np.ndarray:
    """Each component's attention weight on the edited source pieces in the clean run (see the module docstring)."""
    model, step, edited = pair.model, pair.step, pair.edited_positions
    out = model(pair.src[:1], pair.tgt, return_attention=True)
    enc = [a[0][:, :, edited].sum(-1).mean(-1) for a in out.encoder_attentions]  # (H,) per layer: mean over queries
    cross = [a[0, :, step] for a in out.cross_attentions]  # (H, S) per layer, at the step's query
    scores = []
    for kind, layer, index in sites:
        if kind == "enc_head":
            scores.append(float(enc[layer][index]))
        elif kind == "cross_head":
            scores.append(float(cross[layer][index, edited].sum()))
        elif kind == "cross_kv":
            scores.append(float(cross[layer][:, index].mean()))
        else:
            scores.append(0.0)
    return np.array(scores)


@torch.no_grad()
def measure(tr, pairs: list[tuple[str, str, str]], seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Per direction and k, the mean recovery of the top-k components together and of the three baselines; the
    pairs used and skipped; the mean effect of the largest component and how often each kind is the largest; the
    mean ``cross_kv`` effect at the edited pieces per decoder layer (denoise); CPU and wall seconds per call."""
    rng = random.Random(seed)
    rec = {d: {name: {k: [] for k in KS} for name in ("top", "random", "kind_matched", "attention")}
           for d in DIRECTIONS}
    kinds: dict[str, int] = {}
    largest: dict[str, list[float]] = {d: [] for d in DIRECTIONS}  # the largest single component's effect
    cpu, wall, patch_cpu, steps, skipped, used = [], [], [], [], 0, 0
    top_kind = {d: dict.fromkeys(COMPONENTS, 0) for d in DIRECTIONS}  # the kind of each pair's largest component
    at_edit: list[np.ndarray] = []
    for kind, source, edited in pairs:
        c0, w0 = time.process_time(), time.perf_counter()
        r = patch(tr, source, edited)  # the default call: both translations, every site
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        if r.note:
            skipped += 1
            continue
        c0 = time.process_time()
        results = {"denoise": r, "noise": patch(tr, source, edited, target_ids=r.target_ids, step=r.step,
                                                target=r.target, foil=r.foil, direction="noise")}
        patch_cpu.append(time.process_time() - c0)  # every site, nothing translated
        steps.append(r.step)
        used += 1
        kinds[kind] = kinds.get(kind, 0) + 1
        if progress:
            print(f"{used} pairs, {time.process_time():.0f} CPU s", file=sys.stderr, flush=True)
        pair = prepare(tr, source, edited, target_ids=r.target_ids, step=r.step, target=r.target, foil=r.foil)
        sites = [(k, a, b) for k in COMPONENTS for a, b in np.ndindex(r.effect[k].shape)]
        attention = attention_scores(pair, sites)
        edits = r.edited_positions
        at_edit.append(r.effect["cross_kv"][:, edits].sum(-1))  # (L_d,): each decoder layer's reading of the edit
        for direction, res in results.items():
            effect = np.concatenate([res.effect[k].ravel() for k in COMPONENTS])
            largest[direction].append(float(effect.max()))
            top_kind[direction][sites[int(effect.argmax())][0]] += 1
            order = np.argsort(-effect, kind="stable")
            by_attention = np.lexsort((rng.sample(range(len(sites)), len(sites)), -attention))  # ties at random
            rows, names = [], []
            for k in KS:
                top = [sites[i] for i in order[:k]]
                matched = [s for c in COMPONENTS for s in rng.sample([x for x in sites if x[0] == c],
                                                                     sum(t[0] == c for t in top))]
                for name, chosen in (("top", top), ("random", rng.sample(sites, k)), ("kind_matched", matched),
                                     ("attention", [sites[i] for i in by_attention[:k]])):
                    rows.append(chosen)
                    names.append((name, k))
            recovery = pair.effects(pair.metrics(rows, direction), direction)
            for (name, k), value in zip(names, recovery):
                rec[direction][name][k].append(float(value))
    summary = {d: {name: {str(k): round(float(np.mean(v)), 4) if v else None for k, v in by_k.items()}
                   for name, by_k in names_.items()} for d, names_ in rec.items()}
    return {"pairs": used, "skipped_too_small": skipped, "kinds": kinds, "recovery": summary,
            "largest_single_component": {d: round(float(np.mean(v)), 4) if v else None for d, v in largest.items()},
            "largest_component_kind": top_kind,
            "cross_kv_at_the_edit_by_layer": [round(float(x), 4) for x in np.mean(at_edit, axis=0)] if at_edit
            else None,
            "cpu_s_per_call": round(float(np.median(cpu)), 3) if cpu else None,
            "cpu_s_patching_alone": round(float(np.median(patch_cpu)), 3) if patch_cpu else None,
            "mean_step": round(float(np.mean(steps)), 2) if steps else None,
            "wall_s_per_call": round(float(np.median(wall)), 3) if wall else None}


def chosen_k(on_val: dict[str, Any]) -> int:
    """The smallest k whose top-k components recover :data:`TARGET_RECOVERY` of the change on val (denoise), else
    the largest k."""
    top = on_val["recovery"]["denoise"]["top"]
    return next((k for k in KS if top[str(k)] is not None and top[str(k)] >= TARGET_RECOVERY), KS[-1])


def opus_size(sentences: list[str], corpus: list[str], n_pairs: int, seed: int) -> dict[str, Any]:
    """The measures on an OPUS-MT-sized Marian model with random weights (its tokenizer trained on ``corpus``)."""
    from .marian import marian_dir

    with tempfile.TemporaryDirectory(prefix="bench-patching-") as tmp:
        tr = load(marian_dir(Path(tmp), corpus, quick=False), device="cpu")
        pairs = minimal_pairs(tr, sentences, n_pairs)
        patch(tr, *pairs[0][1:], sites="dec_resid")  # warm
        return {"model": "OPUS-MT size (512 / 6+6 / 8 heads / 2048, 58,101 pieces), random weights",
                **at_step(tr, pairs), **measure(tr, pairs, seed)}


@torch.no_grad()
def at_step(tr, pairs: list[tuple[str, str, str]]) -> dict[str, Any]:
    """The median CPU seconds of patching every site at step :data:`TIMED_STEP` of the clean translation (or its
    last step), whatever the metric (random weights barely hear an edit), and the pairs' source lengths."""
    times, lengths = [], []
    for _, source, edited in pairs:
        ids = tr.translate(source).target_ids
        c0 = time.process_time()
        pair = prepare(tr, source, edited, target_ids=ids, step=min(TIMED_STEP, len(ids) - 1))
        pair.metrics([[site] for site in pair.sites()])
        times.append(time.process_time() - c0)
        lengths.append(pair.src.size(1))
    return {f"cpu_s_every_site_at_step_{TIMED_STEP}": round(float(np.median(times)), 3) if times else None,
            "timed_source_pieces": [min(lengths, default=0), max(lengths, default=0)]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.patching", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", action="append",
                   help="repeatable (default: the shipped default model; none with --opus-size)")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    p.add_argument("--val-pairs", type=int, default=50, help="minimal pairs from val choose k")
    p.add_argument("--test-pairs", type=int, default=100, help="minimal pairs from test_2016_flickr")
    p.add_argument("--opus-size", action="store_true", help="also an OPUS-MT-sized model with random weights")
    p.add_argument("--opus-pairs", type=int, default=10)
    p.add_argument("--threads", type=int, default=1, help="(a second thread spin-waits on a busy machine)")
    p.add_argument("--seed", type=int, default=0)
    parsed = args_and_splits(p, argv)
    if parsed is None:
        return 2
    args, val, test = parsed
    began = time.process_time()
    out: dict[str, Any] = {"threads": args.threads, "models": {}}
    for checkpoint in args.checkpoint or ([] if args.opus_size else [str(DEFAULT_CHECKPOINT)]):
        tr = load(Path(checkpoint), device="cpu")
        on_val = measure(tr, minimal_pairs(tr, val, args.val_pairs), args.seed)
        on_test = measure(tr, minimal_pairs(tr, test, args.test_pairs), args.seed)
        out["models"][checkpoint] = {"val": on_val, "k": chosen_k(on_val), "test": on_test,
                                     **at_step(tr, minimal_pairs(tr, test, TIMED_PAIRS))}
    if args.opus_size:
        corpus = (read_sentences(args.data_dir, "train") or [])[:3000] + val
        out["opus_size"] = opus_size(test, corpus, args.opus_pairs, args.seed)
    out["cpu_s"] = round(time.process_time() - began, 1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
