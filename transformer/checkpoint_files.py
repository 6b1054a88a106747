"""The files of one of our checkpoint directories and their low-level readers (no model family involved).

``transformer.checkpoint`` (saving and the public entry points) and ``transformer.families`` (which opens each
family's checkpoints) both build on this module; it imports neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model

from .model import Transformer, TransformerConfig
from .tokenizer import Tokenizer, TokenizerProtocol

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.model"
METADATA_FILE = "metadata.json"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded; the message says which file and why."""


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU; a CUDA device on a machine without one is a ``CheckpointError``."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise CheckpointError(f"unknown device {device!r}: use 'auto', 'cpu' or 'cuda'") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError("CUDA was chosen but no GPU is available here; pick 'cpu' or 'auto'")
    return resolved


def load_config(path: Path) -> TransformerConfig:
    """``config.json`` of a checkpoint directory as a ``TransformerConfig``; ``CheckpointError`` when invalid."""
    try:
        return TransformerConfig.load(path / CONFIG_FILE)
    except Exception as err:  # bad JSON, unknown or invalid fields, a list instead of an object: one clear message
        raise CheckpointError(f"{path / CONFIG_FILE} is not a valid TransformerConfig: {type(err).__name__}: "
                              f"{err}") from err


def check_weights(weights: Path, config: TransformerConfig) -> None:
    """The safetensors header of ``weights`` against the tensors ``config`` builds (no data read)."""
    try:
        with open(weights, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 0 < size < 100_000_000 else None
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{WEIGHTS_FILE} is not a safetensors file: {err}") from err
    if not isinstance(header, dict):
        raise CheckpointError(f"{WEIGHTS_FILE} is not a safetensors file")
    header.pop("__metadata__", None)
    try:
        end = max((int(t["data_offsets"][1]) for t in header.values()), default=0)
        stored = {k: [int(n) for n in v["shape"]] for k, v in header.items()}
    except (TypeError, KeyError, IndexError, ValueError) as err:
        raise CheckpointError(f"{WEIGHTS_FILE} has a malformed header ({type(err).__name__}: {err})") from err
    if 8 + size + end > weights.stat().st_size:
        raise CheckpointError(f"{WEIGHTS_FILE} is truncated ({weights.stat().st_size:,} of {8 + size + end:,} bytes)")
    with torch.device("meta"):
        expected = {k: list(v.shape) for k, v in Transformer(config).state_dict().items()}
    # tied weights are stored once, under any one of their names
    tied = {"src_embed.weight", "tgt_embed.weight", "generator.weight"} if config.share_embeddings else set()
    wrong = [k for k, shape in expected.items() if k not in tied and stored.get(k) != shape]
    if tied and not any(stored.get(k) == expected[k] for k in tied):
        wrong.append("src_embed.weight")
    if wrong or set(stored) - set(expected):
        raise CheckpointError(f"{WEIGHTS_FILE} does not match config.json (e.g. {(wrong or sorted(stored))[0]})")


def check_vocab(tokenizer: TokenizerProtocol, config: TransformerConfig) -> None:
    """The tokenizer's ids fit the model's vocabulary: equal, except that a converted multilingual model may have a
    few unused rows past its tokenizer's ids (NLLB-200: 2)."""
    exact = isinstance(tokenizer, Tokenizer) or not getattr(tokenizer, "languages", None)
    if tokenizer.vocab_size > config.tgt_vocab_size or (exact and tokenizer.vocab_size != config.tgt_vocab_size):
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces but config.json says "
                              f"tgt_vocab_size={config.tgt_vocab_size}")


def read_metadata(path: Path) -> dict:
    """``metadata.json`` as a dict ({} when absent); ``CheckpointError`` when it is not a JSON object."""
    if not (path / METADATA_FILE).is_file():
        return {}
    try:
        metadata = json.loads((path / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path / METADATA_FILE} is not valid JSON: {err}") from err
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path / METADATA_FILE} is not a JSON object")
    return metadata


def load_weights(model: Transformer, path: Path) -> None:
    """Load ``path``'s ``model.safetensors`` into ``model`` (CPU, strict); ``CheckpointError`` when it does not fit."""
    try:
        load_model(model, str(path / WEIGHTS_FILE), strict=True, device="cpu")
    except SafetensorError as err:
        raise CheckpointError(f"{path / WEIGHTS_FILE} is corrupt or not a safetensors file: {err}") from err
    except RuntimeError as err:
        raise CheckpointError(f"{path / WEIGHTS_FILE} does not match config.json "
                              f"(sizes or layer counts differ): {err}") from err
