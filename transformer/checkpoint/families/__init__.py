"""The model families the explorer opens, one module each, and the registry that picks one for a checkpoint.

A family maps a checkpoint's ``config.json`` (Hugging Face ``model_type``, or our own ``TransformerConfig``) to our
``TransformerConfig``, renames and checks its weights, and builds its tokenizer (a
:class:`transformer.checkpoint.tokenizer.TokenizerProtocol`). ``transformer.load``, ``transformer.convert
--from-hf``, the checkpoint check, the app's catalog and the heads command ask the registry; none holds a
family-specific branch.

    shared.py     the :class:`Family` protocol, :class:`HubModel`, and what every Hugging Face family does alike
                  (:class:`HuggingFaceFamily`)
    marian.py     Marian / OPUS-MT;  m2m100.py: NLLB-200 / M2M100 (fairseq_tokenizer.py, fairseq_codes.py)
    converted.py  the list of converted families (adding a family: its module and one line there)
    ours.py       our own checkpoints, which may keep a converted family's tokenizer
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .converted import CONVERTED, converted_family
from .ours import FAMILY as OURS
from .ours import missing_files, open_tokenizer, tokenizer_family
from .shared import Family, HubModel, read_config_json

__all__ = [
    "FAMILIES", "Family", "HubModel", "families", "family_for", "family_of_dir", "hub_model", "hub_models",
    "missing_files", "open_tokenizer", "read_config_json", "tokenizer_family",
]

FAMILIES: list[Family] = [OURS, *CONVERTED]  # ours first: a config.json of ours has no model_type


def families() -> list[Family]:
    """Every registered family, ours first."""
    return FAMILIES


def family_for(config_json: dict[str, Any] | None) -> Family:
    """The family of a checkpoint, from its ``config.json`` (None or no ``model_type``: ours). An unknown
    ``model_type`` is a ``CheckpointError`` naming the ones we open."""
    return converted_family(config_json) or OURS


def family_of_dir(path: str | Path) -> Family:
    """The family of a checkpoint directory (``family_for`` its ``config.json``)."""
    return family_for(read_config_json(path))


def hub_models() -> list[str]:
    """The Hub ids every family suggests, in registry order."""
    return [m for f in families() for m in f.hub_models]


def hub_model(repo_id: str) -> HubModel | None:
    """The suggested Hub model ``repo_id`` names (what it is, its download size), or None."""
    return next((m for f in families() for m in f.hub if m.repo_id == repo_id), None)
