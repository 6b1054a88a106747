"""The model families the explorer opens, one module each, and the registry that picks one for a checkpoint.

A family maps a checkpoint's ``config.json`` (Hugging Face ``model_type``, or our own ``TransformerConfig``) to our
``TransformerConfig``, renames and checks its weights, and builds its tokenizer (a
:class:`transformer.tokenizer.TokenizerProtocol`). ``transformer.load``, ``transformer.convert --from-hf``, the
checkpoint check, the app's catalog and the heads command ask the registry; none holds a family-specific branch.

Adding a family = one module with a ``FAMILY`` object meeting :class:`Family` + one line in :data:`FAMILIES` + its
tests (see ``docs/families.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from ..checkpoint_files import MAX_CONFIG_BYTES, CheckpointError, read_json
from ..model import Transformer, TransformerConfig
from ..tokenizer import TokenizerProtocol


class Family(Protocol):
    """One model family: how to recognise, check and open its checkpoints."""

    name: str  # shown to people, e.g. "Marian / OPUS-MT"
    model_types: tuple[str, ...]  # the ``config.json`` ``model_type`` values it opens (ours: none)
    tokenizer_files: tuple[str, ...]  # the files its tokenizer needs
    copied_files: tuple[str, ...]  # the tokenizer files ``convert`` copies (those present)
    hub_models: tuple[str, ...]  # Hub ids the app suggests
    metadata_defaults: dict[str, Any]  # what a checkpoint of it says without a metadata.json (decoding rules)

    def config(self, config_json: dict[str, Any]) -> TransformerConfig:
        """Our config from the checkpoint's ``config.json`` (``CheckpointError`` for what we cannot represent)."""

    def missing_files(self, path: Path) -> list[str]:
        """Files a checkpoint directory of this family lacks."""

    def has_tokenizer(self, path: Path) -> bool:
        """Whether ``path`` holds this family's tokenizer files."""

    def tokenizer(self, path: Path) -> TokenizerProtocol:
        """The tokenizer of a checkpoint directory (``CheckpointError`` when unusable)."""

    def load(self, path: Path, name: str | None = None) -> tuple[Transformer, TokenizerProtocol, dict[str, Any]]:
        """Model (CPU, eval mode), tokenizer and metadata of a checkpoint directory (``name``: as the user gave it,
        e.g. a Hub id)."""

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


def _families() -> list[Family]:
    from . import m2m100, marian, ours

    return [ours.FAMILY, marian.FAMILY, m2m100.FAMILY]  # ours first: a config.json of ours has no model_type


FAMILIES: list[Family] = []  # filled on first use (the modules import this package's helpers)


def families() -> list[Family]:
    """Every registered family, ours first."""
    if not FAMILIES:
        FAMILIES.extend(_families())
    return FAMILIES


def family_for(config_json: dict[str, Any] | None) -> Family:
    """The family of a checkpoint, from its ``config.json`` (None or no ``model_type``: ours). An unknown
    ``model_type`` is a ``CheckpointError`` naming the ones we open."""
    model_type = (config_json or {}).get("model_type")
    for family in families():
        if model_type in family.model_types or (model_type is None and not family.model_types):
            return family
    known = sorted(t for f in families() for t in f.model_types)
    raise CheckpointError(f"model_type {model_type!r} is not a family this explorer opens (it opens our own "
                          f"checkpoints and model_type {', '.join(map(repr, known))})")


def family_of_dir(path: str | Path) -> Family:
    """The family of a checkpoint directory (``family_for`` its ``config.json``)."""
    return family_for(read_config_json(path))


def tokenizer_family(path: str | Path) -> Family | None:
    """The family whose tokenizer files ``path`` holds (our own checkpoints keep a converted model's tokenizer)."""
    return next((f for f in families() if f.has_tokenizer(Path(path))), None)


def missing_files(path: str | Path) -> list[str]:
    """Required files absent from a checkpoint directory, as its family requires them (ours: config, weights and a
    tokenizer: ``tokenizer.model`` or a converted family's tokenizer files)."""
    try:
        return family_of_dir(path).missing_files(Path(path))
    except CheckpointError:  # an unknown model_type: judged as one of ours
        from .ours import FAMILY

        return FAMILY.missing_files(Path(path))


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


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state dict of a Hugging Face directory: ``model.safetensors``, else ``pytorch_model.bin`` (tensors only,
    ``torch.load(weights_only=True)``: never unpickles code)."""
    if (path / "model.safetensors").is_file():
        from safetensors.torch import load_file

        return load_file(str(path / "model.safetensors"))
    if (path / "pytorch_model.bin").is_file():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise CheckpointError(f"{path} has neither model.safetensors nor pytorch_model.bin")


def weight_shapes(path: Path) -> dict[str, list[int]]:
    """Names and shapes of the weights in ``model.safetensors`` (header only) or ``pytorch_model.bin`` (loaded)."""
    if (path / "model.safetensors").is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(path / "model.safetensors"), "pt") as f:
                return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
        except Exception as err:  # safetensors raises its own error types on a corrupt header
            raise CheckpointError(f"model.safetensors is not a safetensors file: {err}") from err
    return {k: list(v.shape) for k, v in read_weights(path).items()}


def load_renamed(config: TransformerConfig, state: dict[str, torch.Tensor], family: str) -> Transformer:
    """Our ``Transformer`` with renamed weights ``state`` (every weight of ours there, tied tables once)."""
    model = Transformer(config)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # a shape that differs from config.json's
        raise CheckpointError(f"the {family} weights do not match config.json: {str(err)[:300]}") from err
    if unexpected or [k for k in missing if k not in ("tgt_embed.weight", "generator.weight")]:
        raise CheckpointError(f"the {family} weights do not fit (missing {missing[:3]}, unexpected {unexpected[:3]})")
    if not config.share_embeddings:  # untied: load each table as stored
        with torch.no_grad():
            model.tgt_embed.weight.copy_(state["tgt_embed.weight"])
            model.generator.weight.copy_(state["generator.weight"])
    return model.eval()


def hub_models() -> list[str]:
    """The Hub ids every family suggests, in registry order."""
    return [m for f in families() for m in f.hub_models]


def check_renamed(path: Path, config: TransformerConfig, rename: Any, family: str) -> TransformerConfig:
    """``Family.check`` for a Hugging Face directory: the stored weights, renamed by ``rename(state, config)`` (run
    on shape-only "meta" tensors, nothing read but the header), have every shape our model of ``config`` expects."""
    stored = {k: torch.empty(shape, device="meta") for k, shape in weight_shapes(path).items()}
    state = rename(stored, config)
    with torch.device("meta"):
        expected = Transformer(config).state_dict()
    tied = {"tgt_embed.weight", "generator.weight"} if config.share_embeddings else set()
    wrong = [k for k, v in expected.items() if k not in tied and (k not in state or state[k].shape != v.shape)]
    if wrong:
        raise CheckpointError(f"the {family} weights do not match config.json (e.g. {wrong[0]})")
    return config


def missing_hf_files(path: Path, tokenizer_files: tuple[str, ...]) -> list[str]:
    """``config.json``, the weights (safetensors or a PyTorch bin) and ``tokenizer_files``: those absent."""
    missing = [] if (path / "config.json").is_file() else ["config.json"]
    if not (path / "model.safetensors").is_file() and not (path / "pytorch_model.bin").is_file():
        missing.append("model.safetensors")
    return missing + [name for name in tokenizer_files if not (path / name).is_file()]
