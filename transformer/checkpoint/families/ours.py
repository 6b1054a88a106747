"""Our own checkpoints: ``config.json`` (a ``TransformerConfig``), ``model.safetensors``, ``metadata.json`` and a
tokenizer: ``tokenizer.model`` (ours), or the files of the family a checkpoint was converted from
(``python -m transformer.convert``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...network.model import Transformer, TransformerConfig
from ..files import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    check_vocab,
    check_weights,
    load_config,
    loadable,
    read_metadata,
    resolve_device,
)
from ..mapped import build_model, check_fits, map_weights, resolve_dtype
from ..tokenizer import Tokenizer, TokenizerProtocol
from .converted import CONVERTED, converted_family
from .shared import Family, HubModel, read_config_json


def tokenizer_family(path: str | Path) -> Family | None:
    """The family whose tokenizer files ``path`` holds: ours (``tokenizer.model``) first, then the converted families
    (a checkpoint of ours converted from one keeps its tokenizer)."""
    return next((f for f in (FAMILY, *CONVERTED) if f.has_tokenizer(Path(path))), None)


def open_tokenizer(path: Path) -> TokenizerProtocol:
    """The checkpoint's tokenizer, as its family builds it (ours: ``tokenizer.model``); ``CheckpointError`` when it
    does not open."""
    family = tokenizer_family(path)
    try:
        return family.tokenizer(path)
    except CheckpointError:
        raise
    except Exception as err:  # sentencepiece raises RuntimeError / OSError on a bad proto
        raise CheckpointError(f"{path}: {', '.join(family.tokenizer_files)} is not a usable tokenizer: {err}") from err


def missing_files(path: str | Path) -> list[str]:
    """Required files absent from a checkpoint directory, as its family requires them (ours: config, weights and a
    tokenizer: ``tokenizer.model`` or a converted family's tokenizer files; an unknown ``model_type`` is judged as
    one of ours)."""
    try:
        family = converted_family(read_config_json(path)) or FAMILY
    except CheckpointError:
        family = FAMILY
    return family.missing_files(Path(path))


def read_config(path: Path) -> TransformerConfig:
    """The config of a checkpoint directory whose required files are all there; ``CheckpointError`` otherwise."""
    missing = missing_files(path)
    if missing:
        raise CheckpointError(f"checkpoint {path} is missing {', '.join(missing)}")
    return load_config(path)


def check_checkpoint_dir(path: str | Path) -> TransformerConfig:
    """A quick look at a checkpoint directory without loading the weights: the files are there, ``config.json``
    is valid, the safetensors header names every weight of that config with its shape, its data complete (a
    truncated file fails), the tokenizer opens with the config's vocabulary size and ``metadata.json`` (when there)
    is a JSON object, and the weights could fit in the memory available (in bfloat16). Returns the config; raises
    ``CheckpointError`` saying what is wrong, whatever went wrong."""
    path = Path(path)
    config = read_config(path)
    check_fits(config, torch.bfloat16, str(path / CONFIG_FILE))  # not loadable here in any dtype
    try:
        check_weights(path / WEIGHTS_FILE, config)
        check_vocab(open_tokenizer(path), config)
        read_metadata(path)
    except CheckpointError:
        raise
    except Exception as err:  # anything unforeseen in a damaged directory is still one clear message
        raise CheckpointError(f"{path.name} could not be checked: {type(err).__name__}: {err}") from err
    return config


def load_model_dir(path: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype = "float32",
                   ) -> tuple[Transformer, TokenizerProtocol, dict]:
    """Rebuild the model from ``config.json`` and its weights, memory-mapped from ``model.safetensors`` without a
    second copy (``mapped.build_model``; converted one tensor at a time for another ``dtype``: "float32" or
    "bfloat16"); raises ``CheckpointError``, also before anything is allocated when the weights cannot fit in the
    memory available. The tokenizer is ``tokenizer.model``, or the tokenizer files of the family the checkpoint was
    converted from."""
    path = Path(path)
    config = read_config(path)
    chosen = resolve_dtype(dtype)
    tokenizer = open_tokenizer(path)
    check_vocab(tokenizer, config)
    metadata = read_metadata(path)
    check_fits(config, chosen, str(path / CONFIG_FILE))
    model = build_model(config, map_weights(path), chosen, "checkpoint's")
    return model.to(resolve_device(device)).eval(), tokenizer, metadata


class OursFamily:
    """The Transformer of the paper as this project trains it (and converted checkpoints of any other family)."""

    name = "ours (Attention Is All You Need)"
    model_types: tuple[str, ...] = ()
    tokenizer_files = (TOKENIZER_FILE,)
    copied_files = tokenizer_files
    hub: tuple[HubModel, ...] = ()
    hub_models: tuple[str, ...] = ()
    metadata_defaults: dict[str, Any] = {}

    def config(self, config_json: dict[str, Any]) -> TransformerConfig:
        try:
            config = TransformerConfig.from_dict(config_json)
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"config.json is not a valid TransformerConfig: {err}") from err
        return loadable(config, "config.json")

    def missing_files(self, path: Path) -> list[str]:
        missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (path / name).is_file()]
        return missing + ([] if tokenizer_family(path) is not None else [TOKENIZER_FILE])

    def has_tokenizer(self, path: Path) -> bool:
        return (path / TOKENIZER_FILE).is_file()

    def tokenizer(self, path: Path) -> TokenizerProtocol:
        try:
            return Tokenizer(path / TOKENIZER_FILE)
        except Exception as err:  # sentencepiece raises RuntimeError / OSError on a bad proto
            raise CheckpointError(f"{path}: {TOKENIZER_FILE} is not a usable sentencepiece tokenizer: {err}") from err

    def load(self, path: Path, name: str | None = None, dtype: torch.dtype = torch.float32,
             ) -> tuple[Transformer, TokenizerProtocol, dict[str, Any]]:
        return load_model_dir(path, "cpu", dtype)

    def check(self, path: Path) -> TransformerConfig:
        return check_checkpoint_dir(path)


FAMILY = OursFamily()
