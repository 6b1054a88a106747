"""What the views probe beyond one analysis: masks and positional encodings, training snapshots, and
``transformer.interpret`` (inside a head, value norms, attributions, the logit lens, the beam tree, ALTI+, the flow
graph), all as numpy (no Streamlit here; ``app.analysis.cached`` adds the caches).

Each probe of an analysed sentence is one record of :data:`PROBES` (:class:`Probe`: what runs it, what it costs,
the page's words while it runs, whether it always takes a heavy slot), read by the model handle
(``app.analysis.cached.Model.beyond``), the request's ledger and the views."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import transformer
from transformer import Transformer, Translator
from transformer.checkpoint.files import safetensors_shapes
from transformer.network.kinds import decoder_input
from transformer.network.model import missing_weights

from ..limits import ledger, work
from . import patching
from .inference import Analysis, model_settings, stack_layers


def mask_arrays(tr: Translator, analysis: Analysis, extra_source_pad: int = 0,
                extra_target_pad: int = 0) -> dict[str, np.ndarray]:
    """The model's own masks for this sentence, padded as it would be in a batch with longer sentences.

    Returns bool arrays (True = may attend): ``source_padding`` ``(S',)``, ``encoder`` ``(S', S')``,
    ``causal`` ``(T', T')``, ``decoder`` ``(T', T')`` (padding & causal), ``cross`` ``(T', S')``.
    """
    pad = tr.config.pad_id
    src = torch.tensor([analysis.source_ids + [pad] * extra_source_pad])
    tgt = torch.tensor([decoder_input(tr.config.bos_id, analysis.target_ids) + [pad] * extra_target_pad])
    src_pad = transformer.padding_mask(src, pad)  # (1, 1, 1, S)
    tgt_pad = transformer.padding_mask(tgt, pad)  # (1, 1, 1, T)
    causal = transformer.causal_mask(tgt.size(1))  # (1, 1, T, T)
    s, t = src.size(1), tgt.size(1)
    return {
        "source_padding": src_pad[0, 0, 0].numpy(),
        "target_padding": tgt_pad[0, 0, 0].numpy(),
        "encoder": src_pad.expand(1, 1, s, s)[0, 0].numpy(),
        "causal": causal[0, 0].numpy(),
        "decoder": transformer.decoder_self_mask(tgt, pad)[0, 0].numpy(),
        "cross": src_pad.expand(1, 1, t, s)[0, 0].numpy(),
    }


def positional_table(length: int, d_model: int) -> np.ndarray:
    """``transformer.positional_encoding`` as numpy ``(length, d_model)``."""
    return transformer.positional_encoding(length, d_model).numpy()


def model_pe(tr: Translator) -> np.ndarray:
    """The model's own positional-encoding buffer ``(max_len, d_model)``."""
    return tr.model.pe.detach().float().cpu().numpy()


def embedding_norms(tr: Translator, ids: list[int]) -> np.ndarray:
    """Length of each token's embedding as the model adds it to the encoding: ``‖E[id]‖ · √d_model`` (the model's
    ``embedding_scale``: 1 for a family that does not scale, e.g. ``scale_embedding=False``)."""
    weight = tr.model.src_embed.weight.detach().float().cpu()
    return (weight[torch.tensor(ids, dtype=torch.long)].norm(dim=-1) * tr.model.embedding_scale).numpy()


EMBEDDING_BLOCK = 16_384  # rows of the embedding table converted to float32 at a time


def vocab_embedding_norms(tr: Translator) -> np.ndarray:
    """``‖E[id]‖ · √d_model`` (the model's ``embedding_scale``) for the whole vocabulary (padding excluded), in
    float32, a block of rows at a time (no float32 copy of the whole table: 2.1 GB at NLLB-200-3.3B's 256,206 x
    2,048, twice over before)."""
    weight = tr.model.src_embed.weight.detach()
    with torch.no_grad():
        norms = torch.cat([block.float().norm(dim=-1) for block in weight.split(EMBEDDING_BLOCK)]).cpu()  # (V,)
    pad = tr.config.pad_id
    return (torch.cat([norms[:pad], norms[pad + 1:]]) * tr.model.embedding_scale).numpy()


def list_snapshots(tr: Translator) -> list[Path]:
    """Training snapshots shipped with the checkpoint (``snapshots/stepNNNNNNN.safetensors``), oldest first."""
    if tr.path is None:
        return []
    folder = Path(tr.path) / "snapshots"
    if not folder.is_dir():
        return []
    return sorted(folder.glob("step*.safetensors"), key=snapshot_step)


def snapshot_step(path: Path | str) -> int:
    """The training step in a snapshot's file name (``step0000038.safetensors`` -> 38)."""
    match = re.search(r"step([0-9]+)", Path(path).name)
    return int(match.group(1)) if match else -1


def load_snapshot_model(tr: Translator, path: Path | str) -> Transformer:
    """A copy of the model with a snapshot's weights (tied embeddings are stored once, as ``src_embed.weight``)."""
    from safetensors.torch import load_file

    safetensors_shapes(Path(path))  # a regular file (a FIFO never blocks), its header within MAX_HEADER_BYTES
    model = copy.deepcopy(tr.model)
    try:
        state = load_file(str(path), device="cpu")
        missing, unexpected = model.load_state_dict(state, strict=False)
    except Exception as err:  # a corrupt or mismatched file: one clear message
        raise transformer.CheckpointError(f"snapshot {Path(path).name} could not be loaded: {err}") from err
    absent = missing_weights(tr.config, missing)
    if unexpected or absent:
        raise transformer.CheckpointError(f"snapshot {Path(path).name} does not match the model "
                                          f"(missing {sorted(absent)[:3]}, unexpected {unexpected[:3]})")
    return model.to(tr.device).eval()


@torch.no_grad()
def snapshot_attentions(tr: Translator, model: Transformer, source_ids: list[int],
                        target_ids: list[int]) -> tuple[dict[str, np.ndarray], str]:
    """A snapshot's attentions on the final model's translation (teacher-forced, so the axes match),
    and the snapshot's own greedy translation."""
    snap = Translator(model, tr.tokenizer, tr.metadata, tr.path)
    out = snap.attentions(source_ids, target_ids[:-1])
    outputs, _ = snap.generate([source_ids], beam_size=1)
    attn = {kind: stack_layers(layers) for kind, layers in out.attentions().items()}
    return attn, tr.tokenizer.decode(outputs[0])


def _pair(tr: Translator, analysis: Analysis) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src (1, S), tgt (1, T), labels (1, T))`` of an analysed sentence on the model's device."""
    src = torch.tensor([analysis.source_ids], device=tr.device)
    tgt = torch.tensor([decoder_input(tr.config.bos_id, analysis.target_ids)], device=tr.device)
    return src, tgt, torch.tensor([analysis.target_ids], device=tr.device)


def inside_head(tr: Translator, analysis: Analysis, kind: str, layer: int, head: int, query: int) -> dict:
    """``transformer.interpret.head_computation`` for one query of the analysed sentence, as numpy (0-based)."""
    from transformer.interpret import head_computation

    src, tgt, _ = _pair(tr, analysis)
    hc = head_computation(tr.model, src, tgt, kind, layer, head, query)
    return {name: (value.detach().float().cpu().numpy() if isinstance(value, torch.Tensor) else value)
            for name, value in hc.__dict__.items()}


def norm_attentions(tr: Translator, analysis: Analysis) -> dict[str, np.ndarray]:
    """Kobayashi et al.'s ``||alpha v W_O||`` per type, ``(layers, heads, Q, K)`` like the weights."""
    from transformer.interpret import value_norms

    src, tgt, _ = _pair(tr, analysis)
    norms = value_norms(tr.model, src, tgt)
    return {"encoder": stack_layers(norms.encoder_attentions), "decoder": stack_layers(norms.decoder_attentions),
            "cross": stack_layers(norms.cross_attentions)}


def attributions(tr: Translator, analysis: Analysis, method: str, steps: int = 32,
                 span: tuple[int, int] | None = None, max_batch_bytes: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
    """Attribution of each output piece's log-probability: ``source (T', S)``, ``target (T', T)`` for the output
    pieces of ``span`` (``(first, end)``; default all, T' = T), and each cross head's agreement with it
    ``(layers, heads)`` over those pieces; ``progress(done, total)`` after each pass through the model, each pass
    holding at most ``max_batch_bytes``."""
    from transformer.interpret import attention_attribution_agreement, attribute

    src, tgt, labels = _pair(tr, analysis)
    first, end = span or (0, tgt.size(1))
    source, target = attribute(tr.model, src, tgt, labels, method=method, steps=steps, progress=progress,
                               max_batch_bytes=max_batch_bytes, output_span=(first, end),
                               workers=ledger.HEAVY.threads())  # the cores no other heavy job holds
    cross = [torch.from_numpy(a[:, first:end]) for a in analysis.cross]  # (H, T', S) per layer
    agreement = attention_attribution_agreement(cross, source[0].cpu())
    return {"source": source[0].cpu().numpy(), "target": target[0].cpu().numpy(), "agreement": agreement.numpy(),
            "span": np.array([first, end])}


def alti(tr: Translator, analysis: Analysis, max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """``transformer.interpret.contributions`` (ALTI+) of the analysed sentence as numpy: ``source (T, S)``,
    ``target (T, T)`` (the decoder input), ``source_share (T,)``, ``encoder (S, S)``, and per decoder layer
    ``cross_layers (L, T, S)`` and ``cross_residual (L, T)``; the terms held at once within ``max_bytes``."""
    from transformer.interpret import contributions

    src, tgt, _ = _pair(tr, analysis)
    c = contributions(tr.model, src, tgt, max_bytes=max_bytes)
    return {"source": c.source[0].cpu().numpy(), "target": c.target[0].cpu().numpy(),
            "source_share": c.source_share[0].cpu().numpy(), "encoder": c.encoder[0].cpu().numpy(),
            "cross_layers": torch.stack(c.cross_layers)[:, 0].cpu().numpy(),
            "cross_residual": torch.stack(c.cross_residual)[:, 0].cpu().numpy()}


def flow(tr: Translator, analysis: Analysis, max_bytes: int | None = None) -> Any:
    """``transformer.interpret.flow`` of the analysed sentence, its arrays as numpy (batch axis of 1 kept, so its
    ``graph`` works as it is); the per-term vectors held at once within ``max_bytes``."""
    from transformer.interpret import Flow, flow

    src, tgt, _ = _pair(tr, analysis)
    f = flow(tr.model, src, tgt, max_bytes=max_bytes)
    as_numpy = lambda parts: {k: tuple(t.float().cpu().numpy() for t in v) for k, v in parts.items()}  # noqa: E731
    return Flow(as_numpy(f.heads), as_numpy(f.residual), as_numpy(f.ffn))


def flow_head(tr: Translator, analysis: Analysis, kind: str, layer: int, head: int, query: int,
              k: int = 8) -> dict[str, Any]:
    """One head at one query (0-based): its attention ``row (K,)``, and the ``k`` pieces its output promotes and
    suppresses (through the final norm and the output embedding, ``transformer.interpret.head_logits``), as
    ``(piece, logit)`` pairs, strongest first."""
    from transformer.interpret import head_logits, head_output

    src, tgt, _ = _pair(tr, analysis)
    row, vector = head_output(tr.model, src, tgt, kind, layer, head, query)
    logits = head_logits(tr.model, vector).float().cpu()  # (V,)
    k = min(k, logits.numel())
    top, bottom = logits.topk(k), (-logits).topk(k)
    named = lambda ids, values: [(tr.tokenizer.pieces([int(i)])[0], float(v)) for i, v in zip(ids, values)]  # noqa
    return {"row": row.float().cpu().numpy(), "promoted": named(top.indices, top.values),
            "suppressed": named(bottom.indices, -bottom.values)}


def lens(tr: Translator, analysis: Analysis, k: int = 5) -> dict[str, np.ndarray]:
    """The logit lens: per decoder layer and step, the top-k next pieces ``ids``/``probs`` ``(L, T, k)``, and the
    rank and probability of the piece the model produced, ``rank``/``chosen`` ``(L, T)``."""
    from transformer.interpret import logit_lens_chosen

    src, tgt, labels = _pair(tr, analysis)
    top, chosen, rank = logit_lens_chosen(tr.model, src, tgt, labels, k=min(k, tr.config.tgt_vocab_size))
    probs = np.stack([p[0].cpu().numpy() for p, _ in top])  # (L, T, k)
    ids = np.stack([i[0].cpu().numpy() for _, i in top])  # (L, T, k)
    return {"probs": probs, "ids": ids, "labels": labels[0].cpu().numpy(), "rank": rank[:, 0].cpu().numpy(),
            "chosen": chosen[:, 0].cpu().numpy()}  # rank, chosen: (L, T)


def beam_tree(tr: Translator, analysis: Analysis) -> Any:
    """The analysed sentence's beam search tree (None for greedy search), recorded by the ``"gnmt"`` rules, the
    only ones that record one (the Beam tree view says so for a model scored by other rules)."""
    s = analysis.settings
    if s.beam_size <= 1:
        return None
    gnmt = model_settings(tr, s).but(scoring="gnmt")
    return tr.translate(analysis.text, gnmt, return_attention=False, return_tree=True).tree


# ------------------------------------------------------------------------------------------------ the records


@dataclass(frozen=True)
class Probe:
    """One probe of an analysed sentence, described once: ``run(tr, analysis, *args, **progress)`` makes its result,
    ``cost(tr, analysis, *args)`` is its estimate in work units (:mod:`app.limits.work`, counted against the
    request's work), ``working`` the page's words while it runs in a heavy slot, and ``heavy`` whether it always
    takes one (else only once the request's work is no longer light, ``app.limits.ledger.is_light``)."""

    run: Callable[..., Any]
    cost: Callable[..., float]
    working: str = "Working…"
    heavy: bool = False


def _forced(tr: Translator, a: Analysis, *args: Any) -> float:
    """One teacher-forced pass over the analysed sentence (inside a head, value norms, one head's row)."""
    return work.forced_work(tr, len(a.source_ids), len(a.target_ids))


def _attributions_cost(tr: Translator, a: Analysis, method: str, steps: int, span: tuple[int, int] | None,
                       *rest: Any) -> float:
    first, end = span or (0, len(a.target_ids))
    return work.attribution_work(work.parameters(tr), len(a.source_ids), len(a.target_ids), end - first, method, steps)


def _patching_cost(tr: Translator, a: Analysis, *args: Any) -> float:
    return work.patching_work(tr, len(a.source_ids), len(a.target_ids), a.settings)


def _beam_tree_cost(tr: Translator, a: Analysis) -> float:
    """The search again with its tree recorded (nothing for greedy search, which has none)."""
    return work.translation_work(tr, len(a.source_ids), a.settings) if a.settings.beam_size > 1 else 0.0


PROBES: dict[str, Probe] = {
    "inside_head": Probe(inside_head, _forced),
    "norms": Probe(norm_attentions, _forced),
    "flow_head": Probe(flow_head, _forced),
    "attributions": Probe(attributions, _attributions_cost, "Attributing…", heavy=True),
    "beam_tree": Probe(beam_tree, _beam_tree_cost, "Recording the beam search…", heavy=True),
    "lens": Probe(lens, lambda tr, a, *args: work.lens_work(tr, len(a.source_ids), len(a.target_ids)),
                  "Reading every layer's predictions…"),
    "alti": Probe(alti, lambda tr, a, *args: work.alti_work(tr, len(a.source_ids), len(a.target_ids)),
                  "Measuring the contributions (ALTI+)…", heavy=True),
    "flow": Probe(flow, lambda tr, a, *args: work.flow_work(tr, len(a.source_ids), len(a.target_ids)),
                  "Following the information through every head…", heavy=True),
    "patching": Probe(patching.run, _patching_cost, "Patching every layer, position and head…"),
}
