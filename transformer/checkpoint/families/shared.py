"""What every model family shares: the :class:`Family` protocol and the helpers that read a Hugging Face
checkpoint directory (its ``config.json``, its weights, renamed and checked against our ``Transformer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ...network.model import Transformer, TransformerConfig, missing_weights
from ..files import MAX_CONFIG_BYTES, CheckpointError, read_json, safetensors_shapes
from ..mapped import build_model, check_fits, map_weights
from ..tokenizer import TokenizerProtocol


@dataclass(frozen=True)
class HubModel:
    """A Hub model a family suggests, as the app's model picker names it."""

    repo_id: str  # e.g. "Helsinki-NLP/opus-mt-en-de"
    what: str  # what it is, in a few words: "OPUS-MT", "NLLB-200, 200 languages"
    download_mb: int | None = None  # its download (safetensors) in MB, said in the picker; None: small, not said


class Family(Protocol):
    """One model family: how to recognise, check and open its checkpoints."""

    name: str  # shown to people, e.g. "Marian / OPUS-MT"
    model_types: tuple[str, ...]  # the ``config.json`` ``model_type`` values it opens (ours: none)
    tokenizer_files: tuple[str, ...]  # the files its tokenizer needs
    copied_files: tuple[str, ...]  # the tokenizer files ``convert`` copies (those present)
    hub: tuple[HubModel, ...]  # the Hub models the app suggests, with what the picker says of them
    hub_models: tuple[str, ...]  # their ids
    metadata_defaults: dict[str, Any]  # what a checkpoint of it says without a metadata.json (decoding rules)

    def config(self, config_json: dict[str, Any]) -> TransformerConfig:
        """Our config from the checkpoint's ``config.json`` (``CheckpointError`` for what we cannot represent)."""

    def missing_files(self, path: Path) -> list[str]:
        """Files a checkpoint directory of this family lacks."""

    def has_tokenizer(self, path: Path) -> bool:
        """Whether ``path`` holds this family's tokenizer files."""

    def tokenizer(self, path: Path) -> TokenizerProtocol:
        """The tokenizer of a checkpoint directory (``CheckpointError`` when unusable)."""

    def load(self, path: Path, name: str | None = None, dtype: torch.dtype = torch.float32,
             ) -> tuple[Transformer, TokenizerProtocol, dict[str, Any]]:
        """Model (CPU, eval mode, weights in ``dtype``), tokenizer and metadata of a checkpoint directory (``name``:
        as the user gave it, e.g. a Hub id)."""

    def check(self, path: Path) -> TransformerConfig:
        """A quick look without loading the weights: files there, config valid, weights' names and shapes fit."""


def read_config_json(path: str | Path) -> dict[str, Any] | None:
    """A checkpoint directory's ``config.json`` as a dict, or None (absent, unreadable, not an object, over
    ``MAX_CONFIG_BYTES`` or nested too deeply)."""
    try:
        data = read_json(Path(path) / "config.json", MAX_CONFIG_BYTES)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state dict of a Hugging Face directory, memory-mapped (``mapped.map_weights``): ``model.safetensors``,
    else ``pytorch_model.bin`` (tensors only, ``torch.load(weights_only=True)``: never unpickles code)."""
    return map_weights(path)


def weight_shapes(path: Path) -> dict[str, list[int]]:
    """Names and shapes of the weights in ``model.safetensors`` (header only) or ``pytorch_model.bin`` (loaded)."""
    if (path / "model.safetensors").is_file():
        return safetensors_shapes(path / "model.safetensors")  # its header bounded (MAX_HEADER_BYTES)
    return {k: list(v.shape) for k, v in read_weights(path).items()}


def load_renamed(config: TransformerConfig, state: dict[str, torch.Tensor], family: str,
                 dtype: torch.dtype = torch.float32) -> Transformer:
    """Our ``Transformer`` with renamed weights ``state`` (every weight of ours there, tied tables once), in
    ``dtype``, without a second copy (``mapped.build_model``)."""
    return build_model(config, state, dtype, family)


def check_renamed(path: Path, config: TransformerConfig, rename: Any, family: str) -> TransformerConfig:
    """``Family.check`` for a Hugging Face directory: the stored weights, renamed by ``rename(state, config)`` (run
    on shape-only "meta" tensors, nothing read but the header), have every shape our model of ``config`` expects."""
    stored = {k: torch.empty(shape, device="meta") for k, shape in weight_shapes(path).items()}
    state = rename(stored, config)
    with torch.device("meta"):
        expected = Transformer(config).state_dict()
    wrong = missing_weights(config, [k for k in expected if k not in state])
    wrong += [k for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if wrong:
        raise CheckpointError(f"the {family} weights do not match config.json (e.g. {wrong[0]})")
    return config


def missing_hf_files(path: Path, tokenizer_files: tuple[str, ...]) -> list[str]:
    """``config.json``, the weights (safetensors or a PyTorch bin) and ``tokenizer_files``: those absent."""
    missing = [] if (path / "config.json").is_file() else ["config.json"]
    if not (path / "model.safetensors").is_file() and not (path / "pytorch_model.bin").is_file():
        missing.append("model.safetensors")
    return missing + [name for name in tokenizer_files if not (path / name).is_file()]


class HuggingFaceFamily:
    """What every Hugging Face family's :class:`Family` does the same way, given its ``config_from(config_json)``
    (our config, ``CheckpointError`` for what it cannot represent), its ``rename(state, config)`` (its weights under
    our names) and ``short`` (its name in messages, e.g. "Marian"): the config, the missing files, the tokenizer
    files' presence, the quick check, the model and the suggested Hub ids. A family adds its tokenizer and
    ``load``."""

    tokenizer_files: tuple[str, ...]
    hub: tuple[HubModel, ...]
    short: str
    config_from: Callable[[dict[str, Any]], TransformerConfig]
    rename: Callable[[dict[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]

    @property
    def hub_models(self) -> tuple[str, ...]:
        return tuple(m.repo_id for m in self.hub)

    def config(self, config_json: dict[str, Any]) -> TransformerConfig:
        return self.config_from(config_json)

    def missing_files(self, path: Path) -> list[str]:
        return missing_hf_files(path, self.tokenizer_files)

    def has_tokenizer(self, path: Path) -> bool:
        return all((path / name).is_file() for name in self.tokenizer_files)

    def check(self, path: Path) -> TransformerConfig:
        missing = self.missing_files(path)
        if missing:
            raise CheckpointError(f"checkpoint {path} is missing {', '.join(missing)}")
        return check_renamed(path, self.config(read_config_json(path) or {}), self.rename, self.short)

    def model(self, path: str | Path, dtype: torch.dtype = torch.float32) -> Transformer:
        """Our ``Transformer`` with the checkpoint's weights in ``dtype``, memory-mapped where the file holds that
        dtype (CPU, eval mode); refused first when they cannot fit in the memory available (``mapped.check_fits``)."""
        path = Path(path)
        config_json = read_config_json(path)
        if config_json is None:
            raise CheckpointError(f"{path / 'config.json'} could not be read (absent, not a JSON object, too large or "
                                  "nested too deeply)")
        config = self.config(config_json)
        check_fits(config, dtype, str(path / "config.json"))
        return load_renamed(config, self.rename(read_weights(path), config), self.short, dtype)
