"""Checkpoint directories: ``config.json``, ``model.safetensors``, ``tokenizer.model``, ``metadata.json``.

No pickle anywhere. ``load`` takes a local directory or a Hugging Face Hub repo id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from .model import Transformer, TransformerConfig
from .tokenizer import Tokenizer, TokenizerProtocol

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.model"
METADATA_FILE = "metadata.json"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE)


def missing_files(path: Path) -> list[str]:
    """Required files absent from a checkpoint directory, as its family (``transformer.families``) requires them
    (ours: config, weights and a tokenizer: ``tokenizer.model`` or a converted family's tokenizer files)."""
    from .families import family_of_dir

    try:
        return family_of_dir(path).missing_files(Path(path))
    except CheckpointError:  # an unknown model_type: judged as one of ours
        from .families.ours import FAMILY

        return FAMILY.missing_files(Path(path))


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


def save_weights(model: Transformer, path: str | Path) -> None:
    """Write ``model``'s weights to a safetensors file, atomically (tied weights are stored once; weights laid out
    column-major for decoding, ``column_major_weights``, are written contiguous and keep their layout in
    ``model``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    strided = [p for p in model.parameters() if not p.is_contiguous()]  # shared weights listed once
    layouts = [p.data for p in strided]
    try:
        for p in strided:
            p.data = p.data.contiguous()
        save_model(model, str(tmp))
    finally:
        for p, data in zip(strided, layouts):
            p.data = data
    os.replace(tmp, path)


def save_checkpoint(path: str | Path, model: Transformer, tokenizer: Tokenizer,
                    metadata: dict[str, Any] | None = None) -> Path:
    """Write a checkpoint directory."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.config.save(path / CONFIG_FILE)
    save_weights(model, path / WEIGHTS_FILE)
    tokenizer.save(path / TOKENIZER_FILE)
    (path / METADATA_FILE).write_text(json.dumps(metadata or {}, indent=2, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    return path


def read_config(path: Path) -> TransformerConfig:
    """The config of a checkpoint directory whose required files are all there; ``CheckpointError`` otherwise."""
    missing = missing_files(path)
    if missing:
        raise CheckpointError(f"checkpoint {path} is missing {', '.join(missing)}")
    try:
        return TransformerConfig.load(path / CONFIG_FILE)
    except Exception as err:  # bad JSON, unknown or invalid fields, a list instead of an object: one clear message
        raise CheckpointError(f"{path / CONFIG_FILE} is not a valid TransformerConfig: {type(err).__name__}: "
                              f"{err}") from err


def check_checkpoint_dir(path: str | Path) -> TransformerConfig:
    """A quick look at a checkpoint directory without loading the weights: the files are there, ``config.json``
    is valid, the safetensors header names every weight of that config with its shape, its data complete (a
    truncated file fails), the tokenizer opens with the config's vocabulary size and ``metadata.json`` (when there)
    is a JSON object. Returns the config; raises ``CheckpointError`` saying what is wrong, whatever went wrong."""
    path = Path(path)
    config = read_config(path)
    try:
        _check_weights(path / WEIGHTS_FILE, config)
        _check_vocab(_open_tokenizer(path), config)
        _read_metadata(path)
    except CheckpointError:
        raise
    except Exception as err:  # anything unforeseen in a damaged directory is still one clear message
        raise CheckpointError(f"{path.name} could not be checked: {type(err).__name__}: {err}") from err
    return config


def _check_weights(weights: Path, config: TransformerConfig) -> None:
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


def _open_tokenizer(path: Path) -> TokenizerProtocol:
    """The checkpoint's tokenizer, as its family (``transformer.families``) builds it (ours: ``tokenizer.model``);
    ``CheckpointError`` when it does not open."""
    from .families import tokenizer_family

    family = tokenizer_family(path)
    try:
        return family.tokenizer(path)
    except CheckpointError:
        raise
    except Exception as err:  # sentencepiece raises RuntimeError / OSError on a bad proto
        raise CheckpointError(f"{path}: {', '.join(family.tokenizer_files)} is not a usable tokenizer: {err}") from err


def _check_vocab(tokenizer: TokenizerProtocol, config: TransformerConfig) -> None:
    """The tokenizer's ids fit the model's vocabulary: equal, except that a converted multilingual model may have a
    few unused rows past its tokenizer's ids (NLLB-200: 2)."""
    exact = isinstance(tokenizer, Tokenizer) or not getattr(tokenizer, "languages", None)
    if tokenizer.vocab_size > config.tgt_vocab_size or (exact and tokenizer.vocab_size != config.tgt_vocab_size):
        raise CheckpointError(f"tokenizer has {tokenizer.vocab_size} pieces but config.json says "
                              f"tgt_vocab_size={config.tgt_vocab_size}")


def _read_metadata(path: Path) -> dict:
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


def load_model_dir(path: str | Path, device: str | torch.device = "cpu") -> tuple[Transformer, TokenizerProtocol,
                                                                                dict]:
    """Rebuild the model from ``config.json`` and load the weights; raises ``CheckpointError``. The tokenizer is
    ``tokenizer.model``, or the tokenizer files of the family the checkpoint was converted from."""
    path = Path(path)
    config = read_config(path)
    tokenizer = _open_tokenizer(path)
    _check_vocab(tokenizer, config)
    model = Transformer(config)
    try:
        load_model(model, str(path / WEIGHTS_FILE), strict=True, device="cpu")
    except SafetensorError as err:
        raise CheckpointError(f"{path / WEIGHTS_FILE} is corrupt or not a safetensors file: {err}") from err
    except RuntimeError as err:
        raise CheckpointError(f"{path / WEIGHTS_FILE} does not match config.json "
                              f"(sizes or layer counts differ): {err}") from err
    metadata = _read_metadata(path)
    return model.to(resolve_device(device)).eval(), tokenizer, metadata
