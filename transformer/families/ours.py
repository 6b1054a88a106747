"""Our own checkpoints: ``config.json`` (a ``TransformerConfig``), ``model.safetensors``, ``metadata.json`` and a
tokenizer: ``tokenizer.model`` (ours), or the files of the family a checkpoint was converted from
(``python -m transformer.convert``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..checkpoint import TOKENIZER_FILE, CheckpointError, check_checkpoint_dir, load_model_dir
from ..model import Transformer, TransformerConfig
from ..tokenizer import TokenizerProtocol


class OursFamily:
    """The Transformer of the paper as this project trains it (and converted checkpoints of any other family)."""

    name = "ours (Attention Is All You Need)"
    model_types: tuple[str, ...] = ()
    tokenizer_files = (TOKENIZER_FILE,)
    copied_files = tokenizer_files
    hub_models: tuple[str, ...] = ()
    metadata_defaults: dict[str, Any] = {}

    def config(self, config_json: dict[str, Any]) -> TransformerConfig:
        try:
            return TransformerConfig.from_dict(config_json)
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"config.json is not a valid TransformerConfig: {err}") from err

    def missing_files(self, path: Path) -> list[str]:
        from . import tokenizer_family

        missing = [name for name in ("config.json", "model.safetensors") if not (path / name).is_file()]
        return missing + ([] if tokenizer_family(path) is not None else [TOKENIZER_FILE])

    def has_tokenizer(self, path: Path) -> bool:
        return (path / TOKENIZER_FILE).is_file()

    def tokenizer(self, path: Path) -> TokenizerProtocol:
        from ..tokenizer import Tokenizer

        try:
            return Tokenizer(path / TOKENIZER_FILE)
        except Exception as err:  # sentencepiece raises RuntimeError / OSError on a bad proto
            raise CheckpointError(f"{path}: {TOKENIZER_FILE} is not a usable sentencepiece tokenizer: {err}") from err

    def load(self, path: Path, name: str | None = None) -> tuple[Transformer, TokenizerProtocol, dict[str, Any]]:
        return load_model_dir(path, "cpu")

    def check(self, path: Path) -> TransformerConfig:
        return check_checkpoint_dir(path)


FAMILY = OursFamily()
