"""The model work behind the explorer (no Streamlit here; ``app.cached`` adds the caches).

Everything the page draws comes out of :func:`analyse` as plain numpy arrays and lists in an
:class:`Analysis`, so it can be cached, pickled, exported and checked against the model.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import transformer
from transformer import Transformer, Translator

from .analysis import KINDS


def _repo_root() -> Path:
    """Where ``checkpoints/`` lives: the source tree this package sits in (a checkout, ``pip install -e``), else
    the working directory (an installed package, as in the Space image, started from the app's folder)."""
    source = Path(__file__).resolve().parents[1]
    return source if (source / "checkpoints").is_dir() or not (Path.cwd() / "checkpoints").is_dir() else Path.cwd()


REPO_ROOT = _repo_root()
DEFAULT_CHECKPOINT = "checkpoints/multi30k-en-de"
TOP_K = 10
MAX_INPUT_CHARS = 5000

HeadKey = tuple[str, int, int]  # (kind, layer, head), 0-based

@dataclass(frozen=True)
class DecodeSettings:
    """Decoding settings; ``beam_size`` 1 is greedy search. Maximum output length = ``a * source + b``."""

    beam_size: int = 4
    alpha: float = 0.6
    max_len_a: float = 1.5
    max_len_b: int = 10


@dataclass
class Analysis:
    """One translated sentence with every attention weight, ``(layers, heads, queries, keys)`` per type,
    and the top-k next-token candidates of each output step (teacher-forced over the translation)."""

    text: str
    translation: str
    score: float
    source_tokens: list[str]
    target_tokens: list[str]  # output pieces, </s> last unless cut at the limit; query t produced target_tokens[t]
    decoder_input_tokens: list[str]  # <s> + outputs: the keys of decoder self-attention
    source_ids: list[int]
    target_ids: list[int]
    truncated: bool
    source_pieces: int  # pieces before truncation
    unknown_pieces: int
    encoder: np.ndarray
    decoder: np.ndarray
    cross: np.ndarray
    topk_tokens: list[list[str]]
    topk_ids: np.ndarray
    topk_probs: np.ndarray
    chosen_probs: np.ndarray
    settings: DecodeSettings = field(default_factory=DecodeSettings)
    ablated: tuple[HeadKey, ...] = ()
    seconds: float = 0.0
    device: str = "cpu"

    def attention(self, kind: str) -> np.ndarray:
        """``(layers, heads, Q, K)`` of ``"encoder"``, ``"decoder"`` or ``"cross"``."""
        return {"encoder": self.encoder, "decoder": self.decoder, "cross": self.cross}[kind]

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of an attention type."""
        if kind == "encoder":
            return self.source_tokens, self.source_tokens
        if kind == "decoder":
            return self.target_tokens, self.decoder_input_tokens
        return self.target_tokens, self.source_tokens

    def special_keys(self) -> dict[str, int | None]:
        """Key index of ``</s>`` (source keys) and ``<s>`` (decoder keys), for the head table."""
        return {"encoder": len(self.source_tokens) - 1, "cross": len(self.source_tokens) - 1, "decoder": 0}


# ----------------------------------------------------------------------------------------------- loading


def resolve_checkpoint(checkpoint: str) -> str:
    """A relative directory is looked up from the working directory, then from the repository root; a name
    under one of the repository's folders (``checkpoints/...``) stays a path even when it does not exist."""
    checkpoint = checkpoint.strip()
    path = Path(checkpoint).expanduser()
    if path.is_absolute() or path.exists() or not path.parts:
        return checkpoint
    if (REPO_ROOT / path).exists() or path.parts[0] == "checkpoints" or (REPO_ROOT / path.parts[0]).is_dir():
        return str(REPO_ROOT / path)  # a path of this repository (existing or mistyped), never a Hub id
    return checkpoint


def needs_download(checkpoint: str) -> bool:
    """Whether loading ``checkpoint`` would download it: a Hub id (not a local directory) whose files are not in the
    local Hugging Face cache yet (looked up on disk only)."""
    from transformer.checkpoint import looks_like_hub_id

    name = resolve_checkpoint(checkpoint)
    if not name or Path(name).expanduser().exists() or not looks_like_hub_id(name):
        return False
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(repo_id=name, local_files_only=True)
        return False
    except Exception:  # not cached (or any other lookup failure): the download will say what is wrong
        return True


def download(checkpoint: str, progress: Callable[[int, int, str], None]) -> None:
    """Fetch a Hub checkpoint into the local cache, telling ``progress(done_bytes, total_bytes, file)``; raises
    ``transformer.CheckpointError`` (too large, unknown, offline) with a clear message."""
    from transformer.checkpoint import resolve_checkpoint_dir

    resolve_checkpoint_dir(resolve_checkpoint(checkpoint), progress)


def load_translator(checkpoint: str, device: str) -> Translator:
    """Load a checkpoint directory or Hub repo id on ``device`` (resolved by ``transformer.load``: ``"auto"`` takes
    CUDA when present); raises ``transformer.CheckpointError`` with a clear message."""
    if not checkpoint.strip():
        raise transformer.CheckpointError("no checkpoint named: give a directory or a Hugging Face Hub repo id")
    tr = transformer.load(resolve_checkpoint(checkpoint), device=device)  # "auto" resolved there
    tr.model.eval()
    return tr


def model_facts(tr: Translator) -> dict[str, object]:
    """Sizes and scores for the sidebar (scores from the model card, ``metadata.json``)."""
    cfg = tr.config
    facts: dict[str, object] = {
        "d_model": cfg.d_model, "heads": cfg.n_heads, "encoder layers": cfg.n_encoder_layers,
        "decoder layers": cfg.n_decoder_layers, "d_ff": cfg.d_ff, "vocabulary": cfg.tgt_vocab_size,
        "max tokens": cfg.max_len, "parameters": f"{tr.model.num_parameters():,}", "device": str(tr.device),
    }
    meta = tr.metadata or {}
    if meta.get("language_pair"):
        facts["languages"] = str(meta["language_pair"])
    return facts


def model_scores(tr: Translator) -> dict[str, float]:
    """Numeric scores in the model card: validation (``final_validation``) and any test scores."""
    meta = tr.metadata or {}
    scores: dict[str, float] = {}
    for key, value in (meta.get("final_validation") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key.startswith("val"):
            scores[key.replace("_", " ")] = float(value)
    for key, value in meta.items():
        if "test" in key.lower():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                scores[key.replace("_", " ")] = float(value)
            elif isinstance(value, dict):
                for k2, v2 in value.items():
                    if isinstance(v2, (int, float)) and not isinstance(v2, bool):
                        scores[f"{key} {k2}".replace("_", " ")] = float(v2)
    return scores


def model_card(tr: Translator, limit: int = 20_000) -> str | None:
    """The checkpoint's ``README.md`` (its model card) without YAML front matter, or None."""
    if tr.path is None or not (Path(tr.path) / "README.md").is_file():
        return None
    try:
        text = (Path(tr.path) / "README.md").read_text(encoding="utf-8", errors="replace")[:limit]
    except OSError:
        return None
    if text.startswith("---"):
        end = text.find("\n---", 3)
        text = text[end + 4:] if end != -1 else text
    return text.strip() or None


# ----------------------------------------------------------------------------------------------- translating


def all_heads(tr: Translator) -> list[HeadKey]:
    """Every head of the model as ``(kind, layer, head)``."""
    cfg = tr.config
    layers = {"encoder": cfg.n_encoder_layers, "decoder": cfg.n_decoder_layers, "cross": cfg.n_decoder_layers}
    return [(kind, layer, head) for kind in KINDS for layer in range(layers[kind]) for head in range(cfg.n_heads)]


def build_head_mask(tr: Translator, ablated: tuple[HeadKey, ...]) -> dict[str, torch.Tensor] | None:
    """``head_mask`` for the model: 1 everywhere, 0 for each ablated head; None when nothing is ablated."""
    if not ablated:
        return None
    cfg = tr.config
    layers = {"encoder": cfg.n_encoder_layers, "decoder": cfg.n_decoder_layers, "cross": cfg.n_decoder_layers}
    masks = {kind: torch.ones(layers[kind], cfg.n_heads, device=tr.device) for kind in KINDS}
    for kind, layer, head in ablated:
        if kind not in masks or not (0 <= layer < layers[kind]) or not (0 <= head < cfg.n_heads):
            raise ValueError(f"no head {kind} layer {layer + 1} head {head + 1} in this model")
        masks[kind][layer, head] = 0.0
    return masks


def _stack(attns: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Per-layer ``(1, H, Q, K)`` tensors -> ``(L, H, Q, K)`` float32 numpy."""
    return torch.stack([a[0].float().cpu() for a in attns]).numpy()


@torch.no_grad()
def analyse(tr: Translator, text: str, settings: DecodeSettings = DecodeSettings(),
            ablated: tuple[HeadKey, ...] = (), top_k: int = TOP_K) -> Analysis:
    """Translate ``text`` and collect every attention weight and the per-step candidates."""
    start = time.perf_counter()
    head_mask = build_head_mask(tr, ablated)
    pieces = tr.tokenizer.encode(text)
    result = tr.translate(text, beam_size=settings.beam_size, alpha=settings.alpha, max_len_a=settings.max_len_a,
                          max_len_b=settings.max_len_b, return_attention=False, head_mask=head_mask)
    out_ids = result.target_ids[:-1]  # the decoder input after BOS (target_ids ends in EOS unless cut)
    out = tr.attentions(result.source_ids, out_ids, head_mask)
    probs = out.logits[0].float().softmax(dim=-1)  # (T, V)
    top_p, top_i = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    chosen = probs.gather(1, torch.tensor(result.target_ids, device=probs.device)[:, None])[:, 0]
    top_i_list = top_i.cpu().tolist()
    return Analysis(
        text=text, translation=result.text, score=float(result.score), source_tokens=list(result.source_tokens),
        target_tokens=list(result.target_tokens), decoder_input_tokens=list(result.decoder_input_tokens),
        source_ids=list(result.source_ids), target_ids=list(result.target_ids), truncated=bool(result.truncated),
        source_pieces=len(pieces), unknown_pieces=sum(1 for i in result.source_ids if i == tr.tokenizer.unk_id),
        encoder=_stack(out.encoder_attentions), decoder=_stack(out.decoder_attentions),
        cross=_stack(out.cross_attentions), topk_tokens=[tr.tokenizer.pieces(row) for row in top_i_list],
        topk_ids=np.asarray(top_i_list, dtype=np.int64), topk_probs=top_p.cpu().numpy().astype(np.float32),
        chosen_probs=chosen.cpu().numpy().astype(np.float32), settings=settings, ablated=tuple(ablated),
        seconds=time.perf_counter() - start, device=str(tr.device),
    )


@torch.no_grad()
def forced_logprob(tr: Translator, source_ids: list[int], target_ids: list[int],
                   ablated: tuple[HeadKey, ...] = ()) -> float:
    """Sum of log-probabilities of a fixed translation (``target_ids``, EOS included if produced), teacher-forced,
    with the ``ablated`` heads switched off."""
    out = tr.attentions(source_ids, target_ids[:-1], build_head_mask(tr, ablated))
    logp = out.logits[0].float().log_softmax(dim=-1)
    ids = torch.tensor(target_ids, device=logp.device)[:, None]
    return float(logp.gather(1, ids).sum())


# ----------------------------------------------------------------------------------------------- masks, encodings


def mask_arrays(tr: Translator, analysis: Analysis, extra_source_pad: int = 0,
                extra_target_pad: int = 0) -> dict[str, np.ndarray]:
    """The model's own masks for this sentence, padded as it would be in a batch with longer sentences.

    Returns bool arrays (True = may attend): ``source_padding`` ``(S',)``, ``encoder`` ``(S', S')``,
    ``causal`` ``(T', T')``, ``decoder`` ``(T', T')`` (padding & causal), ``cross`` ``(T', S')``.
    """
    pad = tr.config.pad_id
    src = torch.tensor([analysis.source_ids + [pad] * extra_source_pad])
    tgt = torch.tensor([[tr.config.bos_id] + analysis.target_ids[:-1] + [pad] * extra_target_pad])
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
    """Length of each token's embedding as the model adds it to the encoding: ``‖E[id]‖ · √d_model``."""
    weight = tr.model.src_embed.weight.detach().float().cpu()
    return (weight[torch.tensor(ids, dtype=torch.long)].norm(dim=-1) * math.sqrt(tr.config.d_model)).numpy()


def vocab_embedding_norms(tr: Translator) -> np.ndarray:
    """``‖E[id]‖ · √d_model`` for the whole vocabulary (padding excluded)."""
    weight = tr.model.src_embed.weight.detach().float().cpu()
    keep = torch.ones(weight.size(0), dtype=torch.bool)
    keep[tr.config.pad_id] = False
    return (weight[keep].norm(dim=-1) * math.sqrt(tr.config.d_model)).numpy()


# ----------------------------------------------------------------------------------------------- snapshots


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
    match = re.search(r"step(\d+)", Path(path).name)
    return int(match.group(1)) if match else -1


def load_snapshot_model(tr: Translator, path: Path | str) -> Transformer:
    """A copy of the model with a snapshot's weights (tied embeddings are stored once, as ``src_embed.weight``)."""
    from safetensors.torch import load_file

    model = copy.deepcopy(tr.model)
    try:
        state = load_file(str(path), device="cpu")
        missing, unexpected = model.load_state_dict(state, strict=False)
    except Exception as err:  # a corrupt or mismatched file: one clear message
        raise transformer.CheckpointError(f"snapshot {Path(path).name} could not be loaded: {err}") from err
    tied = {"tgt_embed.weight", "generator.weight"} if tr.config.share_embeddings else set()
    if unexpected or set(missing) - tied:
        raise transformer.CheckpointError(f"snapshot {Path(path).name} does not match the model "
                                          f"(missing {sorted(set(missing) - tied)[:3]}, unexpected {unexpected[:3]})")
    return model.to(tr.device).eval()


@torch.no_grad()
def snapshot_attentions(tr: Translator, model: Transformer, source_ids: list[int],
                        target_ids: list[int]) -> tuple[dict[str, np.ndarray], str]:
    """A snapshot's attentions on the final model's translation (teacher-forced, so the axes match),
    and the snapshot's own greedy translation."""
    snap = Translator(model, tr.tokenizer, tr.metadata, tr.path)
    out = snap.attentions(source_ids, target_ids[:-1])
    outputs, _ = snap.generate([source_ids], beam_size=1)
    attn = {"encoder": _stack(out.encoder_attentions), "decoder": _stack(out.decoder_attentions),
            "cross": _stack(out.cross_attentions)}
    return attn, tr.tokenizer.decode(outputs[0])


# ----------------------------------------------------------------------------------------------- export


def export_json(analysis: Analysis, checkpoint: str = "") -> str:
    """Tokens, translation, settings and every attention weight as JSON (nested lists)."""
    payload = {
        "checkpoint": checkpoint, "source": analysis.text, "translation": analysis.translation,
        "score": analysis.score, "settings": analysis.settings.__dict__,
        "ablated_heads": [{"type": k, "layer": layer + 1, "head": h + 1} for k, layer, h in analysis.ablated],
        "source_tokens": analysis.source_tokens, "target_tokens": analysis.target_tokens,
        "decoder_input_tokens": analysis.decoder_input_tokens,
        "layout": "attention[type][layer][head][query][key]; decoder query t produced target_tokens[t]",
        "attention": {kind: np.round(analysis.attention(kind).astype(np.float64), 6).tolist() for kind in KINDS},
    }
    return json.dumps(payload, ensure_ascii=False)


def export_npz(analysis: Analysis) -> bytes:
    """Every attention array ``(layers, heads, Q, K)`` plus the tokens, as a compressed ``.npz``."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf, encoder=analysis.encoder, decoder=analysis.decoder, cross=analysis.cross,
        source_tokens=np.asarray(analysis.source_tokens), target_tokens=np.asarray(analysis.target_tokens),
        decoder_input_tokens=np.asarray(analysis.decoder_input_tokens),
        source_ids=np.asarray(analysis.source_ids), target_ids=np.asarray(analysis.target_ids),
    )
    return buf.getvalue()


def split_sentences(text: str, language: str = "en", limit: int = 100) -> list[str]:
    """The sentences of ``text`` (sentencex, a maintained rule-based splitter), stripped, at most ``limit``."""
    from sentencex import segment

    try:
        parts = [s.strip() for s in segment(language, text)]
    except Exception:  # an unknown language code: the generic rules
        parts = [s.strip() for s in segment("en", text)]
    return [s for s in parts if s][:limit] or [text.strip()]


@functools.lru_cache(maxsize=1)
def _language_identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_language(text: str, min_words: int = 4, min_probability: float = 0.9) -> tuple[str, float] | None:
    """(language code, probability) of ``text`` when py3langid is confident, else None (short text is unreliable)."""
    if len(text.split()) < min_words:
        return None
    language, probability = _language_identifier().classify(text)
    return (str(language), float(probability)) if probability >= min_probability else None


def translate_sentences(tr: Translator, sentences: list[str], settings: DecodeSettings) -> list[str]:
    """Plain translations of several sentences (one batch)."""
    results = tr.translate_batch(sentences, beam_size=settings.beam_size, alpha=settings.alpha,
                                 max_len_a=settings.max_len_a, max_len_b=settings.max_len_b)
    return [r.text for r in results]


@dataclass(frozen=True)
class CheckpointInfo:
    """A checkpoint directory under ``checkpoints/`` as the model picker lists it."""

    path: str  # as typed in the picker, e.g. "checkpoints/multi30k-en-de"
    language_pair: str
    layout: str  # "post-norm" (the paper) or "pre-norm"
    test_bleu: float | None
    problem: str | None  # why it cannot be opened, or None

    def label(self) -> str:
        """``"multi30k-en-de · en-de · post-norm · test BLEU 38.6"``."""
        bleu = f" · test BLEU {self.test_bleu:.1f}" if self.test_bleu is not None else ""
        return f"{Path(self.path).name} · {self.language_pair or '?'} · {self.layout}{bleu}"


def list_checkpoints() -> list[CheckpointInfo]:
    """Every directory under the repository's ``checkpoints/``, checked without loading the weights."""
    from transformer.checkpoint import check_checkpoint_dir

    root = REPO_ROOT / "checkpoints"
    found: list[CheckpointInfo] = []
    for folder in sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []:
        meta: dict = {}
        with contextlib.suppress(OSError, ValueError):  # no or unreadable metadata: listed without scores
            meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
        meta = meta if isinstance(meta, dict) else {}
        test = meta.get("test_2016_flickr")
        bleu = test.get("bleu") if isinstance(test, dict) and isinstance(test.get("bleu"), (int, float)) else None
        try:
            config = check_checkpoint_dir(folder)
            layout, problem = ("pre-norm" if config.norm_first else "post-norm"), None
        except transformer.CheckpointError as err:
            layout, problem = "?", str(err)
        found.append(CheckpointInfo(f"checkpoints/{folder.name}", str(meta.get("language_pair", "")), layout,
                                    float(bleu) if bleu is not None else None, problem))
    return found


def load_heads(path: str | Path | None) -> dict | None:
    """The checkpoint's ``heads.json``, or None."""
    if path is None or not (Path(path) / "heads.json").is_file():
        return None
    try:
        data = json.loads((Path(path) / "heads.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "importance" in data else None


OPUS_MT = [f"Helsinki-NLP/opus-mt-{pair}" for pair in ("en-de", "de-en", "en-fr", "fr-en", "en-es", "es-en")]


def public_mode() -> bool:
    """``ATTN_PUBLIC=1``: the hosted demo (only the allow-listed models, no free-form field)."""
    return os.environ.get("ATTN_PUBLIC", "").strip().lower() in ("1", "true", "yes", "on")


def allowed_models() -> list[str]:
    """The models a public server offers: ``$ATTN_MODELS`` (comma-separated directories and Hub ids), else the
    default checkpoint, every checkpoint directory shipped under ``checkpoints/`` and the suggested OPUS-MT ids."""
    listed = [m.strip() for m in os.environ.get("ATTN_MODELS", "").split(",") if m.strip()]
    if listed:
        return list(dict.fromkeys(listed))
    root = REPO_ROOT / "checkpoints"
    shipped = [f"checkpoints/{p.name}" for p in sorted(root.glob("*")) if p.is_dir()] if root.is_dir() else []
    return list(dict.fromkeys([default_checkpoint(), *shipped, *OPUS_MT]))


def model_allowed(checkpoint: str) -> bool:
    """Whether this server may open ``checkpoint`` (always, unless in public mode)."""
    return not public_mode() or checkpoint.strip() in allowed_models()


# ----------------------------------------------------------------------------------------------- beyond weights


def _pair(tr: Translator, analysis: Analysis) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(src (1, S), tgt (1, T), labels (1, T))`` of an analysed sentence on the model's device."""
    src = torch.tensor([analysis.source_ids], device=tr.device)
    tgt = torch.tensor([[tr.config.bos_id, *analysis.target_ids[:-1]]], device=tr.device)
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
    return {"encoder": _stack(norms.encoder_attentions), "decoder": _stack(norms.decoder_attentions),
            "cross": _stack(norms.cross_attentions)}


def attributions(tr: Translator, analysis: Analysis, method: str, steps: int = 32) -> dict[str, np.ndarray]:
    """Attribution of each output piece's log-probability: ``source (T, S)``, ``target (T, T)``, and each cross
    head's agreement with it ``(layers, heads)``."""
    from transformer.interpret import attention_attribution_agreement, attribute

    src, tgt, labels = _pair(tr, analysis)
    source, target = attribute(tr.model, src, tgt, labels, method=method, steps=steps)
    agreement = attention_attribution_agreement([torch.from_numpy(a) for a in analysis.cross], source[0].cpu())
    return {"source": source[0].cpu().numpy(), "target": target[0].cpu().numpy(), "agreement": agreement.numpy()}


def lens(tr: Translator, analysis: Analysis, k: int = 5) -> dict[str, np.ndarray]:
    """The logit lens: per decoder layer and step, the top-k next pieces ``ids``/``probs`` ``(L, T, k)``, and the
    rank and probability of the piece the model produced, ``rank``/``chosen`` ``(L, T)``."""
    from transformer.interpret import logit_lens

    src, tgt, labels = _pair(tr, analysis)
    full = logit_lens(tr.model, src, tgt, k=tr.config.tgt_vocab_size)  # every piece, to read the chosen one's rank
    probs = np.stack([p[0].cpu().numpy() for p, _ in full])  # (L, T, V) sorted
    ids = np.stack([i[0].cpu().numpy() for _, i in full])  # (L, T, V)
    target = labels[0].cpu().numpy()  # (T,)
    rank = (ids == target[None, :, None]).argmax(-1)  # (L, T): 0 = the top prediction
    chosen = np.take_along_axis(probs, rank[..., None], -1)[..., 0]  # (L, T)
    return {"probs": probs[..., :k], "ids": ids[..., :k], "labels": target, "rank": rank, "chosen": chosen}


def beam_tree(tr: Translator, analysis: Analysis) -> Any:
    """The analysed sentence's beam search tree (None for greedy search)."""
    s = analysis.settings
    if s.beam_size <= 1:
        return None
    return tr.translate(analysis.text, beam_size=s.beam_size, alpha=s.alpha, max_len_a=s.max_len_a,
                        max_len_b=s.max_len_b, return_attention=False, return_tree=True).tree


def default_checkpoint() -> str:
    """``$ATTN_CHECKPOINT`` or ``checkpoints/multi30k-en-de``."""
    return os.environ.get("ATTN_CHECKPOINT", "").strip() or DEFAULT_CHECKPOINT
